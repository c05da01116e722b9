"""The summary's table compares the layouts in memory and time; --explain splits the memory into its parts.

Properties over every decided path, read from the printed summary: the short table's rows are
the estimate's layouts with their totals and host RAM as the estimate has them; a row shows a step band
exactly where the layout runs (it fits the GPU and the host RAM), and that band is the step-time table's;
the chosen row is named; and the long form (--explain) still shows the parts of each total.
"""

from __future__ import annotations

import io
import re
from pathlib import Path
from typing import Any

from rich.console import Console

from helpers import decided_paths, tree
from wizard.app import Result
from wizard.engine.memory import to_gib
from wizard.engine.speed import band_text
from wizard.ui.console import print_result


def _printed(result: Result, *, detail: bool = False) -> str:
    """The summary, wide enough that the table keeps its rules (80 columns: test_terminal_output reads it)."""
    out = io.StringIO()
    print_result(Console(file=out, width=200), tree(), result, dry_run=False, detail=detail)
    return out.getvalue()


def _table(text: str) -> tuple[list[str], dict[str, list[str]]]:
    """The first figure table's headers and rows (label -> cells), as printed with box-drawing rules."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("┏"))
    headers: list[list[str]] = []
    rows: dict[str, list[str]] = {}
    for line in lines[start + 1 :]:
        if line.startswith("└"):
            break
        cells = [cell.strip() for cell in re.split(r"[┃│]", line)[1:-1]]
        if line.startswith("┃"):
            headers.append(cells)
        elif line.startswith("│") and cells and cells[0]:
            rows[cells[0]] = cells[1:]
    # Headers may wrap over two lines: join each column's words.
    joined = [" ".join(part for part in column if part) for column in zip(*headers, strict=True)]
    return joined[1:], rows


def _bare(text: str) -> list[str]:
    """The words of `text` without the punctuation around them."""
    return [bare for word in text.split() if (bare := word.strip("()[]:;,."))]


def _runs(est: Any) -> bool:
    return bool(est.fits) and est.host_fits is not False


def test_the_short_table_gives_each_layouts_total_host_ram_and_step_where_it_runs(tmp_path: Path) -> None:
    timed = 0
    for answers, result in decided_paths(tmp_path):
        rec = result.recommendation
        if not rec.facts.estimates or len(rec.facts.estimates) < 2:
            continue
        headers, rows = _table(_printed(result))
        estimates = rec.facts.estimates
        chosen = str(rec.settings.get("strategy"))
        if "step s" not in headers:
            # No band for any layout that runs (a Mac, a GPU without a throughput figure, a brought JSON past
            # the memory with nothing else timed): the parts of the total, as --explain shows them.
            timed_runs = [k for k in rec.facts.speeds if k in estimates and _runs(estimates[k])]
            assert chosen not in rec.facts.speeds or not timed_runs, (answers, headers, timed_runs)
            assert headers[:3] == ["model states", "activations", "other"], headers
            continue
        timed += 1
        assert headers[0] == "total" and headers[-1] == "fits", headers
        by_label = {est.label: (key, est) for key, est in estimates.items()}
        for label, cells in rows.items():
            key, est = by_label.get(label.replace("->NVMe", "->CPU"), (None, None))
            assert est is not None, (answers, label)
            figures = dict(zip(headers, cells, strict=True))
            assert figures["total"] == f"{to_gib(est.total)}", (answers, label, figures)
            if "host" in figures and est.host_per_node and "NVMe" not in label:
                assert figures["host"] == f"{to_gib(est.host_per_node)}", (answers, label, figures)
            step = rec.facts.speeds.get(key)
            if _runs(est) and step is not None:
                assert figures["step s"] == band_text(step).removesuffix(" s"), (answers, label, figures)
            else:
                # No step for a layout that cannot run, even the chosen one of a JSON run as written.
                assert figures["step s"] == "-" or (_runs(est) and step is None), (answers, label, figures)
            assert figures["step s"] == "-" or _runs(est), (answers, label, figures)
    assert timed > 100, timed


def test_the_long_form_still_splits_each_total_into_its_parts(tmp_path: Path) -> None:
    for answers, result in decided_paths(tmp_path)[::25]:
        if not result.recommendation.facts.estimates:
            continue
        headers, _ = _table(_printed(result, detail=True))
        assert headers[:4] == ["model states", "activations", "other", "total"], (answers, headers)


def test_a_runner_ups_short_form_is_its_reason_less_whole_clauses_paragraph_for_paragraph(tmp_path: Path) -> None:
    """The summary's short view of a runner-up leaves out marked clauses only: the same paragraphs, each one's
    words in order from the whole reason, no marker character left in either; and somewhere it is shorter."""
    from wizard.engine.evaluate import DETAIL_CLOSE, DETAIL_OPEN

    shortened = 0
    for answers, result in decided_paths(tmp_path):
        for runner in result.recommendation.runner_ups:
            whole, short = runner.reason, runner.brief
            for text in (whole, short):
                assert DETAIL_OPEN not in text and DETAIL_CLOSE not in text, (answers, text)
            assert short.count("\n") == whole.count("\n"), (answers, runner.backend)
            for part, cut in zip(whole.split("\n"), short.split("\n"), strict=True):
                words = iter(_bare(part))
                # Every word of the short paragraph comes from the whole one, in order (a subsequence); a clause
                # cut from inside brackets leaves its closing bracket ("(tight: ... left)" reads "(tight)").
                assert all(any(word == w for w in words) for word in _bare(cut)), (answers, part, cut)
                assert cut.endswith((".", ":", ")")) or cut == part, (answers, cut)
            shortened += short != whole
    assert shortened >= 20, shortened


def test_a_lever_that_leads_to_the_same_layout_says_so(tmp_path: Path) -> None:
    """Every lever whose run keeps the current backend and layout says "the same layout as now" and why it is
    listed (it fits then, is no longer a close call, or is faster): otherwise it reads as the answer it already is.
    Over every decided path, with brought JSONs among them."""
    same = 0
    for answers, result in decided_paths(tmp_path):
        rec = result.recommendation
        for lever in result.levers:
            if (lever.backend, lever.strategy) != (rec.backend, rec.settings.get("strategy")):
                continue
            same += 1
            assert "the same layout as now" in lever.title, (answers, lever.change, lever.title)
            assert re.search(
                r"the same layout as now, (then within the usable memory|no longer a close call|faster)", lever.title
            ), lever.title
    assert same, "no lever keeps the layout"


def test_a_long_context_that_passes_the_calibration_says_its_margin(tmp_path: Path) -> None:
    """At a long context the estimate may undershoot the real peak by up to 39%: where even that stays within the
    GPU (no close call), the Memory line says so with the figure; it never says so of a close call or a short one."""
    from wizard.engine.memory import UNDERSHOOT, memory_gib, sum_gib
    from wizard.ui.console import chosen_estimate, verdict_lines

    said = 0
    for answers, result in decided_paths(tmp_path):
        rec = result.recommendation
        est = chosen_estimate(rec)
        lines = dict(verdict_lines(rec, result.session.answers))
        if est is None or "Memory" not in lines:
            continue
        memory = " ".join(lines["Memory"].split())
        margin = "at this long context even 39% more, about" in memory
        ordinary = est.transient > 0 and est.long_context and est.fits and est.device == "gpu"
        chunked = "(with " in memory  # the figures of the loss computed in chunks
        in_chunks = bool(answers.get("chunked_loss") or answers.get("cut_cross_entropy")) or chunked
        # Every layout at a long context that is no close call says the same 39% beside its figure, a loss in chunks
        # too: within the card ("even ... stays within"), or past it ("would pass ... watch the first steps").
        long_fit = est.long_context and est.fits and est.device == "gpu" and not est.close_call
        figure = round(float(sum_gib(est.total, est.transient)) * UNDERSHOOT, 1)
        within = figure <= float(memory_gib(est.gpu_memory))
        assert margin is (long_fit and (ordinary or in_chunks) and within), (answers, memory)
        if margin:
            said += 1
            assert f"about {figure} GiB, stays within" in memory, (answers, memory)
        said_past = f"at this long context 39% more, about {figure} GiB, would pass" in memory
        assert said_past is (long_fit and in_chunks and est.transient == 0 and not within), (answers, memory)
    assert said, "no long-context run passes the calibration"
    # The walk has no loss in chunks at a long context: 8B QLoRA at 8,192 tokens on a 24 GB card, at micro-batch 1
    # (within the card even 39% up: nothing said) and 4 (past it: said).
    from helpers import decide

    qlora_8k = {
        "target": "accelerate", "hardware": "nvidia", "gpu_model": "RTX 4090", "gpus_per_node": 1,
        "model": "llama-3.1-8b", "method": "qlora", "sequence_length": 8192, "chunked_loss": True,
    }  # fmt: skip
    for micro, passes in ((1, False), (4, True)):
        result = decide({**qlora_8k, "micro_batch_size": micro}, tmp_path / f"qlora{micro}")
        memory = " ".join(dict(verdict_lines(result.recommendation, result.session.answers))["Memory"].split())
        assert ("at this long context even 39% more" in memory) is not passes, memory
        said = (
            "the wizard does not decide on that with a loss in chunks (glossary close call), but watch the first steps"
        )
        assert (said in memory) is passes, memory


def test_every_run_that_trains_on_a_gpu_or_a_mac_has_a_step_line(tmp_path: Path) -> None:
    """The panel's Step line: the band where the card has one, and on Apple silicon a line saying none is
    estimated and how to measure it; so that a missing line never reads as an omission."""
    from wizard.engine.device import MAC_DEVICE
    from wizard.ui.console import chosen_estimate, verdict_lines

    macs = 0
    for answers, result in decided_paths(tmp_path):
        rec = result.recommendation
        est = chosen_estimate(rec)
        if est is None:
            continue
        lines = dict(verdict_lines(rec, result.session.answers))
        if est.device == MAC_DEVICE:
            macs += 1
            assert lines.get("Step", "").startswith("not estimated on Apple silicon"), (answers, lines)
        elif str(rec.settings.get("strategy")) in rec.facts.speeds and not est.past_device:
            assert "per optimizer step" in lines.get("Step", ""), (answers, lines)
        else:
            assert "Step" not in lines, (answers, lines)
    assert macs, "no Mac run"


def test_a_shortfall_within_five_percent_of_the_usable_line_is_said_to_be_worth_a_try(tmp_path: Path) -> None:
    """Where an offload is chosen for a run only a little past the usable line, the Why says that without offload
    it may well fit and how to try; it says so only where the shortfall it quotes is under 5% of the usable memory,
    and never where the figure quoted is far past the line."""
    said = quiet = 0
    for answers, result in decided_paths(tmp_path):
        because = " ".join(result.recommendation.because.split())
        match = re.search(
            r"needs about ([\d.]+) GiB(?: on one GPU| per GPU with [^,.(]+(?: \([^)]*\))?)?"
            r"(?:, ([\d.]+) GiB more than|, more than) the ([\d.]+) GiB usable",
            because,
        )
        near = "That is less than 5% past the usable line" in because
        if match is None:
            assert not near, (answers, because)
            continue
        total, usable = float(match.group(1)), float(match.group(3))
        over = float(match.group(2)) if match.group(2) else total - usable
        if near:
            said += 1
            assert over <= 0.05 * usable + 0.1, (answers, because)
        elif over > 0.06 * usable:
            quiet += 1
    assert said and quiet, (said, quiet)


def test_the_near_limit_note_of_a_zero_1_or_2_plan_counts_overlap_comms_buffers(tmp_path: Path) -> None:
    """ZeRO-1/2 with overlap_comm keeps buffers the estimate does not count: where the plan is near the usable line,
    the note adds them by Transformers' guide and judges "most likely works" on the sum, on every decided path."""
    from wizard.engine.advice import ZERO_SHARED_GRADIENTS, overlap_buffer_bytes

    counted = 0
    for answers, result in decided_paths(tmp_path):
        rec = result.recommendation
        strategy = str(rec.settings.get("strategy"))
        note = next((w for w in result.warnings if w.startswith("it fits, close to the usable memory")), None)
        if note is None:
            continue
        flat = " ".join(note.split())
        buffers = overlap_buffer_bytes(strategy, rec.facts, brought=bool(answers.get("deepspeed_config")))
        assert ("With overlap_comm's communication buffers" in flat) is bool(buffers), (answers, flat)
        assert not buffers or strategy in ZERO_SHARED_GRADIENTS
        if buffers:
            counted += 1
            share = int(re.search(r"GiB, (\d+)% of the usable\.", flat).group(1))  # type: ignore[union-attr]
            if share != 90:  # rounded to a whole percent, 90 may be either side of the line
                assert ("most likely works" in flat) is (share < 90), flat
    assert counted, "no ZeRO-1/2 plan near the line"


def test_on_one_gpu_the_short_table_leaves_out_only_sharded_rows_that_cannot_help(tmp_path: Path) -> None:
    """One GPU: ZeRO-1/2/3 and FSDP2 without offload are left out of the short table, and said to be, only where
    each needs at least the one-GPU figure and none is the chosen layout; every other row is kept, and --explain
    keeps all."""
    from wizard.ui.console import one_gpu_rows

    left = seen_several = 0
    for answers, result in decided_paths(tmp_path):
        rec = result.recommendation
        estimates = rec.facts.estimates
        if not estimates or len(estimates) < 2 or "ddp" not in estimates:
            continue
        shown = one_gpu_rows(rec)
        several = shown is None and (rec.facts.workload is None or rec.facts.workload.world_size != 1)
        seen_several += several
        if several and seen_several % 5:
            continue  # several GPUs keep every row by construction: one in five is printed to show it
        text = _printed(result)  # printed once: each path's summary is read for its rows and its notes
        _, rows = _table(text)
        printed = " ".join(text.split())
        plain = [k for k in ("zero1", "zero2", "zero3", "fsdp2") if k in estimates]
        if shown is None:
            assert "on one GPU they shard nothing and need what the 1 GPU row needs" not in printed, answers
            assert len(rows) == len(estimates), (answers, list(rows))
            continue
        left += 1
        assert rec.facts.workload is not None and rec.facts.workload.world_size == 1, answers
        assert str(rec.settings.get("strategy")) not in plain, answers
        assert all(estimates[k].total >= estimates["ddp"].total for k in plain), answers
        kept = {e.label for k, e in estimates.items() if k not in plain}
        assert {label.replace("->NVMe", "->CPU") for label in rows} == kept, (answers, list(rows))
        assert "on one GPU they shard nothing and need what the 1 GPU row needs" in printed, answers
        _, whole = _table(_printed(result, detail=True))
        assert len(whole) == len(estimates), answers
    assert left, "no one-GPU run"


def test_the_wizards_own_deepspeed_offload_is_the_first_with_room_to_spare(tmp_path: Path) -> None:
    """Where the wizard offloads with DeepSpeed on its own (no brought JSON), it takes the lightest offload whose
    peak stays within the room it keeps (70% of the usable memory), not a lighter one near the usable line; where
    none has that room, the lightest that fits and is no close call, as before."""
    from wizard.engine.facts import DEEPSPEED_CPU_OFFLOADS, TIGHT_SHARE

    checked = 0
    for answers, result in decided_paths(tmp_path):
        rec = result.recommendation
        strategy = str(rec.settings.get("strategy"))
        if answers.get("deepspeed_config") or strategy not in DEEPSPEED_CPU_OFFLOADS or answers.get("offload"):
            continue
        estimates = rec.facts.estimates
        runs = [
            k
            for k in DEEPSPEED_CPU_OFFLOADS
            if k in estimates
            and estimates[k].fits
            and estimates[k].host_fits is not False
            and not estimates[k].close_call
        ]
        roomy = [k for k in runs if estimates[k].peak <= TIGHT_SHARE * estimates[k].budget]
        assert rec.facts.get("deepspeed_offload_room") == (roomy or runs)[0], (answers, runs, roomy)
        checked += 1
    assert checked, "no DeepSpeed offload decided"


def test_the_short_tables_notes_name_only_rows_it_shows(tmp_path: Path) -> None:
    """A note beside the short table that lists rows by name (the rows that count AdamW beside an 8-bit optimizer)
    names only rows the table shows: on one GPU the sharded rows it leaves out are not listed there, and --explain,
    which shows every row, lists them all."""
    from helpers import decide

    run = {
        "target": "accelerate", "hardware": "nvidia", "gpu_model": "RTX 4090", "gpus_per_node": 1,
        "model": "llama-3.1-8b", "method": "qlora", "sequence_length": 4096, "optimizer": "paged_adamw_8bit",
    }  # fmt: skip
    result = decide(run, tmp_path / "out")
    for detail in (False, True):
        text = _printed(result, detail=detail)
        printed = " ".join(text.split())
        match = re.search(r"runs only where each GPU keeps a full copy; the (.+?) rows count AdamW", printed)
        assert match is not None, printed
        _, rows = _table(text)
        named = set(match.group(1).split(", "))
        assert named <= set(rows), (detail, named, list(rows))
        if detail:
            assert {"ZeRO-1", "FSDP2"} <= named, named
        else:
            assert not {"ZeRO-1", "FSDP2"} & named, named


def test_the_memory_line_says_little_to_spare_exactly_where_the_near_limit_note_does(tmp_path: Path) -> None:
    """Near the usable line, the panel's Memory line gives the same share as the note under "Before the first launch"
    (with a ZeRO-1/2 plan's overlap_comm buffers where the note counts them) and says little to spare exactly where
    that note does, on every decided path."""
    from wizard.ui.console import verdict_lines

    said = 0
    for answers, result in decided_paths(tmp_path):
        lines = dict(verdict_lines(result.recommendation, result.session.answers))
        memory = " ".join(lines.get("Memory", "").split())
        note = next((w for w in result.warnings if w.startswith("it fits, close to the usable memory")), "")
        note = " ".join(note.split())
        little = "but with little to spare" in note
        match = re.search(
            r"\((\d+)% of it(?: with overlap_comm's buffers)?: (little to spare|past the usable line)", memory
        )
        assert (match is not None) is little, (answers, memory, note)
        if match:
            said += 1
            assert f"{match.group(1)}% of the" in note, (answers, memory, note)
            # Past 100% (a brought JSON's buffers) it says so instead of "little to spare".
            assert (match.group(2) == "past the usable line") is (int(match.group(1)) > 100), (answers, memory)
    assert said, "no run near the usable line"


def test_the_levers_are_set_side_by_side_with_the_figures_each_would_have(tmp_path: Path) -> None:
    """The short summary's "To get a different answer" is a table: one row per lever, starting with the change,
    then the layout it leads to, its GiB per GPU, its host RAM (where any row offloads), its tokens/s (where
    any is timed) and whether it fits with room (yes, tight or close), all as the lever's own figures. Above the
    levers, wherever a layout was chosen, a first row gives it as planned with its own figures (now's tokens/s,
    and "no" where a brought JSON does not fit); a refusal has none, and its title gives the tokens/s of now.
    At 80 columns nothing is cut. Over every decided path and refusal with levers."""
    from wizard.engine.evaluate import chosen_estimate
    from wizard.engine.memory import to_gib
    from wizard.ui.console import PLANNED, levers_table, planned_row

    seen = planned_seen = 0
    for answers, result in decided_paths(tmp_path, refusals=True):
        levers = result.levers
        if not levers:
            continue
        text = _printed(result)
        lines = text.splitlines()
        est = None if result.recommendation.refused else chosen_estimate(result.recommendation)
        hosts = any(item.host_gib_per_machine is not None for item in levers) or bool(est and est.host_per_node)
        rates = any(item.step_band for item in levers)
        now = next((item.now_band for item in levers if item.now_band), None)
        first = next((line for line in lines if line.startswith(PLANNED + " ")), None)
        assert (first is not None) is (est is not None), answers
        if est is not None and first is not None:
            mark = "no" if not est.fits else "risk" if est.close_call else "tight" if est.tight else "yes"
            expected = [
                *est.label.split(),
                f"{to_gib(est.total)}",
                *([f"{to_gib(est.host_per_node)}" if est.host_per_node else "-"] if hosts else []),
                *([now or "-"] if rates else []),
                mark,
            ]
            assert first[len(PLANNED) :].split() == expected, (answers, first, expected)
            planned_seen += 1
        for item in levers:
            row = next((line for line in lines if line.startswith(item.short_change + " ")), None)
            assert row is not None, (answers, item.short_change)
            expected = [
                *(item.layout or item.title).split(),
                "-" if item.gib_per_gpu is None else f"{item.gib_per_gpu}",
                *([f"{item.host_gib_per_machine}" if item.host_gib_per_machine is not None else "-"] if hosts else []),
                *([item.step_band or "-"] if rates else []),
                "risk" if item.close_call else "tight" if item.tight_peak is not None else "yes",
            ]
            assert row[len(item.short_change) :].split() == expected, (answers, row, expected)
        assert (f"tokens/s (now {now})" in " ".join(text.split())) is bool(rates and now and est is None), answers
        narrow = io.StringIO()
        Console(file=narrow, width=80).print(levers_table(levers, planned=planned_row(result)))
        assert "…" not in narrow.getvalue(), narrow.getvalue()
        seen += 1
    assert seen > 50 and planned_seen > 50, (seen, planned_seen)


def test_the_short_why_is_the_reason_less_the_clauses_said_beside_it(tmp_path: Path) -> None:
    """The summary's Why reads the decision's reason without the clauses the tree marks as the long form's: each
    word in order from the whole reason, no marker left in either, the same paragraphs; the close call's "may run
    out of memory" sentence is left out only where the Risk line says it; the files and explain keep the whole."""
    from wizard.engine.evaluate import DETAIL_CLOSE, DETAIL_OPEN
    from wizard.ui.console import close_call_risk

    shortened = 0
    for answers, result in decided_paths(tmp_path, refusals=True):
        rec = result.recommendation
        whole, short = rec.because, rec.because_brief
        assert all(DETAIL_OPEN not in text and DETAIL_CLOSE not in text for text in (whole, short)), answers
        assert all(DETAIL_OPEN not in (entry.because or "") for entry in rec.trace), answers
        if not short:
            continue
        shortened += 1
        assert short.count("\n") == whole.count("\n"), answers
        for part, cut in zip(whole.split("\n"), short.split("\n"), strict=True):
            words = iter(_bare(part))
            assert all(any(word == w for w in words) for word in _bare(cut)), (answers, part, cut)
        if "As configured, it may run out of memory at its loss peak, the moment" in whole:
            # The verdict stays in the short Why; its figures are the Risk line's.
            assert "As configured, it may run out of memory at its loss peak." in short, answers
            assert "the real peak may pass the GPU's" not in short, answers
            assert close_call_risk(result) is not None, answers
        printed = " ".join(_printed(result).replace("│", " ").split())
        assert " ".join(short.split("\n")[0].split()[:12]) in printed, answers
    assert shortened >= 10, shortened


def test_the_summarys_speed_line_gives_one_lever_where_the_long_form_gives_each(tmp_path: Path) -> None:
    """Where Adam's update on the CPU bounds the step, the summary's Speed line names one lever (the first of the
    long form's) and the long form's note names them all, accumulation among them."""
    from wizard.engine.speed import bottleneck_note, largest_micro_batch
    from wizard.ui.speed_view import _accumulation_key, _given_batch, speed_lever

    levers = ("A larger micro-batch", "Accumulating gradients", "For the same global batch")
    seen = 0
    for answers, result in decided_paths(tmp_path):
        rec = result.recommendation
        strategy = str(rec.settings.get("strategy"))
        step = rec.facts.speeds.get(strategy)
        work, links = rec.facts.workload, rec.facts.links
        if step is None or work is None or links is None or "cpu_optimizer" not in (step.bound_at(0), step.bound_at(1)):
            continue
        brief = speed_lever(rec) or ""
        roomier = largest_micro_batch(work, rec.facts.estimates[strategy])
        whole = bottleneck_note(work, step, links, _accumulation_key(rec), roomier, keep_global=_given_batch(rec))
        assert whole is not None and "Accumulating gradients" in whole, answers
        named = [lever for lever in levers if lever in brief]
        assert len(named) == 1, (answers, brief)
        first = min((whole.index(lever), lever) for lever in levers if lever in whole)[1]
        assert named == [first], (answers, brief, whole)
        seen += 1
    assert seen > 10, seen


def test_a_close_calls_next_step_puts_its_fix_before_the_launch(tmp_path: Path) -> None:
    """A close call's Next line says to take the fix first (the loss in chunks where a lever has it), before the
    launch command; a run that is no close call gets no such clause."""
    from wizard.ui.console import chosen_estimate

    close = 0
    for answers, result in decided_paths(tmp_path):
        est = chosen_estimate(result.recommendation)
        if est is None or answers.get("deepspeed_config") or not result.files:
            continue
        printed = " ".join(_printed(result).split())
        # In a sentence before the launch, or as the first of the numbered steps.
        # "would likely" exactly where the calibration's kinder end passes the card too, as the Risk line says.
        may = est.may if est.close_call else "may"
        said = (
            f"or the run {may} run out of memory at the backward pass of its first full-length batch; then" in printed
            or f"as configured, the run {may} run out of memory at the backward pass of its first full-length batch."
            in printed
        )
        assert said is est.close_call, answers
        if said:
            close += 1
            chunked = any(
                x.change.startswith(("the loss computed in chunks", "Cut Cross Entropy")) for x in result.levers
            )
            first = "Next: first switch to " in printed or "Next, in this order: 1. Switch to " in printed
            assert first is chunked, (answers, printed[-800:])
    assert close, "no close call in the walk"


def test_the_short_table_says_both_margins_where_a_layout_was_chosen(tmp_path: Path) -> None:
    """The short table's title gives the usable line (the first margin) and its caption the room a micro-batch the
    wizard picks keeps inside it (the second), with the same share the pick uses, where the run's micro-batch is
    above 1; a refusal's table has no pick, and a micro-batch of 1 left nothing to pick."""
    from wizard.engine.facts import TIGHT_SHARE

    second = f"the wizard takes a micro-batch above 1 only where its peak stays within {TIGHT_SHARE:.0%} of the usable"
    seen = {True: 0, False: 0}
    for answers, result in decided_paths(tmp_path, refusals=True)[::9]:
        rec = result.recommendation
        if not rec.facts.estimates:
            continue
        printed = " ".join(_printed(result).split())
        micro = rec.facts.workload.micro_batch_size if rec.facts.workload is not None else 1
        # The wizard's pick only: a micro-batch the user set is not said to follow the wizard's rule.
        picked = "micro_batch_size" not in result.session.given or "micro_batch_size" in result.session.auto
        chosen = not rec.refused and bool(rec.settings.get("strategy")) and micro > 1 and picked
        assert "within the usable" in printed or "fits = the total at most" in printed, answers
        assert (second in printed.lower()) is chosen, answers
        seen[chosen] += 1
    # The walk answers micro_batch_size 1; a Mac run given a global batch leaves the micro-batch to the wizard.
    from helpers import decide

    mac = {"target": "accelerate", "hardware": "mps", "gpu_memory_gb": 64, "model": "llama-3.2-3b", "method": "lora"}
    for extra in ({"global_batch_size": 16}, {"micro_batch_size": 1}, {"micro_batch_size": 4}):
        result = decide({**mac, **extra}, tmp_path / str(len(seen)) / "_".join(f"{k}{v}" for k, v in extra.items()))
        micro = result.recommendation.facts.workload.micro_batch_size
        printed = " ".join(_printed(result).split())
        # micro_batch_size 4, set by the user: no rule of the wizard's is said beside it.
        assert (second in printed.lower()) is (micro > 1 and "micro_batch_size" not in extra), (extra, micro)
        seen[micro > 1 and "micro_batch_size" not in extra] += 1
    assert seen[True] and seen[False], seen


def test_a_tight_mac_run_says_its_moment_in_the_why(tmp_path: Path) -> None:
    """On a Mac, "fits" in the Why is said with the moment past the usable line where the table says tight, so the
    Why and the Memory line never disagree; a Mac run that is not tight says no such moment."""
    from helpers import decide

    seen = {True: 0, False: 0}
    base = {"target": "accelerate", "hardware": "mps", "gpu_memory_gb": 64, "model": "llama-3.2-3b", "method": "lora"}
    for dtype in ("fp32", "bf16"):
        for micro in (1, 2, 4, 8):
            result = decide({**base, "base_dtype": dtype, "micro_batch_size": micro}, tmp_path / f"{dtype}{micro}")
            rec = result.recommendation
            est = rec.facts.estimates.get("ddp")
            if rec.refused or est is None or not est.fits:
                continue
            moment = "past the usable line but within the Mac's 64 GiB (tight)" in " ".join(rec.because.split())
            assert moment is est.tight, (dtype, micro, rec.because[:300])
            seen[est.tight] += 1
    assert seen[True] and seen[False], seen
