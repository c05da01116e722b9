"""Findings of `backend-wizard check`, printed with rich."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.text import Text

from wizard.checks import NOT_A_CONFIG, Finding
from wizard.ui.text_wrap import Hanging

_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}


def print_findings(console: Console, results: list[tuple[Path, str, list[Finding]]]) -> None:
    """Per file: a summary line, then each finding with its key, what is wrong, the fix and the source."""
    for path, fmt, findings in results:
        errors = sum(f.severity == "error" for f in findings)
        warnings = sum(f.severity == "warning" for f in findings)
        verdict = "[bold red]fails[/]" if errors else "[green]ok[/]"
        if fmt == NOT_A_CONFIG:
            console.print(f"[cyan]skipped[/] {escape(str(path))}: not a config this tool checks")
        else:
            console.print(f"{verdict} {escape(str(path))} ({fmt}): {errors} error(s), {warnings} warning(s)")
        for f in findings:
            style = _STYLE.get(f.severity, "")
            key = f.path or "(whole file)"
            # Wrapped lines go on under the finding's text, not at the margin, so each finding
            # reads as one item; a long key leaves the text too little room, and then they go on
            # under the key instead.
            lead = Text.assemble((f.severity, style), " ", (key, "bold"), ": ")
            console.print(Hanging(lead, f.message, indent=2, fallback=len(f.severity) + 1), highlight=False)
            detail = Text(f"{f.fix}  ", style="default")
            # The source as a word ("source: deepspeed"); the README's table of checks names its page.
            detail.append(f"(source: {f.tag})", style="dim")
            console.print(Hanging("fix: ", detail, indent=4), highlight=False)
