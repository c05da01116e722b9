"""The consoles the commands print with: rich, with no trailing spaces at the ends of lines.

Rich pads every line of a table, a tree or a panel to its full width; copied from a terminal
or written to a file those spaces come along. The writer below drops them as lines go out, and
keeps everything else (styles, the terminal check, the encoding) as the stream has it.

The console is made on first use: importing rich costs more than a whole ``--output json`` run
that never prints through it.
"""

from __future__ import annotations

import re
import sys
from typing import TYPE_CHECKING, Any, TextIO, cast

if TYPE_CHECKING:
    from rich.console import Console

# Spaces before a line end, possibly followed by the escape codes that close a style.
_TRAILING = re.compile(r" +((?:\x1b\[[0-9;]*m)*)(?=\n)")


class _Trimmed:
    """A text stream that writes through to `stream()` without spaces at the ends of lines."""

    def __init__(self, stderr: bool) -> None:
        self._stderr = stderr

    def _stream(self) -> TextIO:
        # Looked up at each write, so that a stream replaced later (a test's capture) is used.
        return sys.stderr if self._stderr else sys.stdout

    def write(self, text: str) -> int:
        self._stream().write(_TRAILING.sub(r"\1", text))
        return len(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream(), name)


class _LazyConsole:
    """A stand-in for a rich Console that makes the real one (and imports rich) on first use."""

    def __init__(self, stderr: bool) -> None:
        self._stderr = stderr
        self._console: Console | None = None

    def __getattr__(self, name: str) -> Any:
        if self._console is None:
            from rich.console import Console

            self._console = Console(file=_Trimmed(self._stderr), highlight=False)  # type: ignore[arg-type]
        return getattr(self._console, name)


def make_console(*, stderr: bool = False) -> Console:
    """A console for the CLI: no syntax highlighting of numbers, no trailing spaces; rich loads on first use."""
    return cast("Console", _LazyConsole(stderr))
