"""`backend-wizard glossary [TERM]`: short definitions of the terms the explanations use."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from wizard.engine.glossary import glossary, lookup, suggest
from wizard.errors import WizardError
from wizard.ui.glossary_view import print_glossary, print_term_list

if TYPE_CHECKING:
    from rich.console import Console


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The glossary subcommand's options."""
    parser.add_argument(
        "term",
        nargs="*",
        help="a term or alias to define (case, spaces, hyphens and underscores do not matter); the list when omitted",
    )
    parser.add_argument("--all", action="store_true", help="print every definition instead of the list of terms")


def _did_you_mean(names: list[str]) -> str | None:
    """'did you mean 'A', 'B' or 'C'?' for up to three names; None for none."""
    if not names:
        return None
    quoted = [f"'{name}'" for name in names]
    choices = quoted[0] if len(quoted) == 1 else f"{', '.join(quoted[:-1])} or {quoted[-1]}"
    return f"did you mean {choices}?"


def run(args: argparse.Namespace, out: Console, err: Console) -> int:
    """Print one entry, every entry (--all), or the list of terms."""
    if not args.term:
        if args.all:
            print_glossary(out, glossary())
        else:
            print_term_list(out, glossary())
        return 0
    name = " ".join(args.term)
    entry = lookup(name)
    if entry is None:
        # A plain WizardError: the CLI prints it on one line and exits 2 (bad input), like every
        # other unknown value; "is not allowed" would misdescribe a term that is merely unknown.
        raise WizardError(
            f"term: {name!r} is not in the glossary; `backend-wizard glossary` lists every term",
            hint=_did_you_mean([t.term for t in suggest(name)]),
        )
    print_glossary(out, (entry,))
    return 0
