"""The real-tools harness can fail: hand-written bad configs are rejected by the real tools.

Each case is a twin pair: the good file passes, the bad one (a small change of it) raises the
tool's own error. Two tests really launch 2 CPU processes through ``accelerate launch``.
"""

import copy
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

import realtools

pytestmark = pytest.mark.tools


def merge(base: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """Return a deep copy of ``base`` with ``patch`` merged into it recursively."""
    out = copy.deepcopy(base)
    for key, value in patch.items():
        out[key] = merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def write_yaml(path: Path, data: dict[str, Any]) -> Path:
    """Write ``data`` as YAML (``safe_dump`` quotes ``'NO'``/``'no'``) and return the path."""
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@dataclass(frozen=True)
class Twin:
    """A config the tool accepts and a near-identical one it must reject with ``error``/``match``."""

    good: dict[str, Any]
    bad: dict[str, Any]
    error: type[BaseException]
    match: str


# --- accelerate ---------------------------------------------------------------------------------

MULTI_GPU = {
    "compute_environment": "LOCAL_MACHINE",
    "distributed_type": "MULTI_GPU",
    "mixed_precision": "bf16",
    "num_machines": 1,
    "machine_rank": 0,
    "num_processes": 4,
    "gpu_ids": "all",
    "rdzv_backend": "static",
    "same_network": True,
    "use_cpu": False,
}
FSDP2 = merge(
    MULTI_GPU,
    {
        "distributed_type": "FSDP",
        "fsdp_config": {
            "fsdp_version": 2,
            "fsdp_reshard_after_forward": True,
            "fsdp_offload_params": False,
            "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
            "fsdp_transformer_layer_cls_to_wrap": "LlamaDecoderLayer",
            "fsdp_state_dict_type": "SHARDED_STATE_DICT",
            "fsdp_cpu_ram_efficient_loading": True,
            "fsdp_activation_checkpointing": False,
        },
    },
)
# A DeepSpeed JSON file excludes mixed_precision and the ZeRO keys from the accelerate YAML.
DS_FILE = {
    "compute_environment": "LOCAL_MACHINE",
    "distributed_type": "DEEPSPEED",
    "deepspeed_config": {"deepspeed_config_file": "ds_zero2.json", "zero3_init_flag": False},
    "num_machines": 1,
    "machine_rank": 0,
    "num_processes": 2,
    "use_cpu": False,
}
DS_ZERO2 = {
    "train_batch_size": "auto",
    "train_micro_batch_size_per_gpu": "auto",
    "gradient_accumulation_steps": "auto",
    "gradient_clipping": "auto",
    "zero_optimization": {"stage": 2, "overlap_comm": False, "contiguous_gradients": True},
    "bf16": {"enabled": "auto"},
    "fp16": {"enabled": "auto"},
}

ACCELERATE_TWINS = {
    "unknown-top-level-key": Twin(
        MULTI_GPU, merge(MULTI_GPU, {"num_procs": 2}), ValueError, r"unknown keys \(\['num_procs'\]\)"
    ),
    "mixed-precision-fp12": Twin(
        MULTI_GPU, merge(MULTI_GPU, {"mixed_precision": "fp12"}), ValueError, "Unknown mixed_precision mode: fp12"
    ),
    "fsdp2-reshard-strategy-name": Twin(
        FSDP2,
        merge(FSDP2, {"fsdp_config": {"fsdp_reshard_after_forward": "FULL_SHARD"}}),
        ValueError,
        "invalid truth value full_shard",
    ),
    "ds-config-file-with-zero-stage": Twin(
        DS_FILE,
        merge(DS_FILE, {"deepspeed_config": {"zero_stage": 2}}),
        ValueError,
        "When using `deepspeed_config_file`, the following accelerate config variables will be ignored",
    ),
}


@pytest.mark.parametrize("case", ACCELERATE_TWINS)
def test_accelerate_dry_run_accepts_good_and_rejects_bad_twin(case: str, tmp_path: Path) -> None:
    twin = ACCELERATE_TWINS[case]
    (tmp_path / "ds_zero2.json").write_text(json.dumps(DS_ZERO2))
    realtools.accelerate_dry_run(write_yaml(tmp_path / "good.yaml", twin.good), cwd=tmp_path)
    with pytest.raises(twin.error, match=twin.match):
        realtools.accelerate_dry_run(write_yaml(tmp_path / "bad.yaml", twin.bad), cwd=tmp_path)


def test_accelerate_dry_run_summarises_multi_gpu(tmp_path: Path) -> None:
    summary = realtools.accelerate_dry_run(write_yaml(tmp_path / "ddp.yaml", MULTI_GPU))
    assert summary["distributed_type"] == "MULTI_GPU"
    assert (summary["num_processes"], summary["num_machines"], summary["mixed_precision"]) == (4, 1, "bf16")
    assert summary["launcher"] == "torchrun"
    assert summary["env"]["ACCELERATE_MIXED_PRECISION"] == "bf16"


def test_accelerate_dry_run_builds_fsdp2_plugin(tmp_path: Path) -> None:
    summary = realtools.accelerate_dry_run(write_yaml(tmp_path / "fsdp2.yaml", FSDP2))
    assert summary["fsdp"] == {
        "version": 2,
        "reshard_after_forward": True,
        "sharding_strategy": None,
        "state_dict_type": "SHARDED_STATE_DICT",
        "offload": False,
        "auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
        "transformer_cls_names_to_wrap": ["LlamaDecoderLayer"],
        "activation_checkpointing": False,
        "cpu_ram_efficient_loading": True,
    }


def test_accelerate_dry_run_resolves_deepspeed_file_then_deepspeed_parses_it(tmp_path: Path) -> None:
    (tmp_path / "ds_zero2.json").write_text(json.dumps(DS_ZERO2))
    summary = realtools.accelerate_dry_run(write_yaml(tmp_path / "ds.yaml", DS_FILE), cwd=tmp_path)
    assert summary["env"]["ACCELERATE_DEEPSPEED_CONFIG_FILE"] == "ds_zero2.json"
    assert summary["deepspeed_config"]["zero_optimization"]["stage"] == 2
    parsed = realtools.deepspeed_parse(summary["deepspeed_config"], world_size=summary["num_processes"])
    assert (parsed.zero_optimization_stage, parsed.train_batch_size) == (2, 2)


def test_cli_deepspeed_config_file_wins_over_yaml_and_frees_the_working_directory(tmp_path: Path) -> None:
    """The YAML's relative path only resolves from the launch directory; an absolute CLI flag wins."""
    (tmp_path / "ds_zero2.json").write_text(json.dumps(DS_ZERO2))
    (tmp_path / "ds_zero1.json").write_text(json.dumps(merge(DS_ZERO2, {"zero_optimization": {"stage": 1}})))
    config = write_yaml(tmp_path / "ds.yaml", DS_FILE)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    with pytest.raises(ValueError, match="Expected a string path to an existing deepspeed config"):
        realtools.accelerate_dry_run(config, cwd=elsewhere)
    override = str(tmp_path / "ds_zero1.json")
    summary = realtools.accelerate_dry_run(config, cwd=elsewhere, extra_args=["--deepspeed_config_file", override])
    assert summary["env"]["ACCELERATE_DEEPSPEED_CONFIG_FILE"] == override
    assert summary["deepspeed_config"]["zero_optimization"]["stage"] == 1


# --- DeepSpeed ----------------------------------------------------------------------------------

DS_EXPLICIT_BATCH = merge(
    DS_ZERO2, {"train_batch_size": 16, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2}
)
DEEPSPEED_TWINS = {
    "zero-stage-7": Twin(
        DS_ZERO2, merge(DS_ZERO2, {"zero_optimization": {"stage": 7}}), ValueError, "Input should be 0, 1, 2, 3"
    ),
    "fp16-and-bf16": Twin(
        merge(DS_ZERO2, {"bf16": {"enabled": True}}),
        merge(DS_ZERO2, {"bf16": {"enabled": True}, "fp16": {"enabled": True}}),
        AssertionError,
        "bfloat16 and fp16 modes cannot be simultaneously enabled",
    ),
    "unknown-zero-key": Twin(
        DS_ZERO2,
        merge(DS_ZERO2, {"zero_optimization": {"overlap_comms": True}}),
        ValueError,
        "overlap_comms\n  Extra inputs are not permitted",
    ),
    "batch-mismatch": Twin(
        DS_EXPLICIT_BATCH,
        merge(DS_EXPLICIT_BATCH, {"train_batch_size": 12}),
        AssertionError,
        r"12 != 4 \* 2 \* 2",
    ),
}


@pytest.mark.parametrize("case", DEEPSPEED_TWINS)
def test_deepspeed_parse_accepts_good_and_rejects_bad_twin(case: str) -> None:
    twin = DEEPSPEED_TWINS[case]
    realtools.deepspeed_parse(twin.good, world_size=2)
    with pytest.raises(twin.error, match=twin.match):
        realtools.deepspeed_parse(twin.bad, world_size=2)


def test_deepspeed_parse_resolves_auto_batch_for_world_size() -> None:
    parsed = realtools.deepspeed_parse(DS_ZERO2, world_size=4, micro_batch_size=2, gradient_accumulation_steps=3)
    assert (parsed.train_micro_batch_size_per_gpu, parsed.gradient_accumulation_steps) == (2, 3)
    assert (parsed.train_batch_size, parsed.gradient_clipping) == (24, 1.0)


def test_deepspeed_parse_rejects_duplicate_json_keys(tmp_path: Path) -> None:
    good = tmp_path / "good.json"
    good.write_text(json.dumps(DS_ZERO2))
    assert realtools.deepspeed_parse(good, world_size=2).zero_optimization_stage == 2
    bad = tmp_path / "bad.json"
    bad.write_text('{"zero_optimization": {"stage": 2}, "train_batch_size": 2, "train_batch_size": 4}')
    with pytest.raises(ValueError, match=r"Duplicate keys in DeepSpeed config: \['train_batch_size'\]"):
        realtools.deepspeed_parse(bad, world_size=2)


# --- axolotl ------------------------------------------------------------------------------------

AXOLOTL_BASE = {
    "base_model": "./tiny-llama",
    "datasets": [{"path": "./data.jsonl", "type": "alpaca"}],
    "output_dir": "./out",
    "learning_rate": 2.0e-5,
    "micro_batch_size": 1,
    "gradient_accumulation_steps": 4,
}
AXOLOTL_DS = merge(AXOLOTL_BASE, {"deepspeed": "deepspeed_configs/zero2.json"})
AXOLOTL_FSDP_CONFIG = {
    "fsdp_version": 2,
    "reshard_after_forward": True,
    "auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
    "transformer_layer_cls_to_wrap": "LlamaDecoderLayer",
    "state_dict_type": "SHARDED_STATE_DICT",
}
AXOLOTL_QLORA = merge(AXOLOTL_BASE, {"adapter": "qlora", "lora_r": 16, "lora_alpha": 32, "lora_target_linear": True})
AXOLOTL_TWINS = {
    "deepspeed-with-fsdp_config": Twin(
        AXOLOTL_DS,
        merge(AXOLOTL_DS, {"fsdp_config": AXOLOTL_FSDP_CONFIG}),
        ValueError,
        "deepspeed and fsdp cannot be used together",
    ),
    "qlora-without-load_in_4bit": Twin(
        merge(AXOLOTL_QLORA, {"load_in_4bit": True}),
        AXOLOTL_QLORA,
        ValueError,
        "Require cfg.load_in_4bit to be True for qlora",
    ),
}


@pytest.mark.parametrize("case", AXOLOTL_TWINS)
def test_axolotl_validate_accepts_good_and_rejects_bad_twin(case: str, tmp_path: Path) -> None:
    twin = AXOLOTL_TWINS[case]
    validated = realtools.axolotl_validate(write_yaml(tmp_path / "good.yaml", twin.good), n_gpu=2)
    assert validated["base_model"] == "./tiny-llama"
    with pytest.raises(twin.error, match=twin.match):
        realtools.axolotl_validate(write_yaml(tmp_path / "bad.yaml", twin.bad), n_gpu=2)


# --- the tool gate ------------------------------------------------------------------------------


def test_require_tool_skips_or_fails_when_a_tool_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BACKEND_WIZARD_REQUIRE_TOOLS", raising=False)
    with pytest.raises(pytest.skip.Exception, match="no_such_tool"):
        realtools.require_tool("no_such_tool")
    monkeypatch.setenv("BACKEND_WIZARD_REQUIRE_TOOLS", "1")
    with pytest.raises(pytest.fail.Exception, match="no_such_tool"):
        realtools.require_tool("no_such_tool")


# --- real launches (2 CPU processes each) -------------------------------------------------------


@pytest.mark.launch
def test_launch_multi_gpu_config_on_cpu_forms_one_gloo_ddp_group(tmp_path: Path) -> None:
    """``ACCELERATE_USE_CPU=true`` turns a MULTI_GPU config into real 2-rank gloo DDP on CPU."""
    config = write_yaml(tmp_path / "ddp.yaml", merge(MULTI_GPU, {"num_processes": 2}))
    realtools.accelerate_dry_run(config, cwd=tmp_path)
    records = realtools.accelerate_launch(config, cwd=tmp_path, nproc_expected=2, env={"ACCELERATE_USE_CPU": "true"})
    assert {(r["distributed_type"], r["backend"], r["model"]) for r in records} == {
        ("DistributedType.MULTI_CPU", "gloo", "DistributedDataParallel")
    }
    assert all(len(r["losses"]) == 3 for r in records)


@pytest.mark.launch
def test_launch_deepspeed_zero2_config_file_on_cpu(tmp_path: Path) -> None:
    """The YAML's relative ``deepspeed_config_file`` resolves from the launch directory."""
    (tmp_path / "ds_zero2.json").write_text(json.dumps(DS_ZERO2))
    config = write_yaml(tmp_path / "ds.yaml", DS_FILE)
    realtools.accelerate_dry_run(config, cwd=tmp_path)
    records = realtools.accelerate_launch(config, cwd=tmp_path, nproc_expected=2)
    assert {(r["distributed_type"], r["backend"], r["model"]) for r in records} == {
        ("DistributedType.DEEPSPEED", "gloo", "DeepSpeedEngine")
    }
    assert all(len(r["losses"]) == 3 for r in records)
