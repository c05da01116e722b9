"""`backend-wizard glossary [TERM]`: short definitions of the terms the explanations use."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from wizard.engine.glossary import glossary, lookup, suggest
from wizard.errors import InvalidAnswerError
from wizard.ui.glossary_view import print_glossary

if TYPE_CHECKING:
    from rich.console import Console


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The glossary subcommand's options."""
    parser.add_argument("term", nargs="*", help="a term (or alias) to define; all terms when omitted")


def run(args: argparse.Namespace, out: Console, err: Console) -> int:
    """Print one entry, or all of them."""
    if not args.term:
        print_glossary(out, glossary())
        return 0
    name = " ".join(args.term)
    entry = lookup(name)
    if entry is None:
        close = suggest(name)
        raise InvalidAnswerError(
            "term",
            name,
            "not in the glossary; run `backend-wizard glossary` for the list",
            hint=f"did you mean '{close}'?" if close else None,
        )
    print_glossary(out, (entry,))
    return 0
