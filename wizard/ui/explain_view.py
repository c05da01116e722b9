"""The decision trace, drawn as a tree for people who have never heard of ZeRO."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console
from rich.markup import escape
from rich.tree import Tree as RichTree

from wizard.engine.evaluate import Recommendation
from wizard.engine.glossary import Term, terms_in
from wizard.engine.tree import Tree
from wizard.engine.what_if import WhatIf
from wizard.ui.console import memory_table


def explanation_text(tree: Tree, rec: Recommendation, what_ifs: Sequence[WhatIf]) -> str:
    """All the prose of an explanation, for finding the terms it uses."""
    parts = [rec.because, *(r.reason for r in rec.runner_ups), *(w.change + " " + w.title for w in what_ifs)]
    for entry in rec.trace:
        parts += [*entry.sentences, entry.guidance_text]
    if rec.backend:
        parts += [tree.backends[rec.backend].title, tree.backends[rec.backend].summary]
    return " ".join(parts)


def print_explanation(console: Console, tree: Tree, rec: Recommendation, what_ifs: Sequence[WhatIf]) -> list[Term]:
    """Print the trace, the runner-ups, the memory table and the levers; return the terms used."""
    root = RichTree("[bold]How the decision was made[/] (rules in order; the first one that holds decides)")
    for entry in rec.trace:
        mark = "[green]✓ holds[/]" if entry.held else "[red]✗ does not hold[/]"
        sources = f" [dim]\\[{escape(', '.join(entry.sources))}][/]" if entry.sources else ""
        branch = root.add(f"{mark} [bold]{entry.rule_id}[/] — {entry.guidance}: {escape(entry.guidance_text)}{sources}")
        for sentence in entry.sentences:
            branch.add(escape(sentence))
        if entry.because:
            branch.add(f"[bold]Decision:[/] {escape(entry.because)}")
    console.print(root)
    if rec.runner_ups:
        others = RichTree("[bold]Why not the other backends[/]")
        for runner in rec.runner_ups:
            others.add(f"[bold]{escape(runner.title)}[/]: {escape(runner.reason)}")
        console.print(others)
    if rec.facts.estimates:
        console.print(memory_table(rec.facts.estimates, {str(rec.settings.get("strategy"))}))
    if what_ifs:
        levers = RichTree("[bold]To get a different answer[/]")
        for item in what_ifs:
            size = f" (about {item.gib_per_gpu} GiB per GPU)" if item.gib_per_gpu is not None else ""
            levers.add(f"with {escape(item.change)}: {escape(item.title)}{size}")
        console.print(levers)
    used = terms_in(explanation_text(tree, rec, what_ifs))
    if used:
        names = ", ".join(t.term for t in used)
        console.print(f"[bold]Terms used:[/] {escape(names)} — `backend-wizard glossary TERM` explains each.")
    return used
