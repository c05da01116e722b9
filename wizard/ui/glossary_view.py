"""Glossary entries, printed with rich."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console
from rich.markup import escape
from rich.padding import Padding
from rich.text import Text

from wizard.engine.glossary import Term


def print_glossary(console: Console, terms: Sequence[Term]) -> None:
    """Each term in bold, its other names, its definition and related terms."""
    for index, term in enumerate(terms):
        if index:
            console.print()
        aliases = f" [dim](also: {escape(', '.join(term.aliases))})[/]" if term.aliases else ""
        console.print(f"[bold]{escape(term.term)}[/]{aliases}")
        console.print(Padding(Text(term.definition), (0, 0, 0, 2)))
        if term.see:
            console.print(f"  [dim]See: {escape(', '.join(term.see))}[/]")
