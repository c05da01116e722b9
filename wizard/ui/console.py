"""Everything printed for people, with rich: the summary, dry-run contents and errors."""

from __future__ import annotations

import re
import shlex
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from rich.cells import cell_len
from rich.console import Console, Group, RenderableType
from rich.markup import escape
from rich.padding import Padding
from rich.panel import Panel
from rich.syntax import Syntax
from rich.table import Table
from rich.text import Text

from wizard.app import Result
from wizard.engine.advice import (
    GATED_PREFIXES,
    LOSS_PEAK_CLOSE,
    MAC_PROCESS_GIB,
    OPTIMIZER_TITLES,
    brought_buffers,
    chunked_loss,
    chunked_loss_name,
    chunked_loss_run,
    layer_offload_host_short,
    loss_peak,
    loss_peak_brief,
    loss_peak_line,
    model_assumption,
    overlap_buffer_bytes,
)
from wizard.engine.batch import GLOBAL_BATCH, batch_line, batch_product, batch_where
from wizard.engine.catalog import lookup_gpu
from wizard.engine.device import GPU_DEVICE, GPU_WORDS, MAC_DEVICE, DeviceWords, words_for
from wizard.engine.evaluate import (
    JSON_FIRST,
    Recommendation,
    backend_title,
    chosen_estimate,
    layout_label,
    nvme_drive_bytes,
    offloaded_host_bytes,
    offloads_to_nvme,
    run_layout_label,
    runs_close_call,
    runs_past_fit,
    runs_past_host,
)
from wizard.engine.facts import (
    GPU_HARDWARE,
    TIGHT_SHARE,
    FactSet,
    mac_bf16_base,
    near_line_share,
    step_on_x8,
)
from wizard.engine.json_fit import (
    LEVERS,
    SUGGESTED_JSON,
    json_verdict,
    past_line_with_buffers,
    short_by_allowance,
    suggested_lever,
)
from wizard.engine.memory import (
    CONTEXT_OVERHEAD,
    ESTIMATE_SHARE_WORDS,
    FIT_MARGIN,
    GIB,
    HOST_CLOSE_SHARE,
    LONG_CONTEXT_TOKENS,
    STRATEGY_TITLES,
    UNDERSHOOT,
    UNDERSHOOT_PERCENT,
    Estimate,
    figure_parts,
    layout_logits_bytes,
    memory_gib,
    optimizer_of,
    run_optimizer,
    spare_gib,
    sum_gib,
    to_gib,
)
from wizard.engine.note import brief_of
from wizard.engine.sentences import leading_sentences, more_sentences, sentences
from wizard.engine.speed import band_text, bound_sentence, rate_text, seconds_text
from wizard.engine.tree import Tree
from wizard.engine.what_if import CHUNKED_CHANGES, MICRO_AT, OFFLOAD_CPU, WhatIf
from wizard.errors import InterruptedByUser, SavedAnswers, WizardError
from wizard.installed import mac_plan_elsewhere
from wizard.render.addons import SNIPPET, snippet_model
from wizard.render.writer import CONFLICT, CREATE, OVERWRITE, REMOVE, UNCHANGED
from wizard.ui.brief_why import brief_why
from wizard.ui.estimate_view import (
    BRIEF_MEANINGS,
    ROUNDED,
    FigureRow,
    FigureTable,
    fit_legend,
    host_notes,
    label_legend,
    parts_differ,
    table_caption,
)
from wizard.ui.in_short import in_short
from wizard.ui.memory_chart import chart_for_estimates, fits_mark
from wizard.ui.speed_view import no_band_line, shown_in_step_table, speed_lever, speed_table
from wizard.ui.text_wrap import Wrapped, join_units, legend_item, wrapped_markup

# The micro-batch the wizard picks leaves room: its loss peak within this share of the usable memory,
# a stricter test than the fits column's (the Speed lines may name a larger one that merely fits).
# Why 70%: the usable line's margin is for fragmentation and buffers; this one is for the estimate's own error
# (measured peaks at 2,048 and 4,096 tokens came to up to 1.13x of it, and 70% x 1.13 stays within the line).
ROOM = (
    f"with its peak within {TIGHT_SHARE:.0%} of the usable memory, a second margin inside the usable line for the"
    " estimate's own error: {measured}; {beyond}"
)


def _room(result: Result) -> str:
    """ROOM with what its measurement covers, in one level of brackets at most (it is said inside one).

    GPU peaks at 2,048 to 4,096 tokens; none on a Mac; a long context, where the estimate runs further low.
    """
    est = chosen_estimate(result.recommendation)
    beyond = "the usable line's own margin is for fragmentation and buffers"
    if result.session.answers.get("hardware") == "mps":
        measured = "peaks measured on an NVIDIA card came to up to 1.13x of it, and none was measured on a Mac"
        # Above a Mac's working set is macOS's and the other programs' memory, not a margin for the allocator.
        beyond = "beyond the Mac's working set, the memory is macOS's and your programs'"
    elif est is not None and est.long_context:
        measured = (
            "peaks measured at 2,048 to 4,096 tokens came to up to 1.13x of it, and at this long context published"
            f" limits (Unsloth's) put it up to {UNDERSHOOT}x, which {TIGHT_SHARE:.0%} also keeps within the usable line"
        )
    else:
        measured = "peaks measured at 2,048 to 4,096 tokens came to up to 1.13x of it"
    return ROOM.format(measured=measured, beyond=beyond)


HOST_NOT_CHECKED = "on offload rows, fits is for GPU memory only; host RAM not checked: cpu_memory_gb not given"
BRIEF_HOST_NOT_CHECKED = "host RAM not checked: cpu_memory_gb not given"
_ACTION_STYLE = {CREATE: "green", OVERWRITE: "yellow", UNCHANGED: "dim", CONFLICT: "red", REMOVE: "yellow"}


def print_error(console: Console, error: WizardError, saved: SavedAnswers | None = None) -> None:
    """One line naming the problem, with the hint at its end when there is one.

    Ctrl-C is the user's choice, not an error: it reads "stopped". When the answers typed so far
    were saved, two more lines say where and give the command to go on, alone on its line so it
    can be copied whole.
    """
    # Text, not markup: the message quotes what the user typed, and rich reads a backslash before
    # "[" as an escape even where markup.escape leaves it alone ("\\[" would print as "[").
    label = ("stopped:", "bold yellow") if isinstance(error, InterruptedByUser) else ("error:", "bold red")
    said = saved.hint(error) if saved is not None else error.hint
    hint = (f" (hint: {said})", "dim") if said else ""
    # One line for logs and pipes; in a terminal, wrapped between words rather than cut mid-word at its edge.
    console.print(Text.assemble(label, " ", error.message, hint), soft_wrap=not _real_terminal(console))
    if saved is not None and saved.resume is not None:
        path, command = saved.resume
        console.print(Text(f"answers so far saved to {path}; go on with:"), soft_wrap=True)
        for line in command_lines(command, console.width - 2):
            console.print(Text(f"  {line}"), soft_wrap=True, highlight=False)


def _real_terminal(console: Console) -> bool:
    """Whether the console writes to a terminal itself (FORCE_COLOR colours a pipe, which still wants one line)."""
    isatty = getattr(console.file, "isatty", None)
    try:
        return bool(isatty and isatty())
    except (OSError, ValueError):
        return False


def command_lines(command: str, width: int) -> list[str]:
    """A shell command in lines of at most `width`, broken before an option with a backslash.

    The terminal would wrap a long command inside a word ("--o" / "utput-dir"); continuation
    lines keep every option whole, and the lines still paste into a shell as one command.
    """
    words = shlex.split(command)
    groups: list[str] = []
    for word in words:
        if groups and not word.startswith("--") and groups[-1].startswith("--") and " " not in groups[-1]:
            groups[-1] += " " + shlex.quote(word)  # an option and its value stay together
        else:
            groups.append(shlex.quote(word))
    lines = [groups[0]]
    for group in groups[1:]:
        if len(lines[-1]) + 1 + len(group) + 2 <= width:
            lines[-1] += " " + group
        else:
            lines[-1] += " \\"
            lines.append("  " + group)
    return lines


def print_result(console: Console, tree: Tree, result: Result, *, dry_run: bool, detail: bool = False) -> None:
    """The summary: decision, reasons, settings, memory table, runner-ups, files, next step.

    Without `detail` it stays short enough to read at once: the memory table with a short legend,
    each losing backend's main reason, and the step band of the chosen layout (in the panel). With
    `detail` (--explain) it adds what `backend-wizard explain` shows: the table's full legend and
    bar chart, what the chosen figure is made of, the step-time table and every runner-up's details.
    """
    rec = result.recommendation
    print_in_short(console, tree, result)
    if rec.refused:
        console.print(Panel(wrapped_markup(escape(rec.because)), title="[bold red]No backend fits", border_style="red"))
    else:
        backend = tree.backends[str(rec.backend)]
        body = Group(
            *(
                [verdict, Text("")]
                if (
                    verdict := verdict_grid(
                        rec,
                        [
                            row
                            for row in (close_call_risk(result), without_asked_offload(result), without_json(result))
                            if row is not None
                        ],
                        result.session.answers,
                        brief=not detail,
                    )
                )
                is not None
                else []
            ),
            # No distributed backend (Accelerate's 'NO'): its summary ("one process on one device") only repeats
            # the Runs line above; --explain and explain keep it.
            *(
                [Text(backend.summary_for(rec.settings.get("strategy")), style="italic"), Text("")]
                if detail or rec.traits.accelerate_type != "NO"
                else []
            ),
            *why_paragraphs(rec.because if detail else rec.because_brief or rec.because, result, detail=detail),
            # The Memory line above already gives the brief peak and what it leaves; the margin's
            # arithmetic is for the long form.
            *([peak] if detail and (peak := peak_paragraph(result.session.answers, rec)) is not None else []),
            # No guideline line: it restated the Why in general words. `backend-wizard explain` and
            # the written files' headers give it, with its sources.
        )
        title = backend_title(tree, rec)
        # A brought JSON runs as written even where the estimate says it does not fit: said in the title,
        # not only in the Why below it.
        short = runs_past_fit(rec) or runs_past_host(rec)
        # A close call too: the verdict the Risk line gives, said where the eye lands first.
        close = not short and runs_close_call(rec)
        title += (
            _fitting_title(title, console.width, SHORT_TITLES)
            if runs_past_fit(rec)
            else _fitting_title(title, console.width, HOST_SHORT_TITLES)
            if short
            else _fitting_title(title, console.width, LIKELY_TITLES if close_likely(rec) else CLOSE_CALL_TITLES)
            if close
            else ""
        )
        colour = "yellow" if short or close else "green"
        console.print(Panel(body, title=f"[bold {colour}]{escape(title)}", border_style=colour))
        if (margins := margins_line(result)) is not None:
            console.print(wrapped_markup(f"[dim]{escape(margins)}[/]"))
        table = _settings_table(rec.settings, rec.facts, result.session.answers, result.session.given)
        for label, value in [*written_training_settings(result), *checkpointing_setting(result), *kbit_setting(result)]:
            table.add_row(label, escape(value))
        console.print(table)
    assumed = _assumed(tree, result, brief=not detail)
    if assumed:
        console.print(wrapped_markup(f"[dim]{escape(assumed)}[/]"))
    strategy = rec.settings.get("strategy")
    if rec.facts.estimates and (
        shape := model_assumption(result.session.answers, rec.facts, strategy, brief=not detail)
    ):
        console.print(wrapped_markup(f"[dim]{escape(shape)}[/]"))
    if rec.facts.estimates:
        # A micro-batch the user set is not the wizard's pick: the rule for its picks is not said beside it.
        given_micro = "micro_batch_size" in result.session.given and "micro_batch_size" not in result.session.auto
        console.print(decision_memory_table(rec, brief=not detail, micro_given=given_micro))
        if detail and (parts := made_of(rec, result.session.answers)) is not None:
            console.print(wrapped_markup(f"[dim]{escape(parts)}[/]"))
    if detail and (speeds := speed_table(rec)) is not None:
        console.print(speeds)
    elif detail and (no_band := no_band_line(rec)) is not None:
        console.print(wrapped_markup(f"[dim]{escape(no_band)}[/]"))
    if not detail and (lever := speed_lever(rec)) is not None:
        # The table is --explain's; what would shorten this step is worth saying here.
        console.print(wrapped_markup(f"[bold]Speed:[/] {escape(lever)}"))
    if rec.runner_ups:
        console.print(_runner_up_table(rec, brief=not detail))
    elif not rec.refused:
        # Said rather than left out, so that a missing section does not read as a missing answer.
        console.print(Text.assemble(("Why not the others: ", "italic"), no_other_backend(rec)))
    if result.levers:
        # A close call kept without offload is shown its ways out, most of them the same answer with room.
        heading = "To give it room at its peak" if result.levers_give_room else LEVERS_HEADING
        console.print(
            levers_list(result.levers, heading)
            if detail
            else levers_table(result.levers, heading, planned=planned_row(result))
        )
    if result.warnings:
        warnings = result.warnings if detail else _brief_warnings(result)
        console.print(
            warnings_list(
                warnings,
                result.files[0].name if result.files else None,
                mac_elsewhere=mac_plan_elsewhere(result.session.answers),
            )
        )
    if result.files:
        _print_files(console, result, dry_run, detail=detail)


def print_in_short(console: Console, tree: Tree, result: Result) -> None:
    """The decision in a few plain sentences (`in_short`), where there are any.

    What a newcomer could repeat to a colleague, before the panel (or the trace) that gives each figure its
    conditions.
    """
    if said := in_short(tree, result):
        console.print(wrapped_markup(f"[bold]In short:[/] {escape(' '.join(said))}"))


def _brief_warnings(result: Result) -> list[str]:
    """The warnings for the short summary: each note's short form, a close call's loss-peak note as what to do.

    Its figures are the Risk line's; --explain and the files keep every note whole.
    """
    rec = result.recommendation
    if rec.refused:
        return list(result.warnings)
    brief = loss_peak_brief(result.session.answers, rec.facts, rec.settings, rec.traits)
    return [brief if brief is not None and w.startswith(LOSS_PEAK_CLOSE) else brief_of(w) for w in result.warnings]


def _fitting_title(title: str, width: int, forms: Sequence[str]) -> str:
    """What a panel title adds for its verdict, the longest of `forms` the top border holds whole at this width."""
    room = width - 6  # the border's corners, its first dash and the spaces around the title
    return next((said for said in forms if len(title) + len(said) <= room), "")


# Longest first: a long layout name (FSDP2 + CP 8) at 80 columns keeps a short form, never a cut one.
CLOSE_CALL_TITLES = (" (may run out of memory: see Risk)", " (may run out of memory)", " (see Risk)")
LIKELY_TITLES = (" (likely to run out of memory: see Risk)", " (likely out of memory)", " (see Risk)")


def close_likely(rec: Recommendation) -> bool:
    """Whether the decided layout is a close call likely past the card (`Estimate.close_call_likely`)."""
    est = None if rec.refused else chosen_estimate(rec)
    return est is not None and est.close_call_likely


SHORT_TITLES = (" (does not fit by this estimate)", " (does not fit)")
HOST_SHORT_TITLES = (" (host RAM short by this estimate)", " (host RAM short)")


def why_paragraphs(because: str, result: Result, *, detail: bool) -> list[RenderableType]:
    """The "Why:" paragraph: in full with `detail`, else its first sentences and what they leave out.

    The long form is one flag away (--explain) and is written at the head of the config file, so the
    summary names the topics it leaves there rather than repeating every figure on screen.
    """
    if detail:
        return [wrapped_markup(f"[bold]Why:[/] {escape(because)}")]
    why = brief_why(because)
    lines: list[RenderableType] = [wrapped_markup(f"[bold]Why:[/] {escape(why.text)}")]
    if why.left_out:
        head = result.files[0].name if result.files else None
        where = "add --explain" + (f", or read the head of {head}" if head else "")
        lines.append(wrapped_markup(f"[dim]More on this ({escape(where)}): {escape(left_out_text(why.left_out))}.[/]"))
    return lines


def left_out_text(left_out: Sequence[str]) -> str:
    """What the short Why leaves out, said as what it is: its further sentences, then the paragraphs by label.

    A bare quoted label ("Checkpointing") did not say it names a paragraph of the long form.
    """
    labels = [item for item in left_out if item.startswith('"')]
    said = [item for item in left_out if not item.startswith('"')]
    if labels:
        said.append(("the paragraph " if len(labels) == 1 else "the paragraphs ") + ", ".join(labels))
    return "; ".join(said)


def verdict_lines(
    rec: Recommendation, answers: Mapping[str, Any] | None = None, *, brief: bool = False
) -> list[tuple[str, str]]:
    """The decision in three lines before its reasons: what runs, its memory, its step time.

    `brief` (the short summary) leaves out the secondary clauses --explain keeps: what the loss's
    moment is made of, a long context's margin, the optimizer step's share of the band and x8 lanes.

    Every figure is one the tables below print (the chosen row's total, the usable line, the
    loss peak, the host RAM, the step-time band), so the short answer and the long one agree;
    with a chunked loss among `answers` (an option chosen after the decision), the memory is the
    run's without the logits it never builds, and the line says what the table counts instead.
    """
    strategy = str(rec.settings.get("strategy"))
    est = rec.facts.estimates.get(strategy) if rec.facts.estimates else None
    if rec.refused or est is None:
        return []
    chunked_note = ""
    chunked = chunked_loss_run(answers, rec.facts, est) if answers is not None else None
    if answers is not None and chunked is not None and chunked[1] >= GIB // 4:
        est, logits = chunked
        chunked_note = (
            f" (with {chunked_loss_name(answers)}; the table below counts the ordinary loss, {to_gib(logits)} GiB of"
            " logits more)"
        )
    words = words_for(est.device)
    processes = int(rec.settings.get("num_processes") or 1)
    machines = int(rec.settings.get("num_machines") or 1)
    where = f"{processes} process{'es' if processes > 1 else ''}" + (f" on {machines} machines" if machines > 1 else "")
    memory = f"about {to_gib(est.total)} GiB of {to_gib(est.budget)} GiB usable {words.per}"
    peak = sum_gib(est.total, est.transient)
    if est.close_call:
        # The Risk line below gives the peak, its calibration and the fix: here the figures once, and a pointer.
        # One verdict, the Risk line's: the estimate's own figure against the card is the Risk line's to weigh.
        memory = (
            f"about {to_gib(est.total)} GiB of {to_gib(est.budget)} GiB usable {words.per} through the step;"
            f" {peak} GiB for a moment as the backward pass starts (the loss's fp32 temporaries). At this long"
            f" context that moment {est.may} pass {words.owner} {memory_gib(est.gpu_memory)} GiB"
            # Past the card at both ends of the calibration: not "close", and said as the Risk line says it.
            + (": see Risk" if est.close_call_likely else " (a close call): see Risk")
        )
    elif est.tight:
        # The peak first: it is the figure that decides whether the run stops out of memory.
        spare = spare_gib(est)
        # On a Mac that rest is shared: the Python process's own memory and macOS's come out of it.
        mac_left = "the Python process, macOS, your programs and " if est.device == MAC_DEVICE else ""
        memory = (
            f"peaks at about {peak} GiB {words.per} for a moment as the backward pass starts (the loss's fp32"
            f" temporaries), past the {to_gib(est.budget)} GiB usable but within {words.owner}"
            f" {memory_gib(est.gpu_memory)} GiB ({spare} GiB left for {mac_left}what the estimate does not count);"
            f" about {to_gib(est.total)} GiB the rest of the step"
        )
        if est.device == MAC_DEVICE and spare - MAC_PROCESS_GIB < 3:
            # What macOS and the programs keep after the Python process: under 3 GiB, the Peak paragraph's advice.
            memory += "; close other programs while it trains"
    elif est.past_device:  # a brought DeepSpeed JSON past the GPU itself: it cannot run as written
        memory = (
            f"about {to_gib(est.total)} GiB {words.per}, more than {words.owner} {memory_gib(est.gpu_memory)} GiB"
            " itself: as written it cannot run"
        )
    elif est.total > est.budget:  # a brought DeepSpeed JSON run as written: past the usable memory, said so
        memory = f"about {to_gib(est.total)} GiB {words.per}, more than the {to_gib(est.budget)} GiB usable" + (
            f"; {peak} GiB for a moment as the backward pass starts (the loss's fp32 temporaries)"
            if est.transient >= est.budget // 20
            else ""
        )
    elif est.transient >= est.budget // 20 and est.peak <= est.budget:  # a moment worth naming, within the line
        memory += f"; {peak} GiB for a moment as the backward pass starts" + (
            # No brackets in the short form: the share that may follow is said in brackets of its own.
            ", for the loss's fp32 temporaries"
            if brief
            else " (the loss's fp32 temporaries), still within the usable memory"
        )
    # A ZeRO-1/2 JSON's overlap_comm buffers, which the near-limit note and the Your JSON line count too.
    json_buffers = overlap_buffer_bytes(strategy, rec.facts, brought=bool(answers and answers.get("deepspeed_config")))
    if est.fits and not est.tight and not est.close_call and est.host_fits is not False:
        # Near the line the note under "Before the first launch" says so at length: the share said here too,
        # where the eye lands first, with the same figure (the moment where it is worth naming, else the total,
        # and those buffers).
        buffers = json_buffers if not chunked_note else 0
        if (share := near_line_share(est, buffers)) is not None:
            with_buffers = " with overlap_comm's buffers" if buffers else ""
            # Past the line with the buffers, "little to spare" would understate it.
            share_words = "past the usable line" if share > 1 else "little to spare"
            memory += f" ({share:.0%} of it{with_buffers}: {share_words}, see 'Before the first launch')"
    chunked_run = est.transient == 0 and answers is not None and chunked_loss(answers)
    if (
        est.fits
        and est.device == GPU_DEVICE
        and est.long_context
        and not est.close_call
        and (est.transient > 0 or chunked_run)
    ):
        # A long context that the close-call test passes (or a loss in chunks, which it is not applied to): the
        # same 39% said beside the figure, in the short form too, so that every layout at that length carries it.
        more = est.real_peak_gib[1]
        if more <= float(memory_gib(est.gpu_memory)):
            memory += (
                f"; at this long context even {UNDERSHOOT_PERCENT} more, about {more} GiB, stays within {words.owner}"
                f" {memory_gib(est.gpu_memory)} GiB"
            )
        else:
            # Only a loss in chunks gets here: with the ordinary loss this is a close call. The calibration had the
            # ordinary loss and cannot say where its shortfall lies, so it is said, not decided on.
            memory += (
                f"; at this long context {UNDERSHOOT_PERCENT} more, about {more} GiB, would pass {words.owner}"
                f" {memory_gib(est.gpu_memory)} GiB: the wizard does not decide on that with a loss in chunks (glossary"
                " close call), but watch the first steps"
            )
    if est.device == MAC_DEVICE:
        # The estimate's error was measured on GPUs only: said where a Mac user reads the figure.
        memory += "; an estimate the wizard has not checked against a peak measured on a Mac"
    if offloads_to_nvme(rec):
        memory += f"; about {to_gib(nvme_drive_bytes(rec))} GiB on the NVMe drive per machine"
    elif est.host_per_node:
        host_usable = int(FIT_MARGIN * est.host_memory) if est.host_memory else 0
        if est.host_fits is False and host_usable:
            # Short of host RAM by the estimate: said here as a GPU shortfall is, not only in a note.
            memory += (
                f"; about {to_gib(est.host_per_node)} GiB of host RAM per machine, more than the"
                f" {to_gib(host_usable)} GiB usable there"
            )
        elif host_usable:
            # Within it: how far, and a close fit said beside the figure (host RAM also holds the data
            # loader's workers and the page cache, which the estimate does not count).
            memory += f"; about {to_gib(est.host_per_node)} of {to_gib(host_usable)} GiB of host RAM usable per machine"
            if est.host_per_node > HOST_CLOSE_SHARE * host_usable:
                # Where the plan stops: the RAM below which the same offload no longer fits (the note's figure).
                memory += (
                    f" ({sum_gib(host_usable, -est.host_per_node)} GiB to spare: a close fit; it stops fitting"
                    f" below about {to_gib(int(est.host_per_node / FIT_MARGIN))} GiB of RAM)"
                )
        else:
            memory += f"; about {to_gib(est.host_per_node)} GiB of host RAM per machine"
    memory += chunked_note
    label = run_layout_label(rec, strategy)
    # A layout past the GPU itself (a brought JSON as written) does not run: said as what the JSON sets up.
    runs = "As written" if est.past_device else "Runs"
    lines = [(runs, f"{label}, {where}"), ("Memory", memory)]
    # No step time for a layout that cannot start (more than the GPU itself): a figure would read as a plan.
    if (step := rec.facts.speeds.get(strategy)) is not None and not est.past_device:
        # Tokens per second beside the seconds: a long step of a large batch is not a slow run.
        step_line = f"about {band_text(step)} per optimizer step ({rate_text(step)} tokens/s), {bound_sentence(step)}"
        if not est.fits:  # a brought JSON run as written past the usable memory: a step it may never take
            step_line += ", if it runs at all"
        if step.cpu_s[0] and brief:
            # In series with the rest, whatever bounds the band: said, so "bound by compute" is not read as all of it.
            step_line += f"; {seconds_text(step.cpu_s[0])}-{seconds_text(step.cpu_s[1])} s of it is Adam on the CPU"
        elif step.cpu_s[0]:
            # The cost an offload adds that nothing hides: the optimizer step on the CPU, after the backward pass.
            # The rate behind it (the wizard's own figure) is in the Speed paragraph of --explain and the files.
            # Said as a serial part of the band, so "bound by compute" does not read as all of it.
            step_line += (
                f"; about {seconds_text(step.cpu_s[0])}-{seconds_text(step.cpu_s[1])} s of it is the optimizer step"
                " on the CPU, which runs after the backward pass with nothing to hide behind"
            )
        # Narrowing the band of a step the run may never take (a JSON that does not fit) helps no one.
        links = rec.facts.links if est.fits else None
        if links is not None and links.each_link and "gpu_links" in (step.bound_at(0), step.bound_at(1)):
            # The card comes with either link, gpu_link was not given, and the GPU links bound an end
            # of the band: it spans both. (Where the network or the CPU bounds it, the link would not.)
            fast, slow = links.each_link
            step_line += (
                f" (gpu_link not given: the fast end assumes {fast}, the slow end {slow};"
                " --set gpu_link=nvlink or gpu_link=pcie narrows it)"
            )
        elif links is not None and links.network is None and "network" in (step.bound_at(0), step.bound_at(1)):
            # The network between the machines bounds an end, and its speed was not given: the line under the
            # settings says what each end assumes ("Not given: network_gbps"); here, where to narrow it.
            step_line += " (network_gbps not given: --set network_gbps=N narrows it)"
        # Only for several PCIe cards in a machine (desktops split the CPU's lanes between them); a lone
        # card and a server's SXM GPUs each get x16.
        several = int(rec.settings.get("num_processes") or 1) > int(rec.settings.get("num_machines") or 1)
        pcie_board = links is not None and links.gpu_link_words.startswith("PCIe") and several
        narrow = step_on_x8(rec.facts, strategy) if step.host_bytes and pcie_board and not brief else None
        if narrow is not None and band_text(narrow) != band_text(step):
            # The band assumes x16 lanes to host RAM; two-card desktops often split them x8/x8, and a
            # layout that moves state over PCIe every step is slower there: said where it differs.
            step_line += (
                f" (with x16 PCIe lanes per GPU; where each gets x8, as two-card desktops often run, about"
                f" {band_text(narrow)})"
            )
        lines.append(("Step", step_line))
    elif est.device == MAC_DEVICE:
        # Said where a GPU run gives its band, so that its absence does not read as an omission.
        lines.append(
            (
                "Step",
                "not estimated on Apple silicon: the throughput differs from chip to chip; time the first steps"
                " of your run (the Mac's measurement under Next, a 5-step run of train_snippet.py, gives them) and"
                " multiply by its optimizer steps (samples / global batch x epochs)",
            )
        )
    if answers is not None and answers.get("deepspeed_config") is not None and strategy in LEVERS:
        # The question a brought JSON comes with (keep it or change it), answered before the reasons.
        verdict = json_verdict(
            strategy,
            rec.facts.estimates,
            answers.get("cpu_memory_gb"),
            json_buffers,
        )
        lever = suggested_lever(strategy, rec.facts.estimates)
        if verdict is not None and lever is not None and (speed := rec.facts.speeds.get(lever)) is not None:
            # The layout to run, in the figures the Memory and Step lines give the JSON as written: the box's
            # other lines are about a layout that does not fit.
            # At this run's micro-batch: planned with the suggested JSON, the wizard may take a larger one where
            # that layout leaves room, and its figures grow with it; said, so the next summary's are no surprise.
            micro = rec.facts.workload.micro_batch_size if rec.facts.workload is not None else 1
            figures = (
                f"about {to_gib(rec.facts.estimates[lever].total)} GiB per GPU, about {band_text(speed)} per"
                f" optimizer step, at micro_batch_size {micro}; planned with this JSON, the wizard may take a larger"
                " micro-batch where the GPU has room, and these figures change with it"
            )
            fits = ", by this estimate"
            verdict = (
                f"{verdict.removesuffix(fits)} by this estimate: {figures}"
                if verdict.endswith(fits)
                else f"{verdict}. {SUGGESTED_JSON}'s layout: {figures}"
            )
        if verdict is not None:
            # The wizard's own suggested edit, brought back to check: not the user's JSON as they wrote it.
            lines.insert(0, ("This JSON" if rec.facts.get("ds_suggested") else "Your JSON", verdict))
    return lines


def chunked_lever(result: Result) -> WhatIf | None:
    """The lever that computes the loss in chunks, a close call's first fix, where the run has one."""
    return next((x for x in result.levers if x.change.startswith(CHUNKED_CHANGES)), None)


def margins_line(result: Result) -> str | None:
    """The margins the verdicts above and below rest on, each said once, in the order a reader meets them.

    The usable line (and what its margin is for), the loss's moment that may use that margin, the room the
    wizard's own picks keep inside the line, and a long context's allowance against the whole GPU: only those
    this run's figures use. None without an estimate (a refusal's levers say their own).
    """
    rec = result.recommendation
    est = chosen_estimate(rec) if not rec.refused else None
    if est is None:
        return None
    words = words_for(est.device)
    card = memory_gib(est.gpu_memory)
    if est.device == MAC_DEVICE:
        said = [
            f"How memory is judged: the wizard plans within the Mac's working set, {est.share:.0%} of its {card} GiB"
            f" ({to_gib(est.budget)} GiB), the share macOS lets Metal use; the rest is macOS's and your programs'."
        ]
    else:
        said = [
            f"How memory is judged: the wizard plans within the usable line, {est.share:.0%} of {words.owner} {card}"
            f" GiB ({to_gib(est.budget)} GiB); the rest is a margin for fragmentation and buffers the estimate leaves"
            " out."
        ]
    mac = est.device == MAC_DEVICE
    if any(e.transient >= e.budget // 20 for e in rec.facts.estimates.values()):
        said.append(
            "For a moment as the backward pass starts the loss's fp32 temporaries add to the peak; that moment may"
            f" pass {'the working set' if mac else 'the usable line'} ('tight') but must stay within the whole memory."
        )
    line = "the working set" if mac else "the usable line"
    room = f"{TIGHT_SHARE:.0%} of {line}, {to_gib(int(est.budget * TIGHT_SHARE))}"
    # A micro-batch the user gave is taken as given: the room is then the wizard's offload picks' only.
    given = "micro_batch_size" in result.session.given and "micro_batch_size" not in result.session.auto
    no_offload = result.session.answers.get("offload") == "none"
    if mac:
        picks = "A micro-batch above 1 that the wizard picks itself"
        measured = "peaks measured on an NVIDIA card came to up to 1.13x of it; none on a Mac"
    else:
        picks = (
            "An offload the wizard picks"
            if given
            else "A micro-batch above 1 that the wizard picks"
            if no_offload
            else "What the wizard picks itself, a micro-batch above 1 or an offload,"
        )
        measured = (
            "peaks measured on one H200, 1B and 3B models at 2,048 and 4,096 tokens, came to up to 1.13x of it, and"
            f" {TIGHT_SHARE:.0%} x 1.13 = {TIGHT_SHARE * 1.13:.0%} of the line"
        )
    tail = "; the micro_batch_size you gave is taken as given" if given else ""
    # Whether a run needs an offload at all is judged against the usable line itself: a plan without one may sit
    # past 70%, as its near-line share then says.
    tail += "." if mac else "; whether to offload at all is judged against the usable line itself."
    if not (given and no_offload):  # nothing of the wizard's own to keep room for
        said.append(f"{picks} keeps its peak within {room} GiB: room for the estimate's own error ({measured}){tail}")
    if est.device == GPU_DEVICE and any(e.long_context for e in rec.facts.estimates.values()):
        if chunked_loss(result.session.answers):
            # The allowance is decided on with the ordinary loss only: said so, or the table's yes beside a figure
            # 39% past the card would read as the rule broken.
            said.append(
                f"At {LONG_CONTEXT_TOKENS:,} tokens or more, with the ordinary loss, the peak as the backward pass"
                f" starts taken {UNDERSHOOT_PERCENT} higher must still fit the whole GPU, or the fits column says"
                " 'risk' (from Unsloth's published limits, not measured here); with your loss in chunks the wizard"
                f" does not decide on it, and the Memory line gives your figure {UNDERSHOOT_PERCENT} higher (glossary"
                " close call)."
            )
        else:
            said.append(
                f"At {LONG_CONTEXT_TOKENS:,} tokens or more, the peak as the backward pass starts taken"
                f" {UNDERSHOOT_PERCENT} higher must still fit the whole GPU, or the fits column says 'risk' (from"
                " Unsloth's published limits, not measured here; glossary close call)."
            )
    return " ".join(said)


def close_call_risk(result: Result) -> tuple[str, str] | None:
    """A close call, said as the risk it is, with the first fix and its figure, in one line.

    The estimate puts the run within the GPU, but its own calibration (a real peak up to 32% above
    it) puts the peak past the card: the reader's question is "will it fit?", answered first here.
    """
    rec = result.recommendation
    est = chosen_estimate(rec) if not rec.refused else None
    if est is None or not est.close_call:
        return None
    peak = sum_gib(est.total, est.transient)
    # The risk in one short sentence, then where its factor comes from.
    # Where the factor comes from (the estimate against published peaks) is the long form's note on the loss peak.
    card = memory_gib(est.gpu_memory)
    risk = (
        "as configured it may run out of memory at the backward pass of the first full-length batch: its peak of"
        f" {peak} GiB may really be up to {UNDERSHOOT_PERCENT} higher, about {est.real_peak_gib[1]} GiB by the"
        f" estimate's calibration at long contexts (against Unsloth's published limits), more than the GPU's {card}"
        " GiB"
    )
    if est.close_call_likely:
        kind, cautious = est.real_peak_gib
        # Past the card even at the calibration's kinder end (the estimate at 76% of the real peak): likely, not
        # only possible.
        risk = (
            "as configured it will likely run out of memory at the backward pass of the first full-length batch."
            " At the longest contexts that Unsloth's published tables fit on an 80 GB card (Hugging Face with"
            " FlashAttention 2), the real peak filled the card, and this estimate came to only"
            f" {ESTIMATE_SHARE_WORDS} of that real peak. Taken the same way here, its {peak} GiB would really be"
            f" about {kind} to {cautious} GiB, more than the GPU's {card} GiB (the wizard has not"
            " measured a peak at this length itself)"
        )
    # The way out by offload, as the glossary orders them after a chunked loss: an offload with room at that
    # peak, where offload is the wizard's to choose (the "CPU offload" lever of the what-if table).
    offload = next((x for x in result.levers if x.change.startswith(OFFLOAD_CPU) and x.gib_per_gpu is not None), None)
    by_offload = ""
    if offload is not None and offload.layout:
        host = (
            f" and {offload.host_gib_per_machine} GiB of host RAM per machine" if offload.host_gib_per_machine else ""
        )
        by_offload = (
            f"allow CPU offload (offload: cpu): {offload.layout}, about {offload.gib_per_gpu} GiB per GPU{host}, with"
            " room at that moment"
        )
    chunked = chunked_lever(result)
    if chunked is None or chunked.gib_per_gpu is None:
        return ("Risk", f"{risk}; {by_offload}" if by_offload else risk)
    # What to do first, before the first launch, then why: the fix named alone, then its figure; a
    # micro-batch the wizard would raise with the room it makes is said after it, not as part of the fix.
    fix = chunked.change.split(MICRO_AT)[0]
    work = rec.facts.workload
    line = f"before the first launch, switch to {fix}, which takes the peak away: about "
    if chunked.micro_batch is not None and chunked.micro_batch > 1 and work is not None:
        # The lever's figure is at the larger micro-batch the freed room lets the wizard take: the figure at this
        # micro-batch first (this layout without the logits it never builds), that one after it.
        here = to_gib(max(est.total - layout_logits_bytes(work, est.strategy), 0))
        line += (
            f"{here} GiB per GPU at this micro-batch ({chunked.gib_per_gpu} GiB at micro_batch_size"
            f" {chunked.micro_batch}, which the wizard takes once the room is freed)"
        )
    else:
        line += f"{chunked.gib_per_gpu} GiB per GPU"
    if by_offload:
        line += f"; or, without it, {by_offload}"
    return ("Risk", f"{line}. {risk[:1].upper()}{risk[1:]}")


def without_json(result: Result) -> tuple[str, str] | None:
    """A brought DeepSpeed JSON: what the wizard itself would pick without it, in one line (keep or switch).

    The figures are those of the "your DeepSpeed JSON left out" lever, the run decided again without the
    file; None where the run brings none, or where that lever leads to the same layout.
    """
    if "deepspeed_config" not in result.session.answers or result.recommendation.refused:
        return None
    lever = next((item for item in result.levers if item.change.startswith("your DeepSpeed JSON left out")), None)
    if lever is None:
        return None
    rec = result.recommendation
    suggested = suggested_lever(str(rec.settings.get("strategy")), rec.facts.estimates)
    if suggested is not None and lever.strategy == suggested:
        # The same layout as the suggested JSON, whose figures the Your JSON line gives: said as that.
        return ("No JSON", f"the wizard's own pick without your JSON is the layout of {SUGGESTED_JSON}: {lever.title}")
    return ("No JSON", f"the wizard's own pick without your JSON: {lever.title}{lever.size}")


def without_asked_offload(result: Result) -> tuple[str, str] | None:
    """Layer offloading asked for on a run that fits without it: the run without it, in one line.

    The figures are those of the "layer_offloading: false" lever, the run decided again (its
    micro-batch picked again too), so the summary quotes the run the user would get, and says the
    offload is a choice here, not a need.
    """
    rec, session = result.recommendation, result.session
    if rec.refused or rec.settings.get("strategy") != "ddp_layer_offload":
        return None
    if session.answers.get("layer_offloading") is not True or "layer_offloading" not in session.given:
        return None
    lever = next((item for item in result.levers if item.change.startswith("layer_offloading: false")), None)
    # Only where the run without it offloads nothing: otherwise the offload is a need, said in the Why.
    if lever is None or lever.gib_per_gpu is None or lever.host_gib_per_machine is not None:
        return None
    est = rec.facts.estimates.get("ddp_layer_offload")
    trade = (
        f": about {to_gib(est.total)} GiB per GPU with it against {lever.gib_per_gpu} GiB without, for"
        f" {to_gib(est.host_per_node)} GiB of host RAM per machine and the copies over PCIe"
        if est is not None
        else ""
    )
    return (
        "Without it",
        f"with {lever.change}: {lever.title}{lever.size}. The run fits without layer offloading, so it is a"
        f" choice here, not a need: it trades GPU memory for host RAM and PCIe time{trade}.",
    )


def verdict_grid(
    rec: Recommendation,
    extra: Sequence[tuple[str, str]] = (),
    answers: Mapping[str, Any] | None = None,
    *,
    brief: bool = False,
) -> RenderableType | None:
    """`verdict_lines` (and `extra` rows) as a two-column grid, its labels bold; None for a refusal."""
    lines = verdict_lines(rec, answers, brief=brief)
    if lines:
        # The Risk of a close call right under the Memory line it qualifies; the other rows after the rest.
        for row in extra:
            at = next((i + 1 for i, (label, _) in enumerate(lines) if label == "Memory"), len(lines))
            lines.insert(at if row[0] == "Risk" else len(lines), row)
    if not lines:
        return None
    grid = Table.grid(padding=(0, 1))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column()
    for label, value in lines:
        # Wrapped as every paragraph is: a figure never parted from its unit.
        grid.add_row(f"{label}:", wrapped_markup(escape(value)))
    return grid


def peak_paragraph(answers: Mapping[str, Any], rec: Recommendation) -> RenderableType | None:
    """The "Peak:" paragraph (the loss's brief peak past the usable line) the summary and explain print."""
    peak = loss_peak_line(answers, rec.facts, rec.settings)
    return None if peak is None else wrapped_markup(f"[bold]Peak:[/] {escape(peak[0].upper() + peak[1:])}")


def made_of(rec: Recommendation, answers: Mapping[str, Any] | None = None) -> str | None:
    """The chosen layout's total per GPU, part by part, so that each figure can be checked by hand.

    With the run's `answers`, the loss's brief peak follows when it goes past the usable line.
    """
    workload, strategy = rec.facts.workload, rec.settings.get("strategy")
    est = rec.facts.estimates.get(str(strategy)) if rec.facts.estimates else None
    if workload is None or est is None or rec.refused:
        return None
    words = words_for(est.device)
    pieces = figure_parts(workload, str(strategy))
    parts = "; ".join(f"{_size(size)} {what}" for what, size in pieces)
    host = f"; and about {to_gib(est.host_per_node)} GiB in host RAM per machine" if est.host_per_node else ""
    if offloads_to_nvme(rec):
        # The states wait on the drive; host RAM holds DeepSpeed's swap buffers only.
        buffers = offloaded_host_bytes(rec)
        host = f"; and about {to_gib(nvme_drive_bytes(rec))} GiB on the NVMe drive per machine" + (
            f", with about {to_gib(buffers)} GiB of swap buffers in host RAM" if buffers else ""
        )
    label = layout_label(rec, str(strategy))
    brief = ""
    if answers is not None and (peak := loss_peak(answers, rec.facts, rec.settings)) is not None:
        brief = (
            f" For a moment at the start of the backward pass, {to_gib(peak.extra)} GiB more: the fp32 loss holds"
            f" three tensors the size of the logits at once (log-probabilities and two gradients,"
            f" {to_gib(peak.per_tensor)} GiB each), two more than the logits counted above (about"
            f" {sum_gib(est.total, peak.extra)} GiB at that moment)."
        )
    # Each part is rounded on its own from exact bytes: their shown sum may miss the total by a little.
    shown = sum(float(to_gib(size)) if size >= GIB // 10 else size / GIB for _, size in pieces)
    rounded = (
        " Each part is rounded on its own, so together they may miss the total by a little."
        if abs(shown - float(to_gib(est.total))) >= 0.05
        else ""
    )
    return f"What the {label} figure, {to_gib(est.total)} GiB {words.per}, is made of: {parts}{host}.{rounded}{brief}"


def _size(size: int) -> str:
    """GiB with one decimal, or MiB below a tenth of a GiB (an adapter's 23 MiB is not "0.0 GiB")."""
    return f"{to_gib(size)} GiB" if size >= GIB // 10 else f"{round(size / 2**20):,} MiB"


LEVERS_HEADING = "To get a different answer"


def levers_list(levers: Sequence[WhatIf], heading: str = LEVERS_HEADING) -> RenderableType:
    """The "To get a different answer" list: each lever, where it leads and its memory per GPU."""
    lines: list[RenderableType] = [Text(heading, style="italic")]
    for item in levers:
        paragraph = Text.assemble(("with " + item.change, "bold"), ": ", join_units(item.title + item.size))
        lines.append(Padding(Wrapped(paragraph), (0, 0, 0, 2), expand=False))
    if any(item.host_unchecked for item in levers):
        lines.append(Padding(Text(LEVER_HOST_UNCHECKED, style="dim"), (0, 0, 0, 2), expand=False))
    return Group(*lines)


LEVER_HOST_UNCHECKED = "Host RAM figures above not checked: cpu_memory_gb not given."


def capitalised(text: str) -> str:
    """`text` with its first letter a capital, the rest as it is (a key such as cpu_memory_gb keeps its case)."""
    return text[:1].upper() + text[1:]


# The first row of the levers table: the layout as planned, set beside the changes.
PLANNED = "as planned (no change)"


def planned_row(result: Result) -> FigureRow | None:
    """The chosen layout as a row of the levers table: the options side by side, the pick among them, in bold."""
    rec = result.recommendation
    est = chosen_estimate(rec) if not rec.refused else None
    if est is None or not result.levers:
        return None
    now = next((item.now_band for item in result.levers if item.now_band), None)
    mark = "no" if not est.fits else "risk" if est.close_call else "tight" if est.tight else "yes"
    host = f"{to_gib(est.host_per_node)}" if est.host_per_node else "-"
    return FigureRow(PLANNED, (est.label, f"{to_gib(est.total)}", host, now or "-"), mark, style="bold")


def levers_table(
    levers: Sequence[WhatIf], heading: str = LEVERS_HEADING, *, planned: FigureRow | None = None
) -> RenderableType:
    """The levers side by side, for the short summary: each change, the layout it leads to and its figures.

    One row per change, read across like the memory table above it: GiB per GPU, host RAM per machine and
    tokens per second (against now, in the title), and whether it fits with room. `planned` (`planned_row`)
    comes first, so the pick stands among its options. --explain and `explain` give the same levers in words
    (`levers_list`).
    """
    hosts = any(item.host_gib_per_machine is not None for item in levers) or (
        planned is not None and planned.figures[2] != "-"
    )
    rates = any(item.step_band for item in levers)
    now = next((item.now_band for item in levers if item.now_band), None)

    def shown(layout: str, gib: str, host: str, band: str) -> tuple[str, ...]:
        """One row's cells, the host and tokens/s columns only where the table has them."""
        return (layout, gib, *([host] if hosts else []), *([band] if rates else []))

    first = [] if planned is None else [FigureRow(planned.label, shown(*planned.figures), planned.mark, planned.style)]
    rows = first + [
        FigureRow(
            item.short_change,
            shown(
                item.layout or item.title,
                "-" if item.gib_per_gpu is None else f"{item.gib_per_gpu}",
                f"{item.host_gib_per_machine}" if item.host_gib_per_machine is not None else "-",
                item.step_band or "-",
            ),
            "risk" if item.close_call else "tight" if item.tight_peak is not None else "yes",
        )
        for item in levers
    ]
    words = levers[0].per if levers else GPU_WORDS.per
    marks = {row.mark for row in rows}
    notes_first = ["the first row (bold in a terminal) is the layout as planned"] if planned is not None else []
    notes = notes_first + [
        legend_item(f"fits '{mark}'", meaning) for mark, meaning in BRIEF_MEANINGS.items() if mark in marks
    ]
    if any(item.host_unchecked for item in levers):
        notes.append(BRIEF_HOST_NOT_CHECKED)
    notes.append("--explain says each in words")
    return FigureTable(
        title=f"{heading}: each change alone, the layout it leads to, its GiB {words}"
        + (", host RAM per machine" if hosts else "")
        # Now's rate is in the first row where it is printed; else in the title.
        + (f" and tokens/s (now {now})" if rates and now and planned is None else " and tokens/s" if rates else ""),
        headers=("layout", "GiB", *(["host"] if hosts else []), *(["tokens/s"] if rates else [])),
        rows=rows,
        caption=join_units(capitalised("; ".join(notes))) + ".",
        name_header="with",
        named=(1,),
        boxed=False,
    )


IGNORED = "ignored '"
INSTALL_FIRST = "install first: "
# Every package the files need, where the user chose not to have this machine read: none was checked.
INSTALL_UNCHECKED = "install unchecked: "


def warnings_list(warnings: Sequence[str], head: str | None = None, *, mac_elsewhere: bool = False) -> RenderableType:
    """The warnings in three parts: what to do before the first launch, what to install, what was not used.

    The first part is a numbered list (the numbers let a reader tick them off), the warnings the
    head of the config file carries too (`head`; without files, a refusal's, they are just
    "Notes"). Packages missing on this machine and answers that did not apply are not steps of
    the launch: each gets a short list of its own, so the count matches the file's. A list of packages this
    machine was not checked for says why (`mac_elsewhere`: a Mac's plan made on another machine; else the user
    chose not to have it read), so that it does not read as the other list's contradiction.
    """
    ignored = [w.removeprefix("ignored ") for w in warnings if w.startswith(IGNORED)]
    installs = [w.removeprefix(INSTALL_FIRST) for w in warnings if w.startswith(INSTALL_FIRST)]
    unchecked = [w.removeprefix(INSTALL_UNCHECKED) for w in warnings if w.startswith(INSTALL_UNCHECKED)]
    steps = [w for w in warnings if not w.startswith((IGNORED, INSTALL_FIRST, INSTALL_UNCHECKED))]
    parts: list[RenderableType] = []
    if steps:
        title = f"Before the first launch (also at the head of {head})" if head else "Notes"
        parts.append(_numbered(title, steps))
    if installs:
        # Package names as they are spelt ("flash-attn"), never capitalised.
        parts.append(
            _numbered(
                "Install where it trains (missing on this machine; check the one that trains)",
                installs,
                False,
            )
        )
    if unchecked:
        parts.append(
            _numbered(
                "Install on the Mac that trains (what the files need; this machine is not a Mac, so none was checked)"
                if mac_elsewhere
                else "Install where it trains (what the files need; none checked: reading this machine was declined"
                " at the start)",
                unchecked,
                False,
            )
        )
    if ignored:
        parts.append(_numbered("Not used from your answers", ignored))
    return Group(*parts)


def _numbered(title: str, items: Sequence[str], sentences: bool = True) -> RenderableType:
    """A titled list, each item numbered and indented under its number (`sentences`: capitalised)."""
    table = Table.grid(padding=(0, 1))
    table.add_column(justify="right", style="yellow", no_wrap=True)
    table.add_column()
    for number, item in enumerate(items, 1):
        # A sentence starts with a capital; a file or key name ("accelerate_config.yaml: ...") as it is spelt.
        named = any(mark in item.split(" ", 1)[0] for mark in "_./'")
        text = item if named or not sentences else item[:1].upper() + item[1:]
        table.add_row(f"{number}.", Wrapped(Text(join_units(text))))
    return Group(Text(title, style="italic"), Padding(table, (0, 0, 0, 1), expand=False))


def no_other_backend(rec: Any) -> str:
    """Why no other backend is compared, when none can run at all (one Apple silicon device)."""
    hardware = rec.hardware or "this hardware"
    if rec.hardware_id == "mps":
        # Said with why: "does not run on it" alone reads as a rule without a reason.
        return (
            f"no distributed backend runs on {hardware}. DDP, DeepSpeed and FSDP2 exchange tensors between"
            " devices through a collective library (NCCL on NVIDIA cards, RCCL on AMD ones), and PyTorch has none"
            " for MPS. With one device there is nothing to split anyway."
        )
    if rec.facts.get("world_size", 1) == 1:
        return f"this run has one device, {hardware}, and no distributed backend (DDP, DeepSpeed, FSDP2) runs on it."
    return f"no other backend runs on {hardware}."


def _list_table(title: str | None, label_style: str = "") -> Table:
    """A borderless label/value list whose cells wrap, and fold a word longer than the column.

    Rich's default overflow cuts such a word with an ellipsis; a setting or a path must stay whole.
    """
    table = Table(title=title, title_justify="left", show_header=False, box=None, padding=(0, 2))
    table.add_column(style=label_style, overflow="fold")
    table.add_column(overflow="fold")
    return table


def _choice_title(tree: Tree, qid: str, value: Any) -> str:
    """The menu title, as " (Only if needed)", for a choice whose title says more than its id; else ""."""
    question = tree.question(qid)
    if question is None or question.type != "choice":
        return ""
    title = next((c.title for c in question.choices if c.id == value), None)
    if title is None or title.lower().replace(" ", "_") == str(value).lower():
        return ""
    # Lower-cased in a sentence ("only if needed"), unless the title starts with a name ("NVIDIA").
    if title[:2].istitle():
        title = title[0].lower() + title[1:]
    return f" ({title})"


def _split_words(result: Result) -> str:
    """A default global batch as its product: "1 per GPU x 4 accumulation x 2 GPUs"."""
    facts = result.recommendation.facts
    if facts.batch is None:
        return "micro-batch x accumulation x data-parallel GPUs"
    world = int(facts.get("world_size", 1) or 1)
    return batch_product(facts.batch, world, str(result.session.answers.get("hardware", "nvidia")))


def _small_batch(answers: Mapping[str, Any]) -> bool:
    """A global batch below the 16 sequences fine-tuning recipes commonly start from."""
    value = answers.get(GLOBAL_BATCH)
    return isinstance(value, int) and value < 16


def _assumed(tree: Tree, result: Result, *, brief: bool = False) -> str:
    """The answers taken from defaults (--defaults), said once, so none reads as the user's choice.

    `brief` (the short summary) says where a default came from in a few words; --explain says why.
    """
    answers = result.session.answers
    # Where each default came from, when it is not the question's own fixed value.
    came_from = {
        # A default global batch is the split the files make anyway; a micro-batch never asked is
        # the largest that fits a given global batch.
        GLOBAL_BATCH: f" ({_split_words(result)}"
        + ("" if brief else ": what the run trains when it is not given")
        # A newcomer's answers file rarely names it: one that small deserves a word (no commas: a list item).
        + (
            "; fine-tuning often takes 16 to 128"
            + ("" if brief else ": give global_batch_size and the wizard splits it")
            if _small_batch(answers)
            else ""
        )
        + ")",
        "micro_batch_size": (
            (
                f" (the smallest; a larger one is taken only where its peak stays within {TIGHT_SHARE:.0%} of the"
                " usable memory)"
                if answers.get("micro_batch_size") == 1
                else f" (the largest whose peak stays within {TIGHT_SHARE:.0%} of the usable memory)"
            )
            if brief
            # 1 is also what is left when no larger one has room: "the largest that fits with room"
            # would then contradict a warning that the run is near its limit.
            else f" (the smallest; the wizard takes a larger power of two that divides global_batch_size"
            f" {answers.get(GLOBAL_BATCH)} only where its peak stays within {TIGHT_SHARE:.0%} of the usable memory,"
            " and none does here"
            + ("; with your JSON as written, 1 does not fit either)" if runs_past_fit(result.recommendation) else ")")
            # Where even 1 does not fit (a brought JSON run as written), "no larger" is all it says.
            if answers.get("micro_batch_size") == 1
            else f" (the largest power of two that divides global_batch_size {answers.get(GLOBAL_BATCH)} and fits"
            f" {_room(result)})"
        )
        if GLOBAL_BATCH in result.session.given
        else "",
    }
    if result.recommendation.facts.get("micro_batch_from_json"):
        # Not the wizard's pick: the brought JSON's number, which DeepSpeed trains with.
        came_from["micro_batch_size"] = " (your DeepSpeed JSON's train_micro_batch_size_per_gpu)"
    if answers.get("gpu_model"):  # the GPU's memory came from the named model, not from nowhere
        came_from["gpu_memory_gb"] = f" (from gpu_model {answers['gpu_model']})"
    named = lookup_gpu(answers.get("gpu_model"))
    if answers.get("gpu_link") == "unknown" and named is not None and named.gpu_link_varies:
        # A card named without its board: which link it has is the one thing the name leaves open.
        # Said inside the menu's "(not sure" bracket, with no comma: the line is a comma-separated list.
        came_from["gpu_link"] = (
            f" (not sure: {answers['gpu_model']} comes as an SXM board with NVLink or a PCIe card without)"
            if brief
            else f" (not sure: gpu_model {answers['gpu_model']} names no board; SXM boards have NVLink and PCIe cards"
            " do not; the step time spans both)"
        )
    if answers.get("gradient_checkpointing") is not None:
        # Its default follows the model and the sequence length (the review says "from model and sequence length").
        came_from["gradient_checkpointing"] = (
            " (from model and sequence_length: on from 1B parameters or 8,192 tokens)"
            if answers["gradient_checkpointing"]
            else " (from model and sequence_length: off below 1B parameters and 8,192 tokens)"
        )
    if answers.get("layer_offloading") is True:
        # Worked out from the run's own figures, not a fixed default: said as the decision it is.
        several = int(result.recommendation.facts.get("world_size") or 1) > 1
        came_from["layer_offloading"] = (
            " (by the memory estimate: a full copy does not fit; it comes before sharding)"
            if several
            else " (by the memory estimate: the run does not fit without it)"
        )
    taken = [
        f"{qid} {_plain(answers[qid])}"
        + came_from.get(qid, "")
        # A choice as the menu names it too ("offload auto" is "Only if needed" there).
        + ("" if qid in came_from and qid == "gpu_link" else _choice_title(tree, qid, answers[qid]))
        # A yes/no key names no subject by itself ("tune no"): add the question's label.
        + _yesno_label(tree, qid)
        for qid in tree.question_ids
        if result.session.origins.get(qid) == "default" and answers.get(qid) is not None
    ]
    # An answer the user left to the wizard at its prompt ("auto") was asked for, not assumed.
    picked = [item for item in taken if item.split(" ", 1)[0] in result.session.auto]
    taken = [item for item in taken if item not in picked]
    # What the wizard worked out from the other answers (a card's memory from its name, a micro-batch that
    # fits the global batch, offloading the run needs) is no default: said apart, as the decision it is.
    worked_ids = {qid for qid in ("gpu_memory_gb", "layer_offloading", "gradient_checkpointing") if came_from.get(qid)}
    if came_from.get("micro_batch_size") and not result.recommendation.facts.get("micro_batch_from_json"):
        worked_ids.add("micro_batch_size")
    worked = [item for item in taken if item.split(" ", 1)[0] in worked_ids]
    taken = [item for item in taken if item not in worked]
    picked_line = f"Picked for you, as you asked (auto): {', '.join(picked)}." if picked else ""
    # An unanswered network speed has no default, yet it widens the step-time band the most.
    unsaid = (
        " Not given: network_gbps, so the step time spans 100 Gb/s for a machine to 400 Gb/s for each GPU"
        " (--set network_gbps=N narrows it)."
        if answers.get("num_nodes", 1) > 1
        and answers.get("network_gbps") is None
        and result.recommendation.facts.links is not None
        and not result.recommendation.refused
        else ""
    )
    if not taken and not worked:
        return f"{picked_line}{unsaid}".strip()
    said = [
        f"{heading}: {', '.join(items)}"
        for heading, items in (
            ("Defaults used (not in your answers)", taken),
            ("Worked out from your other answers", worked),
        )
        if items
    ]
    defaults = ". ".join(said) + "; change one with --set KEY=VALUE."
    return f"{picked_line} {defaults}{unsaid}".strip()


def _yesno_label(tree: Tree, qid: str) -> str:
    """The label in brackets after a yes/no key whose words differ from it.

    "tune no (Performance extras)".
    """
    question = tree.question(qid)
    if question is None or question.type != "yesno" or not question.label:
        return ""
    if question.label.lower().replace("-", " ") == qid.replace("_", " "):
        return ""
    # The question itself, which "no" answers ("megatron no (Is your training code written for
    # Megatron-LM?)"); a label would read as a statement. Its bracketed examples are left out.
    asked = re.sub(r"\s*\([^)]*\)", "", question.prompt or "").strip()
    if not asked or ", " in asked:
        return f" ({question.label})"
    return f" ({asked})"


def _plain(value: Any) -> str:
    """An answer as a person writes it: yes/no for booleans."""
    return ("yes" if value else "no") if isinstance(value, bool) else str(value)


def _settings_table(
    settings: Mapping[str, Any],
    facts: FactSet | None = None,
    answers: Mapping[str, Any] | None = None,
    given: frozenset[str] = frozenset(),
) -> Table:
    """The Key settings table; a global batch the user gave gets its split on a batch row."""
    answers = answers or {}
    table = _list_table("Key settings", label_style="bold")
    labels = {
        "mixed_precision": "mixed precision",
        "num_processes": "processes (all machines)",
        "num_machines": "machines",
        "zero_stage": "ZeRO stage",
        "offload_optimizer": "optimizer offload",
        "offload_param": "weight offload",
        # The parallel layout: the sizes above 1 (HSDP, N-D, Megatron-LM, DeepSpeed SP).
        "dp_replicate_size": "data-parallel replicas",
        "dp_shard_size": "data-parallel shard size",
        "tp_size": "tensor parallel",
        "pp_size": "pipeline stages",
        "cp_size": "context parallel",
        "sp_size": "sequence parallel",
        "ep_size": "expert parallel",
    }
    # A Mac offloads nothing and has no such switch: "none" rows would only read as options.
    mac = facts is not None and facts.workload is not None and facts.workload.device != GPU_DEVICE
    for key, label in labels.items():
        value = settings.get(key)
        if mac and key in ("offload_optimizer", "offload_param"):
            continue
        if (key == "zero_stage" and value is None) or (key.endswith("_size") and value in (None, 1)):
            continue
        if key == "offload_param" and settings.get("strategy") == "ddp_layer_offload":
            # No backend weight offload, but the frozen weights do leave the GPU: "none" beside
            # "layer offloading yes" read as a contradiction.
            table.add_row(label, "the frozen layers, in CPU RAM (Axolotl's layer_offloading: true)")
            continue
        if key == "mixed_precision" and value == "no" and mac_bf16_base(answers):
            # No autocast, but not fp32 either: the base runs in the bf16 the script loads it in. Not
            # "mixed precision" as a label: nothing mixes per operation, the weights differ by kind.
            label = "precision"
            value = "bf16 base, fp32 adapters (the frozen base in bf16 as your script loads it; no autocast:"
            value += " mixed_precision: no)"
        elif key == "mixed_precision" and value == "no" and mac:
            # The same row as the bf16 base's above, under the same label: fp32 throughout.
            label = "precision"
            value = "fp32 (the fp32 weights your script loads; no autocast: mixed_precision: no)"
        elif key == "mixed_precision" and value == "no":
            value = "no (fp32, with the fp32 weights your script loads)"  # "no" alone reads as an answer
        if key == "offload_optimizer" and value not in (None, "none"):
            # DeepSpeed's offload_optimizer and FSDP2's offload move the gradients with the optimizer state.
            value = f"{value} (the optimizer state and the gradients)"
        table.add_row(label, escape(str(value)))
    optimizer = answers.get("optimizer")
    if optimizer not in (None, "adamw"):
        # A choice of the user's that changes the memory, as it runs: where the layout cannot run it (an
        # 8-bit optimizer under sharding, any under CPU offload) the files use AdamW, and the row says so.
        runs = run_optimizer(str(optimizer), str(settings.get("strategy") or "") or None)
        shown = str(optimizer) if runs == optimizer else f"{runs} (your {optimizer} cannot run with this layout)"
        table.add_row("optimizer", escape(shown))
    if (
        answers.get("target") == "axolotl"
        and settings.get("strategy") == "ddp"  # a full copy: a sharding backend's reason is another warning
        and facts is not None
        and layer_offload_host_short(answers, facts, settings)
    ):
        # Asked for beside a full copy, but left out of the files (host RAM is short for it): the
        # answer the user gave does not just vanish from the settings.
        table.add_row(
            "layer offloading",
            "no: asked for, but host RAM is short for the frozen layers, so axolotl.yaml leaves it out and the"
            " frozen layers stay on the GPU, where they fit (the warning below)",
        )
    plan = facts.batch if facts is not None else None
    if plan is not None and (plan.custom or GLOBAL_BATCH in given):
        # The global batch the user set, and where the files (or the script) split it.
        deepspeed = settings.get("backend") == "deepspeed"
        pairs = answers.get("objective") == "dpo"  # a DPO batch counts preference pairs
        fsdp = settings.get("backend") == "fsdp2"
        where = batch_where(
            plan, str(answers.get("target")), answers.get("megatron") is True, deepspeed, dpo=pairs, fsdp=fsdp
        )
        if plan.custom and answers.get("target") == "accelerate" and answers.get("megatron") is not True:
            # The script's calls are a warning below (the files cannot set them): said there, once.
            where = "set by your training script: the list below says how"
        table.add_row(
            "batch",
            f"{batch_line(plan, int(settings['num_processes']), str(answers.get('hardware')), pairs=pairs)} ({where})",
        )
    elif plan is not None and facts is not None and facts.get("micro_batch_from_json"):
        # The brought JSON numbers the batch: the whole product, whose parts are the JSON's, not the wizard's.
        pairs = answers.get("objective") == "dpo"
        table.add_row(
            "batch",
            f"{batch_line(plan, int(settings['num_processes']), str(answers.get('hardware')), pairs=pairs)}"
            " (your DeepSpeed JSON's train_micro_batch_size_per_gpu and gradient_accumulation_steps)",
        )
    elif facts is not None and facts.accumulation > 1:
        # Not an answer, but it sets the batch and what the step-time table calls a step.
        axolotl = facts.accumulation_key.endswith("axolotl.yaml")
        where = (
            "the wizard's default, as in Axolotl's own examples; gradient_accumulation_steps in axolotl.yaml"
            if axolotl
            else "4 per pipeline stage, megatron_lm_num_micro_batches in accelerate_config.yaml"
            if facts.accumulation_key.startswith("megatron")
            else "your DeepSpeed JSON's"
        )
        table.add_row("micro-batches per step", f"{facts.accumulation} ({where})")
    return table


def checkpointing_setting(result: Result) -> list[tuple[str, str]]:
    """Where gradient checkpointing is switched on, for an Accelerate run whose estimate counts on it.

    The Accelerate config can switch it on only under FSDP; otherwise the training script must, and
    a run that fits only with it should not learn that from a warning further down.
    """
    answers, rec = result.session.answers, result.recommendation
    if answers.get("target") != "accelerate" or not answers.get("gradient_checkpointing") or rec.refused:
        return []
    if rec.traits.checkpointing == "fsdp":
        return [("gradient checkpointing", "on, by FSDP (fsdp_activation_checkpointing in accelerate_config.yaml)")]
    if rec.traits.checkpointing != "script":
        return []
    snippet = any(f.name == "train_snippet.py" for f in result.files)
    # TRL's DPOTrainer switches it on from its config, not from a call in the script.
    dpo = result.session.answers.get("objective") == "dpo"
    call = "DPOConfig(gradient_checkpointing=True)" if dpo else "model.gradient_checkpointing_enable()"
    return [
        (
            "gradient checkpointing",
            f"on in your training script ({call}"
            + ("; train_snippet.py shows where" if snippet else "")
            + ")"
            # The warning below says why (the estimate counts on it), except where the snippet covers it.
            + (": the estimate counts on it, the Accelerate config cannot switch it on" if snippet else ""),
        )
    ]


def kbit_setting(result: Result) -> list[tuple[str, str]]:
    """How an Accelerate QLoRA run's training script loads the 4-bit base, and the PEFT call it leaves out.

    PEFT's prepare_model_for_kbit_training casts every weight bitsandbytes left in 16-bit (the embeddings,
    the output head, the norms) to fp32, 2 bytes more each, which the estimate does not count; the snippet
    does not call it, and a script copied from elsewhere often does.
    """
    answers, rec = result.session.answers, result.recommendation
    workload = rec.facts.workload
    if (
        answers.get("target") != "accelerate"
        or answers.get("method") != "qlora"
        or rec.refused
        or workload is None
        or not any(f.name == SNIPPET for f in result.files)
    ):
        return []
    shape = workload.shape
    kept = max(shape.params - shape.quantizable_params, 0)
    return [
        (
            "4-bit base",
            "NF4 by bitsandbytes, loaded in your training script as train_snippet.py shows; not with PEFT's"
            f" prepare_model_for_kbit_training, which casts the {kept / 1e9:.1f}B weights left in 16-bit"
            f" (embeddings, output head, norms) to fp32: about {to_gib(2 * kept)} GiB more per GPU than the"
            " estimate counts, and more for the hidden states between the layers, which then follow in fp32",
        )
    ]


def written_training_settings(result: Result) -> list[tuple[str, str]]:
    """Training settings the wizard chose without asking, read back from the axolotl.yaml it writes.

    Sample packing changes what a batch holds, so a reader should not find it only in the file.
    """
    written = next((f for f in result.files if f.name == "axolotl.yaml"), None)
    if written is None:
        return []
    data = yaml.safe_load(written.text) or {}
    rows = []
    attention = data.get("attn_implementation")
    length = data.get("sequence_len")
    if data.get("sample_packing"):
        rows.append(
            (
                "sample packing",
                f"yes (short samples share each {length:,}-token row, fewer padding tokens, as in Axolotl's"
                f" examples; it needs the attention below; sample_packing in axolotl.yaml)",
            )
        )
    elif data.get("rl"):
        rows.append(("sample packing", "no (one pair per row: Axolotl does not pack preference pairs)"))
    elif attention is not None:
        rows.append(("sample packing", f"no (one sample per row, as the wizard writes it with {attention} attention)"))
    if attention is not None:
        rows.append(("attention", f"{attention} (attn_implementation in axolotl.yaml, chosen for this GPU)"))
    if (data.get("fsdp_config") or {}).get("activation_checkpointing"):
        # axolotl.yaml then says gradient_checkpointing: false, as FSDP checkpoints instead: said here,
        # so the answer "yes" and the file's "false" do not read as a contradiction.
        rows.append(("gradient checkpointing", "on, by FSDP (fsdp_config.activation_checkpointing in axolotl.yaml)"))
    return rows


def decision_memory_table(rec: Recommendation, *, brief: bool = False, micro_given: bool = False) -> Group:
    """The memory table of a decision: its layout in bold (none for a refusal), NVMe rows named so.

    The summary and `explain` both print it, so they draw the same table for the same run; the
    short summary (`brief`) leaves out the long legend and the bar chart. `micro_given`: the user set the
    micro-batch, so the rule by which the wizard picks one is not said beside it.
    """
    chosen = set() if rec.refused or not rec.settings.get("strategy") else {str(rec.settings["strategy"])}
    machines = rec.facts.workload.num_nodes if rec.facts.workload is not None else 1
    # A backend may name the chosen row itself (DDP's "DDP / 1 GPU" row reads DDP on several GPUs);
    # a row that adds to that name ("DDP + layer offload") is more exact, and keeps its own.
    name = rec.traits.label("layout")
    row = rec.facts.estimates.get(next(iter(chosen))) if chosen else None
    if name is not None and row is not None and row.label.startswith(f"{name} + "):
        name = None
    notes: list[str] = []
    estimates, left = rec.facts.estimates, None
    if brief and (shown := one_gpu_rows(rec)) is not None:
        estimates, left = shown
    work = rec.facts.workload
    if work is not None and work.optimizer != "adamw":
        # The 8-bit optimizers and Adafactor run beside a full copy only: the other rows count AdamW,
        # said beside the table in the short form too, where a reader compares the rows (the rows shown only).
        adamw_rows = [est.label for key, est in estimates.items() if optimizer_of(work, key) == "adamw"]
        if adamw_rows:
            title = OPTIMIZER_TITLES.get(work.optimizer, work.optimizer)
            notes.append(
                f"{title} runs only where each GPU keeps a full copy; the {', '.join(adamw_rows)} rows count AdamW,"
                " which their files would use"
            )
    if left is not None:
        notes.append(left)
    return memory_table(
        estimates,
        chosen,
        nvme=offloads_to_nvme(rec),
        machines=machines,
        chosen_name=name,
        brief=brief,
        notes_more=notes,
        micro_batch=work.micro_batch_size if work is not None else None,
        micro_picked=not micro_given,
        steps=brief_steps(rec) if brief else None,
        as_written=runs_past_fit(rec),
        buffers=brought_buffers(rec.facts),
    )


# Sharded layouts without offload: on one GPU they have nothing to shard across.
_SHARDED_PLAIN = ("zero1", "zero2", "zero3", "fsdp2")


def one_gpu_rows(rec: Recommendation) -> tuple[dict[str, Estimate], str] | None:
    """The short table's rows on one GPU without the sharded layouts that cannot help there, and a note; or None.

    On one GPU, ZeRO-1/2/3 and FSDP2 without offload have nothing to shard across: each needs at least what
    the GPU alone needs. The short table leaves them out (--explain keeps every row), so that the rows left
    are the ones that could run the job; only where each of them needs at least the one-GPU figure, and none
    is the chosen layout.
    """
    work, estimates = rec.facts.workload, rec.facts.estimates
    alone = estimates.get("ddp")
    chosen = str(rec.settings.get("strategy"))
    plain = [key for key in _SHARDED_PLAIN if key in estimates]
    if work is None or work.world_size != 1 or alone is None or not plain or chosen in plain:
        return None
    if any(estimates[key].total < alone.total for key in plain):
        return None
    names = [estimates[key].label for key in plain]
    listed = ", ".join(names[:-1]) + f" and {names[-1]}" if len(names) > 1 else names[0]
    note = (
        f"{listed} without offload are left out: on one GPU they shard nothing and need what the 1 GPU row needs"
        f" ({to_gib(alone.total)} GiB) or more"
    )
    return {key: est for key, est in estimates.items() if key not in plain}, note


def brief_steps(rec: Recommendation) -> dict[str, str]:
    """The step band of each layout the step-time table shows, in seconds ("9.2-23"), for the short table.

    The short summary compares the layouts in one table: memory and time side by side, the breakdown
    of the memory and the step's arithmetic left to --explain. Empty where no band is worked out (a Mac,
    a GPU without a throughput figure) or nothing was chosen.
    """
    chosen = rec.settings.get("strategy")
    if rec.refused or chosen is None or str(chosen) not in rec.facts.speeds:
        return {}
    return {
        strategy: band_text(step).removesuffix(" s")
        for strategy, step in rec.facts.speeds.items()
        # Only what runs: a layout past the GPU or the host RAM (a brought JSON as written) has no step to take.
        if (est := rec.facts.estimates.get(strategy)) is not None
        and est.fits
        and est.host_fits is not False
        and shown_in_step_table(rec.facts, strategy, chosen)
    }


def memory_table(
    estimates: Mapping[str, Estimate],
    highlight: set[str],
    *,
    nvme: bool = False,
    machines: int = 1,
    chosen_name: str | None = None,
    brief: bool = False,
    notes_more: Sequence[str] = (),
    micro_batch: int | None = None,
    micro_picked: bool = True,
    steps: Mapping[str, str] | None = None,
    as_written: bool = False,
    buffers: Mapping[str, int] | None = None,
) -> Group:
    """Every strategy's estimate, then the same totals as a bar chart against the usable line.

    `micro_batch`: the micro_batch_size every row is estimated at, said in the title (a Why that
    quotes micro-batch 1 beside a table at 2 would otherwise read as a contradiction).

    The `highlight` strategies are bold, the others dimmed. The table adapts to the width it gets
    and never cuts a figure (see `FigureTable`); the chart marks fit exactly as its fits column.
    `brief`: the columns said in a few words, no notes on how the host column is counted, no chart.
    `steps` (with `brief`): each layout's step band in seconds; given, the table shows the total, the host
    RAM and the step of each layout instead of the parts of the total (--explain shows those).
    `as_written`: the bold row is a brought JSON's layout that does not fit, named as the JSON's, not as chosen.
    `micro_picked`: the micro-batch is the wizard's pick (not one the user set), so the short table says its rule.
    `buffers`: a brought JSON's overlap_comm buffers per ZeRO-1/2 row; a row within the usable line only
    without them is marked so.
    """
    first = next(iter(estimates.values()))
    words = words_for(first.device)  # "per GPU", or "on the Mac" on Apple silicon
    # An NVMe run offloads to the drive: its row's host figure does not apply, only the GPU fit.
    marks = {
        s: ("risk" if e.close_call else "tight" if e.tight else "yes") if e.fits else "no"
        for s, e in estimates.items()
        if nvme and s in highlight
    }
    # The chosen row named for where its states go; the other offload rows stay as the CPU ones.
    labels = {s: estimates[s].label.replace("->CPU", "->NVMe") for s in marks}
    # A brought JSON's overlap_comm buffers on the ZeRO-1/2 rows it could run as (its stage, or an edit that keeps
    # its buckets): the estimate leaves them out, so a row within the line only without them says so.
    for key, extra in (buffers or {}).items():
        e = estimates.get(key)
        if e is not None and key not in marks and fits_mark(e) in ("yes", "tight") and past_line_with_buffers(e, extra):
            marks[key] = "buffers"
    # A host column of dashes only (a Mac, where nothing can be offloaded) is left out.
    offloads = any(est.host_per_node for est in estimates.values())
    timed = bool(brief and steps)
    rows = [
        FigureRow(
            labels.get(strategy, est.label),
            (
                (
                    f"{to_gib(est.total)}",
                    *(
                        [f"{to_gib(est.host_per_node)}" if est.host_per_node and strategy not in labels else "-"]
                        if offloads
                        else []
                    ),
                    (steps or {}).get(strategy, "-"),
                )
                if timed
                else (
                    f"{to_gib(est.model_states)}",
                    f"{to_gib(est.activations)}",
                    f"{to_gib(est.overhead)}",
                    f"{to_gib(est.total)}",
                    f"{to_gib(est.host_per_node)}" if est.host_per_node and strategy not in labels else "-",
                )[: 5 if offloads else 4]
            ),
            # An offload that fits the GPU but not the host RAM does not run: say which limit failed.
            marks.get(strategy, fits_mark(est)),
            style="bold" if strategy in highlight else "dim",
        )
        for strategy, est in estimates.items()
    ]
    # How the host column is counted: sentences after the legend, not brackets inside it.
    notes = host_notes("ddp_layer_offload" in estimates) if offloads and not brief else []
    notes += [ROUNDED] if not timed and parts_differ(rows, 3) and not brief else []
    chosen = [labels.get(strategy, est.label) for strategy, est in estimates.items() if strategy in highlight]
    if len(chosen) == 1 and len(rows) > 1:
        # Bold is lost without colour and in a pasted copy: name the chosen row in words too.
        # A brought JSON that does not fit was not chosen by the wizard: its layout is the JSON's, said so.
        runs = "your JSON's layout, as written" if as_written else "the chosen layout"
        notes.append(
            f"{runs} (bold in a terminal): {chosen_name or chosen[0]}"
            if brief
            else f"{runs} is {chosen_name or chosen[0]} (its row is bold in a terminal)"
        )
    notes += list(notes_more)
    if brief and highlight and micro_batch is not None and micro_batch > 1 and micro_picked:
        # The second margin, said beside the first (the title's usable line), so the two read as one scheme; a
        # refusal picks nothing, and at a micro-batch of 1 there was nothing to pick.
        notes.append(second_margin(first))
    if any(est.host_per_node and est.host_fits is None for est in estimates.values()):
        # An offload row's "yes" is for GPU memory alone when host RAM is unknown: say so.
        notes.append(BRIEF_HOST_NOT_CHECKED if brief else HOST_NOT_CHECKED)
    elif offloads and (host := next((e.host_memory for e in estimates.values() if e.host_memory), None)):
        # Given, it was checked: say against what, so the absence of the note above is no riddle.
        notes.append(
            f"on offload rows, fits also checks host RAM against {to_gib(int(host * FIT_MARGIN))} GiB per machine"
            f" ({FIT_MARGIN:.0%} of cpu_memory_gb, {memory_gib(host)} GiB)"
        )
    table = FigureTable(
        title=(
            (
                f"Memory {words.per} in GiB and the time per optimizer step"
                + (f" at micro_batch_size {micro_batch}" if micro_batch is not None else "")
                + f"; fits = the total within the usable {first.share:.0%} of {memory_gib(first.gpu_memory)} GiB"
                " (the rest is a margin)"
            )
            if timed
            else (
                f"Memory {words.per} in GiB (2^30 bytes)"
                + (f" at micro_batch_size {micro_batch}" if micro_batch is not None else "")
                + f"; fits = the total at most {first.share:.0%} of"
                f" {memory_gib(first.gpu_memory)} GiB{words.share_note}"
            )
            # The fits column's tight and close marks are told in the caption's legend (fit_legend), once.
        ),
        # "model states", as `estimate` and the glossary say (the ZeRO paper's term).
        headers=(
            ("total", *(["host"] if offloads else []), "step s")
            if timed
            else ("model states", "activations", "other", "total", "host")[: 5 if offloads else 4]
        ),
        rows=rows,
        # Each figure is rounded on its own from exact bytes (the decision uses the bytes), so a
        # total shown beside its parts may miss their sum by a last digit: the caption says so
        # rather than showing a total that is not the estimate.
        caption=table_caption(
            _summary_columns({row.mark for row in rows}, estimates, machines, words, brief=brief, timed=timed),
            # The short form names the chosen row's abbreviations only; the others are one glossary
            # look-up away (said in a note), and --explain gives them all.
            chosen if brief and chosen else [r.label for r in rows],
            notes + ([brief_row_names(left)] if brief and chosen and (left := _left_out(rows, chosen)) else []),
            brief=brief,
        ),
    )
    if brief:
        return Group(table)
    return Group(table, chart_for_estimates(estimates, highlight, marks, labels))


def second_margin(est: Estimate) -> str:
    """The room the wizard's own picks keep inside the usable line (facts.has_room), in GiB too, under the short table.

    Said as the rule it is: a micro-batch of 1 the wizard is left with may be past it (nothing smaller to take). The
    GiB figure saves the reader multiplying one share by another (70% of 80% of the card).
    """
    return (
        "the wizard takes a micro-batch above 1 only where its peak stays within"
        f" {TIGHT_SHARE:.0%} of the usable memory ({to_gib(int(est.budget * TIGHT_SHARE))} GiB here): room for the"
        " estimate's own error"
    )


# What the short summary says in place of the other rows' abbreviations.
BRIEF_ROW_NAMES = "the other rows' names: backend-wizard glossary NAME"


def brief_row_names(left_out: Sequence[str]) -> str:
    """The short table's pointer to the row names its legend leaves out, one of them as the example."""
    # An offload row's name as the example: "1 GPU" would look up an entry that only restates the row.
    example = next((name for name in left_out if "->" in name or "+" in name), left_out[0])
    return f"{BRIEF_ROW_NAMES} (glossary {example}, say)"


def _left_out(rows: Sequence[FigureRow], chosen: Sequence[str]) -> list[str]:
    """The abbreviations other rows use that the chosen rows' legend does not explain, as the rows show them."""
    mine = set(label_legend(chosen))
    return [
        item.split(":")[0].replace("\xa0", " ") for item in label_legend([r.label for r in rows]) if item not in mine
    ]


# A sharded row's states are more than its share: the estimate adds the layer being gathered.
SHARDED_STATES = (
    "; on ZeRO-3 rows, this GPU's share of it plus the largest layer gathered whole while it computes (4"
    " bytes per parameter of that layer: its 16-bit weights and a buffer as large, as DeepSpeed's estimator"
    " counts); on FSDP2 rows, this GPU's share plus what FSDP2 holds gathered: the embeddings and output head"
    " for the whole step and two decoder layers, as stored (16 bit; QLoRA's quantized layers in 4 bit)"
)


def _summary_columns(
    marks: set[str],
    estimates: Mapping[str, Estimate],
    machines: int = 1,
    words: DeviceWords = GPU_WORDS,
    *,
    brief: bool = False,
    timed: bool = False,
) -> list[tuple[str, str]]:
    """What the summary table's short column names mean (the glossary has each one too).

    Only the columns that show something are explained: a host column of dashes gets no note.
    `timed`: the short table of totals and step bands (`memory_table`'s `steps`).
    """
    sharded = any(e.gathered for e in estimates.values()) and not brief
    spread = (
        "; one copy spread over the machines"
        + (", except HSDP's, a full copy on each" if "hsdp_offload" in estimates else "")
        if machines > 1
        else ""
    )
    host = (
        [
            (
                "host",
                f"host RAM per machine for what is offloaded{spread}"
                # The 1.5 said where the figure is read: 16 bytes x 13B is 194 GiB, the column 291.
                + (
                    ", counted 1.5 times for pinned buffers"
                    if any(e.host_per_node and not e.strategy.endswith("layer_offload") for e in estimates.values())
                    else ""
                ),
            )
        ]
        if any(e.host_per_node for e in estimates.values())
        else []
    )
    if timed:
        total = (
            f"weights, gradients, optimizer state, activations and {CONTEXT_OVERHEAD // GIB} GiB for the runtime,"
            f" {words.on_each}"
        )
        step = ("step s", "seconds per optimizer step (-: it does not fit)")
        return [("total", total), *host, step, *fit_legend(marks, brief=True)]
    columns = [
        (
            "model states",
            f"weights, gradients and optimizer state {words.on_each}" + (SHARDED_STATES if sharded else ""),
        ),
        # Not only CUDA: ROCm, MPS and the other runtimes reserve memory of their own too.
        ("other", f"a fixed {CONTEXT_OVERHEAD // GIB} GiB for {words.runtime} (the overhead)"),
    ]
    return columns + host + fit_legend(marks)


def grouped_runner_ups(rec: Any) -> list[tuple[str, str]]:
    """The losing backends as (titles, reason), backends that lost for the same reason together.

    One GPU without a backend and DDP fail for the same reason when a full copy does not fit;
    saying it once, for both, reads as one fact instead of a repetition.
    """
    titles: dict[str, list[str]] = {}
    for runner in rec.runner_ups:
        titles.setdefault(runner.reason, []).append(runner.title)
    grouped = []
    for reason, names in titles.items():
        # A semicolon between titles, which may hold commas ("One GPU, no distributed backend").
        joined = "; ".join(names)
        grouped.append((joined, reason))
    return grouped


def _runner_up_table(rec: Any, *, brief: bool = False) -> RenderableType:
    """One paragraph per backend that lost: its name, then the reason, wrapped between words.

    (A two-column table leaves the reasons a narrow column at 80 columns and cuts long words
    such as file paths; paragraphs fold a word only when it is longer than a line.) `brief`
    keeps each backend's first paragraph, its main reason; the layouts under it are details.
    """
    # After a refusal no backend was chosen: each one listed is why it does not fit, not a runner-up.
    heading = "Why each backend does not fit" if rec.refused else "Why not the others"
    lines: list[RenderableType] = [Text(heading, style="italic")]
    # Where every reason opens with the brought JSON's precedence, it is said once, above them.
    json_first = bool(rec.runner_ups) and all(runner.after_json for runner in rec.runner_ups)
    if json_first:
        lines.append(
            Padding(
                Wrapped(
                    Text(join_units(JSON_FIRST.rstrip(", ") + " that, each of the others loses on its own account:"))
                ),
                (0, 0, 0, 2),
            )
        )
    trimmed = 0  # (short form) the sentences left to --explain
    said: dict[str, str] = {}  # a first paragraph already printed -> the title it was printed under
    printed: dict[str, str] = {}  # (short form) a sentence already printed -> the title it was printed under
    shorter = {runner.reason: runner.brief or runner.reason for runner in rec.runner_ups}
    for title, reason in grouped_runner_ups(rec):
        # A reason's line breaks part its layouts: the first paragraph follows the title, the others
        # are indented under it. The short view reads the reason without its long form's clauses.
        first, *more = (shorter[reason] if brief else reason).split("\n")
        if json_first:
            first = first[len(JSON_FIRST) :]
            first = first[:1].upper() + first[1:]
        # The same main reason as a backend above (One GPU and DDP, where DDP has a paragraph of its
        # own after it): pointed to, not printed twice.
        short_name = title.split(",")[0].split(" (")[0]  # "One GPU", "DDP": the short name
        opening = f"The same as for {said[first]} above." if first in said else join_units(first)
        said.setdefault(first, short_name)
        # The short form keeps the main reason and the paragraphs the decision marks for it: how the
        # backend does with offload where the main reason is "without offload it does not fit", and
        # layer offloading weighed on several GPUs.
        keep = _brief_kept(rec, reason)
        shown = more if not brief else [part for i, part in enumerate(more, start=1) if i in keep]
        if brief:
            # Each paragraph's first sentences, its figures against the chosen layout's: the rest is --explain's.
            leads = [_lead(part) for part in (opening, *shown)]
            trimmed += sum(left for _, left in leads)
            opening, *shown = (part for part, _ in leads)
            # Two backends that lose to the same guideline share its sentences word for word: said once.
            opening, *shown = (once_said(part, printed, short_name) for part in (opening, *shown))
        paragraph = Text.assemble((title, "bold"), ": ", opening)
        lines.append(Padding(Wrapped(paragraph), (0, 0, 0, 2), expand=False))
        lines.extend(Padding(Wrapped(Text(join_units(part))), (0, 0, 0, 4), expand=False) for part in shown)
    if trimmed:
        lines.append(
            Padding(
                Text(f"{more_sentences(trimmed)} on these: add --explain.", style="dim"),
                (0, 0, 0, 2),
            )
        )
    return Group(*lines)


# A losing backend's paragraph in the short summary: its first sentences within about seven lines.
_RUNNER_UP_CHARS = 520


# Openings of a sentence that reads on from the one before it.
_LEANING = ("So ", "Thus ", "Therefore ", "Hence ", "That ", "This ", "These ", "Both ", "Also ", "Otherwise ")


def _lead(paragraph: str) -> tuple[str, int]:
    """`paragraph`'s sentences within `_RUNNER_UP_CHARS`, and how many it leaves out (the paragraph whole: 0).

    The first and the last always, then the next ones in order while they fit. The first sentence
    gives the figures against the chosen layout's, the last the verdict (what the backend adds, or
    the rule that decides between two that fit): the middle ones are the details.
    """
    said = sentences(paragraph)
    # A last sentence that leans on the one before it ("So memory does not decide ...") keeps it.
    tail = said[-2:] if said[-1].startswith(_LEANING) else said[-1:]
    if len(said) <= len(tail) + 1:
        return paragraph, 0
    room = _RUNNER_UP_CHARS - sum(len(sentence) + 1 for sentence in tail)
    kept = [*leading_sentences(said[: -len(tail)], room), *tail]
    return (" ".join(kept), len(said) - len(kept)) if len(kept) < len(said) else (paragraph, 0)


# Sentences this short ("It fits.") may repeat without saying "as for X above".
_SHORT_SENTENCE = 8


def once_said(paragraph: str, printed: dict[str, str], title: str) -> str:
    """`paragraph` without the sentences printed before under another backend, and a pointer to it instead.

    `printed` maps each sentence printed so far to the backend it was printed under; this paragraph's are
    added. Short sentences are kept where they repeat.
    """
    kept: list[str] = []
    earlier: list[str] = []
    dropped: list[str] = []
    for sentence in sentences(paragraph):  # the short Why's own splitter: never inside brackets
        if len(sentence.split()) >= _SHORT_SENTENCE and sentence in printed and printed[sentence] != title:
            earlier.append(printed[sentence])
            dropped.append(sentence)
            continue
        printed.setdefault(sentence, title)
        kept.append(sentence)
    if earlier:
        # Which sentences, by their first words: "otherwise" alone would also cover what is the other's own.
        openings = " and ".join(f'"{" ".join(s.split()[:_OPENING_WORDS]).rstrip(",;:.")}..."' for s in dropped)
        kept.append(f"Also, as for {earlier[0]} above: {openings}")
    return " ".join(kept)


# How many words of a sentence said once already name it ("But Axolotl's guide tries layer...").
_OPENING_WORDS = 6


def _brief_kept(rec: Any, reason: str) -> set[int]:
    """The paragraphs of `reason` (1 = the second) the summary's short form keeps beside the first."""
    return {i for runner in rec.runner_ups if runner.reason == reason for i in runner.brief_keep}


def runner_up_beyond(rec: Any, reason: str, *, brief: bool = True) -> list[str]:
    """What "why not X?" adds to the summary's paragraph on X (`_runner_up_table`).

    The paragraphs the summary left out (all of them were shown when it was not `brief`), then X's
    own figures beside the chosen layout's, from the tables the summary prints.
    """
    whole = reason.split("\n")
    short = next((r.brief for r in rec.runner_ups if r.reason == reason and r.brief), reason).split("\n")
    keep = _brief_kept(rec, reason)
    # What the summary left out: the paragraphs it did not print, and those it printed shortened, in full.
    said = [
        join_units(part)
        for i, part in enumerate(whole)
        if brief and ((i > 0 and i not in keep) or (i < len(short) and short[i] != part and (i == 0 or i in keep)))
    ]
    chosen_key = str(rec.settings.get("strategy"))
    estimates, speeds = rec.facts.estimates or {}, rec.facts.speeds
    chosen = estimates.get(chosen_key) if not rec.refused else None
    against = "the chosen {}"
    if chosen is not None and not chosen.fits and (lever := suggested_lever(chosen_key, estimates)) is not None:
        # A brought JSON run as written past the usable memory: the figures that matter are those of
        # the edit the wizard suggests for it (ds_config.suggested.json), not of a layout that does not fit.
        against = f"the {{}} of {SUGGESTED_JSON} (your JSON as written does not fit)"
        chosen_key, chosen = lever, estimates[lever]
    beside = ""  # the chosen layout's figures, the same after every runner-up's
    if chosen is not None:
        mine = f"{to_gib(chosen.total)} GiB"
        if chosen.transient and chosen.peak > chosen.budget:
            mine += f" ({sum_gib(chosen.total, chosen.transient)} GiB for a moment)"
        if chosen.host_per_node:
            mine += f" and {to_gib(chosen.host_per_node)} GiB of host RAM"
        if (now := speeds.get(chosen_key)) is not None:
            mine += f", {band_text(now)}"
            if now.host_bytes:
                mine += f" with {now.host_gib} GiB over PCIe per GPU per optimizer step"
        beside = f"; {against.format(chosen.title or STRATEGY_TITLES.get(chosen_key, chosen_key))}: {mine}"
    shown: set[str] = set()
    for runner in rec.runner_ups:
        est = estimates.get(str(runner.strategy))
        if runner.reason != reason or est is None or runner.strategy in (chosen_key, *shown):
            continue
        shown.add(str(runner.strategy))  # One GPU and DDP share a row where they share a reason
        name = est.title or STRATEGY_TITLES.get(str(runner.strategy), str(runner.strategy))
        if runner.strategy == "ddp" and rec.facts.workload is not None and rec.facts.workload.world_size > 1:
            # The row's figures and step are DDP's on every GPU, not one GPU's alone ("DDP / 1 GPU").
            name = f"DDP on all {rec.facts.workload.world_size} GPUs"
        words = words_for(est.device)
        figures = f"about {to_gib(est.total)} GiB {words.per} of {to_gib(est.budget)} GiB usable"
        if est.transient and est.peak > est.budget:
            figures += f" ({sum_gib(est.total, est.transient)} GiB for a moment as the backward pass starts)"
        if est.host_per_node:
            figures += f", {to_gib(est.host_per_node)} GiB of host RAM per machine"
        # A step time only for a layout that could run: one that does not fit has none to compare. Host RAM
        # short only by the 1.5x pinned-buffer allowance is a try, as the suggested JSON beside it is.
        allowance_only = bool(est.host_memory) and short_by_allowance(est, est.host_memory / GIB)
        if est.host_fits is False and allowance_only:
            figures += " (short only by the 1.5x allowance)"
        runs = est.fits and (est.host_fits is not False or allowance_only)
        if (step := speeds.get(str(runner.strategy))) is not None and runs:
            figures += f", about {band_text(step)} per optimizer step"
            if step.host_bytes:
                figures += f" with {step.host_gib} GiB over PCIe per GPU per optimizer step"
        said.append(join_units(f"{name} in figures: {figures}{beside}."))
    return said


def _rule_char(console: Console) -> str:
    """The character of the lines around a file: a box-drawing rule, or "-" on an ASCII console."""
    try:
        "─".encode(console.encoding)
    except (UnicodeEncodeError, LookupError):
        return "-"
    return "─"


def _file_rule(console: Console, path: str | None = None) -> Text:
    """The line above a previewed file (with its path) or below it (without).

    Above: "── /out/accelerate_config.yaml ───". A path too long for one line is cut into pieces
    of the line's width, each piece on a line of its own indented under the first, so the name
    stays whole and reads as one (rich would wrap it at the space after the leading rule).
    """
    rule = _rule_char(console)
    width = max(min(console.width, 80), 20)
    if path is None:
        return Text(rule * width, style="dim")
    room = width - 3
    pieces = [path[i : i + room] for i in range(0, len(path), room)] or [""]
    head = Text(rule * 2 + " ", style="dim")
    for index, piece in enumerate(pieces):
        if index:
            head.append("\n   ")
        head.append(piece, style="bold")
    tail = width - 3 - cell_len(pieces[-1]) - 1
    head.append(" " + rule * tail if tail >= 2 else "\n   " + rule * 2, style="dim")
    return head


# A header shorter than this is shown whole: a note in its place would save nothing.
HEADER_SHOWN = 6


def split_header(text: str) -> tuple[str, int, str]:
    """A written file as a dry run previews it: its first lines, how many header lines are left out, the rest.

    Every file opens with the same header (templates/_header.j2): a "Generated by backend-wizard"
    line, then the decision's reasons, sources and warnings, up to a bare "#" line. The summary has
    just printed all of that, so the preview keeps the first line and leaves the rest of the header
    out, saying how many lines it leaves; the file on disk keeps them all. (0, "") when there is
    no such header.
    """
    lines = text.splitlines(keepends=True)
    first = next((i for i, line in enumerate(lines[:3]) if line.startswith("# Generated by backend-wizard")), None)
    if first is None:
        return text, 0, ""
    end = next((i for i in range(first + 1, len(lines)) if lines[i].rstrip("\n") == "#"), None)
    if end is None or end - first - 1 < HEADER_SHOWN:
        return text, 0, ""
    return "".join(lines[: first + 1]), end - first - 1, "".join(lines[end:])


def _print_code(console: Console, text: str, lexer: str) -> None:
    """File contents exactly as written: highlighted, unindented, and never wrapped by rich.

    A line wider than the terminal is left to the terminal to wrap (soft wrap), so a selection
    copied from the screen is the file's own line, and no continuation line appears that could be
    mistaken for content (a wrapped comment would lose its "#", a wrapped command would run split).
    """
    # Without colours (a pipe, a file, NO_COLOR) highlighting would only be thrown away: skipped.
    code = Syntax(text, lexer, background_color="default").highlight(text) if console.color_system else Text(text)
    code.rstrip()
    console.print(code, soft_wrap=True)


def _print_files(console: Console, result: Result, dry_run: bool, *, detail: bool = False) -> None:
    by_path = {str(a.path): a for a in result.actions}
    # The title is its own line: as a table title it would wrap at the (narrow) table's width.
    console.print(Text("Would write (dry run, nothing written)" if dry_run else "Files", style="italic"))
    table = _list_table(None)
    for action in result.actions:
        style = _ACTION_STYLE[action.action]
        table.add_row(f"[{style}]{action.action}[/]", escape(str(action.path)))
    console.print(table)
    if dry_run:
        for file in result.files:
            action = next(a for p, a in by_path.items() if p.endswith(file.name))
            lexer = "json" if file.name.endswith(".json") else "bash" if file.name.endswith(".sh") else "yaml"
            if file.name.endswith(".py"):
                lexer = "python"
            # No side borders: what is between the two rules can be selected and pasted as it is.
            console.print(_file_rule(console, str(action.path)))
            head, left_out, body = split_header(file.text)
            _print_code(console, head, lexer)
            if left_out:
                # Not a line of the file: dimmed and in brackets, so a copied preview is not taken for it.
                console.print(
                    Text(f"  [{left_out} more header lines in the file: the reasons and warnings in full]", style="dim")
                )
                _print_code(console, body, lexer)
            console.print(_file_rule(console))
            if action.diff:
                _print_code(console, action.diff, "diff")
        if result.conflicts:
            count = len(result.conflicts)
            console.print(
                f"{count} existing file{'s differ' if count > 1 else ' differs'} (the diff is above): a run without"
                " --dry-run leaves them as they are unless --force is given."
            )
    else:
        for action in result.actions:
            if action.action in (OVERWRITE, CONFLICT) and action.diff:
                _print_code(console, action.diff, "diff")
    if not dry_run and not result.conflicts:
        launch = next((a.path for a in result.actions if a.path.name == "launch.sh"), None)
        if launch is not None:
            answers = result.session.answers
            target = answers["target"]
            command = f"{launch} YOUR_TRAINING_SCRIPT.py" if target == "accelerate" else str(launch)
            intro, under_slurm = "run", None
            commands = [command]
            machines = int(result.recommendation.settings.get("num_machines") or 1)
            if machines > 1 and not answers.get("use_ray"):
                # Each machine runs the same script with its own rank (launch.sh refuses without it),
                # from the folder copied to the same path everywhere. One short line per machine (a
                # shell comment names it), so that no command wraps at 80 columns.
                rank = "MACHINE_RANK" if target == "accelerate" else "NODE_RANK"
                script = " YOUR_TRAINING_SCRIPT.py" if target == "accelerate" else ""
                intro = (
                    f"on every machine, from this folder at the same path, best on storage the machines share"
                    f" (here {launch.parent})"
                )
                # The command with the absolute path: a relative one names nothing on another machine.
                commands = [f"cd {launch.parent.resolve()}"]
                if not answers.get("main_process_ip"):
                    commands.append("export MAIN_PROCESS_IP=<machine 0's address>")
                if machines <= 4:
                    commands += [f"{rank}={n} ./launch.sh{script}  # on machine {n}" for n in range(machines)]
                else:
                    commands.append(f"{rank}=<0..{machines - 1}> ./launch.sh{script}")
                sbatch = next((a.path for a in result.actions if a.path.name == "slurm.sbatch"), None)
                if sbatch is not None:
                    script = " YOUR_TRAINING_SCRIPT.py" if target == "accelerate" else ""
                    under_slurm = (f"or under SLURM, from {sbatch.parent}:", f"sbatch slurm.sbatch{script}")
            if target == "axolotl":
                # The starter config names no real dataset or model: running it as written fails.
                config = next((a.path for a in result.actions if a.path.name == "axolotl.yaml"), None)
                text = next((f.text for f in result.files if f.name == "axolotl.yaml"), "")
                if config is not None and "REPLACE-ME" in text:
                    intro = f"replace the REPLACE-ME values in {config}, then {intro}"
            suggested = next((a.path for a in result.actions if a.path.name == SUGGESTED_JSON), None)
            next_said = False  # the "Next:" heading printed already, with a command of its own before these
            close_fix: str | None = None  # a close call's fix, said before the launch
            plain_intro = intro  # the launch's words without that fix
            # A brought JSON that needs more than the GPU itself: its set is for other GPUs, so no smoke here.
            unrunnable = False
            if runs_past_fit(result.recommendation) and answers.get("deepspeed_config"):
                # A brought JSON run as written past the usable memory: the files are written, but
                # the launch is a try, not a plan (the warnings and levers above say what fits).
                fix = (
                    f"; {suggested} has the change the warning above proposes: give it as deepspeed_config"
                    f" (--set deepspeed_config={suggested}) and run the wizard again to check it;"
                    if suggested is not None
                    else ","
                )
                chosen = chosen_estimate(result.recommendation)
                if (again := suggested_rerun(result)) is not None:
                    # More than the GPU itself: the command that checks the suggested JSON comes first, as
                    # the next step; the files written here run the JSON as written, on a GPU it fits.
                    console.print(
                        wrapped_markup(
                            "[bold]Next:[/] your JSON cannot run as written on these GPUs: it needs more than"
                            f" the GPU itself (see above). {escape(SUGGESTED_JSON)} makes the change the warning above"
                            " proposes; check it with the wizard, into a folder of its own:"
                        )
                    )
                    _print_command(console, shlex.join(["backend-wizard", *again]), indent=2)
                    # Said as an instruction first: a newcomer may otherwise run launch.sh on these GPUs.
                    # How much more: the card whose usable share holds the JSON as written.
                    needs = (
                        f" at least {chosen.card_needed_gib} GiB each (its"
                        f" {to_gib(chosen.total)} GiB within the usable {chosen.share:.0%})"
                        if chosen is not None
                        else " more memory"
                    )
                    # launch.sh checks the cards itself on NVIDIA GPUs (render/context.py's memory_guard).
                    checks = (
                        f" (on NVIDIA GPUs with less, {launch.name} itself stops before launching)"
                        if answers.get("hardware") == "nvidia" and chosen is not None
                        else ""
                    )
                    # No launch command under it: a command printed beside "do not run it" would be copied.
                    intro = (
                        f"The other files run your JSON as written, which needs GPUs with{needs}: do not run"
                        f" {launch.name} on these GPUs{checks}"
                    )
                    commands = []
                    next_said = unrunnable = True
                elif chosen is not None and chosen.past_device:
                    unrunnable = True
                    # More than the GPU itself: no "try": the files run it as written only for a GPU it fits.
                    checks = (
                        f" ({launch.name} itself stops before launching on NVIDIA GPUs with less than"
                        f" {chosen.card_needed_gib} GiB)"
                        if answers.get("hardware") == "nvidia"
                        else ""
                    )
                    intro = (
                        f"your JSON cannot run as written on these GPUs: it needs more than the GPU itself (see"
                        f" above){fix}"
                        f" the files written run your JSON as it is, for a GPU it fits{checks}; there, {intro}"
                    )
                else:
                    intro = f"your JSON does not fit by this estimate (see above){fix} to try yours anyway, {intro}"
            elif runs_past_host(result.recommendation) and answers.get("deepspeed_config"):
                # The same for host RAM: its offload needs more than the usable part by the estimate.
                fix = (
                    f"; {suggested} has the change the warning above proposes (--set deepspeed_config={suggested});"
                    if suggested is not None
                    else ", so"
                )
                intro = (
                    f"your JSON's offload needs more host RAM than this estimate allows (see above){fix} to try it"
                    f" anyway, watching free -g, {intro}"
                )
            elif suggested is not None and answers.get("deepspeed_config"):
                # It fits, but its overlap_comm buffers take it past the usable line: the suggested JSON is the
                # same layout with smaller buckets, the first thing to check.
                intro = (
                    f"your JSON's overlap_comm buffers take it past the usable line (see above): {suggested} is"
                    f" yours with smaller buckets; give it as deepspeed_config (--set deepspeed_config={suggested})"
                    f" and run the wizard again to check it; to run yours as written, {intro}"
                )
            elif runs_close_call(result.recommendation):
                # A close call: "run" alone would send the reader past the Risk line's fix to the launch.
                chunked = chunked_lever(result)
                first = f"switch to {chunked.change.split(MICRO_AT)[0]}" if chunked else "take the Risk line's advice"
                # In a numbered list the fix is a step of its own, the first; in a sentence it leads the launch.
                chosen_close = chosen_estimate(result.recommendation)
                may = chosen_close.may if chosen_close is not None else "may"
                close_fix = (
                    f"{first[:1].upper()}{first[1:]}: as configured, the run {may} run out of memory at the backward"
                    " pass of its first full-length batch."
                )
                intro = (
                    f"first {first}, or the run {may} run out of memory at the backward pass of its first full-length"
                    f" batch; then {intro}"
                )
            # Before renting time on the real machine: a few steps of this very set, measured (smoke
            # runs supervised steps, so not for a DPO set). smoke runs one machine's set: none is
            # offered for the others.
            before: list[tuple[str, str]] = []  # (what to do, its command), in the order to do it
            if result.session.answers.get("objective") != "dpo" and machines == 1 and not unrunnable:
                origin = result.recommendation.facts.origin
                # smoke builds the model from its config.json; a size has none, so it runs a scaled-down
                # model of the same layer shape (--tiny).
                gpu_only = result.session.answers.get("method") == "qlora" and shutil.which("nvidia-smi") is None
                # A catalogue model's config ships with the wizard: on the GPU machine smoke runs it at its
                # own size, which is what tests the memory; here it runs a scaled-down copy.
                tiny = origin is None or origin.source == "size" or (origin.source == "catalog" and not gpu_only)
                hardware = str(result.session.answers.get("hardware", "nvidia"))
                before.append(
                    _smoke_step(launch, tiny=tiny, gpu_only=gpu_only, mac=hardware == "mps", hardware=hardware)
                )
                if hardware == "mps" and (measure := _mac_measure_step(result, launch)) is not None:
                    before.append(measure)
            if before:
                # The steps in the order they come, the launch last: a reader follows a list top down, and
                # the tests that cost nothing come before the run that costs GPU hours.
                console.print(wrapped_markup("[bold]Next[/], in this order:"))
                # "run" alone reads as a bare verb at the end of a list: the step says what runs.
                said = plain_intro if close_fix else intro  # the close call's fix is a step of its own here
                last = (
                    ("Run your own training script" if target == "accelerate" else "Run the training")
                    if said == "run"
                    else said[:1].upper() + said[1:]
                )
                fix_step = [(close_fix, "")] if close_fix else []
                steps = [*fix_step, *before, (f"{last}:", "\n".join(commands))]
                for number, (words, command) in enumerate(steps, 1):
                    console.print(_numbered_step(number, words))
                    for line in command.splitlines():
                        _print_command(console, line, indent=3)
            else:
                # The words wrap between words; each command stands alone on its own line, not wrapped by
                # rich, so the terminal's own soft wrap keeps it whole when copied.
                # Without a command (a JSON that cannot run on these GPUs), the words end the sentence.
                end = ":" if commands else "."
                console.print(
                    wrapped_markup(f"{escape(intro)}{end}" if next_said else f"[bold]Next:[/] {escape(intro)}{end}")
                )
                for line in commands:
                    _print_command(console, line, indent=2)
            if target == "axolotl" and machines > 1 and not answers.get("use_ray"):
                # Each launch.sh tokenizes into dataset_prepared_path first: one folder shared by the
                # machines would be written by all of them at once.
                console.print(
                    wrapped_markup(
                        "Where this folder is on storage the machines share, start every machine but machine 0 with"
                        " SKIP_PREPROCESS=1 as well, so that only machine 0 tokenizes the dataset."
                    )
                )
            if under_slurm is not None:
                console.print(wrapped_markup(escape(under_slurm[0])))
                _print_command(console, under_slurm[1], indent=2)
        saved = next((a.path for a in result.actions if a.path.name == "answers.yaml"), None)
        if saved is not None:
            print_more(console, str(saved), steps=bool(result.recommendation.facts.speeds), trace_follows=detail)


def suggested_rerun(result: Result) -> list[str] | None:
    """The wizard's arguments that plan the suggested JSON into a folder of its own, or None.

    Only where a brought JSON cannot run as written on these GPUs (more than the GPU itself) and the
    files, ds_config.suggested.json and answers.yaml among them, were written: the next step the summary
    gives, and the one an interactive run offers to take at once.
    """
    chosen = chosen_estimate(result.recommendation) if not result.recommendation.refused else None
    if chosen is None or not chosen.past_device or not result.session.answers.get("deepspeed_config"):
        return None
    paths = {a.path.name: a.path for a in result.actions}
    suggested, replay, launch = paths.get(SUGGESTED_JSON), paths.get("answers.yaml"), paths.get("launch.sh")
    if suggested is None or replay is None or launch is None:
        return None
    folder = str(launch.parent) + "-suggested"
    return ["--answers", str(replay), "--set", f"deepspeed_config={suggested}", "--output-dir", folder]


def _print_command(console: Console, line: str, *, indent: int) -> None:
    """A command of Next on its own line, or, past the width, broken before its options with backslashes.

    The terminal's soft wrap would cut a long command inside a word ("meta-llama" / "/Llama-3.2-3B"); the
    continuation lines keep each argument whole and still paste into a shell as one command. A line with a
    comment after it is printed as it is (a comment is no argument to break before).
    """
    pad = " " * indent
    try:
        # Only a plain command with options is broken: one whose words join back to the same line (no shell
        # operator such as && that quoting would change) and that has an option to break before.
        plain = shlex.join(shlex.split(line)) == line and " --" in line
    except ValueError:
        plain = False
    parts = command_lines(line, console.width - indent) if plain and len(line) + indent > console.width else []
    # Whole where it fits, or where an argument is longer than the line itself (a deep path): broken lines would
    # not fit either.
    if not parts or any(len(part) + indent > console.width for part in parts):
        console.print(f"{pad}{escape(line)}", soft_wrap=True)
        return
    for part in parts:
        # Text, not markup: markup's escape doubles a trailing backslash, the continuation itself.
        console.print(Text(f"{pad}{part}"), soft_wrap=True, highlight=False)


def _numbered_step(number: int, said: str) -> RenderableType:
    """One step of "Next": its number, and its words indented under it."""
    table = Table.grid(padding=(0, 1))
    table.add_column(justify="right", style="yellow", no_wrap=True)
    table.add_column()
    table.add_row(f"{number}.", wrapped_markup(escape(said)))
    return table


def _mac_measure_step(result: Result, launch: Path) -> tuple[str, str] | None:
    """On a Mac, where smoke runs on the CPU: the written snippet's --model run, which measures the Mac itself."""
    snippet = next((a.path for a in result.actions if a.path.name == SNIPPET), None)
    written = next((f for f in result.files if f.name == SNIPPET), None)
    if snippet is None or written is None or "StepMeter" not in written.text:
        return None
    model = snippet_model(result.session.answers) or "YOUR_MODEL"
    # A gated repository stops the download with a 401 before the first step: said where the command is.
    gated = (
        f" ({model} is most likely gated: accept its licence on https://huggingface.co/{model} and run hf auth"
        " login first)"
        if model.startswith(GATED_PREFIXES)
        else ""
    )
    said = (
        f"Measure the Mac itself, still before your own script: {SNIPPET} trains your model for a few steps on"
        " random tokens at the planned sizes and prints the seconds per optimizer step and the memory the Mac"
        f" held, beside the estimate{gated}:"
    )
    return said, f"{shlex.quote(str(launch))} {shlex.quote(str(snippet))} --model {shlex.quote(model)} --steps 5"


def _smoke_step(
    launch: Path,
    *,
    tiny: bool = False,
    gpu_only: bool = False,
    mac: bool = False,
    hardware: str = "nvidia",
) -> tuple[str, str]:
    """The step that runs this set for a few steps here, beside the estimate (`tiny`: with --tiny), and its command.

    `gpu_only`: the set cannot run on this machine (QLoRA's 4-bit base needs a CUDA GPU, and no
    nvidia-smi is here), so the command is offered for the GPU machine instead. `mac`: smoke runs a
    Mac's set on its CPU (its device choice is a CUDA GPU or the CPU), which proves the launch only.
    """
    if mac:
        said = (
            "Test the launch here for a few steps (smoke runs it on the CPU, not on MPS: it proves the launch and"
            " its settings, not bf16 on MPS or the memory):"
        )
    else:
        where = (
            "On the GPU machine (QLoRA's 4-bit base needs a CUDA GPU, which this machine has not), test the plan"
            " for a few steps there"
            if gpu_only
            else "Test the setup here for a few steps"
        )
        # --tiny proves what the processes resolve, never the memory (its states are too small to
        # test the estimate): the line says so rather than promise a memory check it cannot give.
        where_memory = (
            ", which a run without --tiny tests here"
            if hardware == "cpu"
            else ", which smoke DIR --device gpu tests on the GPU machine"
            if hardware in GPU_HARDWARE
            else ""
        )
        what = (
            f"world size, backend, precision; a --tiny model cannot test the memory{where_memory}"
            if tiny and not gpu_only
            else "what the processes resolve and the memory they hold, against the estimate"
        )
        said = f"{where} ({what}):"
    # smoke runs the set with the real launcher: on the machine it runs on, the files' packages must be installed.
    said = said.removesuffix(":") + (
        "; it needs the packages of the install list on that machine too:"
        if gpu_only
        else "; it needs the packages of the install list on this machine too:"
    )
    flag = " --tiny" if tiny or mac else ""
    return said, f"backend-wizard smoke {shlex.quote(str(launch.parent))}{flag}"


def print_more(
    console: Console, answers: str, overrides: Sequence[str] = (), *, steps: bool = True, trace_follows: bool = False
) -> None:
    """The closing pointer to `explain` on an answers file (with the run's --set values), and to the glossary.

    `steps`: whether the run has a step-time table to promise (none on a Mac or a CPU).
    `trace_follows`: --explain prints the walk through the rules right below, so only the glossary is named.
    """
    if trace_follows:
        console.print(wrapped_markup("[dim]More: backend-wizard glossary TERM explains any term above or below.[/]"))
        return
    sets = "".join(f" --set {shlex.quote(value)}" for value in overrides)
    also = "the memory breakdown and the step-time table" if steps else "the memory breakdown"
    console.print(
        wrapped_markup(
            f"[dim]More: backend-wizard explain --answers {escape(shlex.quote(answers))}{escape(sets)}"
            f" walks through the decision rule by rule, with {also};"
            " backend-wizard glossary TERM explains any term above.[/]"
        )
    )
