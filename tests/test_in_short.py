"""The "In short" lines above the summary: the decision in a few plain sentences that agree with the rest.

Properties, over every path of the walk (refusals too):

* every decision with a memory estimate, and every refusal with a change that fits, opens its summary with "In short:";
* it stays short: at most five sentences, none longer than 50 words, no brackets inside brackets;
* its first sentence names what the panel decided: the ZeRO stage, FSDP2 or HSDP, DDP, an offload to host RAM
  or an NVMe drive, a brought JSON kept or not, "Nothing fits" where the chosen layout does not fit;
* it names the risk exactly where the estimate has one (a close call, a moment past the usable line), and says how
  near the usable line the run comes exactly where the panel's Memory line does, with the same share;
* a layout chosen because a full copy (or a sharded one) does not fit argues it at one sequence per micro-batch,
  as the Why does, and says the micro-batch its own figure is at;
* every figure it gives is one the summary under it prints too, so the short answer and the long one agree.
"""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
import yaml
from rich.console import Console

from helpers import decide, decided_paths, tree
from wizard.cli import main
from wizard.engine.evaluate import chosen_estimate, offloads_to_nvme
from wizard.engine.memory import ESTIMATE_SHARE, OFFLOAD_STRATEGIES, memory_gib, sum_gib, to_gib
from wizard.engine.sentences import sentences
from wizard.ui.console import print_result, verdict_lines
from wizard.ui.in_short import in_short

FIGURE = re.compile(r"\d+(?:,\d{3})*(?:\.\d+)?%?")


def _flat(text: str) -> str:
    return " ".join(re.sub(r"[│╭╮╰╯─┃━┏┓┗┛┡┩╇┳┻]", " ", text).split())


def test_in_short_is_short_and_names_what_the_panel_decided(tmp_path: Path) -> None:
    kinds: set[str] = set()
    for answers, result in decided_paths(tmp_path, refusals=True):
        rec = result.recommendation
        said = in_short(tree(), result)
        est = None if rec.refused else chosen_estimate(rec)
        if est is not None or (rec.refused and any(x.gib_per_gpu is not None for x in result.levers)):
            assert said, answers
        if not said:
            continue
        assert len(said) <= 5, (answers, said)
        for sentence in said:
            assert len(sentence.split()) <= 50, (answers, sentence)
            assert not re.search(r"\([^)]*\(", sentence), (answers, sentence)
        if est is None:
            continue
        first, text = said[0], " ".join(said)
        strategy = str(rec.settings.get("strategy"))
        brought = answers.get("deepspeed_config") is not None
        gpu = rec.hardware_id in ("nvidia", "amd")
        if gpu and (stage := rec.settings.get("zero_stage")) is not None:
            assert f"ZeRO-{stage}" in first, (answers, first)
            kinds.add("zero")
        if gpu:
            assert ("FSDP2" in first or "HSDP" in first) == strategy.startswith(("fsdp2", "hsdp")), (answers, first)
            offloaded = "host RAM" in first or "NVMe" in first or "offload" in first
            assert offloaded == (strategy in OFFLOAD_STRATEGIES), (answers, first)
            assert ("NVMe" in first) == offloads_to_nvme(rec), (answers, first)
        # A brought JSON: kept where it fits, tried where only host RAM is short, changed where it does not fit.
        kept = first.startswith(("Keep your DeepSpeed JSON", "Try your DeepSpeed JSON as written"))
        assert kept == (brought and est.fits), (answers, first)
        assert first.startswith("Try your") == (brought and est.fits and est.host_fits is False), (answers, first)
        assert first.startswith("Your DeepSpeed JSON") == (brought and not est.fits), (answers, first)
        assert first.startswith("Nothing fits") == (not brought and not est.fits), (answers, first)
        # A plan kept with a fix to make first says so in its lead, exactly where it would likely run out of memory.
        after_fix = bool(re.search(r"after one fix, .+: as configured, it would likely run out of memory", first))
        not_as_is = "but not as configured: as it is, it would likely run out of memory (see Risk)" in first
        assert (after_fix or not_as_is) == (not brought and est.close_call_likely), (answers, first)
        # The fix the lead points to is the paragraph's last sentence.
        fix_said = "How, before the first launch: " in text or text.endswith("Make it before the first launch.")
        assert after_fix == (not brought and est.close_call_likely and fix_said), (answers, text)
        if after_fix and "How, before the first launch: " in text:
            # The lead names the fix; the paragraph ends with how (or when) to make it.
            assert ". " not in text.rsplit("How, before the first launch: ", 1)[-1], text
        assert bool(re.search(r"the real peak (?:may|would likely) pass the GPU's", text)) == est.close_call, text
        if est.close_call:
            # "would" exactly where even the calibration's kinder end (the estimate at 76% of the real peak) passes it.
            likely = sum_gib(est.total, est.transient) / ESTIMATE_SHARE[1] > float(memory_gib(est.gpu_memory))
            assert ("the real peak would likely pass" in text) == likely == est.close_call_likely, (answers, text)
            kinds.add("likely" if likely else "may")
        assert ("into the spare" in text) == (est.tight and not est.close_call), (answers, text)
        # Near the usable line exactly where the panel's Memory line says so, with the same share.
        memory = dict(verdict_lines(rec, result.session.answers, brief=True)).get("Memory", "")
        near = re.search(r"\((\d+)% of it[^:]*: (little to spare|past the usable line)", memory)
        said_near = ("% of it" in text and "little to spare" in text) or "overlap_comm buffers it comes to" in text
        assert said_near == bool(near), (memory, text)
        if near:
            assert f"{near.group(1)}%" in text, (memory, text)
            kinds.add("near")
        # A layout picked at a larger micro-batch than 1 is argued at 1, as the Why argues it.
        work = rec.facts.workload
        if work is not None and work.micro_batch_size > 1 and ("it would need" in text):
            assert "at one sequence per micro-batch" in text, (answers, text)
            assert f"at micro-batches of {work.micro_batch_size}" in text, (answers, text)
            kinds.add("micro")
        kinds.add("close" if est.close_call else "tight" if est.tight else "fits" if est.fits else "past")
        kinds.add("offload" if strategy in OFFLOAD_STRATEGIES else "on the GPUs")
    assert kinds >= {"zero", "close", "tight", "fits", "past", "offload", "on the GPUs", "near", "likely", "may"}, kinds


def test_every_figure_in_short_is_one_the_summary_prints(tmp_path: Path) -> None:
    checked = 0
    for answers, result in decided_paths(tmp_path, refusals=True)[::4]:
        out = io.StringIO()
        print_result(Console(file=out, width=80), tree(), result, dry_run=True)
        text = out.getvalue()
        said = in_short(tree(), result)
        if not said:
            assert not text.startswith("In short:"), answers
            continue
        assert text.startswith("In short:"), (answers, text[:200])
        head, rest = text.split("╭", 1)
        assert _flat(head) == _flat("In short: " + " ".join(said)), (answers, head)
        missing = [figure for figure in FIGURE.findall(" ".join(said)) if figure not in _flat(rest)]
        assert not missing, (answers, missing, said)
        checked += 1
    assert checked > 100


def test_a_single_gpu_lora_that_offloads_says_why_and_the_plugin_that_would_avoid_it(tmp_path: Path) -> None:
    # One A10G (22.49 GiB), a LoRA of an 8B model at Axolotl's defaults: the full copy is just past the line.
    answers = {
        "target": "axolotl",
        "hardware": "nvidia",
        "gpu_model": "A10G",
        "gpus_per_node": 1,
        "model": "llama-3.1-8b",
        "method": "lora",
    }
    said = sentences(" ".join(in_short(tree(), decide(answers, tmp_path))))
    assert said[0] == "Use one GPU with layer offloading."
    assert re.fullmatch(
        r"With everything on the GPU, it would need about 18\.3 GiB on the GPU, more than the 18\.0 GiB the wizard"
        r" plans with \(80% of the GPU's 22\.49 GiB; it keeps the rest spare\)\.",
        said[1],
    ), said[1]
    lead = "So the frozen layers wait in host RAM and come to the GPU layer by layer, which leaves about"
    assert said[2].startswith(lead)
    assert said[3].startswith("Or, with Cut Cross Entropy (cut_cross_entropy: yes), it fits with no offload: about")


def test_explain_opens_with_the_same_in_short_after_the_answers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    answers = {"target": "accelerate", "hardware": "nvidia", "gpu_model": "RTX 4090", "gpus_per_node": 2}
    answers |= {"model": "llama-3.1-8b", "method": "full", "cpu_memory_gb": 512}
    path = tmp_path / "answers.yaml"
    path.write_text(yaml.safe_dump(answers), encoding="utf-8")
    said = in_short(tree(), decide(answers, tmp_path / "out"))
    assert said and said[0].startswith("Use DeepSpeed ZeRO-")  # offloads: a full 8B copy is far past two 4090s
    assert main(["explain", "--answers", str(path)]) == 0
    out = capsys.readouterr().out
    # After the answers it was given, before the first rule.
    before, after = out.split("In short:", 1)
    assert before.startswith("Answers:") and "How the decision was made" not in before
    assert _flat(after.split("How the decision was made", 1)[0]) == _flat(" ".join(said))


def test_a_layout_picked_at_a_larger_micro_batch_is_argued_at_one_as_the_why_argues_it(tmp_path: Path) -> None:
    # One A10G, a LoRA of an 8B model, global batch 16: layer offloading frees room for micro-batches of 2, but a
    # full copy is past the line at 1 already; that is the reason, said with the figure the Why gives.
    answers = {"target": "axolotl", "hardware": "nvidia", "gpu_model": "A10G", "gpus_per_node": 1}
    answers |= {"model": "llama-3.1-8b", "method": "lora", "global_batch_size": 16}
    result = decide(answers, tmp_path)
    rec = result.recommendation
    assert rec.settings["strategy"] == "ddp_layer_offload" and rec.facts.workload is not None
    assert rec.facts.workload.micro_batch_size == 2
    said = " ".join(in_short(tree(), result))
    at_two = to_gib(rec.facts.estimates["ddp"].total)
    at_one = re.search(r"it would need about ([\d.]+) GiB on the GPU at one sequence", said)
    assert at_one is not None and float(at_one.group(1)) < at_two, said
    assert f"{at_one.group(1)} GiB" in " ".join(rec.because.split()), rec.because  # the Why's own figure
    assert f"about {to_gib(rec.facts.estimates['ddp_layer_offload'].total)} GiB on the GPU" in said
    assert "at micro-batches of 2" in said
    # "Why not DDP" on that one GPU gives the same figure, at the micro-batch it names.
    ddp = next(r.reason for r in rec.runner_ups if r.backend == "ddp")
    assert f"about {at_one.group(1)} GiB at micro_batch_size 1, more than" in " ".join(ddp.split()), ddp


def test_a_refusal_leads_with_the_change_that_alters_the_job_least(tmp_path: Path) -> None:
    # Two machines of 8 H100s, a full fine-tune of 70B with offload ruled out: LoRA, a third machine and allowing
    # offload would each fit; allowing offload is a setting, the others change the hardware or the method.
    answers = {"target": "accelerate", "hardware": "nvidia", "gpu_model": "H100", "gpus_per_node": 8, "num_nodes": 2}
    answers |= {"model": "70B", "method": "full", "sequence_length": 4096, "cpu_memory_gb": 2048, "offload": "none"}
    answers |= {"chunked_loss": True}
    result = decide(answers, tmp_path)
    assert result.recommendation.refused
    changes = [x.change for x in result.levers if x.gib_per_gpu is not None]
    assert changes[0].startswith("LoRA instead") and any(c.startswith("CPU offload allowed") for c in changes)
    said = in_short(tree(), result)
    assert said[0] == "Nothing fits these answers as they are."
    assert said[1].startswith("It would fit with CPU offload allowed (offload: auto): "), said
