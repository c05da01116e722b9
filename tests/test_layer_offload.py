"""Axolotl's layer offloading as a layout: the frozen decoder layers in CPU RAM on one GPU.

For LoRA and QLoRA the decoder layers are frozen, so Axolotl 0.21 can keep them in pinned host RAM
and stream each one to the GPU as it computes (axolotl/core/trainers/mixins/layer_offloading.py).
These tests hold the wizard to choosing that layout exactly where it is what makes a one-GPU run
fit, before FSDP2's full CPU offload, and to writing it, estimating it and explaining it correctly.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from test_gpu_catalog import A10G_LORA

from helpers import decide, decided_paths, parsed, title_line
from wizard.app import Result
from wizard.cli import main
from wizard.engine.facts import layer_offload_step_x8, step_on_x8
from wizard.engine.memory import GIB, NF4_BYTES_PER_PARAM, Workload, estimate, pcie_bytes_per_step
from wizard.engine.model_size import ModelShape, shape_for_model

Outcome = tuple[dict[str, Any], Result]
LAYER = "ddp_layer_offload"
# The common case the layout is for: a 7B LoRA at 8k tokens on one 24 GB A10G (22.49 GiB).
REPRO: dict[str, Any] = {**A10G_LORA, "sequence_length": 8192}


@pytest.fixture(scope="module")
def decided(tmp_path_factory: pytest.TempPathFactory) -> list[Outcome]:
    """Every path of the walk that reaches a decision or a refusal (shared, cached walk)."""
    return decided_paths(tmp_path_factory.mktemp("layer_offload"), refusals=True)


def frozen_layer_bytes(shape: ModelShape, method: str) -> int:
    """The frozen decoder-layer weights, counted here from the shape's own fields.

    Everything but the embeddings (input and output, once when tied) and the final norm; 16 bit
    for LoRA, and for QLoRA the block linears in NF4 (4 bit and double-quantized constants) with
    the two norms of every layer left in 16 bit.
    """
    h, layers = shape.hidden_size, shape.layers
    embeddings = shape.vocab_size * h * (1 if shape.tied_embeddings else 2)
    if method == "qlora":
        linears = shape.params - embeddings - (2 * layers + 1) * h
        return int(linears * NF4_BYTES_PER_PARAM) + 2 * layers * h * 2
    return (shape.params - embeddings - h) * 2


def expected_layer_layout(answers: dict[str, Any], result: Result) -> bool:
    """The condition under which the layer-offload layout must be the decision.

    Axolotl, LoRA or QLoRA, one NVIDIA or AMD GPU, no DeepSpeed JSON, offload neither cpu nor
    nvme; layer offloading answered yes, or left to the default with offload auto and the plain
    one-GPU row short of memory; and the layer row fits the GPU and the host RAM (unknown host RAM
    counts as fitting).
    """
    rec, session = result.recommendation, result.session.answers
    est = rec.facts.estimates
    plain, layer = est.get("ddp"), est.get(LAYER)
    if plain is None or layer is None:
        return False
    base = (
        answers.get("target") == "axolotl"
        and answers.get("method") in ("lora", "qlora")
        and answers.get("hardware") in ("nvidia", "amd")
        and rec.facts.get("world_size") == 1
        and "deepspeed_config" not in answers
        and session.get("offload") not in ("cpu", "nvme")
    )
    given = answers.get("layer_offloading")
    wanted = given is True or (given is None and session.get("offload") == "auto" and not plain.fits)
    return base and wanted and layer.fits and layer.host_fits is not False


def test_layer_layout_is_chosen_exactly_where_it_applies(decided: list[Outcome]) -> None:
    chosen = skipped = 0
    for answers, result in decided:
        rec = result.recommendation
        expected = expected_layer_layout(answers, result)
        got = not rec.refused and rec.settings.get("strategy") == LAYER and rec.backend == "single_gpu"
        assert got == expected, (answers, rec.rule.id)
        chosen += got
        # The fitting run is never offloaded by default: plain single GPU, no layer offloading.
        plain = rec.facts.estimates.get("ddp")
        if plain is not None and plain.fits and rec.facts.get("world_size") == 1 and "layer_offloading" not in answers:
            skipped += result.session.answers.get("layer_offloading") is False
            assert rec.settings.get("strategy") != LAYER, answers
    assert chosen >= 5 and skipped >= 5, (chosen, skipped)


def test_the_default_follows_the_fact_and_offload(decided: list[Outcome]) -> None:
    """Yes by default only with offload auto and only when it is what makes the run fit.

    On several GPUs also LoRA only, at a step about as long as FSDP2's (within 10%, on x8 lanes).
    """
    defaulted = 0
    for answers, result in decided:
        if "layer_offloading" in answers or "layer_offloading" not in result.session.answers:
            continue
        defaulted += 1
        rec, session = result.recommendation, result.session.answers
        est = rec.facts.estimates
        on = session["layer_offloading"]
        assert on is (rec.facts.get("layer_offloading_default") is True), answers
        if on:
            assert session.get("offload") == "auto", answers
            assert not est["ddp"].fits and est[LAYER].fits and est[LAYER].host_fits is not False, answers
            if rec.facts.get("world_size") != 1:
                # Beside DDP on several GPUs: LoRA only, at a step about as long as FSDP2's (within 10%, on x8 lanes).
                narrow = layer_offload_step_x8(rec.facts)
                assert session.get("method") == "lora", answers
                sharded = step_on_x8(rec.facts, "fsdp2")
                assert narrow is not None and sharded is not None and narrow.middle <= 1.1 * sharded.middle, answers
        if session.get("offload") == "none":
            assert on is False, answers
    assert defaulted >= 15, defaulted


def test_chosen_layout_is_written_and_fits(decided: list[Outcome]) -> None:
    written = 0
    for answers, result in decided:
        rec = result.recommendation
        if rec.refused or answers.get("target") != "axolotl":
            continue
        config = parsed(result, "axolotl.yaml")
        if rec.settings.get("strategy") == LAYER:
            written += 1
            assert config.get("layer_offloading") is True, answers
            assert not [key for key in config if key.startswith(("fsdp", "deepspeed"))], (answers, config)
            est = rec.facts.estimates[LAYER]
            assert est.fits and est.host_fits is not False, answers
        if config.get("layer_offloading"):
            # Never beside sharded weights: FSDP2 and ZeRO-3 hold shards the layer hooks do not handle.
            assert rec.backend in ("single_gpu", "ddp"), (answers, rec.backend)
    assert written >= 5, written


def test_layer_row_between_the_adapters_and_the_whole_copy(decided: list[Outcome]) -> None:
    checked = 0
    for answers, result in decided:
        facts = result.recommendation.facts
        layer, plain, shape = facts.estimates.get(LAYER), facts.estimates.get("ddp"), facts.shape
        if layer is None or plain is None or shape is None:
            continue
        checked += 1
        method = str(answers["method"])
        frozen = frozen_layer_bytes(shape, method)
        adapters = shape.lora_params(16)
        # The adapters' weights, gradients and optimizer state (2 + 2 + 12 bytes) never leave the GPU.
        adapters_only = 16 * adapters + layer.activations + layer.overhead
        assert adapters_only < layer.total < plain.total, answers
        per_node = facts.get("world_size") // int(answers.get("num_nodes", 1))
        assert layer.host_per_node == frozen * per_node, answers
        # What the GPU no longer holds is the frozen layers less the three resident at a time.
        resident = frozen * 3 // shape.layers
        assert abs((plain.model_states - layer.model_states) - (frozen - resident)) <= 1, answers
    assert checked > 30, checked


def test_full_fine_tune_has_no_layer_row(decided: list[Outcome]) -> None:
    full = [r for a, r in decided if a.get("method") == "full" and r.recommendation.facts.estimates]
    assert full
    assert all(LAYER not in r.recommendation.facts.estimates for r in full)


def test_pcie_traffic_is_four_passes_of_the_frozen_layers() -> None:
    shape = shape_for_model("13B")
    for method in ("lora", "qlora"):
        workload = Workload(shape, method, 1, 1, 2048, 1, True)
        frozen = frozen_layer_bytes(shape, method)
        assert pcie_bytes_per_step(workload, LAYER) == 4 * frozen
        est = estimate(workload, LAYER, 24, None)
        assert est.title == "1 GPU + layer offload" and est.gathered == 0
    ddp = Workload(shape, "lora", 8, 1, 2048, 1, True)
    assert estimate(ddp, LAYER, 80, None).label == "DDP + layer offload"


def test_repro_and_the_offload_answers(tmp_path: Path) -> None:
    """The default takes layer offloading; offload: cpu keeps FSDP2's offload; offload: none refuses."""
    auto = decide(REPRO, tmp_path)
    assert auto.recommendation.rule.id == "layer_offload_single_gpu"
    assert auto.session.answers["layer_offloading"] is True
    cpu = decide({**REPRO, "offload": "cpu"}, tmp_path)
    assert cpu.recommendation.settings["strategy"] == "fsdp2_offload"
    assert "layer_offloading" not in parsed(cpu, "axolotl.yaml")
    none = decide({**REPRO, "offload": "none"}, tmp_path)
    assert none.recommendation.refused and none.session.answers["layer_offloading"] is False
    # Asked for by name, it runs even under offload: none, and on a run that fits without it.
    asked = decide({**REPRO, "offload": "none", "layer_offloading": True}, tmp_path)
    assert asked.recommendation.settings["strategy"] == LAYER
    roomy = decide({**REPRO, "gpu_model": "A100", "sequence_length": 2048, "layer_offloading": True}, tmp_path)
    assert roomy.recommendation.settings["strategy"] == LAYER
    assert parsed(roomy, "axolotl.yaml")["layer_offloading"] is True
    # Host RAM that cannot hold the frozen layers: no layer offloading by default.
    short = decide({**REPRO, "cpu_memory_gb": 12}, tmp_path)
    assert short.session.answers["layer_offloading"] is False
    assert short.recommendation.settings["strategy"] != LAYER


def test_layer_offloading_dropped_beside_sharded_weights_is_said(tmp_path: Path) -> None:
    answers = {**REPRO, "gpu_model": "A100", "gpus_per_node": 8, "sequence_length": 2048}
    answers |= {"layer_offloading": True, "model_parallel": True, "tensor_parallel_size": 2}
    result = decide(answers, tmp_path)
    assert result.recommendation.backend == "fsdp2"
    assert "layer_offloading" not in parsed(result, "axolotl.yaml")
    assert result.session.answers["layer_offloading"] is True  # asked, kept in the answers, and said
    assert any("layer_offloading" in w for w in result.warnings), result.warnings


def test_summary_names_layer_offloading_and_host_ram(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    path = tmp_path / "answers.yaml"
    path.write_text(yaml.safe_dump(REPRO), encoding="utf-8")
    # The short summary names what the Why leaves out; --explain prints it whole.
    code = main(["--answers", str(path), "--defaults", "--dry-run", "--output-dir", str(tmp_path / "short")])
    short = " ".join(capsys.readouterr().out.split())
    assert code == 0 and "More on this (add --explain, or read the head of axolotl.yaml):" in short
    code = main(["--answers", str(path), "--defaults", "--dry-run", "--explain", "--output-dir", str(tmp_path / "out")])
    out = capsys.readouterr().out
    assert code == 0
    summary, files = out.split("Would write", 1)
    lines = summary.splitlines()
    assert all(len(line) <= 80 for line in lines)
    assert "One GPU, no distributed backend: 1 GPU + layer offload" in title_line(summary)
    end = next(i for i, text in enumerate(lines) if text.startswith("╰"))
    panel = " ".join(line.strip("│ ") for line in lines[:end])
    assert "layer_offloading: true" in panel and "FSDP2 + offload" not in lines[0]
    est = decide(REPRO, tmp_path).recommendation.facts.estimates[LAYER]
    host = f"{est.host_per_node / GIB:.1f} GiB"
    assert f"Host RAM holds the frozen layers once, as stored: about {host}" in panel
    row = next(line for line in lines if line.startswith("│ 1 GPU + layer offload"))
    assert row.rstrip("│ ").endswith("yes") and host.split()[0] in row
    assert "\nlayer_offloading: true\n" in files  # the key itself, in the dry run of axolotl.yaml
    # Key settings never say "weight offload none" while the frozen weights leave the GPU.
    weight = next(line for line in lines if line.strip().startswith("weight offload"))
    assert "none" not in weight and "frozen layers" in weight, weight


def test_a_layer_offloading_default_is_said_as_the_estimates_decision(decided: list[Outcome]) -> None:
    """Where layer offloading is on by default, the summary's defaults say it was worked out from the
    memory estimate (and why, by GPU count), not listed like a fixed default."""
    from helpers import tree
    from wizard.ui.console import _assumed

    said = 0
    for answers, result in decided:
        if "layer_offloading" in answers or result.session.answers.get("layer_offloading") is not True:
            continue
        line = " ".join(_assumed(tree(), result).split())
        several = int(result.recommendation.facts.get("world_size") or 1) > 1
        reason = "a full copy does not fit; it comes before sharding" if several else "the run does not fit without it"
        assert f"layer_offloading yes (by the memory estimate: {reason})" in line, (answers, line)
        said += 1
    assert said >= 3, said


def test_a_chunked_loss_that_lets_the_full_copy_fit_is_weighed_against_layer_offloading(
    decided: list[Outcome],
) -> None:
    """Invariant, over every path that takes one GPU + layer offloading because the full copy does not fit:
    the Why weighs Cut Cross Entropy exactly where the full copy without its logits (and the loss's moment)
    would fit, with that copy's figure; the Cut Cross Entropy lever leads there. The usable line is the
    wizard's own, so a copy short by a little is shown the no-offload way, not only the offload."""
    from dataclasses import replace

    from wizard.engine.memory import layout_logits_bytes, to_gib

    said = {True: 0, False: 0}
    for answers, result in decided:
        rec = result.recommendation
        if rec.rule is None or rec.rule.id != "layer_offload_single_gpu" or answers.get("cut_cross_entropy"):
            continue
        copy, work = rec.facts.estimates["ddp"], rec.facts.workload
        assert work is not None
        if copy.fits:
            continue
        chunked = replace(copy, activations=max(copy.activations - layout_logits_bytes(work, "ddp"), 0), transient=0)
        because = " ".join(rec.because.split())
        weighed = "Why layer offloading over a chunked loss: Cut Cross Entropy (cut_cross_entropy: true)" in because
        assert weighed is chunked.fits, because
        if weighed:
            assert f"about {to_gib(chunked.total)} GiB of {to_gib(copy.budget)} GiB usable" in because, because
            assert any("(cut_cross_entropy: yes)" in lever.change for lever in result.levers), result.levers
        said[weighed] += 1
    assert said[True] and said[False], said
