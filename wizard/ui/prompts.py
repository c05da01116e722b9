"""Interactive prompts with questionary (the only module that imports it).

Each question shows a step counter and its help; choices carry descriptions, and choices that
cannot apply are shown disabled with the reason. Typed answers go through the same validator as
the answers file, inline, so a bad value is explained and asked again. After the last question a
review screen lists every answer and lets the user change any of them before anything is written.
"""

from __future__ import annotations

import sys
from typing import Any

import questionary
from prompt_toolkit.input import Input
from prompt_toolkit.key_binding import KeyBindings, merge_key_bindings
from prompt_toolkit.output import Output, create_output
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from wizard.engine.evaluate import Recommendation
from wizard.engine.tree import Question, Tree
from wizard.errors import InvalidAnswerError, WizardError
from wizard.session import BACK, Session, Step

WRITE = "__write__"
DONE = -1
BACK_CHOICE = "__back__"
BACK_TEXT = "<"
SKIP_HINT = "(leave empty to skip)"
BACK_TITLE = "<- Back to the previous question"


def _ask(question: questionary.Question, *, menu: bool = True) -> Any:
    """Ask; Ctrl-D (end of input) ends the run the way Ctrl-C does, never with a traceback.

    Text prompts raise EOFError on Ctrl-D in an empty line; menus ignore the key unless it is
    bound, so it is bound here to the same end.
    """
    app = question.application
    if menu:
        bindings = KeyBindings()

        @bindings.add("c-d", eager=True)
        def _end_of_input(event: Any) -> None:
            event.app.exit(exception=EOFError(), style="class:aborting")

        app.key_bindings = merge_key_bindings([app.key_bindings or KeyBindings(), bindings])
    try:
        return question.unsafe_ask()
    except EOFError:
        raise KeyboardInterrupt from None


def answer_text(question: Question, value: Any) -> str:
    """An answer as a person reads it: a choice's title, yes/no, or the value itself."""
    if question.type == "yesno":
        return "yes" if value else "no"
    if question.type == "choice":
        choice = question.choice(str(value))
        return choice.title if choice is not None else str(value)
    return str(value)


class QuestionaryPrompter:
    """Asks in the terminal. `input`/`output` let tests drive it with keystrokes."""

    def __init__(self, console: Console, input: Input | None = None, output: Output | None = None) -> None:
        self.console = console
        # Prompts draw on stderr, so stdout carries only results (the JSON of --output json).
        self.io: dict[str, Any] = {"output": output if output is not None else create_output(stdout=sys.stderr)}
        if input is not None:
            self.io["input"] = input
        self._part = 0  # the section last announced

    def offer_detect(self) -> bool:
        """Ask whether to fill the defaults from this machine before the first question."""
        return bool(
            _ask(
                questionary.confirm(
                    "Fill in defaults from this machine (GPUs and their memory, host RAM, installed packages)?",
                    default=True,
                    **self.io,
                )
            )
        )

    def ask(self, step: Step) -> Any:
        """Ask one question; return the validated value, None for a skipped optional one, or BACK."""
        q = step.question
        if step.part and step.part != self._part:
            self._part = step.part
            self.console.rule(
                f"[bold]{escape(q.section)}[/] [dim](part {step.part} of {step.parts})[/]", align="left", style="dim"
            )
        self.console.print(f"[dim]{escape(q.help)}[/]")
        if step.detected_from:
            self.console.print(f"[dim]default detected on this machine ({escape(step.detected_from)})[/]")
        if step.no_default:
            self.console.print(f"[dim]no default: {escape(step.no_default)}[/]")
        message = f"{step.number}. {q.prompt}"
        if q.type in ("choice", "yesno"):
            return self._select(step, message)
        return self._text(step, message)

    def _select(self, step: Step, message: str) -> Any:
        q = step.question
        if q.type == "yesno":
            choices: list[Any] = [questionary.Choice("Yes", value=True), questionary.Choice("No", value=False)]
            default: Any = bool(step.default) if step.default is not None else False
        else:
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
        if step.can_go_back:
            choices += [questionary.Separator(), questionary.Choice(BACK_TITLE, value=BACK_CHOICE)]
        answer = _ask(
            questionary.select(message, choices=choices, default=default, instruction="(arrow keys, Enter)", **self.io)
        )
        if answer == BACK_CHOICE:
            return BACK
        return step.validate(answer)

    def _text(self, step: Step, message: str) -> Any:
        q = step.question
        optional = not q.required and step.default is None

        def check(text: str) -> bool | str:
            if not text.strip():
                return True if optional else "an answer is needed here"
            if step.can_go_back and text.strip() == BACK_TEXT:
                return True
            try:
                step.validate(text)
            except WizardError as exc:
                return exc.message if not isinstance(exc, InvalidAnswerError) else f"not allowed: {exc.allowed}"
            return True

        default = "" if step.default is None else str(step.default)
        hints = [SKIP_HINT] if optional else []
        if step.can_go_back:
            hints.append(f"({BACK_TEXT} goes back)")
        text = _ask(
            questionary.text(" ".join([message, *hints]), default=default, validate=check, **self.io), menu=False
        )
        if not text.strip():
            return None
        if step.can_go_back and text.strip() == BACK_TEXT:
            return BACK
        return step.validate(text)

    def review(self, tree: Tree, session: Session) -> str | None:
        """List every answer and skipped question; return the id of one to change, or None to go on."""
        rows = [
            (q, answer_text(q, session.answers[q.id]) if q.id in session.answers else "(not given)")
            for q in tree.questions
            if q.id in session.answers or q.id in session.skipped
        ]
        table = Table(title="Review your answers", title_justify="left", show_header=False, box=None)
        table.add_column(style="bold", no_wrap=True)
        table.add_column(overflow="fold")
        for question, text in rows:
            table.add_row(escape(question.label), escape(text))
        self.console.print(table)
        choices = [questionary.Choice(title="Looks right: decide and write the configs", value=WRITE)]
        choices += [questionary.Choice(title=f"Change: {question.label}", value=question.id) for question, _ in rows]
        picked = _ask(questionary.select("Anything to change?", choices=choices, **self.io))
        self._part = 0  # an edit announces its section again
        return None if picked == WRITE else str(picked)

    def why_not(self, rec: Recommendation) -> None:
        """Offer "why not X?" for every backend that lost, until the user picks "done"."""
        choices = [questionary.Choice(title=f"Why not {r.title}?", value=i) for i, r in enumerate(rec.runner_ups)]
        choices.append(questionary.Choice(title="Done", value=DONE))
        while True:
            picked = _ask(questionary.select("Questions about the choice?", choices=choices, **self.io))
            if picked == DONE:
                return
            runner = rec.runner_ups[int(picked)]
            # Wrapped at word boundaries by rich (soft_wrap would let the terminal cut words).
            self.console.print(f"[bold]{escape(runner.title)}[/]: {escape(runner.reason)}")
