"""`backend-wizard explain`: the decision trace for an answers file."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from wizard.app import run as run_wizard
from wizard.commands.common import add_answer_arguments, collect_answers
from wizard.engine.evaluate import (
    Recommendation,
    chosen_estimate,
    recommend,
    runs_close_call,
    runs_past_fit,
    runs_past_host,
)
from wizard.engine.what_if import what_if
from wizard.errors import ExitCode, WizardError
from wizard.session import Session, Sources
from wizard.ui.explain_view import print_answers_used, print_explanation

if TYPE_CHECKING:
    from rich.console import Console

    from wizard.app import Result
    from wizard.engine.tree import Tree


# What a bare `backend-wizard explain` prints: it has nothing to explain without answers.
NEEDS_ANSWERS = "explain needs answers: an answers file (--answers FILE) or --set KEY=VALUE values"
EXAMPLE = "backend-wizard explain --defaults --set model=7B --set gpu_model=A100"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The explain subcommand's options."""
    parser.epilog = f"{NEEDS_ANSWERS}; for example: {EXAMPLE}"
    add_answer_arguments(parser)
    parser.add_argument(
        "--defaults",
        action="store_true",
        help="use each question's default for missing answers (default: off, a missing answer is an error)",
    )


def run(args: argparse.Namespace, out: Console, err: Console) -> int:
    """Decide, then print every step of the decision."""
    if args.answers is None and not args.set:
        # A usage error, not the first unanswered question: name what the command needs.
        raise WizardError(NEEDS_ANSWERS, hint=f"for example: {EXAMPLE}")
    tree, session = collect_answers(args, use_defaults=args.defaults)
    rec, warnings, result = _decided(tree, session)
    # The inputs first, so that the trace and its figures can be repeated from this output alone; then the
    # decision in a few plain sentences, as the summary opens, before the rules that led to it.
    print_answers_used(out, tree, session.answers, session.origins)
    if result is not None:
        from wizard.ui.console import print_in_short

        print_in_short(out, tree, result)
    print_explanation(
        out,
        tree,
        rec,
        what_if(tree, session.answers, session.inputs, rec, session.given, session.set_aside),
        warnings,
        session.answers,
    )
    return _verdict(rec, err)


def _verdict(rec: Recommendation, err: Console) -> int:
    """The exit code the run itself gives these answers (4 refused, 9 past the fit or a close call), said last.

    A script that explains before it writes reads the same verdict from either command.
    """
    if rec.refused:
        code, why = ExitCode.REFUSED, "no backend fits these answers (what to change is above)"
    elif runs_close_call(rec):
        code = ExitCode.WRITTEN_WONT_RUN
        est = chosen_estimate(rec)
        may = "will likely" if est is not None and est.close_call_likely else "may"
        why = f"by this estimate the run {may} run out of memory at the backward pass of its first full-length batch"
    elif runs_past_fit(rec) or runs_past_host(rec):
        code, why = ExitCode.WRITTEN_WONT_RUN, "by this estimate the run does not fit as written"
    else:
        return int(ExitCode.OK)
    err.print(f"exit {int(code)}, as the run itself would: {why}", style="yellow", markup=False, highlight=False)
    return int(code)


def _decided(tree: Tree, session: Session) -> tuple[Recommendation, list[str], Result | None]:
    """The decision, the summary's own warnings for it and the dry run itself (nothing written).

    The warnings come from the decision, the rendered configs' notes and their self-check, so
    the summary's dry run is the one source for both. Should rendering fail, the explanation
    still prints with the decision's own warnings: the summary reports that failure itself.
    """
    try:
        result = run_wizard(tree, Sources(), Path("backend-wizard-out"), force=False, dry_run=True, session=session)
    except WizardError:
        rec = recommend(tree, session.answers, session.inputs)
        return rec, list(rec.warnings), None
    return result.recommendation, result.warnings, result
