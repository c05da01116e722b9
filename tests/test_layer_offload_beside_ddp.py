"""Layer offloading beside DDP where a whole LoRA copy does not fit several GPUs.

Axolotl's guide orders its memory levers from least to most invasive: layer offloading for
LoRA/QLoRA comes before moving to FSDP2 or DeepSpeed, where the transfer cost is acceptable. On
several GPUs the wizard takes it (offload: auto, LoRA) where a full copy does not fit, the copy
without its frozen layers does, and its step is about as long as FSDP2's or shorter (within 10%) by
the step-time model even where the board splits its PCIe lanes x8/x8.
Invariants, over every path of the walk and a grid of consumer and data-centre cards:

* the layout is DDP + layer offloading exactly where the fact says so and the answer did not turn
  it off; QLoRA on several GPUs keeps FSDP2;
* the Why names the full copy's figure, the layer-offloaded figure and both step times;
* every sharding runner-up that offloads nothing says it lost on the guide's lever order, with its
  own step and the GPU memory each leaves, and never that "a full copy fits";
* axolotl.yaml turns layer_offloading on with no fsdp_config and no deepspeed key, and Axolotl's own
  schema accepts it (the file's launch under DDP is the same as the one-GPU layout's).
"""

from __future__ import annotations

from dataclasses import replace
from itertools import product
from pathlib import Path
from typing import Any

import pytest
import yaml

from helpers import decide, decided_paths
from wizard.app import Result
from wizard.engine.facts import layer_offload_step_x8, step_on_x8
from wizard.engine.memory import to_gib
from wizard.engine.speed import band_text, step_time
from wizard.ui.brief_why import brief_why

LAYER = "ddp_layer_offload"
GRID = [
    {
        "target": "axolotl",
        "hardware": "nvidia",
        "gpu_model": gpu,
        "gpus_per_node": count,
        "cpu_memory_gb": host,
        "model": model,
        "method": method,
        "sequence_length": length,
    }
    for gpu, count, host, model, method, length in product(
        ("RTX 4090", "A10G", "L4"), (2, 4), (64, 256), ("mistral 7b", "13B"), ("lora", "qlora"), (4096, 12288)
    )
]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[dict[str, Any], Result]]:
    folder = tmp_path_factory.mktemp("beside_ddp")
    found = list(decided_paths(folder, lambda a: a.get("target") == "axolotl"))
    found += [(answers, decide(answers, folder / "grid")) for answers in GRID]
    return found


def _chosen(result: Result) -> bool:
    rec = result.recommendation
    return not rec.refused and rec.backend == "ddp" and rec.settings.get("strategy") == LAYER


def test_chosen_exactly_where_the_fact_holds(runs: list[tuple[dict[str, Any], Result]]) -> None:
    chosen = 0
    for answers, result in runs:
        rec = result.recommendation
        plain = rec.facts.estimates.get("ddp")
        needed = _chosen(result) and plain is not None and not plain.fits
        fact = bool(rec.facts.get("layer_offload_beside_ddp"))
        expected = fact and answers.get("layer_offloading") is not False and "deepspeed_config" not in answers
        assert needed is expected, (answers, rec.rule.id)
        if fact:
            assert result.session.answers.get("method") == "lora", answers
            narrow = layer_offload_step_x8(rec.facts)
            if needed:
                # Recomputed on x8 lanes (half the host link, and the link between GPUs where PCIe).
                assert narrow is not None and rec.facts.links is not None
                links = rec.facts.links
                between = links.gpu_link_words.startswith("PCIe")
                gpu_link = (links.gpu_link[0] / 2, links.gpu_link[1] / 2) if between else links.gpu_link
                half = replace(links, host_link=links.host_link / 2, gpu_link=gpu_link)
                again = step_time(rec.facts.workload, LAYER, half, rec.facts.accumulation)
                assert again is not None and again.middle == narrow.middle
                sharded = step_on_x8(rec.facts, "fsdp2")
                assert sharded is not None and narrow.middle <= 1.1 * sharded.middle, answers
        chosen += needed
    assert chosen >= 4, chosen


def test_the_why_weighs_the_copy_and_the_steps(runs: list[tuple[dict[str, Any], Result]]) -> None:
    for _answers, result in runs:
        if not _chosen(result) or result.recommendation.facts.estimates["ddp"].fits:
            continue
        rec = result.recommendation
        est, speeds = rec.facts.estimates, rec.facts.speeds
        why = " ".join(rec.because.split())
        assert f"needs about {to_gib(est['ddp'].total)} GiB per GPU (DDP)" in why, why
        assert f"holds about {to_gib(est[LAYER].total)} GiB" in why, why
        steps = f"at a step of about {band_text(speeds[LAYER])} against {band_text(speeds['fsdp2'])} with FSDP2"
        assert steps in why, why
        x8, sharded_x8 = layer_offload_step_x8(rec.facts), step_on_x8(rec.facts, "fsdp2")
        assert x8 is not None and sharded_x8 is not None
        assert f"here about {band_text(x8)} against {band_text(sharded_x8)})" in why, why
        # The short summary keeps the reason, not only the full copy's figure.
        assert "Axolotl's guide tries layer offloading" in brief_why(rec.because).text, rec.because
        assert "Even sharded" not in why, why


def test_sharding_runner_ups_lose_on_the_lever_order(runs: list[tuple[dict[str, Any], Result]]) -> None:
    seen = 0
    for _answers, result in runs:
        rec = result.recommendation
        if not _chosen(result) or rec.facts.estimates["ddp"].fits:
            continue
        layer = to_gib(rec.facts.estimates[LAYER].total)
        for runner in rec.runner_ups:
            reason = " ".join(runner.reason.split())
            if "without moving anything to host RAM" not in reason:
                continue
            seen += 1
            assert "a full copy fits" not in reason, reason
            assert "Axolotl's guide tries layer offloading before a sharding backend" in reason, reason
            assert f"needs less of each GPU: {layer} GiB against " in reason, reason
            assert "--set layer_offloading=false shards with FSDP2 instead" in reason, reason
    assert seen, "no sharding runner-up beside layer offloading on several GPUs"


@pytest.mark.tools
def test_the_axolotl_file_runs_it_beside_ddp(runs: list[tuple[dict[str, Any], Result]], tmp_path: Path) -> None:
    """axolotl.yaml as Axolotl 0.21's own validator reads it: layer offloading on, no sharding backend."""
    from realtools import axolotl_validate

    checked = 0
    for answers, result in runs:
        if not _chosen(result) or result.recommendation.facts.estimates["ddp"].fits or checked >= 3:
            continue
        out = tmp_path / str(checked)
        written = decide(answers, out, write=True)
        world = int(written.recommendation.facts.get("world_size"))
        config = yaml.safe_load((out / "axolotl.yaml").read_text())
        assert config["layer_offloading"] is True, answers
        assert "fsdp_config" not in config and "deepspeed" not in config, answers
        validated = axolotl_validate(out / "axolotl.yaml", n_gpu=world)
        assert validated["layer_offloading"] is True and not validated.get("fsdp_config"), answers
        assert not validated.get("deepspeed"), answers
        checked += 1
    assert checked, "no run to write"
