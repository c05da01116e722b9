"""`backend-wizard completion SHELL`: print a completion script for bash, zsh or fish.

The script is written from the argparse parsers themselves (the main command's and every
subcommand's), so it offers exactly the options the command line accepts.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import TYPE_CHECKING

from wizard.commands.common import path_argument
from wizard.render.completion import SHELLS, Command, Option, render

if TYPE_CHECKING:
    from rich.console import Console


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The completion subcommand's options."""
    parser.add_argument(
        "shell",
        choices=SHELLS,
        metavar="SHELL",
        help=f'the shell to complete in: {", ".join(SHELLS)} (the README\'s "Shell completion" says where to put it)',
    )


def run(args: argparse.Namespace, out: Console, err: Console) -> int:
    """Print the script on stdout."""
    sys.stdout.write(render(args.shell, describe()))
    return 0


def describe() -> tuple[Command, ...]:
    """The main command and every subcommand, as their parsers define them."""
    from wizard.cli import SUBCOMMANDS, build_parser  # local: the CLI imports the commands lazily too

    commands = [_command("", "", build_parser())]
    for name, summary in SUBCOMMANDS.items():
        parser = argparse.ArgumentParser(prog=f"backend-wizard {name}", description=summary)
        importlib.import_module(f"wizard.commands.{name}").add_arguments(parser)
        commands.append(_command(name, summary, parser))
    return tuple(commands)


def _command(name: str, summary: str, parser: argparse.ArgumentParser) -> Command:
    options = []
    word_choices: tuple[str, ...] = ()
    word_files = False
    # argparse keeps its arguments in `_actions`; shtab and argcomplete read the same list.
    for action in parser._actions:
        if not action.option_strings:
            word_choices = tuple(map(str, action.choices or ()))
            word_files = action.type is path_argument
            continue
        options.append(
            Option(
                names=tuple(action.option_strings),
                # The help without its "(default: ...)", which holds argparse's %-placeholders.
                help=(action.help or "").split(" (default")[0].replace("%%", "%"),
                takes_value=action.nargs != 0,
                choices=tuple(map(str, action.choices or ())),
                files=action.type is path_argument,
                repeatable=isinstance(action, argparse._AppendAction),
            )
        )
    return Command(name, summary, tuple(options), word_choices, word_files)
