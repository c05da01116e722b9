"""The rough step time: its arithmetic, its invariants over every path, and what a user reads.

The band is a planning figure. These tests hold it to its own stated arithmetic (computed here
independently from the model's shape), to orderings that must hold whatever the constants (an
offload layout is never faster than the same layout without it), to the written files (the
accumulation it assumes is the one the Axolotl YAML sets), and to what the summary prints at 80
columns.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from helpers import decide, decided_paths, parsed
from wizard.app import Result
from wizard.cli import main
from wizard.engine.catalog import lookup_gpu
from wizard.engine.memory import Workload, trainable_params, weight_bytes
from wizard.engine.model_size import shape_for_model
from wizard.engine.speed import flops_per_token, links_for, step_time

Outcome = tuple[dict[str, Any], Result]

# Each offload layout and the layout it offloads from: same sharding, same GPU traffic.
OFFLOADED_FROM = {
    "zero2_offload_optimizer": "zero2",
    "zero3_offload_optimizer": "zero3",
    "zero3_offload_all": "zero3",
    "fsdp2_offload": "fsdp2",
    "hsdp_offload": "hsdp",
    "ddp_layer_offload": "ddp",
}


@pytest.fixture(scope="module")
def decided(tmp_path_factory: pytest.TempPathFactory) -> list[Outcome]:
    """Every decided path of the walk (shared, cached)."""
    return decided_paths(tmp_path_factory.mktemp("speed"))


def workload(**fields: Any) -> Workload:
    """A 7B Llama-shaped workload, one GPU, 2,048 tokens, with `fields` changed."""
    base: dict[str, Any] = {
        "shape": shape_for_model("7B"),
        "method": "full",
        "world_size": 1,
        "num_nodes": 1,
        "sequence_length": 2048,
        "micro_batch_size": 1,
        "gradient_checkpointing": False,
    }
    return Workload(**{**base, **fields})


def test_flops_per_token_is_six_per_parameter_plus_attention() -> None:
    """Kaplan et al.'s 6N for a full fine-tune, 4N for LoRA, 2N more when checkpointing recomputes."""
    shape = shape_for_model("7B")
    matmul = shape.params - (0 if shape.tied_embeddings else shape.vocab_size * shape.hidden_size)
    attention = 2 * shape.layers * 2048 * shape.heads * shape.head_dim  # causal forward, per token
    assert flops_per_token(workload()) == pytest.approx(6 * matmul + 3 * attention)
    assert flops_per_token(workload(method="lora")) == pytest.approx(4 * matmul + 3 * attention)
    assert flops_per_token(workload(gradient_checkpointing=True)) == pytest.approx(8 * matmul + 4 * attention)


def test_compute_time_is_flops_over_the_cards_throughput() -> None:
    """One A100 step: the step's FLOPs over 312 TFLOPS at 60% (fast end) and 30% (slow end)."""
    links = links_for(lookup_gpu("A100"))
    assert links is not None and links.flops == 312e12
    load = workload(gradient_checkpointing=True)
    step = step_time(load, "ddp", links)
    assert step is not None
    flops = flops_per_token(load) * 2048
    assert step.compute == pytest.approx((flops / (312e12 * 0.6), flops / (312e12 * 0.3)))
    assert (step.low, step.high) == pytest.approx(step.compute)  # nothing else on one GPU without offload
    assert step.bound == "compute"


def test_ring_traffic_of_each_layout() -> None:
    """Bytes per GPU as NCCL counts them: DDP 2(n-1)/n of the gradients, FSDP2 two gathers and a reduce-scatter."""
    links = links_for(lookup_gpu("H100"))
    assert links is not None
    load = workload(world_size=8)
    grads, weights = 2 * trainable_params(load), weight_bytes(load)
    ddp, fsdp2, zero2 = (step_time(load, s, links, accumulation=4) for s in ("ddp", "fsdp2", "zero2"))
    assert ddp is not None and fsdp2 is not None and zero2 is not None
    assert ddp.gpu_bytes == pytest.approx(2 * grads * 7 / 8, rel=1e-6)  # once per optimizer step
    assert zero2.gpu_bytes == pytest.approx(grads * 7 / 8 * 5, rel=1e-6)  # every micro-batch, weights once
    assert fsdp2.gpu_bytes == pytest.approx((2 * weights + grads) * 7 / 8 * 4, rel=1e-6)
    two_machines = step_time(workload(world_size=16, num_nodes=2), "ddp", links)
    # One ring over both machines: the same bytes cross the GPU links and the network, at the slower pace.
    assert two_machines is not None and two_machines.network_bytes == two_machines.gpu_bytes > 0
    assert two_machines.one_ring
    assert two_machines.comm(1) == max(two_machines.gpu_comm[1], two_machines.network_comm[1])


def test_pcie_carries_both_directions_at_once() -> None:
    """Layer offloading moves the frozen layers in twice and out twice: the time is one direction's."""
    links = links_for(lookup_gpu("RTX 4090"))
    assert links is not None
    step = step_time(workload(shape=shape_for_model("13B"), method="lora"), "ddp_layer_offload", links)
    assert step is not None
    assert step.host_s == pytest.approx(step.host_bytes / 2 / links.host_link)


def test_cards_without_a_throughput_figure_get_no_band(tmp_path: Path) -> None:
    """A Mac and a GPU named only by its memory: no table, no figures invented."""
    mac = decide(
        {"target": "accelerate", "hardware": "mps", "gpu_memory_gb": 16, "model": "1B", "method": "lora"}, tmp_path
    )
    unknown = decide(
        {
            "target": "accelerate",
            "hardware": "nvidia",
            "gpu_memory_gb": 24,
            "gpus_per_node": 1,
            "model": "1B",
            "method": "lora",
        },
        tmp_path,
    )
    for result in (mac, unknown):
        assert result.recommendation.facts.speeds == {}


def test_band_invariants_on_every_path(decided: list[Outcome]) -> None:
    """Over the walk: a band for the chosen layout on every known card, ordered and consistent.

    The fast end never exceeds the slow end; the tokens per step are micro-batch x sequence x
    accumulation x data-parallel ranks; an offload layout is never faster than the layout it
    offloads from; a layout that gathers weights never sends less than ZeRO-2 on the same run.
    """
    checked = 0
    for answers, result in decided:
        rec = result.recommendation
        facts = rec.facts
        strategy = rec.settings.get("strategy")
        if facts.links is None:
            assert facts.speeds == {}
            continue
        assert facts.workload is not None
        if strategy in facts.estimates and strategy != "megatron":
            assert strategy in facts.speeds, answers
        for name, step in facts.speeds.items():
            assert 0 < step.low <= step.high, (answers, name)
            assert step.tokens % (facts.workload.micro_batch_size * step.accumulation) == 0
            source = OFFLOADED_FROM.get(name)
            if source in facts.speeds:
                assert step.low >= facts.speeds[source].low - 1e-9, (answers, name)
                assert step.high >= facts.speeds[source].high - 1e-9, (answers, name)
        if "zero2" in facts.speeds and "fsdp2" in facts.speeds:
            sent = facts.speeds["fsdp2"].gpu_bytes + facts.speeds["fsdp2"].network_bytes
            assert sent >= facts.speeds["zero2"].gpu_bytes + facts.speeds["zero2"].network_bytes
        checked += 1
    assert checked > 100


def test_bound_by_names_each_end_of_the_band_where_they_differ(decided: list[Outcome]) -> None:
    """ "bound by" holds at both ends of the band: the longest cost at the slow end, and the fast
    end's too where it is another (a slow network, a fast one and the CPU optimizer after it)."""
    from wizard.engine.speed import BOUND_WORDS, bound_text

    both = 0
    for answers, result in decided:
        for name, step in result.recommendation.facts.speeds.items():
            ends = []
            for end in (1, 0):
                costs = {
                    "compute": step.compute[end],
                    "gpu_links": step.gpu_comm[end],
                    "network": step.network_comm[end],
                    "host_link": step.host_s,
                    "cpu_optimizer": step.cpu_s[end],
                    "nvme_drive": step.drive_s[end],
                }
                ends.append(BOUND_WORDS[max(costs, key=lambda k: costs[k])])
            expected = ends[0] if ends[0] == ends[1] else f"{ends[0]} or {ends[1]}"
            assert bound_text(step) == expected, (answers, name)
            both += ends[0] != ends[1]
    assert both > 0, "no path whose bottleneck changes across the band"


def test_accumulation_matches_the_written_axolotl_yaml(decided: list[Outcome]) -> None:
    """The band's micro-batches per step are the ones the Axolotl YAML trains with."""
    checked = 0
    for answers, result in decided:
        rec = result.recommendation
        if answers.get("target") != "axolotl" or rec.settings.get("strategy") not in rec.facts.speeds:
            continue
        config = parsed(result, "axolotl.yaml")
        step = rec.facts.speeds[str(rec.settings["strategy"])]
        written = config["micro_batch_size"] * config["gradient_accumulation_steps"]
        assert written == answers.get("micro_batch_size", 1) * step.accumulation, answers
        checked += 1
    assert checked > 10


FOUR_A100_FULL = {
    "target": "accelerate",
    "hardware": "nvidia",
    "gpu_model": "A100 80GB",
    "gpus_per_node": 4,
    "model": "7B",
    "method": "full",
}


def run_cli(args: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("COLUMNS", "80")
    assert main(args) == 0
    return capsys.readouterr().out


def test_summary_shows_the_band_at_80_columns(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The table names every layout that fits with its band, nothing cut, the assumptions after it."""
    path = tmp_path / "answers.yaml"
    path.write_text(yaml.safe_dump(FOUR_A100_FULL), encoding="utf-8")
    out = run_cli(
        ["--answers", str(path), "--defaults", "--dry-run", "--output-dir", str(tmp_path / "o"), "--explain"],
        capsys,
        monkeypatch,
    )
    section = out[out.index("Time per optimizer step") : out.index("Why not the others")]
    assert out.count("Time per optimizer step") == 1  # the explanation after the summary does not repeat it
    assert "…" not in section and all(len(line) <= 80 for line in section.splitlines())
    result = decide(FOUR_A100_FULL, tmp_path)
    rec = result.recommendation
    for name in rec.facts.speeds:
        est = rec.facts.estimates[name]
        shown = est.label in section
        assert shown == (est.fits and est.host_fits is not False), name
    assert "312 TFLOPS" in section and "4 GPUs" in section
    chosen = rec.facts.estimates[str(rec.settings["strategy"])].label
    row = next(line for line in section.splitlines() if line.startswith(f"│ {chosen} "))
    assert "1.0x" in row


def test_cpu_bound_offload_names_accumulation_as_the_lever(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 7B full fine-tune on one A100 offloads Adam to the CPU: the note says so and what eases it."""
    answers = {**FOUR_A100_FULL, "gpus_per_node": 1, "cpu_memory_gb": 256}
    rec = decide(answers, tmp_path).recommendation
    step = rec.facts.speeds[str(rec.settings["strategy"])]
    assert step.bound == "cpu_optimizer"
    path = tmp_path / "answers.yaml"
    path.write_text(yaml.safe_dump(answers), encoding="utf-8")
    out = run_cli(
        ["--answers", str(path), "--defaults", "--dry-run", "--output-dir", str(tmp_path / "o"), "--explain"],
        capsys,
        monkeypatch,
    )
    flat = " ".join(out.split())
    assert "Adam's update on the CPU" in flat
    assert "Accelerator(gradient_accumulation_steps=8)" in flat


def test_json_output_carries_the_band(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """--output json: each estimate's step_time, the same figures as the engine's."""
    path = tmp_path / "answers.yaml"
    path.write_text(yaml.safe_dump(FOUR_A100_FULL), encoding="utf-8")
    out = run_cli(
        ["--answers", str(path), "--defaults", "--dry-run", "--output", "json", "--output-dir", str(tmp_path / "o")],
        capsys,
        monkeypatch,
    )
    data = json.loads(out)
    rec = decide(FOUR_A100_FULL, tmp_path).recommendation
    for row in data["estimates"]:
        step = rec.facts.speeds[row["strategy"]]
        assert row["step_time"]["low_seconds"] == round(step.low, 3)
        assert row["step_time"]["bound_by"] == step.bound
        assert row["step_time"]["low_seconds"] <= row["step_time"]["high_seconds"]


FOUNDRY = (
    "llm-foundry, MPT training benchmarks, "
    "https://github.com/mosaicml/llm-foundry/blob/main/scripts/train/benchmarking/README.md"
)
TITAN = "torchtitan, docs/performance.md, https://github.com/pytorch/torchtitan/blob/main/docs/performance.md"
FMS = "PyTorch blog, Maximizing training throughput using PyTorch FSDP, https://pytorch.org/blog/maximizing-training/"

# Published full-training throughput, tokens per second per GPU, and how the band compares
# (with its fast end at 60% of peak): (source, model, GPU, GPUs, machines, sequence,
# micro-batch, checkpointing, layout, accumulation, measured, how far off).
PUBLISHED = [
    (FOUNDRY, "7B", "H100", 8, 1, 2048, 6, False, "fsdp2", 1, 10643, "inside the band"),
    (FOUNDRY, "13B", "H100", 8, 1, 2048, 2, False, "fsdp2", 1, 4792, "inside the band"),
    (FOUNDRY, "7B", "A100", 8, 1, 2048, 6, False, "fsdp2", 2, 4641, "6% above the fast end (64% of peak)"),
    (FOUNDRY, "13B", "A100", 8, 1, 4096, 10, True, "fsdp2", 3, 2060, "20% above (selective recompute)"),
    (FOUNDRY, "70B", "H100", 64, 8, 2048, 8, True, "fsdp2", 4, 1039, "inside the band"),
    (TITAN, "8B", "A100", 64, 8, 8192, 1, True, "fsdp2", 1, 2973, "9% above (selective recompute)"),
    (TITAN, "70B", "A100", 64, 8, 8192, 1, True, "fsdp2", 1, 331, "5% above the fast end"),
    (TITAN, "8B", "H100", 8, 1, 8192, 2, True, "fsdp2", 1, 5762, "inside the band"),
    (FMS, "7B", "A100", 128, 16, 4096, 2, False, "hsdp", 1, 3760, "inside the band"),
]


@pytest.mark.parametrize("case", PUBLISHED, ids=[f"{c[1]}-{c[3]}x{c[2]}" for c in PUBLISHED])
def test_band_against_published_throughput(case: tuple[Any, ...]) -> None:
    """Each published figure lies in the band or within 25% above its fast end, as stated beside it.

    Tuned pre-training stacks recompute only part of each layer and reach 50 to 64% of peak, so
    the band (which counts a full recompute) may be slow for them; it must never be faster
    than a measured run.
    """
    _, model, gpu, gpus, machines, sequence, micro, checkpointing, layout, accumulation, measured, said = case
    load = Workload(
        shape=shape_for_model(model),
        method="full",
        world_size=gpus,
        num_nodes=machines,
        sequence_length=sequence,
        micro_batch_size=micro,
        gradient_checkpointing=checkpointing,
    )
    links = links_for(lookup_gpu(gpu))
    assert links is not None
    step = step_time(load, layout, links, accumulation)
    assert step is not None
    slow, fast = (rate / gpus for rate in step.tokens_per_second)
    assert measured >= slow, "the band must not promise more than a measured run"
    off = measured / fast - 1
    assert off <= 0.25
    assert (said == "inside the band") == (measured <= fast)
    if measured > fast:
        assert said.startswith(f"{off:.0%} above"), off


def test_hsdp_sends_every_shards_gradients_through_the_machines_network() -> None:
    """HSDP on 2 machines of 8: each machine sends the whole gradient once (8 shards at once)."""
    links = links_for(lookup_gpu("H100 SXM"))
    assert links is not None
    load = workload(shape=shape_for_model("13B"), world_size=16, num_nodes=2)
    step = step_time(load, "hsdp", links)
    assert step is not None
    grads = 2 * trainable_params(load)
    assert step.network_bytes == pytest.approx(grads * 2 * (2 - 1) / 2, rel=1e-6)
    # 100 Gb/s for the whole machine at the slow end, 400 Gb/s for each of its 8 GPUs at the fast one.
    assert step.network_comm == pytest.approx((step.network_bytes / (50e9 * 8), step.network_bytes / 12.5e9))


def test_every_offload_decision_says_what_offloading_costs(decided: list[Outcome]) -> None:
    """An offload decision on a known card compares its step with the same layout without offload."""
    from wizard.engine.speed import OFFLOADED_FROM as ENGINE_PAIRS
    from wizard.engine.speed import offload_cost_note

    assert ENGINE_PAIRS == OFFLOADED_FROM
    checked = 0
    for answers, result in decided:
        rec = result.recommendation
        chosen = str(rec.settings.get("strategy"))
        if chosen not in OFFLOADED_FROM or chosen not in rec.facts.speeds:
            continue
        base = rec.facts.speeds.get(OFFLOADED_FROM[chosen])
        step = rec.facts.speeds[chosen]
        note = offload_cost_note(step, base)
        assert note is not None and note.startswith("Without offload"), answers
        assert base is not None
        # Both ends compared, each named: the fast ends, then the slow ends, never below 1x.
        fast, slow = step.low / base.low, step.high / base.high
        assert fast >= 1 - 1e-9 and slow >= 1 - 1e-9
        said = (
            f"about {fast:.1f}x as long"
            if f"{fast:.1f}" == f"{slow:.1f}"
            else f"{fast:.1f}x as long at the fast end and {slow:.1f}x at the slow end"
        )
        assert said in note, note
        assert ("copies over PCIe" in note) == (step.host_s > 0)
        assert ("Adam's update on the CPU" in note) == (step.cpu_s[0] > 0)
        checked += 1
    assert checked > 10


def test_context_parallel_groups_are_named_in_the_assumptions(tmp_path: Path) -> None:
    """A CP run's step covers one sequence per group of GPUs, and the assumptions say so."""
    from wizard.engine.speed import assumptions_text

    answers = {
        "target": "accelerate",
        "hardware": "nvidia",
        "gpu_model": "H100",
        "gpus_per_node": 8,
        "model": "8B",
        "method": "lora",
        "sequence_length": 131072,
    }
    rec = decide(answers, tmp_path).recommendation
    step = rec.facts.speeds[str(rec.settings["strategy"])]
    assert step.group == rec.facts.get("nd_cp") > 1
    assert rec.facts.links is not None and rec.facts.workload is not None
    text = assumptions_text(step, rec.facts.links, rec.facts.workload)
    assert f"each of the {8 // step.group} groups of {step.group} GPUs" in text
    assert step.tokens == 131072 * (8 // step.group)


def test_link_answers_turn_the_band_into_one_figure(tmp_path: Path) -> None:
    """gpu_link and network_gbps replace the spans they stand for, and change nothing but the time."""
    answers = {
        "target": "axolotl",
        "hardware": "nvidia",
        "gpu_model": "A100 80GB",
        "gpus_per_node": 4,
        "num_nodes": 2,
        "model": "13B",
        "method": "full",
    }
    plain = decide(answers, tmp_path).recommendation
    told = decide({**answers, "gpu_link": "nvlink", "network_gbps": 200}, tmp_path).recommendation
    pcie = decide({**answers, "gpu_link": "pcie"}, tmp_path).recommendation
    assert (told.backend, told.settings) == (plain.backend, plain.settings) == (pcie.backend, pcie.settings)
    assert plain.facts.links is not None and plain.facts.links.gpu_link[0] != plain.facts.links.gpu_link[1]
    assert told.facts.links is not None and told.facts.links.gpu_link == (230e9, 230e9)
    assert pcie.facts.links is not None and pcie.facts.links.gpu_link == (16e9, 16e9)
    step = told.facts.speeds["hsdp"]
    assert step.network_comm == pytest.approx((step.network_bytes / 25e9, step.network_bytes / 25e9))
    assert told.facts.speeds["hsdp"].high < plain.facts.speeds["hsdp"].high


def _band_middle(band: str) -> float:
    """The middle of a printed band ("0.62-1.3" or "11"): the mean of its ends."""
    ends = [float(end) for end in band.split("-")]
    return sum(ends) / len(ends)


def test_a_step_comparison_holds_on_each_board_it_names(decided: list[Outcome]) -> None:
    """Comparing two layouts' steps on a card sold with NVLink and PCIe boards names each link apart.

    One band spans both boards' links; a percentage taken from it would hold on neither. So a
    comparison there is given per link, every "N% shorter" agrees with the two bands beside it,
    and "about as long" is said only of bands whose middles are within 5%.
    """
    per_link = re.compile(
        r"over (?P<link>NVLink \(SXM boards\)|PCIe \d\.0[^()]*\(PCIe boards\)) (?P<verdict>the two steps are about as"
        r" long|[^;()]+?'s is about (?P<pct>\d+)% shorter)"
        r" \([^()]+? (?P<mine>[\d.-]+) s, [^()]+? (?P<theirs>[\d.-]+) s\)"
    )
    seen = 0
    for answers, result in decided:
        links = result.recommendation.facts.links
        for runner in result.recommendation.runner_ups:
            reason = " ".join(runner.reason.split())
            found = list(per_link.finditer(reason))
            if links is None or not links.each_link:
                assert not found, (answers, reason)
                continue
            if "By the step-time model, taking each kind of link on its own: over" not in reason:
                continue
            seen += 1
            assert [m["link"] for m in found] == list(links.each_link), (answers, reason)
            for match in found:
                mine, theirs = _band_middle(match["mine"]), _band_middle(match["theirs"])
                if match["pct"]:
                    # Either layout may be the shorter one; the percentage is its gain, from the unrounded
                    # bands (the printed ones agree within rounding).
                    short, long = sorted((mine, theirs))
                    assert short < long / 1.05, (answers, match[0])
                    assert abs(int(match["pct"]) / 100 - (1 - short / long)) < 0.08, (answers, match[0])
                else:
                    assert mine >= theirs / 1.08, (answers, match[0])
    assert seen, "no path compares steps per link"


def test_most_of_the_step_is_said_of_the_cpu_optimizer_only_where_it_bounds_both_ends(
    decided: list[Outcome],
) -> None:
    """A band whose slow end is the network is not "mostly Adam's update": said only where it holds."""
    from wizard.engine.speed import bottleneck_note

    seen = {True: 0, False: 0}
    for answers, result in decided:
        facts = result.recommendation.facts
        step = facts.speeds.get(str(result.recommendation.settings.get("strategy")))
        if step is None or facts.workload is None or facts.links is None:
            continue
        if "cpu_optimizer" not in (step.bound_at(0), step.bound_at(1)):
            continue
        note = bottleneck_note(facts.workload, step, facts.links, facts.accumulation_key)
        if note is None:
            continue
        both = step.bound_at(0) == step.bound_at(1) == "cpu_optimizer"
        assert note.startswith("The largest part of this step is Adam's update on the CPU") is both, (answers, note)
        assert note.startswith("Adam's update on the CPU takes a large part of this step") is not both, note
        seen[both] += 1
    assert seen[True] and seen[False], seen


def test_an_nvme_bound_step_names_the_larger_micro_batch_that_fits(tmp_path: Path) -> None:
    """The drive reads every weight once per micro-batch whatever its size: the note names the lever, measured."""
    from wizard.engine.evaluate import offloads_to_nvme
    from wizard.engine.memory import estimate
    from wizard.engine.speed import bottleneck_note, largest_micro_batch, rate_text, with_nvme

    answers = {
        **{"target": "accelerate", "hardware": "nvidia", "gpu_model": "A100 80GB", "gpus_per_node": 1},
        **{"cpu_memory_gb": 256, "model": "13B", "method": "full", "offload": "nvme", "nvme_path": "/local_nvme"},
    }
    rec = decide(answers, tmp_path / "out").recommendation
    assert offloads_to_nvme(rec)
    facts, strategy = rec.facts, str(rec.settings["strategy"])
    step = facts.speeds[strategy]
    assert "nvme_drive" in (step.bound_at(0), step.bound_at(1))
    roomier = largest_micro_batch(facts.workload, facts.estimates[strategy], check_host=False)
    assert roomier is not None and roomier.micro_batch_size > 1
    # It fits the GPU by the estimate (the drive, not host RAM, holds the offloaded states).
    assert estimate(roomier, strategy, facts.estimates[strategy].gpu_memory / 2**30, None).fits
    wider = with_nvme(step_time(roomier, strategy, facts.links, step.accumulation), roomier)
    note = bottleneck_note(facts.workload, step, facts.links, facts.accumulation_key, roomier)
    assert note is not None and note.startswith("Most of this step is the NVMe drive's reads and writes")
    assert f"micro_batch_size {roomier.micro_batch_size} fits the usable memory by the estimate" in note
    assert f"about {rate_text(wider)} tokens/s instead of {rate_text(step)}" in note
    assert min(wider.tokens_per_second) > min(step.tokens_per_second)


GIVEN_BATCH_RUNS = [
    # CPU-optimizer bound (ZeRO-2 offload on one A100), NVMe bound (ZeRO-3 NVMe), network and CPU bound (2 x 8 H100).
    {"gpus_per_node": 1, "gpu_model": "A100 80GB", "cpu_memory_gb": 512, "model": "13B", "global_batch_size": 32},
    {
        "gpus_per_node": 1,
        "gpu_model": "A100 80GB",
        "cpu_memory_gb": 256,
        "model": "13B",
        "offload": "nvme",
        "nvme_path": "/nvme",
        "global_batch_size": 32,
    },
    {
        "gpus_per_node": 8,
        "num_nodes": 2,
        "main_process_ip": "10.0.0.1",
        "gpu_model": "H100",
        "cpu_memory_gb": 1024,
        "model": "70B",
        "sequence_length": 4096,
        "global_batch_size": 128,
    },
]


@pytest.mark.parametrize("given", GIVEN_BATCH_RUNS, ids=("cpu-adam", "nvme", "two-machines"))
def test_a_larger_micro_batch_lever_keeps_a_global_batch_the_user_gave(tmp_path: Path, given: dict[str, Any]) -> None:
    """Invariant: where the user gave the global batch, a speed lever that names a larger micro-batch keeps that
    global batch (fewer accumulation steps, micro-batch x accumulation x GPUs = the batch given) and never says the
    batch grows; with the micro-batch kept at 1 so that a larger one has room to be named."""
    from wizard.ui.speed_view import speed_lever

    answers = {"target": "accelerate", "hardware": "nvidia", "method": "full", "micro_batch_size": 1, **given}
    rec = decide(answers, tmp_path).recommendation
    lever = speed_lever(rec)
    assert lever is not None, answers
    said = " ".join(lever.split())
    named = re.search(r"micro_batch_size (\d+) fits the usable memory by the estimate", said)
    if named is None:
        # No larger micro-batch that splits the batch and shortens the step: none named, none grown.
        assert "with the same" not in said, said
        return
    kept = re.search(r"the same global batch of ([\d,]+) sequences: (\d+) accumulation steps? instead of (\d+)", said)
    assert kept is not None, said
    total, accumulation = int(kept.group(1).replace(",", "")), int(kept.group(2))
    assert total == answers["global_batch_size"], said
    world = answers["gpus_per_node"] * answers.get("num_nodes", 1)
    assert int(named.group(1)) * accumulation * world == total, said


def test_an_nvlink_answer_for_a_card_without_nvlink_is_said_to_be_set_aside() -> None:
    """Every catalogue card on one machine of 2: gpu_link nvlink changes the GPU links where the card has NVLink;
    where it has none, PCIe is counted and the step's assumptions say the answer could not apply."""
    from wizard.engine.catalog import gpu_catalog
    from wizard.engine.speed import links_for

    said = 0
    for gpu in gpu_catalog():
        plain, told = links_for(gpu), links_for(gpu, "nvlink")
        if plain is None or told is None or gpu.vendor != "nvidia":
            continue
        assert told.no_nvlink is (gpu.gpu_link_gbs is None), gpu.name
        if told.no_nvlink:
            assert told.gpu_link == plain.gpu_link, gpu.name  # nothing changed: PCIe as before
            said += 1
        else:
            assert told.told_link and told.gpu_link[0] == told.gpu_link[1] == gpu.gpu_link_gbs * 1e9, gpu.name
    assert said, "no card without NVLink in the catalogue"


def test_the_set_aside_nvlink_answer_is_printed_beside_the_links(tmp_path: Path) -> None:
    from wizard.engine.speed import assumptions_text

    answers = {
        "target": "axolotl", "hardware": "nvidia", "gpu_model": "RTX 4090", "gpus_per_node": 2,
        "gpu_link": "nvlink", "model": "mistral 7b", "method": "lora", "sequence_length": 12288,
    }  # fmt: skip
    rec = decide(answers, tmp_path).recommendation
    assert rec.facts.links is not None and rec.facts.workload is not None
    step = rec.facts.speeds[str(rec.settings["strategy"])]
    text = " ".join(assumptions_text(step, rec.facts.links, rec.facts.workload).split())
    assert "(gpu_link: nvlink was answered, but the RTX 4090 has no NVLink)" in text, text
