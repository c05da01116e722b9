"""The GPU benchmark's plans (bench/gpu_smoke/) still decide the layouts the README's measured table names.

The table was measured once, on a GPU; CI has none. What CI can hold is the other half: each answers
file still gives the backend and layout its row is labelled with, and the swapped-in FSDP2 config is
one that accelerate launch takes (FSDP version 2, one process).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from helpers import decide
from realtools import accelerate_dry_run
from wizard.inputs import load_answers_file

BENCH = Path(__file__).resolve().parent.parent / "bench"
sys.path.insert(0, str(BENCH))
import gpu_smoke  # noqa: E402

# Each plan's layout as the README's table names it: (backend, strategy, world size).
EXPECTED = {
    "full_checkpointing": ("single_gpu", "ddp"),
    "full_no_checkpointing": ("single_gpu", "ddp"),
    "lora_3b": ("single_gpu", "ddp"),
    "zero2": ("deepspeed", "zero2"),
    "zero3": ("deepspeed", "zero3"),
    "fsdp2_one_process": ("single_gpu", "ddp"),
    "offload_16gb": ("deepspeed", "zero3_offload_all"),
}


@pytest.mark.parametrize("name", sorted(gpu_smoke.PLANS))
def test_each_plan_decides_the_layout_its_row_names(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    answers_file, _, _ = gpu_smoke.PLANS[name]
    monkeypatch.chdir(gpu_smoke.HERE)  # the DeepSpeed JSON paths are relative to the plans' folder
    answers = load_answers_file(gpu_smoke.HERE / answers_file)
    rec = decide(answers, tmp_path / "set").recommendation
    assert not rec.refused
    assert (rec.backend, rec.settings.get("strategy")) == EXPECTED[name], name
    assert rec.facts.get("world_size") == 1  # one GPU: the table says every layout ran as one process
    if answers.get("deepspeed_config"):
        assert rec.settings.get("mixed_precision") == "bf16"  # the JSON's "auto" is planned as bf16


def test_the_fsdp2_row_is_held_against_fsdp2s_own_estimate(tmp_path: Path) -> None:
    answers_file, config, _ = gpu_smoke.PLANS["fsdp2_one_process"]
    assert config is not None
    states, peak = gpu_smoke._fsdp2_peak(gpu_smoke.HERE / answers_file, tmp_path / "set")
    est = decide(load_answers_file(gpu_smoke.HERE / answers_file), tmp_path / "set2").recommendation.facts.estimates
    # FSDP2's row counts the gathered layer beside the whole states: more than one GPU's plain row.
    assert states == est["fsdp2"].model_states > est["ddp"].model_states
    assert peak == states + est["fsdp2"].activations + est["fsdp2"].transient


def test_the_swapped_fsdp2_config_is_one_process_of_fsdp2(tmp_path: Path) -> None:
    _, config, _ = gpu_smoke.PLANS["fsdp2_one_process"]
    assert config is not None
    resolved = accelerate_dry_run(gpu_smoke.HERE / config, cwd=tmp_path)
    assert resolved["distributed_type"] == "FSDP" and resolved["num_processes"] == 1
    assert resolved["fsdp"]["version"] == 2 and resolved["fsdp"]["offload"] is False


def test_a_row_reads_what_the_report_says() -> None:
    """The Markdown row from a smoke report: resolved layout, states and peak against the estimate."""
    gib = 2**30
    report = {
        "name": "zero3",
        "distributed_type": "DEEPSPEED",
        "zero_stage": 3,
        "offload_param": "none",
        "param_dtype": "bfloat16",
        "mixed_precision": "bf16",
        "states_bytes": [19 * gib],
        "peak_bytes": [30 * gib],
        "estimated_states_bytes": 19 * gib,
        "estimated_peak_bytes": 33 * gib,
        "verdict": "matches",
        "edited_files": [],
    }
    assert gpu_smoke.row(report) == (
        "| zero3 | DEEPSPEED ZeRO-3, bfloat16 / bf16 | 19.00 / 19.00 | 30.00 / 33.00 (0.91x) | matches |"
    )
    swapped = {**report, "edited_files": ["accelerate_config.yaml"], "verdict": "differs", "peak_bytes": [50 * gib]}
    assert gpu_smoke.row(swapped).endswith("| outside 25% of the FSDP2 row |")
