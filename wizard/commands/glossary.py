"""`backend-wizard glossary [TERM ...]`: short definitions of the terms the explanations use."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from wizard.engine.glossary import Term, glossary, lookup, suggest
from wizard.errors import WizardError
from wizard.ui.console import print_error
from wizard.ui.glossary_view import print_glossary, print_term_list

if TYPE_CHECKING:
    from collections.abc import Sequence

    from rich.console import Console


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The glossary subcommand's options."""
    parser.add_argument(
        "term",
        nargs="*",
        metavar="TERM",
        help=(
            "terms to define, each in turn; case, spaces, hyphens and underscores do not matter. Quote a"
            ' term of several words ("full copy"); unquoted words that together name a term are read as'
            " one. Unknown terms are reported after the known ones, with exit code 2. Without a term:"
            " the list of terms"
        ),
    )
    parser.add_argument(
        "--all", action="store_true", help="print every definition, whole, instead of the list of terms"
    )
    parser.add_argument(
        "--full",
        action="store_true",
        help="print each definition whole (default: a long one stops after its first sentences and says how many"
        " more there are)",
    )


def _did_you_mean(names: list[str]) -> str | None:
    """'did you mean 'A', 'B' or 'C'?' for up to three names; None for none."""
    if not names:
        return None
    quoted = [f"'{name}'" for name in names]
    choices = quoted[0] if len(quoted) == 1 else f"{', '.join(quoted[:-1])} or {quoted[-1]}"
    return f"did you mean {choices}?"


def read_terms(words: Sequence[str]) -> list[tuple[str, Term | None]]:
    """The terms the words name, in order: (what was typed, its entry or None when unknown).

    At each position the longest run of consecutive words that names one term is read as that
    term, so `glossary LoRA "full copy"` is two terms and `glossary ZeRO 3` is one (ZeRO-3); a
    word that starts no such run is an unknown term of its own.
    """
    found: list[tuple[str, Term | None]] = []
    start = 0
    while start < len(words):
        for end in range(len(words), start, -1):
            name = " ".join(words[start:end])
            entry = lookup(name)
            if entry is not None:
                found.append((name, entry))
                start = end
                break
        else:
            found.append((words[start], None))
            start += 1
    return found


def _unknown(name: str) -> WizardError:
    # A plain WizardError: the CLI prints it on one line and exits 2 (bad input), like every
    # other unknown value; "is not allowed" would misdescribe a term that is merely unknown.
    return WizardError(
        f"{name!r} is not in the glossary; `backend-wizard glossary` lists every term",
        hint=_did_you_mean([t.term for t in suggest(name)]),
    )


def run(args: argparse.Namespace, out: Console, err: Console) -> int:
    """Print the entries asked for, every entry (--all), or the list of terms.

    With several terms the known ones are printed first, each once, in the order given; then
    one error line for each unknown one, and the exit code of an unknown term.
    """
    if not args.term:
        if args.all:
            print_glossary(out, glossary())
        else:
            print_term_list(out, glossary())
        return 0
    read = read_terms(args.term)
    entries: list[Term] = []
    for _, entry in read:
        if entry is not None and entry not in entries:
            entries.append(entry)
    if entries:
        print_glossary(out, entries, full=args.full)
    unknown = [_unknown(name) for name, entry in read if entry is None]
    if not unknown:
        return 0
    for error in unknown[:-1]:
        print_error(err, error)
    raise unknown[-1]
