"""The acceptance table: the scenarios of tests/scenarios/*.yaml, read by tests/scenario_data.py.

Each decision scenario runs its answers through the same path as an answers file and compares the
rule, the backend and the listed settings of the recommendation (or the answer the run is refused
on); each check scenario runs `backend-wizard check` and compares its findings by check id. The
tests below them look at the files each row writes. Rows of other topics have their file checks
next to the feature (tests/test_hardware_gate.py, test_ray.py, test_addons.py, test_parallel.py,
test_checks_cli.py).
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

import pytest

from helpers import decide, file, parsed
from scenario_data import ROW_COUNT, CheckScenario, Scenario, answers, checks, scenario, scenarios
from wizard.cli import main
from wizard.errors import DeepSpeedConfigError, InvalidAnswerError

# The answers of the core rules' rows by row number, one scenario each: other modules run the same
# setups through rendering, the shell scripts, SLURM, the real tools and the explanations.
CORE_ROWS = (4, 5, 6, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 24, 25, 28, 40, 44)
ANSWERS: dict[int, dict[str, Any]] = {
    row: dict(entry.answers)
    for row in CORE_ROWS
    for entry in scenarios()
    if entry.row == row and entry.error is None and entry.deepspeed_json is None
}
ERRORS: dict[str, type[Exception]] = {"invalid_answer": InvalidAnswerError, "deepspeed_config": DeepSpeedConfigError}


@pytest.mark.parametrize("entry", scenarios(), ids=lambda entry: entry.name)
def test_scenario_decision(tmp_path: Path, entry: Scenario) -> None:
    given = entry.answers_in(tmp_path / "brought")
    if entry.error is not None:
        with pytest.raises(ERRORS[entry.error["type"]]) as info:
            decide(given, tmp_path / "out")
        if "key" in entry.error:
            assert isinstance(info.value, InvalidAnswerError) and info.value.key == entry.error["key"]
        return
    rec = decide(given, tmp_path / "out").recommendation
    assert (rec.rule.id, rec.backend, rec.refused) == (entry.rule, entry.backend, entry.refused), rec.because
    assert {key: rec.settings.get(key) for key in entry.settings} == entry.settings


@pytest.mark.parametrize("entry", checks(), ids=lambda entry: entry.name)
def test_scenario_check(tmp_path: Path, entry: CheckScenario) -> None:
    path = entry.write(tmp_path)
    world = ["--world-size", str(entry.world_size)] if entry.world_size is not None else []
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["check", str(path), *world, "--output", "json"])
    found = [
        {"check": f["check"], "severity": f["severity"], "path": f["path"]}
        for f in json.loads(out.getvalue())["findings"]
        if f["file"] == str(path)
    ]
    assert (code, found) == (entry.exit, entry.findings)


def test_every_core_row_has_one_answers_set() -> None:
    assert sorted(ANSWERS) == list(CORE_ROWS)
    assert all(sum(entry.row == row for entry in scenarios()) == 1 for row in CORE_ROWS)


def test_every_row_of_the_table_has_a_scenario() -> None:
    rows = {entry.row for entry in [*scenarios(), *checks()] if entry.row is not None}
    assert sorted(rows) == list(range(1, ROW_COUNT + 1)), set(range(1, ROW_COUNT + 1)) - rows


# ---------------------------------------------------------------------------------------------
# What the rows write
# ---------------------------------------------------------------------------------------------


def test_row08_axolotl_single_gpu_starter(tmp_path: Path) -> None:
    result = decide(answers("axolotl_lora_a10g"), tmp_path)
    cfg = parsed(result, "axolotl.yaml")
    assert "deepspeed" not in cfg and "fsdp_config" not in cfg
    assert cfg["bf16"] is True and cfg["attn_implementation"] == "flash_attention_2"
    assert cfg["sample_packing"] is True and cfg["gradient_checkpointing"] is True
    assert cfg["adapter"] == "lora"


def test_row09_qlora_single_gpu(tmp_path: Path) -> None:
    cfg = parsed(decide(answers("axolotl_qlora_rtx4090"), tmp_path), "axolotl.yaml")
    assert cfg["adapter"] == "qlora" and cfg["load_in_4bit"] is True
    assert cfg["gradient_checkpointing"] is True and cfg["attn_implementation"] == "flash_attention_2"


def test_row10_deepspeed_offload_json(tmp_path: Path) -> None:
    result = decide(answers("full_7b_a100_cpu_offload"), tmp_path)
    acc = parsed(result, "accelerate_config.yaml")
    assert acc["distributed_type"] == "DEEPSPEED" and "mixed_precision" not in acc
    assert acc["deepspeed_config"] == {"deepspeed_config_file": "ds_config.json"}
    ds = parsed(result, "ds_config.json")
    assert ds["zero_optimization"]["stage"] == 2
    assert ds["zero_optimization"]["offload_optimizer"]["device"] == "cpu"
    assert "offload_param" not in ds["zero_optimization"]
    assert ds["bf16"] == {"enabled": True} and "fp16" not in ds


def test_row11_nvme_paths_only_in_json(tmp_path: Path) -> None:
    result = decide(answers("full_7b_a100_nvme_offload"), tmp_path)
    acc = parsed(result, "accelerate_config.yaml")
    assert "offload_param_nvme_path" not in json.dumps(acc)
    zero = parsed(result, "ds_config.json")["zero_optimization"]
    param = zero["offload_param"]
    assert {k: param[k] for k in ("device", "nvme_path", "pin_memory")} == {
        "device": "nvme",
        "nvme_path": "/local_nvme",
        "pin_memory": True,
    }
    # The swap buffers hold the largest layer (tests/test_nvme_offload.py checks every NVMe path).
    shape = result.recommendation.facts.shape
    assert shape is not None and param["buffer_size"] >= shape.largest_layer_params
    assert zero["offload_optimizer"]["nvme_path"] == "/local_nvme"


def test_row12_ddp_config(tmp_path: Path) -> None:
    acc = parsed(decide(answers("full_1b_eight_a100_ddp"), tmp_path), "accelerate_config.yaml")
    assert acc["distributed_type"] == "MULTI_GPU" and acc["num_processes"] == 8
    assert acc["mixed_precision"] == "bf16" and acc["gpu_ids"] == "all"


def test_row13_fsdp2_config(tmp_path: Path) -> None:
    acc = parsed(decide(answers("full_7b_four_a100"), tmp_path), "accelerate_config.yaml")
    fsdp = acc["fsdp_config"]
    assert acc["distributed_type"] == "FSDP" and fsdp["fsdp_version"] == 2
    assert fsdp["fsdp_auto_wrap_policy"] == "TRANSFORMER_BASED_WRAP"
    assert fsdp["fsdp_reshard_after_forward"] is True
    assert fsdp["fsdp_state_dict_type"] == "SHARDED_STATE_DICT"


def test_row14_axolotl_fsdp2_block(tmp_path: Path) -> None:
    cfg = parsed(decide(answers("axolotl_full_7b_four_a100"), tmp_path), "axolotl.yaml")
    assert cfg["fsdp_version"] == 2 and "deepspeed" not in cfg
    fsdp = cfg["fsdp_config"]
    assert fsdp["auto_wrap_policy"] == "TRANSFORMER_BASED_WRAP" and fsdp["reshard_after_forward"] is True
    assert not any(key.startswith("fsdp_") for key in fsdp), "Axolotl's fsdp_config keys are un-prefixed"


def test_row15_qlora_fsdp2_offload(tmp_path: Path) -> None:
    cfg = parsed(decide(answers("axolotl_qlora_70b_two_rtx4090_offload"), tmp_path), "axolotl.yaml")
    assert cfg["adapter"] == "qlora" and cfg["fsdp_config"]["offload_params"] is True


def test_row18_zero3_flags(tmp_path: Path) -> None:
    result = decide(answers("full_70b_eight_h100_cpu_offload"), tmp_path)
    acc = parsed(result, "accelerate_config.yaml")
    assert acc["deepspeed_config"]["zero3_init_flag"] is True
    zero = parsed(result, "ds_config.json")["zero_optimization"]
    assert zero["stage3_gather_16bit_weights_on_model_save"] is True


def test_row24_multinode_keys(tmp_path: Path) -> None:
    result = decide(answers("full_70b_two_nodes"), tmp_path)
    acc = parsed(result, "accelerate_config.yaml")
    assert acc["num_machines"] == 2 and acc["num_processes"] == 16 and acc["machine_rank"] == 0
    assert acc["same_network"] is True and acc["main_process_port"] == 29500
    launch = file(result, "launch.sh").text
    assert '--machine_rank "$MACHINE_RANK"' in launch and '--main_process_ip "$MAIN_PROCESS_IP"' in launch


def test_row28_amd_uses_sdpa(tmp_path: Path) -> None:
    cfg = parsed(decide(answers("axolotl_mi300x_two_nodes"), tmp_path), "axolotl.yaml")
    assert cfg["attn_implementation"] == "sdpa" and cfg["sample_packing"] is False


def test_row40_v100_fp16(tmp_path: Path) -> None:
    cfg = parsed(decide(answers("axolotl_full_1b_four_v100"), tmp_path), "axolotl.yaml")
    assert cfg["fp16"] is True and cfg["bf16"] is False and cfg["attn_implementation"] == "sdpa"


def test_row44_lora_fit_does_not_carry_over(tmp_path: Path) -> None:
    result = decide(answers("axolotl_full_8b_one_a100"), tmp_path)
    # LoRA would fit on the one GPU; the full fine-tune asked for offloads, and a warning says so.
    assert result.recommendation.facts.get("lora_fits_single_gpu") is True
    assert any("LoRA" in warning for warning in result.warnings), result.warnings


def _existing_json_is_used_as_is(tmp_path: Path, name: str) -> None:
    result = decide(scenario(name).answers_in(tmp_path / "brought"), tmp_path / "out")
    # Copied into the output folder (so it travels with it to every machine), referenced relatively.
    assert parsed(result, "ds_config.json") == scenario(name).deepspeed_json
    if result.session.answers["target"] == "axolotl":
        cfg = parsed(result, "axolotl.yaml")
        assert cfg["deepspeed"] == "ds_config.json" and "fsdp_config" not in cfg
    else:
        acc = parsed(result, "accelerate_config.yaml")
        assert acc["deepspeed_config"]["deepspeed_config_file"] == "ds_config.json"
        assert acc["num_processes"] == 8 and "mixed_precision" not in acc
        assert not set(acc["deepspeed_config"]) - {"deepspeed_config_file", "zero3_init_flag"}


def test_row19_existing_json_axolotl(tmp_path: Path) -> None:
    _existing_json_is_used_as_is(tmp_path, "axolotl_brought_zero3_offload")


def test_row20_existing_json_accelerate(tmp_path: Path) -> None:
    _existing_json_is_used_as_is(tmp_path, "accelerate_brought_zero3_offload")


def test_row21_param_offload_below_stage3_names_both_fixes(tmp_path: Path) -> None:
    with pytest.raises(DeepSpeedConfigError) as info:
        decide(scenario("brought_param_offload_at_stage2").answers_in(tmp_path / "brought"), tmp_path / "out")
    # The two ways out, each naming the JSON key to change.
    assert "zero_optimization.stage" in str(info.value.hint) and "offload_param" in str(info.value.hint)


def test_row27_existing_zero2_json_multi_node(tmp_path: Path) -> None:
    result = decide(scenario("axolotl_brought_zero2_four_nodes").answers_in(tmp_path / "brought"), tmp_path / "out")
    launch = file(result, "launch.sh").text
    assert "--launcher torchrun" in launch and "--nnodes 4 --nproc_per_node 8" in launch
    assert "axolotl preprocess" in launch.split("axolotl train")[0]


def test_row06_local_sgd_is_optional(tmp_path: Path) -> None:
    # "+ optional Local SGD": asked for CPU processes, off (0) unless given; set in Python.
    plain = decide(answers("cpu_four_processes"), tmp_path / "plain")
    assert plain.session.answers["local_sgd_steps"] == 0 and "train_snippet.py" not in [f.name for f in plain.files]
    result = decide({**answers("cpu_four_processes"), "local_sgd_steps": 8}, tmp_path / "local_sgd")
    acc = parsed(result, "accelerate_config.yaml")
    assert acc["distributed_type"] == "MULTI_CPU" and acc["num_processes"] == 4
    snippet = file(result, "train_snippet.py").text
    assert "local_sgd_steps = 8" in snippet and "LocalSGD(accelerator=accelerator, model=model" in snippet
    assert "local_sgd.step()" in snippet.split("optimizer, batch, args)")[-1]  # after each optimizer step


def test_row25_hsdp_with_offload_over_two_machines(tmp_path: Path) -> None:
    result = decide(answers("axolotl_full_70b_two_nodes_offload"), tmp_path)
    cfg = parsed(result, "axolotl.yaml")
    assert (cfg["dp_shard_size"], cfg["dp_replicate_size"], cfg["fsdp_config"]["offload_params"]) == (8, 2, True)
    assert cfg["fsdp_version"] == 2 and "deepspeed" not in cfg
    launch = file(result, "launch.sh").text
    assert "--launcher torchrun -- \\\n  --nnodes 2 --nproc_per_node 8" in launch and "--rdzv_backend c10d" in launch
