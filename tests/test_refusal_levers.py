"""A run refused for want of host RAM is shown its two ways out side by side: more RAM, or NVMe.

Invariants over every path of the walk:
* the NVMe lever appears only on a refusal, and its line gives the GPU, host RAM and drive sizes
  of the decision the wizard would make with `offload: nvme`, with that layout's tokens per second;
* the host RAM lever names the least common server size that lets the run decide, with the
  decision at that size; one size less is still refused.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from helpers import ONE_A100_13B_FULL, decide, decided_paths
from wizard.engine.evaluate import nvme_drive_bytes, offloads_to_nvme
from wizard.engine.memory import to_gib
from wizard.engine.what_if import HOST_RAM_SIZES, NVME


def _redecide(answers: dict[str, Any], tmp_path: Path, **change: Any) -> Any:
    return decide({**answers, **change}, tmp_path / "again").recommendation


def test_refusals_for_host_ram_offer_more_ram_and_nvme_with_their_figures(tmp_path: Path) -> None:
    seen = {"nvme": 0, "ram": 0, "wider": 0}
    # Every other path (each refusal decides its levers and the runs they name): half the time.
    for answers, result in decided_paths(tmp_path, refusals=True)[::2]:
        rec = result.recommendation
        nvme = [lever for lever in result.levers if lever.change == NVME]
        ram = [
            lever
            for lever in result.levers
            if f"GiB of host RAM per machine instead of {answers.get('cpu_memory_gb', 0):,}" in lever.change
        ]
        if not rec.refused:
            assert not nvme and not ram, answers
            continue
        for lever in nvme:
            again = _redecide(answers, tmp_path, offload="nvme", nvme_path=answers.get("nvme_path") or "/local_nvme")
            assert not again.refused and offloads_to_nvme(again), answers
            # A way out only where the GPU holds what stays on it.
            assert again.facts.estimates[str(again.settings["strategy"])].fits, answers
            assert lever.drive_gib == to_gib(nvme_drive_bytes(again)) and lever.drive_gib, lever
            assert f", {lever.drive_gib} GiB on the drive" in lever.size, lever.size
            assert ("tokens/s" in lever.size) is bool(lever.step_band), lever.size
            # Its own lever: a larger micro-batch reads the drive as often for more tokens.
            if lever.wider:
                assert lever.wider in lever.size and "with micro_batch_size" in lever.wider, lever.size
                seen["wider"] += 1
            seen["nvme"] += 1
        for lever in ram:
            size = int(lever.change.split(" GiB")[0].replace(",", ""))
            assert size in HOST_RAM_SIZES and size > answers["cpu_memory_gb"], lever.change
            assert not _redecide(answers, tmp_path, cpu_memory_gb=size).refused
            smaller = [s for s in HOST_RAM_SIZES if answers["cpu_memory_gb"] < s < size]
            if smaller:
                assert _redecide(answers, tmp_path, cpu_memory_gb=smaller[-1]).refused, (answers, size)
            seen["ram"] += 1
    assert seen["nvme"] and seen["ram"] and seen["wider"], seen


def test_the_one_a100_13b_full_refusal_compares_cpu_and_nvme_offload(tmp_path: Path) -> None:
    answers = dict(ONE_A100_13B_FULL)
    result = decide(answers, tmp_path / "out")
    assert result.recommendation.refused
    lines = {lever.change: lever for lever in result.levers}
    ram = lines[
        "384 GiB of host RAM per machine instead of 256 (the first common size that is enough, as free -g's total:"
        " a machine sold with that many GB shows a little less there)"
    ]
    nvme = lines[NVME]
    assert "CPU offload" in ram.title and "NVMe offload" in nvme.title
    # Both speeds are shown, and CPU offload is the faster one.
    assert ram.step_band and nvme.step_band
    assert float(ram.step_band.split("-")[0].replace(",", "")) > float(nvme.step_band.split("-")[-1].replace(",", ""))


def test_the_gpu_count_a_refusal_names_splits_the_global_batch_given(tmp_path: Path) -> None:
    """A 13B full fine-tune on 4 x A100 40GB with 251 GiB of host RAM and a global batch of 64 is refused; the
    fewest GPUs FSDP2 would fit on is 7, which cannot split 64, so the refusal names 8, says why, and the run with
    8 GPUs is decided (not refused for its batch)."""

    answers = {
        "target": "accelerate", "hardware": "nvidia", "gpu_model": "A100 40GB", "gpus_per_node": 4, "num_nodes": 1,
        "cpu_memory_gb": 251, "model": "13B", "method": "full", "sequence_length": 2048, "global_batch_size": 64,
    }  # fmt: skip
    refused = decide(answers, tmp_path / "refused").recommendation
    assert refused.refused
    because = " ".join(refused.because.split())
    assert "add GPUs (about 8 in all, sharded without offload, by this estimate, the fewest that also split" in because
    taken = decide({**answers, "gpus_per_node": 8}, tmp_path / "eight").recommendation
    assert not taken.refused and taken.backend == "fsdp2", taken.backend
