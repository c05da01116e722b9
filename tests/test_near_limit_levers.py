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
    if rec.refused or cp < 2 or est is None or not near_limit(est):
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
    assert result.recommendation.settings.get("cp_size") == 2
    assert check(result)


def test_every_context_parallel_run_near_the_limit_gets_the_lever_with_its_figure(tmp_path: Path) -> None:
    told = sum(check(result) for _, result in decided_paths(tmp_path))
    assert told >= 1, told
