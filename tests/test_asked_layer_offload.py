"""Layer offloading asked for where a full copy fits: DDP with the frozen layers in host RAM.

With `layer_offloading: true` on several GPUs whose full copy fits, the wizard keeps DDP (nothing
needs sharding) and adds the layer offloading. What a user reads must describe that run, not plain
DDP beside it. Invariants, over every such run of the walk and a grid of GPUs, methods and models:

* the backend line does not say every GPU keeps a full copy of the model (the frozen layers wait
  in host RAM), and the short Why names the layer offloading and its per-GPU figure;
* the memory table names the chosen row as "DDP + layer offload", not "DDP";
* the speed note does not speak of a run "if the whole run fitted": DDP alone fits, and it says so;
* every runner-up that offloads nothing says why the wizard still did not take it (a full copy
  fits, so nothing is sharded), with DDP's own figure, rather than only what it would save.
"""

from __future__ import annotations

import io
from itertools import product
from pathlib import Path
from typing import Any

import pytest

from helpers import decide, decided_paths, tree
from wizard.app import Result
from wizard.engine.memory import to_gib

LAYER = "ddp_layer_offload"
GRID = [
    {
        "target": "axolotl",
        "hardware": "nvidia",
        "gpu_model": gpu,
        "gpus_per_node": count,
        "num_nodes": 1,
        "model": model,
        "method": method,
        "layer_offloading": True,
        "global_batch_size": 16,
    }
    for gpu, count, model, method in product(
        ("RTX 4090", "A100", "A10G"), (2, 4, 8), ("mistral 7b", "llama-3.1-8b", "1B"), ("lora", "qlora")
    )
]


def _text(result: Result) -> str:
    from rich.console import Console

    from wizard.ui.console import print_result

    out = io.StringIO()
    print_result(Console(file=out, width=80), tree(), result, dry_run=True, detail=True)
    return out.getvalue()


def _asked_beside_a_fitting_copy(result: Result) -> bool:
    """DDP + layer offloading where DDP alone fits (where it does not, tests/test_layer_offload_beside_ddp.py)."""
    rec = result.recommendation
    plain = rec.facts.estimates.get("ddp")
    return rec.settings.get("strategy") == LAYER and rec.backend == "ddp" and plain is not None and plain.fits


@pytest.fixture(scope="module")
def asked(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[dict[str, Any], Result]]:
    folder = tmp_path_factory.mktemp("asked_layer")
    runs = [(answers, result) for answers, result in decided_paths(folder) if _asked_beside_a_fitting_copy(result)]
    for answers in GRID:
        result = decide(answers, folder / "grid")
        if _asked_beside_a_fitting_copy(result):
            runs.append((answers, result))
    return runs


def test_asked_layer_offload_runs_exist(asked: list[tuple[dict[str, Any], Result]]) -> None:
    # The grid must reach the layout on several GPU counts, or the properties below test nothing.
    counts = {result.recommendation.facts.get("world_size") for _, result in asked}
    assert {2, 4, 8} <= counts, counts


def test_summary_describes_ddp_with_layer_offload(asked: list[tuple[dict[str, Any], Result]]) -> None:
    for answers, result in asked:
        rec = result.recommendation
        text = _text(result)
        flat = " ".join(line.strip("│ ") for line in text.splitlines())
        flat = " ".join(flat.split())
        assert "Every GPU keeps a full copy of the model" not in flat, answers
        assert "With layer offloading, each keeps the frozen layers in host RAM" in flat, answers
        layer = rec.facts.estimates[LAYER]
        why = flat.split("Why: ", 1)[1].split("More on this", 1)[0]
        holds = f"each GPU then holds about {to_gib(layer.total)} GiB"
        assert "layer offloading" in why and holds in why, (answers, why)
        assert "The chosen layout is DDP + layer offload" in flat, answers
        assert "The chosen layout is DDP (" not in flat, answers
        assert "if the whole run fitted" not in flat, answers
        if rec.facts.estimates["ddp"].fits and "Speed:" in flat:
            same = "Without offload (DDP) at the same micro-batch (to weigh the offload's cost alone; it fits"
            assert same in flat, answers


def test_runner_ups_say_why_they_lost(asked: list[tuple[dict[str, Any], Result]]) -> None:
    seen = 0
    for _answers, result in asked:
        rec = result.recommendation
        ddp = to_gib(rec.facts.estimates["ddp"].total)
        for runner in rec.runner_ups:
            reason = " ".join(runner.reason.split())
            if "without moving anything to host RAM" not in reason:
                continue
            seen += 1
            assert "but a full copy fits on each GPU, so the wizard shards nothing and keeps DDP" in reason, reason
            assert f"layer_offloading: false would run DDP alone, about {ddp} GiB per GPU" in reason, reason
    assert seen, "no runner-up without offload beside an asked layer offload"


def test_the_fewest_gpus_lever_is_not_offered_for_an_asked_layer_offload(tmp_path: Path) -> None:
    # Layer offloading asked for stays at any GPU count: no count "needs no offload".
    for answers in GRID:
        one = decide({**answers, "gpus_per_node": 1}, tmp_path)
        if one.recommendation.refused:
            continue
        assert not any("the fewest that need no offload" in lever.change for lever in one.levers), answers


def test_the_summary_quotes_the_run_without_it_as_the_wizard_would_plan_it(
    asked: list[tuple[dict[str, Any], Result]],
) -> None:
    """Asked for where the run fits without it: the panel's "Without it" row gives the figures of the
    run decided again with layer_offloading: false (its micro-batch picked again), and calls the
    offload a choice; where the run without it would offload, there is no such row."""
    said = 0
    for answers, result in asked:
        flat = " ".join(" ".join(line.strip("│ ") for line in _text(result).splitlines()).split())
        lever = next((item for item in result.levers if item.change.startswith("layer_offloading: false")), None)
        plain = lever is not None and lever.gib_per_gpu is not None and lever.host_gib_per_machine is None
        assert ("Without it: with layer_offloading: false" in flat) is plain, (answers, flat[:1500])
        if plain:
            assert lever is not None
            row = flat.split("Without it: ", 1)[1].split(" Why: ", 1)[0]
            assert f"about {lever.gib_per_gpu} GiB per GPU" in row, row
            assert "so it is a choice here, not a need" in row, row
            said += 1
    assert said, "no asked layer offload whose run without it offloads nothing"


def test_layer_offloading_not_offered_on_several_gpus_is_weighed_in_why_not_ddp(tmp_path: Path) -> None:
    """Invariant over the walk (and two 4090s at 12k tokens turning it off): on several GPUs, where a whole
    copy does not fit and Axolotl's layer offloading was not taken, "why not DDP" gives layer offloading's
    own figures (per GPU, host RAM) beside the winner's, exactly where the estimate has them, and says it
    is the wizard's default exactly where it is (the answer turned it off)."""

    lee = {
        "target": "axolotl", "hardware": "nvidia", "gpu_model": "RTX 4090", "gpus_per_node": 2, "num_nodes": 1,
        "gpu_link": "pcie", "cpu_memory_gb": 62, "model": "mistral-7b", "method": "lora", "sequence_length": 12288,
        "global_batch_size": 16, "layer_offloading": False,
    }  # fmt: skip
    cases = [(lee, decide(lee, tmp_path / "lee")), *decided_paths(tmp_path, lambda a: a.get("target") == "axolotl")]
    said = 0
    for answers, result in cases:
        rec = result.recommendation
        ddp = [r for r in rec.runner_ups if r.backend == "ddp"]
        figure = rec.facts.get("layer_offload_gib")
        text = " ".join(ddp[0].reason.split()) if ddp else ""
        expected = bool(ddp) and figure is not None and int(rec.facts.get("world_size", 1)) > 1 and not rec.refused
        expected = expected and not rec.facts.estimates["ddp"].fits
        assert ("With Axolotl's layer offloading beside DDP" in text) is expected, (answers, text)
        if expected:
            host = rec.facts.get("layer_offload_host_gib")
            assert f"about {figure} GiB per GPU and {host} GiB of host RAM" in text, text
            default = bool(rec.facts.get("layer_offload_beside_ddp"))
            assert ("It is the wizard's default here" in text) is default, (answers, text)
            said += 1
    assert said, "no path weighs layer offloading on several GPUs"
