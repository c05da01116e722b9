"""The command line: parse arguments, pick the answer sources, run, print, map errors to exit codes.

Exit codes (README "Exit codes"): 0 done, 1 an existing file differs (not overwritten), 2 bad
input, 3 broken decision tree, 4 no backend fits, 5 a file could not be written, 130 Ctrl-C.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console

from wizard import __version__
from wizard.app import Result, answers_document, load, run
from wizard.engine.tree import Tree
from wizard.errors import (
    ExitCode,
    InteractiveSessionError,
    InterruptedByUser,
    OverwriteRefusedError,
    RefusedError,
    WizardError,
)
from wizard.inputs import load_answers_file, parse_set_values
from wizard.render.writer import atomic_write
from wizard.session import Prompter, Sources

PARTIAL_ANSWERS = "backend-wizard-partial-answers.yaml"


SUBCOMMANDS = {
    "estimate": "memory per GPU for every strategy (--formula default|deepspeed|zero-paper)",
    "explain": "the decision trace for an answers file, rule by rule, in plain words",
    "tree": "draw the decision tree (--format rich|mermaid)",
    "glossary": "short definitions of the terms the explanations use",
    "check": "check existing Accelerate, DeepSpeed or Axolotl config files (exit 1 on errors)",
}


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (also used by the README's usage section)."""
    parser = argparse.ArgumentParser(
        prog="backend-wizard",
        description="Pick a distributed-training backend, learn why, and write configs that run.",
        epilog="subcommands: " + "; ".join(f"backend-wizard {n}: {h}" for n, h in SUBCOMMANDS.items()),
    )
    parser.add_argument("--answers", metavar="FILE", type=Path, help="answers file (YAML or JSON): no prompts")
    parser.add_argument(
        "--set",
        metavar="KEY=VALUE",
        action="append",
        default=[],
        help="set one answer (repeatable; wins over --answers)",
    )
    parser.add_argument("--defaults", action="store_true", help="use each question's default for missing answers")
    parser.add_argument(
        "--ask-missing",
        action="store_true",
        help="with --answers: prompt for the answers the file lacks (needs a terminal)",
    )
    parser.add_argument(
        "--output-dir",
        metavar="DIR",
        type=Path,
        default=Path("backend-wizard-out"),
        help="where to write (default: %(default)s)",
    )
    parser.add_argument("--force", action="store_true", help="replace existing files whose content differs")
    parser.add_argument("--dry-run", action="store_true", help="show what would be written; write nothing")
    parser.add_argument("--output", choices=("text", "json"), default="text", help="text for people, json for scripts")
    parser.add_argument("--tree", metavar="FILE", type=Path, help="use another decision tree file")
    parser.add_argument("--explain", action="store_true", help="also print the decision trace, rule by rule")
    parser.add_argument(
        "--detect", action="store_true", help="fill defaults from this machine (nvidia-smi/rocm-smi, host RAM)"
    )
    parser.add_argument("--version", action="version", version=f"backend-wizard {__version__}")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the backend-wizard command."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in SUBCOMMANDS:
        return _subcommand(argv[0], argv[1:])
    args = build_parser().parse_args(argv)
    as_json = args.output == "json"
    out = Console(highlight=False)
    err = Console(stderr=True, highlight=False)
    tree = None
    try:
        tree = load(args.tree)
        sources = Sources(
            set_values=parse_set_values(args.set),
            file_values=load_answers_file(args.answers) if args.answers else {},
            use_defaults=args.defaults,
        )
        if args.detect:
            sources.detected = _detect(err)
        scripted = bool(args.answers or args.set or args.defaults)
        if not scripted or args.ask_missing:
            sources.prompter = _prompter(err, required=not scripted)
            if sources.prompter is not None and not scripted and not args.detect and sources.prompter.offer_detect():
                sources.detected = _detect(err)
        result = run(tree, sources, args.output_dir, force=args.force, dry_run=args.dry_run)
    except InterruptedByUser as exc:
        return _interrupted(err, exc, tree)
    except KeyboardInterrupt:
        return _interrupted(err, InterruptedByUser("interrupted: no config was written"), tree)
    except WizardError as exc:
        return _fail(out, err, exc, as_json)
    code = _finish(out, err, tree, result, args.dry_run, as_json)
    if not as_json and (args.explain or sources.prompter is not None):
        _teach(out, tree, result, sources.prompter, full=args.explain)
    return code


def _detect(err: Console) -> dict[str, tuple[object, str]]:
    """Detect this machine and say what was found, with each value's source (on stderr)."""
    from wizard.detect import detect

    found = detect()
    for item in found.answers:
        err.print(f"[dim]detected[/] {item.key} = {item.value} [dim]({item.source})[/]")
    present = ", ".join(name for name, ok in found.packages.items() if ok) or "none"
    err.print(f"[dim]detected packages: {present}[/]")
    return {item.key: (item.value, item.source) for item in found.answers}


def _teach(out: Console, tree: Tree, result: Result, prompter: Prompter | None, full: bool) -> None:
    """--explain prints the whole trace; an interactive run offers "why not X?" for each other backend."""
    rec = result.recommendation
    if full:
        from wizard.engine.what_if import what_if
        from wizard.ui.explain_view import print_explanation

        print_explanation(out, tree, rec, what_if(tree, result.session.answers, result.session.inputs, rec))
    if prompter is not None and rec.runner_ups:
        try:
            prompter.why_not(rec)
        except KeyboardInterrupt:
            return


def _subcommand(name: str, argv: list[str]) -> int:
    import importlib

    module = importlib.import_module(f"wizard.commands.{name}")
    parser = argparse.ArgumentParser(prog=f"backend-wizard {name}", description=SUBCOMMANDS[name])
    module.add_arguments(parser)
    args = parser.parse_args(argv)
    out = Console(highlight=False)
    err = Console(stderr=True, highlight=False)
    try:
        return int(module.run(args, out, err))
    except KeyboardInterrupt:
        return _interrupted(err, InterruptedByUser("interrupted"), None)
    except WizardError as exc:
        return _fail(out, err, exc, getattr(args, "output", "text") == "json")


def _prompter(err: Console, required: bool) -> Prompter | None:
    if not (sys.stdin.isatty() and sys.stderr.isatty()):
        if required:
            raise InteractiveSessionError(
                "no terminal to ask questions on (stdin or stderr is not a TTY)",
                hint="pass --answers FILE (see examples/), or --set KEY=VALUE with --defaults",
            )
        return None
    from wizard.ui.prompts import QuestionaryPrompter  # questionary loads only when prompting

    return QuestionaryPrompter(err)


def _finish(out: Console, err: Console, tree: Tree, result: Result, dry_run: bool, as_json: bool) -> int:
    from wizard.ui.console import print_error, print_result

    rec = result.recommendation
    code = ExitCode.OK
    failure: WizardError | None = None
    if rec.refused:
        failure = RefusedError(f"no backend fits: {rec.because}")
        code = ExitCode.REFUSED
    elif result.conflicts:
        names = ", ".join(str(a.path) for a in result.conflicts)
        failure = OverwriteRefusedError(
            f"not overwriting {names}: the existing content differs (nothing was written)",
            hint="rerun with --force to replace it (the diff is above)",
        )
        code = ExitCode.NOT_OVERWRITTEN
    if as_json:
        from wizard.report import result_envelope

        print(json.dumps(result_envelope(result), indent=2))
        if failure is not None:
            print_error(err, failure)
        return int(code)
    print_result(out, tree, result, dry_run=dry_run)
    if failure is not None:
        print_error(err, failure)
    return int(code)


def _fail(out: Console, err: Console, exc: WizardError, as_json: bool) -> int:
    from wizard.ui.console import print_error

    if as_json:
        from wizard.report import error_envelope

        print(json.dumps(error_envelope(exc), indent=2))
    print_error(err, exc)
    return int(exc.exit_code)


def _interrupted(err: Console, exc: InterruptedByUser, tree: Tree | None) -> int:
    from wizard.ui.console import print_error

    if exc.partial and tree is not None:
        try:
            atomic_write(Path(PARTIAL_ANSWERS), answers_document(tree, dict(exc.partial)))
            exc.hint = (
                f"answers so far saved to {PARTIAL_ANSWERS}; "
                f"resume: backend-wizard --answers {PARTIAL_ANSWERS} --ask-missing"
            )
        except WizardError as save_error:
            exc.hint = f"could not save the answers so far: {save_error.message}"
    print_error(err, exc)
    return int(ExitCode.INTERRUPTED)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
