"""Triage rows about the add-ons chosen after the backend (22, 38, 39): FP8 through MS-AMP refused
with a ZeRO-3 JSON, Transformer Engine FP8 on FSDP2 for Accelerate, torchao FP8 for Axolotl."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from helpers import decide, file, parsed
from scenario_table import row
from wizard.errors import DeepSpeedConfigError

H100X8: dict[str, Any] = {
    "target": "accelerate",
    "hardware": "nvidia",
    "gpu_model": "H100",
    "gpus_per_node": 8,
    "num_nodes": 1,
    "gpu_memory_gb": 80,
    "method": "full",
    "micro_batch_size": 1,
}
ROW38 = {**H100X8, "model": "8B", "sequence_length": 4096, "tune": True, "fp8": "te"}
ROW39 = {**H100X8, "target": "axolotl", "model": "3B", "sequence_length": 4096, "tune": True, "fp8": "ao"}


@row(22)
def _row22_msamp_with_zero3_json_is_refused_with_the_fix(tmp_path: Path) -> None:
    ds = tmp_path / "zero3_msamp.json"
    ds.write_text(
        json.dumps(
            {
                "train_micro_batch_size_per_gpu": "auto",
                "bf16": {"enabled": "auto"},
                "zero_optimization": {"stage": 3},
                "msamp": {"enabled": True, "opt_level": "O2"},
            }
        )
    )
    answers = {**H100X8, "model": "13B", "sequence_length": 2048, "deepspeed_config": str(ds)}
    with pytest.raises(DeepSpeedConfigError) as info:
        decide(answers, tmp_path / "out")
    assert "MS-AMP (FP8) is not supported with ZeRO-3" in info.value.message
    assert "te or ao" in str(info.value.hint) and "stage to 2 or less" in str(info.value.hint)
    # The same JSON at stage 2 is accepted: MS-AMP works with ZeRO 0-2.
    ds.write_text(ds.read_text().replace('"stage": 3', '"stage": 2'))
    assert decide(answers, tmp_path / "out").recommendation.backend == "deepspeed"


@row(
    38,
    note=(
        "the table spells fp8_config.fp8_backend: te; Accelerate 1.15 (utils/dataclasses.py) compares the "
        "backend with FP8BackendType exactly (AO/TE/MSAMP, upper case), so the launch-flag spelling "
        "backend: TE is written (amax_history_len / amax_compute_algo are the same keys without the fp8_ prefix)"
    ),
)
def _row38_accelerate_fsdp2_with_transformer_engine_fp8(tmp_path: Path) -> None:
    result = decide(ROW38, tmp_path)
    assert result.recommendation.backend == "fsdp2"  # 8B full: about 124 GiB replicated, sharded it fits
    acc = parsed(result, "accelerate_config.yaml")
    assert acc["distributed_type"] == "FSDP" and acc["fsdp_config"]["fsdp_version"] == 2
    assert acc["mixed_precision"] == "fp8"
    assert acc["fp8_config"] == {
        "backend": "TE",
        "fp8_format": "HYBRID",
        "amax_history_len": 1024,
        "amax_compute_algo": "most_recent",
    }
    assert "transformer-engine" in file(result, "launch.sh").text.split("set -euo")[0]


@row(
    39,
    note=(
        "the table lists FSDP2 for a 3B full fine-tune on 8 x H100, but B8 applies: a full copy needs about "
        "49 GiB of the 64 GiB usable per GPU, so DDP; FP8 is an add-on after the backend, so "
        "the 3B run gets fp8 on DDP and a model that needs sharding (13B) gets the FSDP2 + FP8 all-gather pair"
    ),
)
def _row39_axolotl_torchao_fp8(tmp_path: Path) -> None:
    small = decide(ROW39, tmp_path / "3b")
    assert small.recommendation.backend == "ddp"
    cfg = parsed(small, "axolotl.yaml")
    assert cfg["fp8"] is True and cfg["torch_compile"] is True  # torchao FP8 is fast only compiled
    assert "fp8_enable_fsdp_float8_all_gather" not in cfg and "fsdp_config" not in cfg
    sharded = decide({**ROW39, "model": "13B"}, tmp_path / "13b")
    assert sharded.recommendation.backend == "fsdp2"
    cfg = parsed(sharded, "axolotl.yaml")
    assert cfg["fsdp_version"] == 2 and cfg["fsdp_config"]["reshard_after_forward"] is True
    assert cfg["fp8"] is True and cfg["fp8_enable_fsdp_float8_all_gather"] is True
    assert not any("fp8" in warning for warning in sharded.warnings), sharded.warnings
