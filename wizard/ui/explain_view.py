"""The decision trace, drawn as a tree for people who have never heard of ZeRO."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.text import Text
from rich.tree import Tree as RichTree

from wizard.engine.evaluate import TOOL_NAMES, Recommendation, TraceEntry, chosen_estimate
from wizard.engine.glossary import Term, term_as_listed, term_mentions
from wizard.engine.memory import UNDERSHOOT_PERCENT, memory_gib, sum_gib
from wizard.engine.sentences import sentences
from wizard.engine.tree import Tree
from wizard.engine.what_if import WhatIf
from wizard.installed import mac_plan_elsewhere
from wizard.ui.console import (
    LEVER_HOST_UNCHECKED,
    decision_memory_table,
    grouped_runner_ups,
    made_of,
    no_other_backend,
    peak_paragraph,
    warnings_list,
)
from wizard.ui.speed_view import no_band_line, speed_table, speed_words
from wizard.ui.text_wrap import Hanging, url_line, wrapped_markup


def shown_trace(rec: Recommendation) -> list[TraceEntry]:
    """The rules an explanation shows: those that could apply to this hardware, and the decision."""
    return [entry for entry in rec.trace if entry.held or not (entry.other_hardware or entry.other_tool)]


def explanation_text(tree: Tree, rec: Recommendation, what_ifs: Sequence[WhatIf], warnings: Sequence[str] = ()) -> str:
    """All the prose of an explanation, warnings included, for finding the terms it uses."""
    parts = [
        rec.because,
        *(r.reason for r in rec.runner_ups),
        *(w.change + " " + w.title for w in what_ifs),
        *warnings,
    ]
    for entry in shown_trace(rec):
        # A guideline is printed only under the rule that decided: only its words count.
        parts += [entry.title, *entry.sentences, *([entry.guidance_text] if entry.held else [])]
    if rec.backend:
        parts += [
            tree.backends[rec.backend].title_on(rec.hardware_id),
            tree.backends[rec.backend].summary_for(rec.settings.get("strategy")),
        ]
    return " ".join(parts)


def source_legend(tree: Tree, tags: Sequence[str]) -> list[tuple[str, str, str | None]]:
    """(tag, title, address) for each tag, in first-use order; the tree writes "Title https://...".

    A source without an address (the wizard's own estimate) has None there.
    """
    legend: list[tuple[str, str, str | None]] = []
    for tag in dict.fromkeys(tags):
        text = tree.sources.get(tag, tag)
        title, _, last = text.rpartition(" ")
        if last.startswith(("https://", "http://")) and title:
            legend.append((tag, title, last))
        else:
            legend.append((tag, text, None))
    return legend


def _failed_reason(entry: TraceEntry) -> str:
    """Why a rule that did not hold failed, as its first sentence says (a fallback where it has none)."""
    return entry.sentences[0] if entry.sentences and entry.sentences[0] else "its condition does not hold"


def _same_reason_runs(entries: Sequence[TraceEntry]) -> list[list[TraceEntry]]:
    """The trace in runs: rules next to each other that failed for the very same reason share a run."""
    runs: list[list[TraceEntry]] = []
    for entry in entries:
        last = runs[-1][-1] if runs else None
        if last is not None and not entry.held and not last.held and _failed_reason(entry) == _failed_reason(last):
            runs[-1].append(entry)
        else:
            runs.append([entry])
    return runs


def _trace_group(root: RichTree, group: Sequence[TraceEntry], numbers: dict[str, int]) -> None:
    """Rules next to each other that failed for the same reason: the reason once, then each rule's title.

    Said once above the titles rather than pointed to from each ("as above" chains, and the reader climbs it).
    """
    tags = {tag for entry in group for tag in entry.sources if tag in numbers}
    cited = ", ".join(str(n) for n in sorted({numbers[tag] for tag in tags}))
    tail = f" [dim]\\[{cited}][/]" if cited else ""
    branch = root.add(
        wrapped_markup(f"[red]✗[/] {len(group)} rules, for the same reason: {escape(_failed_reason(group[0]))}{tail}")
    )
    for entry in group:
        branch.add(wrapped_markup(f"[red]✗[/] {escape(entry.title[:1].upper() + entry.title[1:])}"))


def _trace_line(
    root: RichTree, entry: TraceEntry, numbers: dict[str, int], *, after_summary: bool = False, caveat: str = ""
) -> None:
    """One rule of the trace: "✗ <title>: <why not>" or "✓ <title>", and, dim, its sources' numbers.

    A rule that failed reads as the rule's own claim being unmet for this run (not its guideline
    being false); the guideline is said once, under the rule that decided. Sources are cited by
    number, as in a paper, and listed once at the end.
    """
    cited = ", ".join(str(n) for n in sorted({numbers[tag] for tag in entry.sources if tag in numbers}))
    tail = f" [dim]\\[{cited}][/]" if cited else ""
    title = escape(entry.title[:1].upper() + entry.title[1:])
    if not entry.held:
        reason = _failed_reason(entry)
        # Rules next to it that failed the same way are grouped under one reason (`_trace_group`).
        root.add(wrapped_markup(f"[red]✗[/] {title}: {escape(reason)}{tail}"))
        return
    branch = root.add(wrapped_markup(f"[green]✓[/] [bold]{title}[/]{tail}"))
    if caveat and entry.because:
        # The rule's "fits" is the estimate's; a close call is said under it, or the tick reads as a promise.
        branch.add(wrapped_markup(f"[yellow]{escape(caveat)}[/]"))
    for sentence in entry.sentences:
        if sentence:
            branch.add(wrapped_markup(escape(sentence)))
    branch.add(wrapped_markup(f"[dim]Guideline: {escape(entry.guidance_text)}[/]"))
    if entry.because and after_summary:
        # The summary's panel printed this decision's reasons in full just above: pointed to, not repeated.
        # Its first sentence, so the line says something; the rest is in the panel.
        first = sentences(entry.because)[0] if sentences(entry.because) else ""
        branch.add(
            wrapped_markup(f"[bold]Decision:[/] {escape(first)} (the rest: the Why in the summary's panel, above)")
        )
    elif entry.because:
        branch.add(wrapped_markup(f"[bold]Decision:[/] {escape(entry.because)}"))


def _close_call_caveat(rec: Recommendation) -> str:
    """Under the rule that decided a close call: that it fits by the estimate only, in the Risk line's words."""
    est = chosen_estimate(rec)
    if est is None or not est.close_call:
        return ""
    peak = sum_gib(est.total, est.transient)
    return (
        f"A close call: it fits by the estimate, but at this long context its peak of {peak} GiB as the backward pass"
        f" starts may really be up to {UNDERSHOOT_PERCENT} higher, about {est.real_peak_gib[1]} GiB, so it"
        f" {est.may} run out of memory on the GPU's {memory_gib(est.gpu_memory)} GiB (the note on the loss peak says"
        " what to change)."
    )


def print_explanation(
    console: Console,
    tree: Tree,
    rec: Recommendation,
    what_ifs: Sequence[WhatIf],
    warnings: Sequence[str] = (),
    answers: Mapping[str, Any] | None = None,
    *,
    after_summary: bool = False,
) -> list[Term]:
    """Print the trace, the runner-ups, the memory table, the levers, the warnings and the sources.

    `warnings` are the summary's (a caller that printed the summary already passes none).
    `after_summary`: the detailed summary above already showed the runner-ups, the tables and the
    levers, so only the trace, its sources and the terms follow. Returns the terms used.
    """
    root = RichTree("[bold]How the decision was made[/] (rules in order; the first one that holds decides)")
    skipped = sum(1 for entry in rec.trace if entry.other_hardware and not entry.held)
    if skipped:
        hardware = rec.hardware or "this hardware"
        root.add(
            wrapped_markup(
                f"[dim]{skipped} rules for other hardware were skipped: they cannot apply to {escape(hardware)}.[/]"
            )
        )
    other_tool = sum(1 for entry in rec.trace if entry.other_tool and not entry.held)
    if other_tool:
        # Rules for the other tool, counted as other hardware's are: their lines said only "for X runs only".
        name = TOOL_NAMES.get(str(rec.target), str(rec.target))
        other = next((title for key, title in TOOL_NAMES.items() if key != rec.target), "the other tool")
        rules = "rule" if other_tool == 1 else "rules"
        root.add(
            wrapped_markup(
                f"[dim]{other_tool} {rules} for {other} runs only {'was' if other_tool == 1 else 'were'} skipped:"
                f" this run launches with {escape(name)}.[/]"
            )
        )
    legend = source_legend(tree, [tag for entry in shown_trace(rec) for tag in entry.sources])
    numbers = {tag: index for index, (tag, _, _) in enumerate(legend, start=1)}
    for group in _same_reason_runs(shown_trace(rec)):
        if len(group) > 1:
            _trace_group(root, group, numbers)
        else:
            _trace_line(root, group[0], numbers, after_summary=after_summary, caveat=_close_call_caveat(rec))
    untested = len(tree.rules) - len(rec.trace)
    if untested:
        # Counted, so that the skipped and shown rules plus these add up to the whole tree.
        rules = "rule was" if untested == 1 else "rules were"
        tested = {entry.rule_id for entry in rec.trace}
        # Quoted: a title read as a sentence ("nothing above applies → no backend fits") would contradict the ✓.
        later = "; ".join(f'"{rule.title or rule.id}"' for rule in tree.rules if rule.id not in tested)
        # Named on GPUs, where they are the other layouts; elsewhere they are GPU rules, only counted.
        named = f": {escape(later)}" if rec.hardware_id in ("nvidia", "amd") else ""
        root.add(
            wrapped_markup(
                f"[dim]{untested} later {rules} not tested, since the first rule that holds decides{named}.[/]"
            )
        )
    console.print(root)
    if not after_summary:
        _print_details(console, rec, what_ifs, warnings, answers)
    if legend:
        console.print("[bold]Sources[/] (the numbers in brackets above)")
        for tag, title, address in legend:
            # "[2] Title ..." with its wrapped lines under the title's first letter, not the number.
            label = f"[{numbers[tag]}] "
            console.print(Hanging(label, title, indent=2), highlight=False)
            if address:
                # On a line of its own, under the title, and never wrapped or cut: a URL broken in
                # two cannot be opened or copied. One too long for the indent starts at the margin.
                line = url_line(address, 2 + len(label), console.width)
                console.print(Text(line), soft_wrap=True, highlight=False)
    prose = explanation_text(tree, rec, what_ifs, warnings)
    if rec.facts.estimates:
        # The table's row names and legend count too (ZeRO-2, optim->CPU, activations, ...).
        table = decision_memory_table(rec).renderables[0]
        labels = " ".join(est.label for est in rec.facts.estimates.values())
        prose += f" {labels} {getattr(table, 'caption', '') or ''}"
    # The step-time table's words too (TFLOPS, NVLink, gradient accumulation, bound by, ...).
    prose += " " + speed_words(rec)
    mentions = term_mentions(prose)
    used = [term for term, _ in mentions]
    if used:
        names = ", ".join(term_as_listed(term, words) for term, words in mentions)
        console.print(f"[bold]Terms used:[/] {escape(names)} — `backend-wizard glossary TERM` explains each.")
    return used


def _print_details(
    console: Console,
    rec: Recommendation,
    what_ifs: Sequence[WhatIf],
    warnings: Sequence[str],
    answers: Mapping[str, Any] | None,
) -> None:
    """The runner-ups, the memory table and its parts, the step times, the levers and the warnings."""
    if rec.runner_ups:
        others = RichTree("[bold]Why not the other backends[/]")
        for title, reason in grouped_runner_ups(rec):
            others.add(wrapped_markup(f"[bold]{escape(title)}[/]: {escape(reason)}"))
        console.print(others)
    elif not rec.refused:
        console.print(f"[bold]Why not the other backends:[/] {escape(no_other_backend(rec))}")
    if rec.facts.estimates:
        console.print(decision_memory_table(rec))
        if (parts := made_of(rec, answers)) is not None:
            console.print(wrapped_markup(escape(parts)))
        if answers is not None and (peak := peak_paragraph(answers, rec)) is not None:
            console.print(peak)
    if (speeds := speed_table(rec)) is not None:
        console.print(speeds)
    elif (no_band := no_band_line(rec)) is not None:
        console.print(wrapped_markup(f"[dim]{escape(no_band)}[/]"))
    if what_ifs:
        levers = RichTree("[bold]To get a different answer[/]")
        for item in what_ifs:
            levers.add(wrapped_markup(f"with {escape(item.change)}: {escape(item.title)}{escape(item.size)}"))
        if any(item.host_unchecked for item in what_ifs):
            levers.add(Text(LEVER_HOST_UNCHECKED, style="dim"))
        console.print(levers)
    if warnings:
        console.print(warnings_list(warnings, mac_elsewhere=answers is not None and mac_plan_elsewhere(answers)))


def print_answers_used(console: Console, tree: Tree, answers: Mapping[str, Any], origins: Mapping[str, str]) -> None:
    """One dim line with every answer the explanation rests on, defaults marked as such."""
    given = ", ".join(
        f"{qid} {_plain(answers[qid])}"
        + (
            # As the summary says it: worked out from the other answers, the GPU's memory from the named model.
            f" (worked out from gpu_model {answers['gpu_model']})"
            if origins.get(qid) == "default" and qid == "gpu_memory_gb" and answers.get("gpu_model")
            # Layer offloading the run needs is the memory estimate's verdict, not a fixed default.
            else " (worked out by the memory estimate)"
            if origins.get(qid) == "default" and qid == "layer_offloading" and answers.get(qid) is True
            else " (worked out from model and sequence_length)"
            if origins.get(qid) == "default" and qid == "gradient_checkpointing"
            # A micro-batch planned for a given global batch is the wizard's pick for it, not a fixed default.
            else f" (picked for global_batch_size {answers['global_batch_size']})"
            if origins.get(qid) == "default"
            and qid == "micro_batch_size"
            and origins.get("global_batch_size") not in (None, "default")
            and answers.get("global_batch_size") is not None
            else " (default)"
            if origins.get(qid) == "default"
            else ""
        )
        for qid in tree.question_ids
        if answers.get(qid) is not None
    )
    console.print(Text(f"Answers: {given}.", style="dim"))


def _plain(value: object) -> str:
    """An answer as a person writes it: yes/no for booleans."""
    return ("yes" if value else "no") if isinstance(value, bool) else str(value)
