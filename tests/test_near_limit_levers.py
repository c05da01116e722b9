"""A run split by context parallel that fits close to the limit is told the next size, with its figure."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

from helpers import decide, decided_paths
from wizard.app import Result
from wizard.engine.advice import near_limit
from wizard.engine.memory import GIB, estimate, to_gib

LONG = {
    "target": "accelerate",
    "hardware": "nvidia",
    "gpu_model": "H100",
    "gpus_per_node": 8,
    "model": "8B",
    "method": "lora",
    "sequence_length": 131072,
}


def cp_lever(warnings: list[str]) -> re.Match[str] | None:
    text = " ".join(" ".join(warnings).split())
    return re.search(r"set context_parallel_size: (\d+) \(about ([\d.]+) GiB per GPU by the same estimate", text)


def check(result: Result) -> bool:
    """Whether the run's warnings carry the doubled context-parallel size, right; False when not near the limit."""
    rec = result.recommendation
    cp = int(rec.settings.get("cp_size") or 1)
    est = rec.facts.estimates.get(str(rec.settings.get("strategy")))
    # Near the limit, or tight by the loss peak: either warning names the doubled size.
    if rec.refused or cp < 2 or est is None or not (near_limit(est) or est.tight):
        return False
    workload = rec.facts.workload
    assert workload is not None
    lever = cp_lever(result.warnings)
    if workload.world_size % (2 * cp):
        assert lever is None, result.warnings
        return False
    assert lever is not None, result.warnings
    wider = estimate(replace(workload, context_parallel=2 * cp), est.strategy, est.gpu_memory / GIB, None)
    assert int(lever.group(1)) == 2 * cp
    assert float(lever.group(2)) == to_gib(wider.total) < to_gib(est.total)
    return True


def test_a_long_context_run_near_the_limit_is_told_the_next_context_parallel_size(tmp_path: Path) -> None:
    result = decide(LONG, tmp_path / "out")
    # 2 would leave the steady total under the line, but the fp32 loss peak past the GPU.
    assert result.recommendation.settings.get("cp_size") == 4
    assert result.recommendation.facts.estimates["fsdp2_nd"].tight
    assert check(result)


def test_every_context_parallel_run_near_the_limit_gets_the_lever_with_its_figure(tmp_path: Path) -> None:
    told = sum(check(result) for _, result in decided_paths(tmp_path))
    assert told >= 1, told


RUN9 = {
    "target": "axolotl",
    "hardware": "nvidia",
    "gpu_model": "A100 80GB",
    "gpus_per_node": 4,
    "num_nodes": 2,
    "gpu_link": "nvlink",
    "network_gbps": 200,
    "model": "13B",
    "method": "full",
    "sequence_length": 4096,
    "micro_batch_size": 2,
}


def check_hsdp(answers: dict[str, object], result: Result) -> bool:
    """Whether an HSDP run near the limit is offered sharding over every GPU, where that leaves room.

    The keys it names must be the ones the written file sets (so the user edits a line that is
    there), the figure must be the FSDP2 row's; False when the lever does not apply.
    """
    rec = result.recommendation
    est = rec.facts.estimates.get(str(rec.settings.get("strategy")))
    if rec.refused or rec.settings.get("strategy") != "hsdp" or est is None or not near_limit(est):
        return False
    text = " ".join(" ".join(result.warnings).split())
    lever = re.search(
        r"shard over all (\d+) GPUs instead of each machine's"
        r" \(set (\w+): (\d+) and (\w+): 1 in ([\w.]+)\): about ([\d.]+) GiB",
        text,
    )
    whole = rec.facts.estimates["fsdp2"]
    if not whole.fits or near_limit(whole):
        assert lever is None, text
        return False
    assert lever is not None, text
    world = rec.facts.get("world_size")
    assert int(lever[1]) == int(lever[3]) == world
    written = next(f.text for f in result.files if f.name == lever[5])
    assert re.search(rf"^\s*{lever[2]}: {rec.facts.get('gpus_per_node') or answers['gpus_per_node']}$", written, re.M)
    assert re.search(rf"^\s*{lever[4]}: {answers['num_nodes']}$", written, re.M)
    assert float(lever[6]) == to_gib(whole.total)
    return True


def test_a_near_limit_hsdp_run_is_offered_sharding_over_every_gpu(tmp_path: Path) -> None:
    assert check_hsdp(RUN9, decide(RUN9, tmp_path / "out"))
    accelerate = {**RUN9, "target": "accelerate"}
    assert check_hsdp(accelerate, decide(accelerate, tmp_path / "acc"))


def test_every_hsdp_run_near_the_limit_names_the_keys_it_would_change(tmp_path: Path) -> None:
    for answers, result in decided_paths(tmp_path):
        check_hsdp(answers, result)


def test_a_whole_copy_near_the_limit_is_told_to_shard_over_the_gpus_it_has_before_adding_any(tmp_path: Path) -> None:
    """Where a sharded layout fits on the same GPUs, the lever names it, not more GPUs."""
    told = 0
    for _, result in decided_paths(tmp_path):
        rec = result.recommendation
        est = rec.facts.estimates.get(str(rec.settings.get("strategy"))) if rec.facts.estimates else None
        near = [" ".join(w.split()) for w in result.warnings if w.startswith("it fits, close to the usable memory")]
        if est is None or not near or not rec.traits.whole_copy or int(rec.facts.get("world_size") or 1) < 2:
            continue
        if "shard the states over" not in near[0]:
            continue
        told += 1
        assert f"over the {rec.facts.get('world_size')} GPUs you have" in near[0]
        assert "add GPUs to shard over" not in near[0], near[0]
        named = re.search(r"you have \((\S+(?: \S+)*?): about ([\d.]+) GiB per GPU", near[0])
        assert named is not None, near[0]
        other = next(e for e in rec.facts.estimates.values() if e.label == named.group(1))
        assert other.fits and to_gib(other.total) == float(named.group(2)) and other.total < est.total
    assert told


def test_an_axolotl_adapter_run_near_the_limit_names_layer_offloading_with_the_figures_it_then_runs_at(
    tmp_path: Path,
) -> None:
    """Invariant: an Axolotl LoRA/QLoRA run kept as a full copy (DDP) near the limit is told layer offloading
    first, on one GPU or several, and the run that follows the lever (layer_offloading: true) is decided as
    DDP + layer offload at the GPU figure and step band the lever named; a sharding lever, if named too, comes
    after it with its own step band."""
    told = 0
    for answers, result in decided_paths(tmp_path, lambda a: a.get("target") == "axolotl"):
        rec = result.recommendation
        near = [" ".join(w.split()) for w in result.warnings if w.startswith("it fits, close to the usable memory")]
        if not near or rec.settings.get("strategy") != "ddp" or answers.get("method") not in ("lora", "qlora"):
            continue
        named = re.search(r"set layer_offloading: true\. .*?about ([\d.]+) GiB per GPU by the", near[0])
        if named is None:
            continue
        told += 1
        followed = decide({**answers, "layer_offloading": True}, tmp_path / f"layer{told}").recommendation
        assert followed.settings["strategy"] == "ddp_layer_offload", followed.because
        layer = followed.facts.estimates["ddp_layer_offload"]
        assert to_gib(layer.total) == float(named.group(1)), near[0]
        band = re.search(r"and a step of about (\S+ s) against (\S+ s) now\. To keep", near[0])
        if band is not None:
            assert f"about {band.group(1)}" in " ".join(followed.because.split()), (band.group(1), followed.because)
        if "shard the states over" in near[0]:
            assert near[0].index("set layer_offloading") < near[0].index("shard the states over"), near[0]
    assert told


def test_the_axolotl_two_4090_lora_run_is_told_layer_offloading_before_sharding(tmp_path: Path) -> None:
    """A Mistral-7B LoRA run on two RTX 4090 (DDP, near the limit): layer offloading, with its step beside the
    current one, comes before FSDP2, which would double the step over PCIe."""
    answers = {
        "target": "axolotl",
        "hardware": "nvidia",
        "gpu_model": "RTX 4090",
        "gpus_per_node": 2,
        "model": "7B",
        "method": "lora",
    }
    result = decide(answers, tmp_path)
    near = next(" ".join(w.split()) for w in result.warnings if w.startswith("it fits, close to the usable memory"))
    assert near.index("set layer_offloading: true") < near.index("shard the states over the 2 GPUs you have")
    assert "by the same estimate" in near and "DDP + layer offload row" not in near  # no such row in the table
    assert re.search(r"and a step of about [\d.]+-[\d.]+ s against [\d.]+-[\d.]+ s now\. To keep", near), near
