"""`backend-wizard explain`: the decision trace for an answers file."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from wizard.commands.common import add_answer_arguments, collect_answers
from wizard.engine.evaluate import recommend
from wizard.engine.what_if import what_if
from wizard.ui.explain_view import print_explanation

if TYPE_CHECKING:
    from rich.console import Console


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The explain subcommand's options."""
    add_answer_arguments(parser)
    parser.add_argument("--defaults", action="store_true", help="use each question's default for missing answers")


def run(args: argparse.Namespace, out: Console, err: Console) -> int:
    """Decide, then print every step of the decision."""
    tree, session = collect_answers(args, use_defaults=args.defaults)
    rec = recommend(tree, session.answers, session.inputs)
    print_explanation(out, tree, rec, what_if(tree, session.answers, session.inputs, rec))
    return 0
