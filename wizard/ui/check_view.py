"""Findings of `backend-wizard check`, printed with rich."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.padding import Padding
from rich.text import Text

from wizard.checks import Finding

_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}


def print_findings(console: Console, results: list[tuple[Path, str, list[Finding]]]) -> None:
    """Per file: a summary line, then each finding with its key, what is wrong, the fix and the source."""
    for path, fmt, findings in results:
        errors = sum(f.severity == "error" for f in findings)
        warnings = sum(f.severity == "warning" for f in findings)
        verdict = "[bold red]fails[/]" if errors else "[green]ok[/]"
        console.print(f"{verdict} {escape(str(path))} ({fmt}): {errors} error(s), {warnings} warning(s)")
        for f in findings:
            style = _STYLE.get(f.severity, "")
            key = f.path or "(whole file)"
            console.print(f"  [{style}]{f.severity}[/] [bold]{escape(key)}[/]: {escape(f.message)}", soft_wrap=False)
            detail = Text(f"fix: {f.fix}  ", style="default")
            # The source as a word ("source: deepspeed"); the README's table of checks names its page.
            detail.append(f"(source: {f.tag})", style="dim")
            console.print(Padding(detail, (0, 0, 0, 4)))
