"""Interactive prompts with questionary (the only module that imports it).

Each question shows a step counter and its help; choices carry descriptions, and choices that
cannot apply are shown disabled with the reason. Typed answers go through the same validator as
the answers file, inline, so a bad value is explained and asked again. After the last question a
review screen lists every answer and lets the user change any of them before anything is written.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

import questionary
from prompt_toolkit.input import Input
from prompt_toolkit.output import Output, create_output
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from wizard.engine.evaluate import Recommendation
from wizard.engine.tree import Tree
from wizard.errors import InvalidAnswerError, WizardError
from wizard.session import Step

WRITE = "__write__"
DONE = -1
SKIP_HINT = "(leave empty to skip)"


class QuestionaryPrompter:
    """Asks in the terminal. `input`/`output` let tests drive it with keystrokes."""

    def __init__(self, console: Console, input: Input | None = None, output: Output | None = None) -> None:
        self.console = console
        # Prompts draw on stderr, so stdout carries only results (the JSON of --output json).
        self.io: dict[str, Any] = {"output": output if output is not None else create_output(stdout=sys.stderr)}
        if input is not None:
            self.io["input"] = input

    def offer_detect(self) -> bool:
        """Ask whether to fill the defaults from this machine before the first question."""
        return bool(
            questionary.confirm(
                "Fill in defaults from this machine (GPUs and their memory, host RAM, installed packages)?",
                default=True,
                **self.io,
            ).unsafe_ask()
        )

    def ask(self, step: Step) -> Any:
        """Ask one question; return the validated value, or None for a skipped optional one."""
        q = step.question
        self.console.print(f"\n[dim]{escape(q.help)}[/]")
        if step.detected_from:
            self.console.print(f"[dim]default detected on this machine ({escape(step.detected_from)})[/]")
        if step.no_default:
            self.console.print(f"[dim]no default: {escape(step.no_default)}[/]")
        message = f"[{step.number}/{step.total}] {q.prompt}"
        if q.type == "choice":
            return self._select(step, message)
        if q.type == "yesno":
            default = bool(step.default) if step.default is not None else False
            return questionary.confirm(message, default=default, **self.io).unsafe_ask()
        return self._text(step, message)

    def _select(self, step: Step, message: str) -> Any:
        q = step.question
        choices = [
            questionary.Choice(
                title=choice.title,
                value=choice.id,
                description=choice.description,
                disabled=step.disabled.get(choice.id),
            )
            for choice in q.choices
        ]
        enabled = [c.id for c in q.choices if c.id not in step.disabled]
        default = step.default if step.default in enabled else (enabled[0] if enabled else None)
        answer = questionary.select(
            message, choices=choices, default=default, instruction="(arrow keys, Enter)", **self.io
        ).unsafe_ask()
        return step.validate(answer)

    def _text(self, step: Step, message: str) -> Any:
        q = step.question
        optional = not q.required and step.default is None

        def check(text: str) -> bool | str:
            if not text.strip():
                return True if optional else "an answer is needed here"
            try:
                step.validate(text)
            except WizardError as exc:
                return exc.message if not isinstance(exc, InvalidAnswerError) else f"not allowed: {exc.allowed}"
            return True

        default = "" if step.default is None else str(step.default)
        suffix = f" {SKIP_HINT}" if optional else ""
        text = questionary.text(message + suffix, default=default, validate=check, **self.io).unsafe_ask()
        if not text.strip():
            return None
        return step.validate(text)

    def review(self, tree: Tree, answers: Mapping[str, Any]) -> str | None:
        """List every answer; return the id of one to change, or None to write the configs."""
        table = Table(title="Review your answers", title_justify="left", show_header=False, box=None)
        table.add_column(style="bold")
        table.add_column()
        for qid in tree.question_ids:
            if qid in answers:
                table.add_row(qid, escape(str(answers[qid])))
        self.console.print(table)
        choices = [questionary.Choice(title="Looks right: decide and write the configs", value=WRITE)]
        choices += [
            questionary.Choice(title=f"Change {qid} ({answers[qid]})", value=qid)
            for qid in tree.question_ids
            if qid in answers
        ]
        picked = questionary.select("Anything to change?", choices=choices, **self.io).unsafe_ask()
        return None if picked == WRITE else str(picked)

    def why_not(self, rec: Recommendation) -> None:
        """Offer "why not X?" for every backend that lost, until the user picks "done"."""
        choices = [questionary.Choice(title=f"Why not {r.title}?", value=i) for i, r in enumerate(rec.runner_ups)]
        choices.append(questionary.Choice(title="Done", value=DONE))
        while True:
            picked = questionary.select("Questions about the choice?", choices=choices, **self.io).unsafe_ask()
            if picked == DONE:
                return
            runner = rec.runner_ups[int(picked)]
            self.console.print(f"[bold]{escape(runner.title)}[/]: {escape(runner.reason)}", soft_wrap=True)
