"""The command line: parse arguments, pick the answer sources, run, print, map errors to exit codes.

Exit codes (README "Exit codes"): 0 done, 1 an existing file differs (not overwritten), 2 bad
input, 3 broken decision tree, 4 no backend fits, 5 a file could not be written, 130 Ctrl-C,
141 standard output closed early (a pipe into head).
"""

from __future__ import annotations

import argparse
import shlex
import sys

from wizard import __version__
from wizard.commands.common import HelpFormatter, Parser, add_output_argument, path_argument
from wizard.errors import (
    ExitCode,
    InteractiveSessionError,
    InterruptedByUser,
    RefusedError,
    SavedAnswers,
    WizardError,
)
from wizard.ui.output import ends_quietly  # light: no rich until a console prints

# Imported where used, not here: `--help`, `--version` and a mistyped subcommand need none of
# the engine, not even json, pathlib or typing, and an `--output json` run needs no rich
# (start-up time, see bench/startup.py). mypy reads any name TYPE_CHECKING as its own flag.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

    from rich.console import Console

    from wizard.app import Result
    from wizard.engine.tree import Tree
    from wizard.session import Prompter, Session

PARTIAL_ANSWERS = "backend-wizard-partial-answers.yaml"
OUTPUT_DIR = "backend-wizard-out"  # argparse turns the default into a Path like a given value


SUBCOMMANDS = {
    "estimate": "memory per GPU for every strategy (--formula default|deepspeed|zero-paper)",
    "explain": "the decision trace for an answers file, rule by rule, in plain words",
    "tree": "draw the decision tree (--format rich|mermaid)",
    "glossary": "short definitions of the terms the explanations use",
    "check": "check existing Accelerate, DeepSpeed or Axolotl config files (exit 1 on errors)",
    "completion": "print a shell completion script (bash, zsh or fish)",
    "smoke": "run a written set for a few steps here and compare what the processes hold with the estimate",
}


def _use_caches() -> None:
    """Compiled templates and parsed data files from earlier runs, where the cache folder allows.

    Start-up time (bench/startup.py); wizard.disk_cache says where they live and when not.
    """
    from wizard import disk_cache
    from wizard.engine import catalog
    from wizard.render import template_cache

    template_cache.enable()
    if disk_cache.usable_folder() is not None:
        catalog.use_parse_store(disk_cache.parsed)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (also used by the README's usage section)."""
    parser = Parser(
        prog="backend-wizard",
        formatter_class=HelpFormatter,
        description="Pick a distributed-training backend, learn why, and write configs that run.",
        epilog="subcommands: " + "; ".join(f"backend-wizard {n}: {h}" for n, h in SUBCOMMANDS.items()),
    )
    parser.add_argument(
        "--answers",
        metavar="FILE",
        type=path_argument,
        help="answers file (YAML or JSON), as in examples/: no prompts (default: none, ask in the terminal)",
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
        "--defaults",
        action="store_true",
        help=(
            "use each question's default for every missing answer (default: off: a missing optional answer"
            " takes its default anyway, a missing required one is an error)"
        ),
    )
    parser.add_argument(
        "--ask-missing",
        action="store_true",
        help="with --answers: prompt for the answers the file lacks (needs a terminal; default: off)",
    )
    parser.add_argument(
        "--output-dir",
        metavar="DIR",
        type=path_argument,
        default=OUTPUT_DIR,
        help="where to write (default: %(default)s)",
    )
    parser.add_argument(
        "--force",
        action="store_true",
        help="replace existing files whose content differs (default: off, such files are kept)",
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="show what would be written; write nothing (default: off)"
    )
    add_output_argument(parser)
    parser.add_argument(
        "--tree",
        metavar="FILE",
        type=path_argument,
        help="use another decision tree file (default: the shipped decision_tree.yaml)",
    )
    parser.add_argument(
        "--explain", action="store_true", help="also print the decision trace, rule by rule (default: off)"
    )
    parser.add_argument(
        "--detect",
        action="store_true",
        help="fill defaults from this machine: nvidia-smi/rocm-smi, host RAM (default: off)",
    )
    parser.add_argument(
        "--version", action="version", version=f"backend-wizard {__version__}", help="print the version and exit"
    )
    return parser


def _gpu_seen() -> bool:
    """Whether this machine shows a GPU to read: nvidia-smi or rocm-smi on the PATH, or a Mac (cheap: nothing runs)."""
    import shutil

    from wizard.installed import this_machine_is_a_mac

    return this_machine_is_a_mac() or any(shutil.which(tool) for tool in ("nvidia-smi", "rocm-smi"))


@ends_quietly
def main(argv: Sequence[str] | None = None, *, read_machine: bool = True) -> int:
    """Entry point of the backend-wizard command.

    `read_machine`: False where an interactive run the user told not to read this machine goes on to plan another
    set (the suggested JSON's): the choice holds for the whole session.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in SUBCOMMANDS:
        return _subcommand(argv[0], argv[1:])
    if argv and not argv[0].startswith("-"):
        # The main command takes no words, only options: a word first is a mistyped subcommand.
        return _unknown_command(argv[0])
    args = build_parser().parse_args(argv)
    _use_caches()
    from wizard.app import load_runnable, run
    from wizard.inputs import load_answers_file, parse_set_values, without_unset
    from wizard.session import Session, Sources
    from wizard.ui.output import make_console

    as_json = args.output == "json"
    out = make_console()
    err = make_console(stderr=True)
    tree = None
    session = Session()
    sources = Sources()
    try:
        tree = load_runnable(args.tree)
        set_values, file_values = without_unset(
            parse_set_values(args.set), load_answers_file(args.answers) if args.answers else {}, tree.question_ids
        )
        sources = Sources(set_values=set_values, file_values=file_values, use_defaults=args.defaults)
        if args.detect:
            sources.detected = _detect(err)
        sources.read_machine = read_machine
        scripted = bool(args.answers or args.set or args.defaults)
        if not scripted or args.ask_missing:
            sources.prompter = _prompter(err, required=not scripted)
            if sources.prompter is not None and not scripted and not args.detect:
                if sources.prompter.offer_detect(gpu_seen=_gpu_seen()):
                    sources.detected = _detect(err)
                else:
                    sources.read_machine = False
        result = run(tree, sources, args.output_dir, force=args.force, dry_run=args.dry_run, session=session)
        printed = False
        while sources.prompter is not None and result.recommendation.refused and not as_json:
            # Interactive: show why nothing fits, then offer the review screen instead of ending.
            from wizard.ui.console import print_result

            print_result(out, tree, result, dry_run=args.dry_run, detail=args.explain)
            printed = True
            if not sources.prompter.change_after_refusal():
                break
            printed = False
            result = run(tree, sources, args.output_dir, force=args.force, dry_run=args.dry_run, session=session)
    except (InterruptedByUser, KeyboardInterrupt) as exc:
        # The writer says itself what it finished before a held signal; elsewhere nothing was written.
        error = exc if isinstance(exc, InterruptedByUser) else InterruptedByUser("no config was written")
        return _fail(out, err, error, as_json, _keep_answers(tree, session, args, bool(sources.detected)))
    except WizardError as exc:
        return _fail(out, err, exc, as_json, _keep_answers(tree, session, args, bool(sources.detected)))
    try:
        code = _finish(out, err, tree, result, args.dry_run, as_json, session, args, bool(sources.detected), printed)
        said = False
        if not as_json and (args.explain or sources.prompter is not None):
            _teach(out, tree, result, sources.prompter, full=args.explain)
        if code == ExitCode.WRITTEN_WONT_RUN and sources.prompter is not None and not as_json and not args.dry_run:
            from wizard.ui.console import suggested_rerun

            # A brought JSON that cannot run on these GPUs: the next step the summary gives, offered at once.
            again = suggested_rerun(result)
            if again is not None and sources.prompter.offer_suggested(again[-1]):
                out.print()
                code = main(again, read_machine=sources.read_machine)
                said = True  # the second run's own last line stands
        if code == ExitCode.WRITTEN_WONT_RUN and not as_json and not said:
            _say_exit(err, result, args.dry_run)
        if code == ExitCode.OK and not as_json and not args.dry_run and _resumed(args):
            # Last, so it is not lost above the explanation: the saved file served its purpose (the user's to delete).
            from rich.text import Text

            out.print(
                Text(
                    f"{args.answers} was only kept to resume: answers.yaml now has them all, so you may delete it.",
                    style="dim",
                )
            )
    except KeyboardInterrupt:
        # Ctrl-C while the summary prints: the files (if any) are already written, each whole.
        # Only the line on stderr: stdout may hold half of the JSON already.
        return _fail(out, err, InterruptedByUser(_interrupted_while_printing(result, args.dry_run)), False)
    except WizardError as exc:
        # A failed rule's sentence is rendered when the explanation or the report first reads it: a
        # tree text that cannot render (a broken tree) is said here, as one line with its exit code.
        return _fail(out, err, exc, as_json, None)
    return code


def _interrupted_while_printing(result: Result, dry_run: bool) -> str:
    """What a Ctrl-C during the final printing leaves on disk, in words."""
    written = not dry_run and not result.recommendation.refused and not result.conflicts and result.actions
    if written:
        return (
            f"interrupted while printing; the files in {result.actions[0].path.parent} were written, each one complete"
        )
    return "interrupted while printing (no config was written)"


def _resumed(args: argparse.Namespace) -> bool:
    """Whether this run went on from answers an earlier run saved when it stopped."""
    return bool(args.answers) and args.answers.name.startswith(PARTIAL_ANSWERS.removesuffix(".yaml"))


def resume_command(args: argparse.Namespace, answers_file: str, detected: bool, *, force: bool = False) -> str:
    """The command that goes on from saved answers with the options of this run.

    --answers and --set are left out (the saved file holds those answers); --defaults too, since
    the resumed run asks for what is missing.
    """
    words = ["backend-wizard", "--answers", answers_file, "--ask-missing"]
    if args.output_dir != path_argument(OUTPUT_DIR):
        words += ["--output-dir", str(args.output_dir)]
    if args.tree is not None:
        words += ["--tree", str(args.tree)]
    words += [flag for flag, on in (("--force", args.force or force), ("--dry-run", args.dry_run)) if on]
    words += [flag for flag, on in (("--explain", args.explain), ("--detect", args.detect or detected)) if on]
    if args.output != "text":
        words += ["--output", args.output]
    return shlex.join(words)


def _keep_answers(
    tree: Tree | None,
    session: Session,
    args: argparse.Namespace,
    detected: bool,
    *,
    force: bool = False,
) -> SavedAnswers | None:
    """Save the answers typed so far when a run stops early; say where and how to go on.

    Only answers typed at a prompt are worth saving (the others are in the user's files). The
    file never replaces another: a free name beside it is taken instead.
    """
    if tree is None or not session.prompted:
        return None
    from pathlib import Path

    from wizard.app import answers_document
    from wizard.render.writer import write_new

    header = (
        "# Answers so far, saved by backend-wizard when the run stopped."
        " Resume: backend-wizard --answers THIS-FILE --ask-missing, with the options you ran with"
    )
    try:
        path = write_new(Path.cwd(), PARTIAL_ANSWERS, answers_document(tree, dict(session.answers), header))
    except WizardError as save_error:
        return SavedAnswers(problem=save_error.message)
    return SavedAnswers(resume=(path.name, resume_command(args, path.name, detected, force=force)))


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

        session = result.session
        print_explanation(
            out,
            tree,
            rec,
            what_if(tree, session.answers, session.inputs, rec, session.given, session.set_aside),
            answers=session.answers,
            after_summary=True,
        )
    if prompter is not None and rec.runner_ups:
        try:
            prompter.why_not(rec, brief=not full)
        except KeyboardInterrupt:
            return


def _unknown_command(word: str) -> int:
    """One line, exit 2, for a word that is no subcommand: the closest one, else the list."""
    from wizard.engine.suggest import closest
    from wizard.ui.console import print_error
    from wizard.ui.output import make_console

    known = ", ".join(SUBCOMMANDS)
    suggestion = closest(word, SUBCOMMANDS)
    error = WizardError(
        f"unknown command {word!r}; allowed: {known}, or options only (see backend-wizard --help)",
        hint=f"did you mean 'backend-wizard {suggestion}'?" if suggestion else None,
    )
    print_error(make_console(stderr=True), error)
    return int(error.exit_code)


def _subcommand(name: str, argv: list[str]) -> int:
    import importlib

    module = importlib.import_module(f"wizard.commands.{name}")
    parser = Parser(prog=f"backend-wizard {name}", description=SUBCOMMANDS[name], formatter_class=HelpFormatter)
    module.add_arguments(parser)
    args = parser.parse_args(argv)
    if name in ("estimate", "explain"):  # they render the tree's texts
        _use_caches()
    from wizard.ui.output import make_console

    out = make_console()
    err = make_console(stderr=True)
    try:
        return int(module.run(args, out, err))
    except KeyboardInterrupt:
        return _fail(out, err, InterruptedByUser("interrupted"), False)
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


def _finish(
    out: Console,
    err: Console,
    tree: Tree,
    result: Result,
    dry_run: bool,
    as_json: bool,
    session: Session,
    args: argparse.Namespace,
    detected: bool,
    printed: bool = False,
) -> int:
    from wizard.engine.evaluate import runs_close_call, runs_past_fit, runs_past_host

    rec = result.recommendation
    code = ExitCode.OK
    failure: WizardError | None = None
    saved: SavedAnswers | None = None
    if rec.refused:
        # The reasons and the levers are in the panel above; one short line here, not a repeat.
        failure = RefusedError("no backend fits, so nothing was written: what to change is above")
        code = ExitCode.REFUSED
    elif result.conflicts and not dry_run:  # a dry run only shows: the diff and a note say what --force would do
        from wizard.render.writer import overwrite_refused

        # JSON carries no diff: point at the run that shows one.
        shows = "a text run with --dry-run shows the diff" if as_json else "the diff is above"
        failure = overwrite_refused(result.conflicts, f"rerun with --force to replace it ({shows})")
        code = ExitCode.NOT_OVERWRITTEN
    elif runs_past_fit(rec) or runs_past_host(rec) or runs_close_call(rec):
        # Written as asked (a JSON the user brought is kept), but the estimate says it does not fit as written, or
        # (a close call) that it may run out of memory at the backward pass of its first full-length batch: a script
        # that launches on exit 0 should stop here. The title and the Your JSON or Risk line say why.
        code = ExitCode.WRITTEN_WONT_RUN
    if failure is not None:
        # Nothing was written: keep what was typed, so the rerun needs no retyping.
        saved = _keep_answers(tree, session, args, detected, force=code == ExitCode.NOT_OVERWRITTEN)
    # rich (wizard.ui.console) loads only for what it prints: a JSON run that succeeds needs none.
    if as_json:
        import json

        from wizard.report import result_envelope

        print(json.dumps(result_envelope(result), indent=2))
        if failure is not None:
            from wizard.ui.console import print_error

            print_error(err, failure, saved)
        return int(code)
    from wizard.ui.console import print_error, print_result

    if not printed:
        print_result(out, tree, result, dry_run=dry_run, detail=args.explain)
        if rec.refused and args.answers:
            # No answers.yaml was written for the usual "More: explain --answers OUT/answers.yaml".
            from wizard.ui.console import print_more

            # A refusal has no chosen layout, so explain has no step-time table to show for it.
            print_more(out, str(args.answers), list(args.set or []), steps=False)
    if failure is not None:
        print_error(err, failure, saved)
    return int(code)


def _say_exit(err: Console, result: Result, dry_run: bool) -> None:
    """Why a run that wrote its files exits 9, said last: after the summary, the explanation and any question.

    Said before "Questions about the choice?", it read as the end of the program.
    """
    from rich.text import Text

    from wizard.engine.evaluate import runs_close_call
    from wizard.ui.console import close_likely

    rec = result.recommendation
    why = (
        f"it {'will likely' if close_likely(rec) else 'may'} run out of memory at the backward pass of its first"
        " full-length batch (see Risk above)"
        if runs_close_call(rec)
        else "the run does not fit as written (see the title above)"
    )
    err.print(
        Text(
            f"exit {int(ExitCode.WRITTEN_WONT_RUN)}: the files are {'shown' if dry_run else 'written'}, but by this"
            f" estimate {why}",
            style="yellow",
        )
    )


def _fail(out: Console, err: Console, exc: WizardError, as_json: bool, saved: SavedAnswers | None = None) -> int:
    from wizard.ui.console import print_error

    if as_json:
        import json

        from wizard.report import error_envelope

        print(json.dumps(error_envelope(exc, saved), indent=2))
    print_error(err, exc, saved)
    return int(exc.exit_code)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
