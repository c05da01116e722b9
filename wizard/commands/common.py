"""Helpers shared by the subcommands: answers from a file, --set and flags, through the same loop."""

from __future__ import annotations

import argparse
import os
import re
import sys

# Neither pathlib nor typing (nor the engine) is imported at the top: building the parser for
# `--help` needs none of them, and each costs start-up time (see bench/startup.py). mypy reads
# any name TYPE_CHECKING as its own flag.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path
    from typing import Any, NoReturn

    from wizard.engine.tree import Tree
    from wizard.session import Session


def terminal_columns() -> int:
    """The terminal's width as shutil.get_terminal_size gives it: $COLUMNS, the terminal, else 80.

    argparse asks shutil for it, and importing shutil (with bz2, lzma and fnmatch) costs `--help`
    a tenth of its start-up; os answers the same question.
    """
    try:
        columns = int(os.environ.get("COLUMNS", "0"))
    except ValueError:
        columns = 0
    if columns > 0:
        return columns
    try:
        return os.get_terminal_size(sys.__stdout__.fileno()).columns or 80  # type: ignore[union-attr]
    except (AttributeError, ValueError, OSError):
        return 80


def _wrap(text: str, width: int) -> list[str]:
    """Greedy word wrap at spaces, as textwrap.wrap would (without importing it), never inside a word.

    A word longer than the width stands on a line of its own rather than being cut: an option
    name or a path split in two could not be copied.
    """
    lines: list[str] = []
    line = ""
    for word in text.split():
        if line and len(line) + 1 + len(word) > width:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}" if line else word
    if line:
        lines.append(line)
    return lines


class HelpFormatter(argparse.HelpFormatter):
    """argparse's help layout, sized and wrapped without shutil or textwrap (start-up time)."""

    def __init__(self, prog: str, indent_increment: int = 2, max_help_position: int = 24, width: int | None = None):
        super().__init__(prog, indent_increment, max_help_position, terminal_columns() - 2 if width is None else width)

    def _split_lines(self, text: str, width: int) -> list[str]:
        return _wrap(text, width)

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        return "\n".join(indent + line for line in _wrap(text, max(width - len(indent), 1)))


def path_argument(text: str) -> Path:
    """An argument that names a file or folder (argparse's ``type``), as a Path.

    An empty one is refused: Path("") is the current folder, so `--output-dir "$UNSET"` would write
    wherever the command happens to run.
    """
    from pathlib import Path

    if not text:
        raise argparse.ArgumentTypeError("an empty path; give a file or folder name (use . for this folder)")
    return Path(text)


class Parser(argparse.ArgumentParser):
    """argparse, with whole option names only and a one-line error.

    No abbreviations (``--dry`` for ``--dry-run``): a script that relies on one breaks the day a
    new option shares its start. A mistake is one line naming the option, a did-you-mean where a
    known option is close, and where the help is, exit 2 as argparse's own.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        """Print one line and exit 2 (argparse prints its whole usage block first)."""
        hint = ""
        if message.startswith("unrecognized arguments: "):
            from wizard.engine.suggest import closest

            unknown = message.removeprefix("unrecognized arguments: ").split()[0].split("=")[0]
            known = [option for option in self._option_string_actions if option.startswith("--")]
            near = closest(unknown, known) if unknown.startswith("-") else None
            hint = f"; did you mean {near}?" if near else ""
            key = unknown.lstrip("-").replace("-", "_")
            if "--set" in known and unknown.startswith("--") and _answer_key(key):
                # An answer with no option of its own (--hardware): --set takes every answer.
                hint = f"; {key} is an answer: --set {key}=VALUE"
        self.exit(2, f"error: {self.prog}: {message}{hint} (see {self.prog} --help)\n")


def _answer_key(key: str) -> bool:
    """Whether `key` is a question of the bundled tree (False where the tree cannot be read)."""
    from wizard.app import load
    from wizard.errors import WizardError

    try:
        return load(None).question(key) is not None
    except WizardError:
        return False


def add_output_argument(parser: argparse.ArgumentParser) -> None:
    """--output text|json, the same for the main command and the subcommands that report."""
    parser.add_argument(
        "--output",
        choices=("text", "json"),
        default="text",
        help="text for people, json for scripts (default: %(default)s)",
    )


def add_answer_arguments(parser: argparse.ArgumentParser) -> None:
    """--answers, --set and --tree, as the main command has them."""
    parser.add_argument(
        "--answers",
        metavar="FILE",
        type=path_argument,
        help="answers file (YAML or JSON), as the wizard saves it or as in examples/ (default: none)",
    )
    parser.add_argument(
        "--set",
        metavar="KEY=VALUE",
        action="append",
        default=[],
        help="set one answer, such as --set gpu_model=A100 (repeatable; wins over --answers; KEY= with"
        " nothing after it drops that answer from the file, as if it were not there; default: none)",
    )
    parser.add_argument(
        "--tree",
        metavar="FILE",
        type=path_argument,
        help="use another decision tree file (default: the shipped decision_tree.yaml)",
    )


def collect_answers(
    args: argparse.Namespace,
    flags: dict[str, Any] | None = None,
    use_defaults: bool = True,
    file_drops: Sequence[str] = (),
) -> tuple[Tree, Session]:
    """Answers from --answers, then --set and `flags` (which win), and defaults; never prompts.

    `file_drops`: answers-file keys left unread (the hardware search sets them itself, so a file
    written for one machine still serves it).
    """
    from wizard.app import load_runnable
    from wizard.inputs import load_answers_file, parse_set_values, without_unset
    from wizard.session import Sources, collect

    tree = load_runnable(args.tree)
    kept, file_values = without_unset(
        parse_set_values(args.set), load_answers_file(args.answers) if args.answers else {}, tree.question_ids
    )
    file_values = {key: value for key, value in file_values.items() if key not in file_drops}
    set_values: dict[str, Any] = dict(kept)
    given = {key: value for key, value in (flags or {}).items() if value is not None}
    set_values.update(given)
    # An error about a value given by its own option names that option (--model), not --set.
    options = {key: f"--{key.replace('_', '-')}" for key in given}
    sources = Sources(set_values=set_values, file_values=file_values, use_defaults=use_defaults, options=options)
    session = collect(tree, sources)
    return tree, session


def whole_number(option: str, value: str | None, low: int, high: int) -> int | None:
    """A numeric option's value (None when not given), refused in one line outside ``low``-``high``.

    Read from the option's text here rather than by argparse's ``type=int``, so that any text, of
    any length, gets the same one-line refusal naming the option and the range (a bound range
    also keeps a huge count from overflowing the float arithmetic it feeds).
    """
    from wizard.errors import WizardError

    if value is None:
        return None
    text = value.strip()
    if re.fullmatch(r"[+-]?[0-9]{1,30}", text) and low <= int(text) <= high:
        return int(text)
    shown = repr(value) if len(value) <= 40 else f"{value[:20]!r}... ({len(value):,} characters)"
    raise WizardError(f"{option}: {shown} is not allowed; expected a whole number from {low:,} to {high:,}")
