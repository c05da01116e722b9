"""`backend-wizard tree`: the whole decision tree, in the terminal or as a Mermaid flowchart.

``--lint`` instead checks the tree in full (schema, template syntax, reachability, what it names
and uses, lines of at most 120 characters) and says so in one line: the shipped tree is not
linted on every run, so this is how to lint it by hand.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from wizard.app import load
from wizard.commands.common import path_argument

if TYPE_CHECKING:
    from rich.console import Console


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The tree subcommand's options."""
    parser.add_argument(
        "--format",
        choices=("rich", "mermaid"),
        default="rich",
        help="rich: drawn in the terminal; mermaid: a Mermaid flowchart to paste into Markdown (default: %(default)s)",
    )
    parser.add_argument(
        "--tree",
        metavar="FILE",
        type=path_argument,
        help="use another decision tree file (default: the shipped decision_tree.yaml)",
    )
    parser.add_argument(
        "--lint",
        action="store_true",
        help="lint the tree in full and print one line; exit 3 if it is broken (default: off, draw it)",
    )


def run(args: argparse.Namespace, out: Console, err: Console) -> int:
    """Draw the tree, or lint it (a broken tree raises `TreeError`, exit 3)."""
    tree = load(args.tree, lint=True if args.lint else None)
    if args.lint:
        from wizard.engine.tree_lint import check_line_lengths
        from wizard.inputs import read_tree_text
        from wizard.resources import default_tree_path

        # Style, so not part of loading: a tree with a long line still runs (wizard.app.load).
        check_line_lengths(read_tree_text(args.tree or default_tree_path()), tree.source)
        sys.stdout.write(f"{tree.source}: no problems ({len(tree.questions)} questions, {len(tree.rules)} rules)\n")
    elif args.format == "mermaid":
        from wizard.render.mermaid import tree_to_mermaid

        sys.stdout.write(tree_to_mermaid(tree))
    else:
        from wizard.ui.tree_view import print_tree

        print_tree(out, tree)
    return 0
