"""The consoles the commands print with: rich, with no trailing spaces at the ends of lines.

Rich pads every line of a table, a tree or a panel to its full width; copied from a terminal
or written to a file those spaces come along. The writer below drops them as lines go out, and
keeps everything else (styles, the terminal check, the encoding) as the stream has it; a
character the stream's encoding cannot print is spelled plainly (see `plain_text`).

Plain output without a terminal or with NO_COLOR (https://no-color.org/): no escape codes at all.
A closed pipe (`backend-wizard ... | head`) ends the run quietly with exit 141, as the shell
reports a command that SIGPIPE stopped; see "Note on SIGPIPE" in the signal module's docs,
https://docs.python.org/3/library/signal.html#note-on-sigpipe.

The console is made on first use: importing rich costs more than a whole ``--output json`` run
that never prints through it.
"""

from __future__ import annotations

import errno
import functools
import os
import re
import sys

from wizard.errors import ExitCode
from wizard.ui.plain_text import fit_encoding

# typing and collections.abc only for the checker: `--help` imports this module, and typing alone
# costs it a sixth of its start-up (bench/startup.py). mypy reads any name TYPE_CHECKING as its flag.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, ParamSpec, TextIO

    from rich.console import Console

    P = ParamSpec("P")

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
        stream = self._stream()
        stream.write(fit_encoding(_TRAILING.sub(r"\1", text), getattr(stream, "encoding", None)))
        return len(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream(), name)


def _rich_console(stderr: bool) -> Console:
    """The real console, made on first use (this imports rich)."""
    from rich.console import Console

    class _Console(Console):
        """A rich console that lets a broken pipe reach `ends_quietly` (rich would exit with 1)."""

        def on_broken_pipe(self) -> None:
            """Stop printing, and let the caller end the run (see `ends_quietly`)."""
            self.quiet = True
            raise BrokenPipeError(errno.EPIPE, os.strerror(errno.EPIPE))

    # NO_COLOR set (to anything but "") turns off every style, not only colours: bold and dim are
    # escape codes too, and a user who asks for no colour asks for plain text.
    plain = os.environ.get("NO_COLOR", "") != ""
    return _Console(file=_Trimmed(stderr), highlight=False, **({"color_system": None} if plain else {}))  # type: ignore[arg-type]


class _LazyConsole:
    """A stand-in for a rich Console that makes the real one (and imports rich) on first use."""

    def __init__(self, stderr: bool) -> None:
        self._stderr = stderr
        self._console: Console | None = None

    def __getattr__(self, name: str) -> Any:
        if self._console is None:
            self._console = _rich_console(self._stderr)
        return getattr(self._console, name)


def make_console(*, stderr: bool = False) -> Console:
    """A console for the CLI: no syntax highlighting of numbers, no trailing spaces; rich loads on first use."""
    return _LazyConsole(stderr)  # type: ignore[return-value]  # it stands in for one


def ends_quietly(main: Callable[P, int]) -> Callable[P, int]:
    """Wrap a command's entry point: a reader that closed the pipe ends it quietly (exit 141).

    The output is flushed inside, so a broken pipe shows here and not at interpreter exit (as an
    "Exception ignored" line); then standard output and error are pointed at /dev/null so that
    nothing is written to the closed pipe again.
    """

    @functools.wraps(main)
    def run(*args: P.args, **kwargs: P.kwargs) -> int:
        try:
            code = main(*args, **kwargs)
            sys.stdout.flush()
            return code
        except BrokenPipeError:
            _silence()
            return int(ExitCode.BROKEN_PIPE)
        except KeyboardInterrupt:
            # Ctrl-C that the command did not catch itself (while it starts, say): one line, no
            # traceback. Where answers can be saved or files are written, the command catches it
            # first and says what it kept.
            sys.stderr.write("stopped: interrupted\n")
            return int(ExitCode.INTERRUPTED)

    return run


def _silence() -> None:
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        for stream in (sys.stdout, sys.stderr):
            try:
                os.dup2(devnull, stream.fileno())
            except (AttributeError, OSError, ValueError):
                continue  # not a file descriptor (a test's capture): nothing is left to break
    finally:
        os.close(devnull)
