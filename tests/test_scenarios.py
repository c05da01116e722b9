"""The acceptance table (tests/scenario_table.py): all 44 rows.

Each row feeds the scenario's answers through the same path as an answers file and checks the
backend and the key settings in the files that would be written (or the refusal and its reason).
The rows of the core rules are here; the others are registered by tests/scenarios_*.py, next to
the feature they exercise. `test_triage_scenario` runs every row, and fails for a row that has no
check.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from helpers import decide, file, parsed
from scenario_table import ROW_COUNT, SCENARIOS, Scenario, row
from wizard.errors import DeepSpeedConfigError, InvalidAnswerError

GPU = {"target": "accelerate", "hardware": "nvidia", "num_nodes": 1}


def ds_json(tmp_path: Path, stage: int, *, optimizer: str = "none", param: str = "none", name: str = "ds.json") -> str:
    zero: dict[str, Any] = {"stage": stage}
    if optimizer != "none":
        zero["offload_optimizer"] = {"device": optimizer}
    if param != "none":
        zero["offload_param"] = {"device": param}
    data = {
        "train_batch_size": "auto",
        "train_micro_batch_size_per_gpu": "auto",
        "gradient_accumulation_steps": "auto",
        "bf16": {"enabled": "auto"},
        "zero_optimization": zero,
    }
    path = tmp_path / name
    path.write_text(json.dumps(data), encoding="utf-8")
    return str(path)


def scenario(**answers: Any) -> dict[str, Any]:
    return {**GPU, "micro_batch_size": 1, **answers}


# (row, answers, expected backend, expected settings in the recommendation)
ROWS: list[tuple[int, dict[str, Any], str, dict[str, Any]]] = [
    (
        4,
        {
            "target": "accelerate",
            "hardware": "mps",
            "gpu_memory_gb": 32,
            "model": "1B",
            "method": "lora",
            "sequence_length": 2048,
        },
        "single_gpu",
        {"mixed_precision": "no", "num_processes": 1},
    ),
    (
        5,
        {
            "target": "accelerate",
            "hardware": "cpu",
            "cpu_processes": 1,
            "model": "125M",
            "method": "full",
            "sequence_length": 512,
        },
        "cpu",
        {"mixed_precision": "no", "num_processes": 1},
    ),
    (
        6,
        {
            "target": "accelerate",
            "hardware": "cpu",
            "cpu_processes": 4,
            "model": "125M",
            "method": "full",
            "sequence_length": 512,
        },
        "multi_cpu",
        {"mixed_precision": "no", "num_processes": 4},
    ),
    (
        8,
        scenario(
            target="axolotl",
            gpu_model="A10G",
            gpus_per_node=1,
            gpu_memory_gb=24,
            model="7B",
            method="lora",
            sequence_length=4096,
        ),
        "single_gpu",
        {"mixed_precision": "bf16"},
    ),
    (
        9,
        scenario(
            target="axolotl",
            gpu_model="RTX 4090",
            gpus_per_node=1,
            gpu_memory_gb=24,
            model="8B",
            method="qlora",
            sequence_length=8192,
        ),
        "single_gpu",
        {},
    ),
    (
        10,
        scenario(
            gpu_model="A100",
            gpus_per_node=1,
            gpu_memory_gb=80,
            model="7B",
            method="full",
            offload="cpu",
            sequence_length=2048,
        ),
        "deepspeed",
        {"zero_stage": 2, "offload_optimizer": "cpu", "offload_param": "none", "mixed_precision": "bf16"},
    ),
    (
        11,
        scenario(
            gpu_model="A100",
            gpus_per_node=1,
            gpu_memory_gb=80,
            model="7B",
            method="full",
            offload="nvme",
            nvme_path="/local_nvme",
            sequence_length=2048,
        ),
        "deepspeed",
        {"zero_stage": 3, "offload_optimizer": "nvme", "offload_param": "nvme"},
    ),
    (
        12,
        scenario(
            gpu_model="A100 40GB", gpus_per_node=8, gpu_memory_gb=40, model="1.3B", method="full", sequence_length=2048
        ),
        "ddp",
        {"num_processes": 8, "mixed_precision": "bf16"},
    ),
    (
        13,
        scenario(gpu_model="A100", gpus_per_node=4, gpu_memory_gb=80, model="7B", method="full", sequence_length=4096),
        "fsdp2",
        {"num_processes": 4},
    ),
    (
        14,
        scenario(
            target="axolotl",
            gpu_model="A100",
            gpus_per_node=4,
            gpu_memory_gb=80,
            model="7B",
            method="full",
            sequence_length=4096,
        ),
        "fsdp2",
        {},
    ),
    (
        15,
        scenario(
            target="axolotl",
            gpu_model="RTX 4090",
            gpus_per_node=2,
            gpu_memory_gb=24,
            model="70B",
            method="qlora",
            offload="cpu",
            sequence_length=2048,
        ),
        "fsdp2",
        {"offload_param": "cpu"},
    ),
    (
        16,
        scenario(
            gpu_model="RTX 4090",
            gpus_per_node=2,
            gpu_memory_gb=24,
            model="70B",
            method="qlora",
            offload="cpu",
            sequence_length=2048,
        ),
        "fsdp2",
        {"offload_param": "cpu"},
    ),
    (
        17,
        scenario(
            target="axolotl",
            gpu_model="H100",
            gpus_per_node=8,
            gpu_memory_gb=80,
            model="70B",
            method="full",
            sequence_length=4096,
        ),
        "fsdp2",
        {"offload_param": "cpu"},
    ),
    (
        18,
        scenario(
            gpu_model="H100",
            gpus_per_node=8,
            gpu_memory_gb=80,
            model="70B",
            method="full",
            offload="cpu",
            sequence_length=4096,
        ),
        "deepspeed",
        {"zero_stage": 3, "offload_optimizer": "cpu"},
    ),
    # Row 24: the table lists FSDP2 + HSDP, but its own note says 70B x 16 B is ~70 GB per GPU even
    # 16-way sharded, above 0.8 x 80 GB, "so the wizard must add CPU offload (B6) or more GPUs".
    # Following that text (and B6: for Accelerate, CPU offload means DeepSpeed), the answer is
    # DeepSpeed ZeRO-3 with the optimizer on the CPU over both nodes.
    (
        24,
        scenario(
            gpu_model="H100",
            gpus_per_node=8,
            num_nodes=2,
            gpu_memory_gb=80,
            model="70B",
            method="full",
            sequence_length=4096,
        ),
        "deepspeed",
        {"zero_stage": 3, "offload_optimizer": "cpu", "num_processes": 16, "num_machines": 2},
    ),
    # Row 25: T5, HSDP across the two nodes (shard over each node's 8 GPUs, one replica per node),
    # with FSDP2 CPU offload as asked (B6 for Axolotl).
    (
        25,
        scenario(
            target="axolotl",
            gpu_model="H100",
            gpus_per_node=8,
            num_nodes=2,
            gpu_memory_gb=80,
            model="70B",
            method="full",
            offload="cpu",
            sequence_length=4096,
        ),
        "fsdp2",
        {
            "offload_param": "cpu",
            "num_processes": 16,
            "num_machines": 2,
            "strategy": "hsdp_offload",
            "dp_shard_size": 8,
            "dp_replicate_size": 2,
        },
    ),
    (
        28,
        scenario(
            target="axolotl",
            hardware="amd",
            gpu_model="MI300X",
            gpus_per_node=8,
            num_nodes=2,
            gpu_memory_gb=192,
            model="70B",
            method="full",
            sequence_length=4096,
        ),
        "fsdp2",
        {"offload_param": "none", "num_processes": 16},
    ),
    (
        40,
        scenario(
            target="axolotl",
            gpu_model="V100",
            gpus_per_node=4,
            gpu_memory_gb=32,
            model="1B",
            method="full",
            sequence_length=2048,
        ),
        "ddp",
        {"mixed_precision": "fp16", "num_processes": 4},
    ),
    (
        44,
        scenario(
            target="axolotl",
            gpu_model="A100",
            gpus_per_node=1,
            gpu_memory_gb=80,
            model="8B",
            method="full",
            sequence_length=4096,
        ),
        "fsdp2",
        {"offload_param": "cpu"},
    ),
]


ANSWERS = {row: answers for row, answers, _, _ in ROWS}


def _decides(number: int, tmp_path: Path) -> None:
    """The generic part of a row: the backend and the settings of the recommendation."""
    _, answers, backend, settings = next(r for r in ROWS if r[0] == number)
    rec = decide(answers, tmp_path / f"generic{number}").recommendation
    assert rec.backend == backend, rec.because
    for key, value in settings.items():
        assert rec.settings[key] == value, (key, rec.settings)


@row(8)
def _row8_axolotl_single_gpu_starter(tmp_path: Path) -> None:
    _decides(8, tmp_path)
    result = decide(ANSWERS[8], tmp_path)
    cfg = parsed(result, "axolotl.yaml")
    assert "deepspeed" not in cfg and "fsdp_config" not in cfg
    assert cfg["bf16"] is True and cfg["attn_implementation"] == "flash_attention_2"
    assert cfg["sample_packing"] is True and cfg["gradient_checkpointing"] is True
    assert cfg["adapter"] == "lora"


@row(9)
def _row9_qlora_single_gpu(tmp_path: Path) -> None:
    _decides(9, tmp_path)
    cfg = parsed(decide(ANSWERS[9], tmp_path), "axolotl.yaml")
    assert cfg["adapter"] == "qlora" and cfg["load_in_4bit"] is True
    assert cfg["gradient_checkpointing"] is True and cfg["attn_implementation"] == "flash_attention_2"


@row(10)
def _row10_deepspeed_offload_json(tmp_path: Path) -> None:
    _decides(10, tmp_path)
    result = decide(ANSWERS[10], tmp_path)
    acc = parsed(result, "accelerate_config.yaml")
    assert acc["distributed_type"] == "DEEPSPEED" and "mixed_precision" not in acc
    assert acc["deepspeed_config"] == {"deepspeed_config_file": "ds_config.json"}
    ds = parsed(result, "ds_config.json")
    assert ds["zero_optimization"]["stage"] == 2
    assert ds["zero_optimization"]["offload_optimizer"]["device"] == "cpu"
    assert "offload_param" not in ds["zero_optimization"]
    assert ds["bf16"] == {"enabled": True} and "fp16" not in ds


@row(11)
def _row11_nvme_paths_only_in_json(tmp_path: Path) -> None:
    _decides(11, tmp_path)
    result = decide(ANSWERS[11], tmp_path)
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


@row(12)
def _row12_ddp_config(tmp_path: Path) -> None:
    _decides(12, tmp_path)
    acc = parsed(decide(ANSWERS[12], tmp_path), "accelerate_config.yaml")
    assert acc["distributed_type"] == "MULTI_GPU" and acc["num_processes"] == 8
    assert acc["mixed_precision"] == "bf16" and acc["gpu_ids"] == "all"


@row(13)
def _row13_fsdp2_config(tmp_path: Path) -> None:
    _decides(13, tmp_path)
    acc = parsed(decide(ANSWERS[13], tmp_path), "accelerate_config.yaml")
    fsdp = acc["fsdp_config"]
    assert acc["distributed_type"] == "FSDP" and fsdp["fsdp_version"] == 2
    assert fsdp["fsdp_auto_wrap_policy"] == "TRANSFORMER_BASED_WRAP"
    assert fsdp["fsdp_reshard_after_forward"] is True
    assert fsdp["fsdp_state_dict_type"] == "SHARDED_STATE_DICT"


@row(14)
def _row14_axolotl_fsdp2_block(tmp_path: Path) -> None:
    _decides(14, tmp_path)
    cfg = parsed(decide(ANSWERS[14], tmp_path), "axolotl.yaml")
    assert cfg["fsdp_version"] == 2 and "deepspeed" not in cfg
    fsdp = cfg["fsdp_config"]
    assert fsdp["auto_wrap_policy"] == "TRANSFORMER_BASED_WRAP" and fsdp["reshard_after_forward"] is True
    assert not any(key.startswith("fsdp_") for key in fsdp), "Axolotl's fsdp_config keys are un-prefixed"


@row(15)
def _row15_qlora_fsdp2_offload(tmp_path: Path) -> None:
    _decides(15, tmp_path)
    cfg = parsed(decide(ANSWERS[15], tmp_path), "axolotl.yaml")
    assert cfg["adapter"] == "qlora" and cfg["fsdp_config"]["offload_params"] is True


@row(18)
def _row18_zero3_flags(tmp_path: Path) -> None:
    _decides(18, tmp_path)
    result = decide(ANSWERS[18], tmp_path)
    acc = parsed(result, "accelerate_config.yaml")
    assert acc["deepspeed_config"]["zero3_init_flag"] is True
    zero = parsed(result, "ds_config.json")["zero_optimization"]
    assert zero["stage3_gather_16bit_weights_on_model_save"] is True


@row(
    24,
    note=(
        "the table lists FSDP2 + HSDP, but its own note (70B x 16 B is about 70 GB per GPU even 16-way "
        "sharded, over the 0.8 x 80 GB margin) says the wizard must add CPU offload: B6, DeepSpeed ZeRO-3 "
        "for Accelerate"
    ),
)
def _row24_multinode_keys(tmp_path: Path) -> None:
    _decides(24, tmp_path)
    result = decide(ANSWERS[24], tmp_path)
    acc = parsed(result, "accelerate_config.yaml")
    assert acc["num_machines"] == 2 and acc["num_processes"] == 16 and acc["machine_rank"] == 0
    assert acc["same_network"] is True and acc["main_process_port"] == 29500
    launch = file(result, "launch.sh").text
    assert '--machine_rank "$MACHINE_RANK"' in launch and '--main_process_ip "$MAIN_PROCESS_IP"' in launch


@row(28)
def _row28_amd_uses_sdpa(tmp_path: Path) -> None:
    _decides(28, tmp_path)
    cfg = parsed(decide(ANSWERS[28], tmp_path), "axolotl.yaml")
    assert cfg["attn_implementation"] == "sdpa" and cfg["sample_packing"] is False


@row(40)
def _row40_v100_fp16(tmp_path: Path) -> None:
    _decides(40, tmp_path)
    cfg = parsed(decide(ANSWERS[40], tmp_path), "axolotl.yaml")
    assert cfg["fp16"] is True and cfg["bf16"] is False and cfg["attn_implementation"] == "sdpa"


@row(44)
def _row44_lora_fit_does_not_carry_over(tmp_path: Path) -> None:
    _decides(44, tmp_path)
    result = decide(ANSWERS[44], tmp_path)
    assert any("would fit on one GPU with LoRA" in w for w in result.warnings)


@row(7)
def _row7_axolotl_on_cpu_is_refused_with_the_reason(tmp_path: Path) -> None:
    with pytest.raises(InvalidAnswerError) as info:
        decide({"target": "axolotl", "hardware": "cpu", "model": "7B", "method": "qlora"}, tmp_path)
    assert info.value.key == "hardware"
    assert "(CUDA) and AMD (ROCm) GPUs only" in info.value.message


def _existing_json_is_used_as_is(tmp_path: Path, target: str) -> None:
    path = ds_json(tmp_path, 3, optimizer="cpu", param="cpu")
    answers = scenario(
        target=target,
        gpu_model="H100",
        gpus_per_node=8,
        gpu_memory_gb=80,
        model="70B",
        method="full",
        deepspeed_config=path,
        sequence_length=4096,
    )
    result = decide(answers, tmp_path / "out")
    rec = result.recommendation
    assert rec.backend == "deepspeed" and rec.rule.id == "existing_deepspeed_json"
    assert (rec.settings["zero_stage"], rec.settings["offload_optimizer"], rec.settings["offload_param"]) == (
        3,
        "cpu",
        "cpu",
    )
    # Copied into the output folder (so it travels with it to every machine), referenced relatively.
    assert parsed(result, "ds_config.json") == json.loads(Path(path).read_text())
    if target == "axolotl":
        cfg = parsed(result, "axolotl.yaml")
        assert cfg["deepspeed"] == "ds_config.json" and "fsdp_config" not in cfg
    else:
        acc = parsed(result, "accelerate_config.yaml")
        assert acc["deepspeed_config"]["deepspeed_config_file"] == "ds_config.json"
        assert acc["num_processes"] == 8 and "mixed_precision" not in acc
        assert not set(acc["deepspeed_config"]) - {"deepspeed_config_file", "zero3_init_flag"}


@row(21)
def _row21_param_offload_below_stage3_is_reported_with_the_fix(tmp_path: Path) -> None:
    path = ds_json(tmp_path, 2, optimizer="cpu", param="cpu")
    answers = scenario(
        gpu_model="A100",
        gpus_per_node=4,
        gpu_memory_gb=80,
        model="13B",
        method="full",
        deepspeed_config=path,
        sequence_length=2048,
    )
    with pytest.raises(DeepSpeedConfigError) as info:
        decide(answers, tmp_path / "out")
    assert "offload_param" in info.value.message and "stage 2" in info.value.message
    assert "raise zero_optimization.stage to 3" in str(info.value.hint)
    assert "remove offload_param" in str(info.value.hint)


@row(27)
def _row27_existing_zero2_json_multi_node(tmp_path: Path) -> None:
    path = ds_json(tmp_path, 2, optimizer="cpu", name="zero2.json")
    answers = scenario(
        target="axolotl",
        gpu_model="H100",
        gpus_per_node=8,
        num_nodes=4,
        gpu_memory_gb=80,
        model="8B",
        method="full",
        deepspeed_config=path,
        sequence_length=4096,
    )
    result = decide(answers, tmp_path / "out")
    assert result.recommendation.backend == "deepspeed"
    assert result.recommendation.settings["zero_stage"] == 2
    launch = file(result, "launch.sh").text
    assert "--launcher torchrun" in launch and "--nnodes 4 --nproc_per_node 8" in launch
    assert "axolotl preprocess" in launch.split("axolotl train")[0]


@row(19)
def _row19_existing_json_axolotl(tmp_path: Path) -> None:
    _existing_json_is_used_as_is(tmp_path, "axolotl")


@row(20)
def _row20_existing_json_accelerate(tmp_path: Path) -> None:
    _existing_json_is_used_as_is(tmp_path, "accelerate")


@row(4)
def _row4(tmp_path: Path) -> None:
    _decides(4, tmp_path)


@row(5)
def _row5(tmp_path: Path) -> None:
    _decides(5, tmp_path)


@row(6)
def _row6(tmp_path: Path) -> None:
    _decides(6, tmp_path)
    # "+ optional Local SGD": asked for CPU processes, off (0) unless given; set in Python.
    plain = decide(ANSWERS[6], tmp_path / "plain")
    assert plain.session.answers["local_sgd_steps"] == 0 and "train_snippet.py" not in [f.name for f in plain.files]
    result = decide({**ANSWERS[6], "local_sgd_steps": 8}, tmp_path / "local_sgd")
    acc = parsed(result, "accelerate_config.yaml")
    assert acc["distributed_type"] == "MULTI_CPU" and acc["num_processes"] == 4
    snippet = file(result, "train_snippet.py").text
    assert "local_sgd_steps = 8" in snippet and "LocalSGD(accelerator=accelerator, model=model" in snippet
    assert "local_sgd.step()" in snippet.split("optimizer, batch, args)")[-1]  # after each optimizer step


@row(16)
def _row16(tmp_path: Path) -> None:
    _decides(16, tmp_path)


@row(17)
def _row17(tmp_path: Path) -> None:
    _decides(17, tmp_path)


@row(25)
def _row25(tmp_path: Path) -> None:
    _decides(25, tmp_path)
    result = decide(ANSWERS[25], tmp_path)
    cfg = parsed(result, "axolotl.yaml")
    assert (cfg["dp_shard_size"], cfg["dp_replicate_size"], cfg["fsdp_config"]["offload_params"]) == (8, 2, True)
    assert cfg["fsdp_version"] == 2 and "deepspeed" not in cfg
    launch = file(result, "launch.sh").text
    assert "--launcher torchrun -- \\\n  --nnodes 2 --nproc_per_node 8" in launch and "--rdzv_backend c10d" in launch


def _load_row_modules() -> None:
    """Import the scenarios_*.py modules that register the other rows."""
    import importlib

    for path in sorted(Path(__file__).parent.glob("scenarios_*.py")):
        importlib.import_module(path.stem)


_load_row_modules()


@pytest.mark.parametrize("number", range(1, ROW_COUNT + 1), ids=lambda n: f"row{n:02d}")
def test_triage_scenario(tmp_path: Path, number: int) -> None:
    scenario: Scenario | None = SCENARIOS.get(number)
    assert scenario is not None, f"acceptance table row {number} has no registered check"
    scenario.check(tmp_path)
