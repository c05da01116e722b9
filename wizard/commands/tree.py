"""`backend-wizard tree`: the whole decision tree, in the terminal or as a Mermaid flowchart."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from wizard.app import load
from wizard.render.mermaid import tree_to_mermaid
from wizard.ui.tree_view import print_tree

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
        type=Path,
        help="use another decision tree file (default: the shipped decision_tree.yaml)",
    )


def run(args: argparse.Namespace, out: Console, err: Console) -> int:
    """Draw the tree."""
    tree = load(args.tree)
    if args.format == "mermaid":
        sys.stdout.write(tree_to_mermaid(tree))
    else:
        print_tree(out, tree)
    return 0
