"""The loss over the output logits: what the estimate counts, what it leaves to the margin, and the levers.

Invariants, over every path of the tree:
* a decision that says a run "needs about X GiB, more than the Y GiB usable" has X > Y;
* a layout fits only when its peak with the loss's temporaries is within the device: no chosen
  layout runs out of memory at its first backward pass by the estimate's own figures, and a layout
  short only by that moment is said so (its total within the usable line, its peak past the device),
  in the fits column ("oom") and in every sentence that says why it lost;
* the loss warning appears exactly when the loss's fp32 temporaries beyond the counted logits
  (8 bytes per token per vocabulary entry) take the peak past the usable line (into the margin,
  marked "tight" in the fits column), and its figures are the chosen layout's own;
* a run whose written axolotl.yaml computes the loss in chunks (Cut Cross Entropy, Liger's fused
  loss) gets no such warning.
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from helpers import decide, decided_paths, file, parsed
from wizard.app import Result
from wizard.cli import main
from wizard.engine.advice import LOSS_PEAK_CLOSE, LOSS_PEAK_WARNINGS, chunked_loss, loss_peak_line
from wizard.engine.device import words_for
from wizard.engine.memory import (
    activation_parts,
    layout_tokens,
    logits_bytes,
    loss_extra_bytes,
    memory_gib,
    sum_gib,
    to_gib,
)
from wizard.ui.memory_chart import fits_mark

QLORA_8K_4090 = {
    "target": "accelerate",
    "hardware": "nvidia",
    "gpu_model": "RTX 4090",
    "gpus_per_node": 1,
    "model": "8B",
    "method": "qlora",
    "sequence_length": 8192,
}
LORA_2K_4090 = {**QLORA_8K_4090, "method": "lora", "sequence_length": 2048, "cpu_memory_gb": 64}


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def loss_warning(result: Result) -> str | None:
    found = [" ".join(w.split()) for w in result.warnings if w.startswith(LOSS_PEAK_WARNINGS)]
    assert len(found) <= 1, found
    return found[0] if found else None


def logits_part(result: Result) -> int:
    rec = result.recommendation
    assert rec.facts.workload is not None
    parts = dict(activation_parts(rec.facts.workload, str(rec.settings["strategy"])))
    return next((size for what, size in parts.items() if what.startswith("the output logits")), 0)


def test_the_loss_warning_appears_exactly_when_its_temporaries_outgrow_the_margin(tmp_path: Path) -> None:
    fired = quiet = 0
    for answers, result in decided_paths(tmp_path):
        rec = result.recommendation
        est = rec.facts.estimates.get(str(rec.settings.get("strategy"))) if rec.facts.estimates else None
        work = rec.facts.workload
        text = loss_warning(result)
        if est is None or work is None or not est.fits:
            assert text is None, answers
            continue
        extra = loss_extra_bytes(work, est.strategy)
        assert est.total + extra <= est.gpu_memory, answers  # a fitting layout's moment is within the device
        # Past the usable line, or a close call (a long context, its peak 39% higher past the card).
        expected = (est.total + extra > est.budget or est.close_call) and not chunked_loss(answers)
        assert (text is not None) == expected, (answers, extra, est)
        if text is None:
            quiet += 1
            continue
        fired += 1
        # Twice the counted logits beyond them (12 bytes per entry against 4), on this layout's tokens.
        assert extra == 2 * logits_part(result) > 0
        assert f"{layout_tokens(work, est.strategy):,} tokens x {work.shape.vocab_size:,} vocabulary" in text
        assert f"{to_gib(extra // 2)} GiB each" in text and "for the three" not in text
        assert (
            f"Of the three, the estimate counts one already, as the {to_gib(extra // 2)} GiB of fp32 logits; the other"
            f" two add {to_gib(extra)} GiB" in text
        )
        # The peak as the shown total plus the shown moment, so the two figures add up on screen.
        peak = f"from about {to_gib(est.total)} GiB to about {sum_gib(est.total, extra)} GiB"
        # A close call opens on the risk and says the fix as what to do before the first launch; a
        # tight run keeps it for "if the run stops out of memory".
        assert text.startswith(LOSS_PEAK_CLOSE) is est.close_call, text
        if est.close_call:
            # Its peak on either side of the usable line: said as it is.
            side = "past" if est.tight else "within"
            assert f"{peak}, {side} the usable {to_gib(est.budget)} GiB and within" in text, text
            device = f"{memory_gib(est.gpu_memory)} GiB by the estimate."
            calibrated = round(float(sum_gib(est.total, extra)) * 1.39, 1)
            assert f"is about {calibrated} GiB, more than the {memory_gib(est.gpu_memory)} GiB" in text, text
            assert "So before the first launch, " in text and "if the run stops out of memory" not in text, text
        else:
            assert f"{peak}, past the usable {to_gib(est.budget)} GiB, " in text, text
            device = f"{memory_gib(est.gpu_memory)} GiB, but if"
        assert f"within {words_for(est.device).owner} {device}" in text, text
        # The decision panel says the same peak in one line: a fit and its brief peak, one answer.
        line = loss_peak_line(answers, rec.facts, rec.settings)
        assert line is not None and f"to about {sum_gib(est.total, extra)}" in line, line
        # What is left of the memory above the peak, from the shown figures; on a Mac it is split between
        # the Python process and macOS, as the Memory paragraph counts it.
        left = round(float(memory_gib(est.gpu_memory)) - sum_gib(est.total, extra), 1)
        if est.device == "gpu":
            # One verdict for a close call: never "it fits, tightly" where 39% more passes the card.
            verdict = "a close call, since 39% more than that peak" if est.close_call else "it fits, tightly"
            assert f"leaves {left} GiB of" in line and verdict in line, line
        else:
            assert f"{left} GiB are then left: about 2.0 GiB for the Python process itself and" in line, line
            assert f"and {round(left - 2.0, 1)} GiB for macOS and your programs" in line, line
        # host: the host RAM's verdict comes first; close: tight, and 39% more passes the card.
        assert fits_mark(est) == ("host" if est.host_fits is False else "risk" if est.close_call else "tight")
        lever = "compute the loss in chunks" if est.device == "gpu" else "shorten sequence_length"
        lever = "Cut Cross Entropy" if answers.get("target") == "axolotl" else lever
        # DPO under Accelerate: TRL computes the log-probabilities, and its own switch chunks them.
        dpo = answers.get("target") == "accelerate" and answers.get("objective") == "dpo" and est.device == "gpu"
        lever = "DPOConfig(use_liger_kernel=True)" if dpo else lever
        assert lever in text, text
    assert fired and quiet, (fired, quiet)


def test_a_layout_short_only_by_the_loss_moment_is_said_so_wherever_it_lost(tmp_path: Path) -> None:
    """Its total is within the usable line, so "needs X, more than Y usable" would be untrue: each
    reason it lost names the moment's peak against the device, and the fits column says "oom"."""
    said = 0
    for answers, result in decided_paths(tmp_path, refusals=True):
        rec = result.recommendation
        short = {name: e for name, e in (rec.facts.estimates or {}).items() if e.peak_short}
        if not short:
            continue
        for estimate in short.values():
            assert not estimate.fits and fits_mark(estimate) == "oom"
            assert estimate.total <= estimate.budget < estimate.gpu_memory < estimate.peak
        for runner in rec.runner_ups:
            estimate = short.get(str(runner.strategy))
            text = " ".join(runner.reason.split())
            if estimate is None or f"{to_gib(estimate.total)} GiB" not in text:
                continue  # lost for another reason, or said without its figure
            said += 1
            peak = sum_gib(estimate.total, estimate.transient)
            assert "the loss's fp32 temporaries" in text and f"{peak} GiB" in text, (answers, text)
    assert said, "no path lost a layout to the loss peak alone"


def test_a_qlora_run_at_8k_and_the_common_lora_run_on_a_4090_are_told_their_brief_peak(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both stay one GPU; each is told its peak past the usable line and within the card, in one answer.

    QLoRA at 8k: 13.9 GiB plus 7.8 GiB of fp32 loss temporaries, a close call (a long context, and 39%
    more passes the card); LoRA at 2k: 18.3 GiB plus 2.0 GiB, tight (at 2,048 tokens the calibration is not
    applied). A 3B QLoRA run at 8k, whose peak stays under the line and 39% more within the card, is
    told nothing.
    """
    monkeypatch.setenv("COLUMNS", "80")
    cases = (
        (QLORA_8K_4090, r"13\.\d", r"7\.8", r"21\.\d", True),
        (LORA_2K_4090, r"18\.\d", r"2\.0", r"20\.\d", False),
        ({**LORA_2K_4090, "sequence_length": 8192, "method": "qlora", "model": "3B"}, None, None, None, False),
    )
    for index, (answers, steady, extra, peak, close) in enumerate(cases):
        path = tmp_path / f"run{index}.yaml"
        path.write_text("\n".join(f"{k}: {v}" for k, v in answers.items()) + "\n", encoding="utf-8")
        code, out, err = cli(capsys, "--answers", str(path), "--dry-run", "--explain")
        assert code == (9 if close else 0), err  # 9: a close call may run out of memory
        text = " ".join((out + err).replace("│", " ").split())
        # What a user reads: the single-GPU decision stands; the warning names the peak and the card.
        assert "One GPU, no distributed backend" in text
        assert ("The loss peak may take this run out of memory" in text) is close, text
        assert ("The loss peak takes this run past the usable memory" in text) is (peak is not None and not close)
        assert ("Peak: " in text) is (peak is not None), text
        if peak is None:
            continue
        within = "and within" if close else "within"
        said = rf"GiB to about {peak} GiB, past the usable 19\.2 GiB,? {within} the GPU's 23\.99 GiB"
        assert re.search(said, text), text
        # One answer: the panel puts the brief peak beside the fit, and the breakdown adds it up.
        panel = (
            rf"Peak: About {steady} GiB per GPU through a step; .* add {extra} GiB .* to about {peak} GiB\. That is"
            r" past the usable 19\.2 GiB and leaves [\d.]+ GiB of the GPU's 23\.99 GiB for what the estimate does not"
            r" count"
        )
        assert re.search(panel, text), text
        assert re.search(rf"For a moment at the start of the backward pass, {extra} GiB more", text), text
        # explain says the same, so neither reads safer than the other.
        code, out, err = cli(capsys, "explain", "--answers", str(path))
        explained = " ".join((out + err).split())
        assert code == (9 if close else 0) and re.search(panel, explained), explained


def _axolotl(tmp_path: Path, **extra: Any) -> Result:
    answers: dict[str, Any] = {**QLORA_8K_4090, "target": "axolotl", "tune": True, **extra}
    return decide(answers, tmp_path / "out", write=False)


@pytest.mark.parametrize(
    ("extra", "chunked"),
    [
        ({}, False),
        ({"cut_cross_entropy": True}, True),
        ({"liger": True}, True),
        ({"liger": True, "cut_cross_entropy": True}, True),
    ],
)
def test_the_loss_warning_is_left_out_exactly_when_axolotl_yaml_computes_the_loss_in_chunks(
    tmp_path: Path, extra: dict[str, Any], chunked: bool
) -> None:
    result = _axolotl(tmp_path, **extra)
    config = parsed(result, "axolotl.yaml")
    plugins = config.get("plugins") or []
    written = (
        any("cut_cross_entropy" in p.lower() for p in plugins) or config.get("liger_fused_linear_cross_entropy") is True
    )
    assert written is chunked, config
    assert chunked_loss(result.session.answers) is chunked
    assert (loss_warning(result) is None) is chunked, result.warnings
    if not chunked:
        assert "turn on Cut Cross Entropy (--set cut_cross_entropy=true)" in loss_warning(result)
    rec = result.recommendation
    est = rec.facts.estimates[str(rec.settings["strategy"])]
    plain = _axolotl(tmp_path / "plain").recommendation
    plain_est = plain.facts.estimates[str(plain.settings["strategy"])]
    logits = logits_bytes(plain.facts.workload)
    notes = [w for w in result.warnings if "one of the options asked after the decision" in w]
    if extra.get("cut_cross_entropy"):
        # Asked before the decision: the estimate itself counts no logits and no moment, and no note is needed.
        assert rec.facts.workload.chunked_loss and not notes, result.warnings
        assert (est.activations, est.transient) == (plain_est.activations - logits, 0)
        assert "the loss computed in chunks (Cut Cross Entropy)" in _assumed(result)[0]
        return
    # Liger's fused loss is an option asked after the decision: the figures overstate the run, said with the size.
    assert len(notes) == int(chunked), result.warnings
    if chunked:
        assert f"they count {to_gib(logits)} GiB of output logits" in notes[0]
        assert f"the run needs about {to_gib(est.total - logits)} GiB per GPU" in notes[0], notes[0]
        which = "Liger's fused linear cross entropy"
        assert notes[0].startswith(which + " is on")
        # The panel's Memory line gives the same figure, and says what the table counts instead.
        from wizard.ui.console import verdict_lines

        memory = dict(verdict_lines(rec, result.session.answers))["Memory"]
        assert memory.startswith(f"about {to_gib(est.total - logits)} GiB of") and f"(with {which};" in memory
        assert "for a moment" not in memory, memory
        # No other warning judges the run by the moment the chunked loss never has.
        others = [w for w in result.warnings if w is not notes[0]]
        assert not any("for a moment as the backward pass starts" in w for w in others), others


def _assumed(result: Result) -> list[str]:
    """The summary's "Assumed:" line for a result."""
    from wizard.engine.advice import model_assumption

    rec = result.recommendation
    return [model_assumption(result.session.answers, rec.facts, str(rec.settings.get("strategy")))]


def test_a_run_said_to_need_more_than_the_usable_memory_does(tmp_path: Path) -> None:
    needs = re.compile(r"needs about ([\d.]+) GiB[^.;]*?, more than the ([\d.]+) GiB usable")
    said = 0
    for answers, result in decided_paths(tmp_path, refusals=True):
        for found in needs.finditer(" ".join(result.recommendation.because.split())):
            said += 1
            assert float(found.group(1)) > float(found.group(2)), (answers, found.group(0))
    assert said


def test_a_memory_answer_beyond_the_named_card_is_said_with_the_cards_own_figure(tmp_path: Path) -> None:
    """gpu_memory_gb above what gpu_model has: a warning names both figures; at or below it, none.

    Over every GPU path of the walk that names a known card, the answer raised to twice the card's
    memory gets the warning, and the card's own figure does not.
    """
    from wizard.engine.catalog import lookup_gpu

    checked = 0
    for answers, _ in decided_paths(tmp_path, lambda a: lookup_gpu(a.get("gpu_model")) is not None)[:40]:
        gpu = lookup_gpu(answers["gpu_model"])
        assert gpu is not None
        card = round(gpu.memory_mib / 1024, 2)
        for memory, said in ((card, False), (round(card * 0.8, 2), False), (round(card * 2, 2), True)):
            result = decide({**answers, "gpu_memory_gb": memory}, tmp_path / "m", write=False)
            found = [w for w in result.warnings if w.startswith(f"gpu_memory_gb {memory:g} is more than the")]
            assert bool(found) is said, (answers, memory, result.warnings)
            if said:
                assert f"({card:.2f} GiB as" in found[0], found[0]
        checked += 1
    assert checked >= 10, checked


def test_a_chunked_loss_beside_an_offload_says_whether_the_offload_is_still_needed(tmp_path: Path) -> None:
    """Invariant, over every Axolotl offload decision of the walk with Cut Cross Entropy turned on: the note
    says whether the lightest layout without offload fits once the logits are gone, with that layout's own
    figures (except where one fits without offload already), and never tells the user to rerun with
    offload turned off (the decision, made before the loss options, would still count the logits)."""
    from wizard.engine.advice import chunked_loss_run
    from wizard.engine.memory import OFFLOAD_STRATEGIES

    seen: set[bool] = set()
    for answers, first in decided_paths(tmp_path, lambda a: a.get("target") == "axolotl"):
        if str(first.recommendation.settings.get("strategy")) not in OFFLOAD_STRATEGIES:
            continue
        result = decide({**answers, "tune": True, "liger": True}, tmp_path / "cce")
        rec = result.recommendation
        if rec.refused or str(rec.settings.get("strategy")) not in OFFLOAD_STRATEGIES:
            continue
        notes = [w for w in result.warnings if "one of the options asked after the decision" in w]
        if not notes:
            continue  # logits too small to be worth a note
        if rec.facts.get("fits_without_offload"):
            # Layer offloading taken beside DDP where a sharded layout fits without offload already: the
            # chunked loss does not change whether offload is needed, and the note does not say it does.
            assert "no offload at all" not in notes[0] and "only just past it" not in notes[0], notes[0]
            continue
        plain = [
            run[0]
            for strategy, est in rec.facts.estimates.items()
            if strategy not in OFFLOAD_STRATEGIES
            and (run := chunked_loss_run(result.session.answers, rec.facts, est)) is not None
        ]
        lightest = min(plain, key=lambda e: e.total)
        fits = lightest.total <= lightest.budget
        note = " ".join(notes[0].split())
        if fits:
            assert f"would fit with no offload at all (about {to_gib(lightest.total)} GiB" in note, note
        elif to_gib(lightest.total) - to_gib(lightest.budget) < 0.5:
            assert f"would need about {to_gib(lightest.total)} GiB, only" in note and "only just past it" in note, note
        else:
            assert f"would still need about {to_gib(lightest.total)} GiB" in note and "the offload stays" in note
        assert "run the wizard again" not in note, note
        seen.add(fits)
    assert seen == {True, False}, seen  # both answers occur on the walk


def _chunked_answer(answers: dict[str, Any]) -> str:
    """The answer that says the loss is computed in chunks, before the decision: per tool."""
    return "cut_cross_entropy" if answers.get("target") == "axolotl" else "chunked_loss"


def test_a_chunked_loss_answer_is_counted_by_every_estimate_and_written_on_every_gpu_path(tmp_path: Path) -> None:
    """Invariant, over every GPU path of the walk (refusals too) with the chunked-loss answer turned on:

    - every layout's estimate is the same run's without the logits that layout counts, and with no loss moment;
    - the decision never gets harder: a run that was decided still is, and a layout that fitted still fits;
    - the run is told what makes it true: Axolotl's YAML turns the plugin on, an Accelerate script is told to
      compute the loss in chunks (and the Assumed line says the estimate counts it); no loss-peak warning is left.
    """
    from wizard.engine.memory import layout_logits_bytes

    seen = {"axolotl": 0, "accelerate": 0, "now_decided": 0, "other_layout": 0}
    for answers, plain in decided_paths(tmp_path, lambda a: a.get("hardware") in ("nvidia", "amd"), refusals=True):
        key = _chunked_answer(answers)
        result = decide({**answers, key: True}, tmp_path / "chunked")
        before, after = plain.recommendation, result.recommendation
        if before.facts.workload is None:
            continue
        assert after.facts.workload is not None and after.facts.workload.chunked_loss, answers
        # A default worked out from the memory (a context-parallel split) may change with it: another run.
        same_run = replace(after.facts.workload, chunked_loss=False) == before.facts.workload
        seen["other_layout"] += not same_run
        for strategy, est in before.facts.estimates.items() if same_run else ():
            chunked = after.facts.estimates[strategy]
            logits = layout_logits_bytes(before.facts.workload, strategy)
            assert (chunked.activations, chunked.transient) == (est.activations - logits, 0), (answers, strategy)
            assert chunked.model_states == est.model_states, (answers, strategy)
        if not before.refused:
            assert not after.refused, (answers, after.because)
            layout = str(before.settings["strategy"])
            # (A brought JSON is run as written even where it does not fit.)
            if same_run and before.facts.estimates[layout].fits:
                assert after.facts.estimates[layout].fits, answers
        elif not after.refused:
            seen["now_decided"] += 1
        if after.refused:
            continue
        assert loss_warning(result) is None, result.warnings
        assert "the loss computed in chunks" in _assumed(result)[0], answers
        if answers.get("target") == "axolotl":
            plugins = parsed(result, "axolotl.yaml").get("plugins") or []
            assert "axolotl.integrations.cut_cross_entropy.CutCrossEntropyPlugin" in plugins, answers
        else:
            told = "in chunks, as answered (chunked_loss: yes)"
            header = " ".join(line.lstrip("# ") for line in file(result, "accelerate_config.yaml").text.splitlines())
            assert told in " ".join(header.split()), answers
        seen[str(answers.get("target"))] += 1
    assert seen["axolotl"] >= 50 and seen["accelerate"] >= 50 and seen["other_layout"] < 50, seen


def test_a_snippet_that_loads_a_model_computes_the_loss_in_chunks_exactly_where_answered(tmp_path: Path) -> None:
    """Invariant, over every decided path that writes train_snippet.py, and the QLoRA run at 8k both ways: the
    snippet's --model run loads the model through Liger Kernel (whose fused loss builds no logits) exactly where
    chunked_loss: yes made the estimate count none, the install list names it then, and the file compiles."""
    runs = [(answers, result) for answers, result in decided_paths(tmp_path)]
    for chunked in (True, False):
        answers = {**QLORA_8K_4090, "chunked_loss": chunked}
        runs.append((answers, decide(answers, tmp_path / f"qlora{chunked}", write=False)))
    said = {True: 0, False: 0}
    for answers, result in runs:
        snippet = next((f.text for f in result.files if f.name == "train_snippet.py"), None)
        if snippet is None:
            continue
        compile(snippet, "train_snippet.py", "exec")
        loads_model = "from_pretrained(" in snippet
        liger = "from liger_kernel.transformers import AutoLigerKernelForCausalLM as AutoModelForCausalLM" in snippet
        expected = loads_model and answers.get("chunked_loss") is True
        assert liger is expected, answers
        # The files' headers list what to install, whatever this machine has.
        assert ("liger-kernel (the loss in chunks" in " ".join(snippet.split())) is expected, answers
        said[liger] += 1
    assert said[True] and said[False], said


def test_a_close_calls_note_in_the_short_summary_says_what_to_do_and_leaves_the_figures_to_risk(
    tmp_path: Path,
) -> None:
    """Invariant, over every decided close call: the short summary's loss-peak note points at the Risk line for the
    figures and keeps the same fix as the long note; --explain and the config file's head keep the note whole; every
    other run's notes are the same in both forms."""
    from io import StringIO

    from rich.console import Console

    from helpers import decided_paths, tree
    from wizard.engine.advice import LOSS_PEAK_CLOSE
    from wizard.engine.evaluate import chosen_estimate
    from wizard.ui.console import print_result

    def shown(result: Any, detail: bool) -> str:
        out = StringIO()
        print_result(Console(file=out, width=80), tree(), result, dry_run=True, detail=detail)
        return " ".join(out.getvalue().split())

    paths = decided_paths(tmp_path)
    close = [(a, r) for a, r in paths if (est := chosen_estimate(r.recommendation)) is not None and est.close_call]
    assert close
    for answers, result in close[:: max(1, len(close) // 12)] + paths[::60]:
        long_note = next((w for w in result.warnings if w.startswith(LOSS_PEAK_CLOSE)), None)
        short, full = shown(result, False), shown(result, True)
        if long_note is None:
            continue
        # The fix as the long note gives it: its first lever, less the clause on the tensors the short one does
        # not name, and the first sentence of the other (the levers table gives its figures).
        fix = " ".join(long_note.split("So before the first launch, ", 1)[1].split())
        parts = re.fullmatch(r"(.*?counts it\)?)(?:; or (.*))?", fix)
        assert parts, fix
        first, other = parts.group(1), parts.group(2) or ""
        for clause in (", which builds none of them", " and builds none of them", " and build none of them"):
            first = first.replace(clause, "")
        other = re.split(r"\.\s+(?=[A-Z])", other, maxsplit=1)[0].rstrip(".")
        said = f"So before the first launch, {first}; or {other}." if other else f"So before the first launch, {first}"
        assert "as the Risk line above says" in short and "Risk:" in short, answers
        assert said in short, (answers, said)
        assert "three fp32 tensors" not in short.split("Before the first launch", 1)[1], answers
        assert "three fp32 tensors" in full and "as the Risk line above says" not in full, answers
        head = " ".join(result.files[0].text.replace("\n#", " ").split())
        assert "three fp32 tensors" in head and "as the Risk line above says" not in head, answers
