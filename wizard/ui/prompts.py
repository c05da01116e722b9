"""Interactive prompts with questionary (the only module that imports it).

Each question shows its part of the interview, a count that only moves forward and its help;
choices are listed with their descriptions (and why one is unavailable) above the menu, wrapped
at the terminal's width. Typed answers go through the same validator as the answers file; a
refused value is explained and asked again. Menus end with "Back"; a typed answer takes "<".
After the last question a review screen lists every answer, where it came from, and lets the
user change any of them before anything is written.
"""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Mapping
from typing import Any

import questionary
from prompt_toolkit.formatted_text import FormattedText
from prompt_toolkit.input import Input
from prompt_toolkit.key_binding import KeyBindings, merge_key_bindings
from prompt_toolkit.keys import Keys
from prompt_toolkit.output import Output, create_output
from questionary.prompts.common import InquirerControl
from rich.console import Console
from rich.markup import escape
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from wizard.engine.batch import GLOBAL_BATCH
from wizard.engine.catalog import lookup_gpu
from wizard.engine.evaluate import Recommendation
from wizard.engine.facts import FACTS, json_micro_batch
from wizard.engine.glossary import terms_in
from wizard.engine.model_size import catalog_hub_id, catalog_model, shape_for_catalog
from wizard.engine.sentences import leading_sentences, sentences
from wizard.engine.tree import Question, Ref, Tree
from wizard.errors import InvalidAnswerError, ModelUnavailableError, WizardError
from wizard.session import AUTO, BACK, KEPT_DEFAULT, Session, Step
from wizard.ui.console import grouped_runner_ups, runner_up_beyond
from wizard.ui.text_wrap import Hanging, Wrapped, join_units

WRITE = "__write__"
CHANGE = "__change__"
# Terms a "why not" answer does not define again: units and words every answer uses.
EVERYDAY_TERMS = frozenset({"GiB", "step", "gradients", "peak", "usable memory", "host RAM", "layout"})
# The backends' names as glossary terms: the why-not menu names them, so their one-line definitions are noise there.
BACKEND_TERMS = frozenset({"DDP", "DeepSpeed", "FSDP", "FSDP2", "Megatron-LM", "distributed backend"})
DONE = "done"  # the why-not menu's way out (its other values are the runner-ups' indexes, as text)
BACK_CHOICE = "__back__"
BACK_TEXT = "<"
BACK_TITLE = "<- Back to the previous question"
# A long help is shown in part; "?" (typed, or this last menu line) shows the rest.
MORE_TEXT = "?"
CLEAR_TEXT = "-"  # typed alone at an optional question that has an answer: take the answer out
MORE_CHOICE = "__more__"
MORE_TITLE = "? The rest of this help"
# About four lines at 80 columns: a help longer than this shows its first sentences up to it.
HELP_FOLD_CHARS = 320
CANCEL_TITLE = "<- Back to the review (keep the answer)"
# questionary's mark before every question ("? "), and the least room left for typing an answer.
QMARK = "? "
# How to use a menu, shown as its first line.
KEY_HINT = "(arrow keys, Enter)"
TYPING_ROOM = 12
UNAVAILABLE = "not available with these answers, see above"
# Where an answer came from, as the review screen says it: every row names its source, so a
# default nobody chose stands out from an answer given at the prompt.
ORIGINS = {
    "prompt": "your answer",
    "answers file": "from your answers file",
    "--set": "from --set",
    "default": "default",
    KEPT_DEFAULT: "kept",
}
# The review's source for a global batch kept with Enter: planned as the user's, as one typed is.
KEPT_BATCH_ORIGIN = "kept, planned as yours"
# The review's source for an answer left to the wizard ("auto" at its prompt).
AUTO_ORIGIN = "auto: the wizard picks it"
# What the review's sources mean, for the ones a list shows (a source column with no key reads as jargon).
ORIGIN_MEANINGS = {
    "default": "default = not asked; the wizard's value",
    # A text prompt cannot tell Enter from the same value typed: both read as kept.
    "kept": "kept = asked, and you took the value offered",
    "from": "{example} = worked out from the answers named",
    "given": "from your answers file or from --set = given there, not asked",
}


# The review's label column: the longest label but the global batch's fits on one line.
REVIEW_LABEL_WIDTH = 28


def fold_help(text: str, limit: int = HELP_FOLD_CHARS) -> tuple[str, str]:
    """A help text's first sentences up to about `limit` characters, and the rest ("" when it is all shown).

    The first sentence says what the question is and what it changes; the details after it are
    there for the reader who asks (a help of 10 to 15 lines pushed the question off the screen).
    """
    if len(text) <= limit:
        return text, ""
    said = sentences(text)
    kept = leading_sentences(said, limit)
    if len(kept) == len(said):
        return text, ""
    return " ".join(kept), " ".join(said[len(kept) :])


def _review_text(question: Question, session: Session) -> str:
    """An answer as the review lists it: "auto" for one left to the wizard at its prompt."""
    if question.id not in session.answers:
        return "(not given)"
    if question.id in session.auto and session.origins.get(question.id) == "default":
        return "auto"  # the wizard's pick comes once the run is decided
    return answer_text(question, session.answers[question.id])


def derived_from(
    ref: Ref,
    answers: Mapping[str, Any],
    sections: Mapping[str, str] | None = None,
    *,
    labels: Mapping[str, str] | None = None,
) -> str:
    """The given answers a computed default follows ("gpu_model"), or "" when it follows none of them.

    Past three answers, what works it out and the kinds of answer it reads ("the memory estimate of
    your hardware, model and training answers"), or the first three and how many more where nothing
    is named as its basis.
    `sections` (answer id -> part of the interview) is kept for callers; the short form needs no parts.
    `labels` (answer id -> the question's label): the answers named as the review lists them ("GPU
    model", "sequence length"), not by their answers-file keys; without it, the keys.
    """
    spec = FACTS.get(ref.name) if ref.kind == "fact" else None
    needs = spec.needs if spec is not None else ((ref.name,) if ref.kind == "answer" else ())
    given = [
        _label_in_text(labels.get(name, name)) if labels else name
        for name in needs
        if answers.get(name) is not None and name != "hardware"
    ]
    if not given:
        return ""
    # Named, never "your other answers": the review's legend promises "from X", X an answer. A
    # dozen names on one row is noise, not an explanation: the first three and how many more.
    if len(given) > 3:
        # What works the default out is named ("the memory estimate"): a count alone explains nothing,
        # and the parts of the interview behind it made a review cell of four lines at 80 columns.
        if spec is not None and spec.basis:
            # A count ("and 10 more of your answers") said nothing a reader could use, and a dozen names
            # are noise: what the estimate reads, said as the kinds of answer it is.
            return f"{spec.basis} of your hardware, model and training answers"
        return f"{', '.join(given[:3])} and {len(given) - 3} more"
    return given[0] if len(given) == 1 else ", ".join(given[:-1]) + " and " + given[-1]


def _whose_default(step: Step) -> str:
    """Whose choice a menu opens on: the user's earlier answer, a default a change moved, or the default."""
    if step.default_is_earlier_answer:
        return "your earlier answer"
    if step.moved_from is not None:
        return f"the default after your change (it was {answer_text(step.question, step.moved_from)})"
    return "the default"


def _label_in_text(label: str) -> str:
    """A review label inside a sentence: "Model" as "model", an acronym's "GPU model" kept."""
    return label[:1].lower() + label[1:] if label[1:2].islower() else label


def prompt_lines(message: str, width: int, room: int) -> str:
    """`message` as questionary prints it after "? ", in lines that fit `width` with `room` left after the last.

    A question too long for one line is broken between words, each further line indented under
    the question's first word, rather than cut by the terminal mid-word. Only the last line keeps
    `room` free (for the key hint, or the answer typed): the lines above use the whole width.
    """
    if len(QMARK) + len(message) + room <= width:
        return message
    usable = max(width - len(QMARK), 20)
    lines = textwrap.wrap(message, usable, break_long_words=False, break_on_hyphens=False)
    if len(lines[-1]) + room > usable:
        # The last line has no room left: its last words go on a line of their own.
        tail = textwrap.wrap(lines[-1], max(usable - room, 10), break_long_words=False, break_on_hyphens=False)
        lines[-1:] = [" ".join(tail[:-1]), tail[-1]] if len(tail) > 1 else tail
    return ("\n" + " " * len(QMARK)).join(lines)


def _placeholder(default: str) -> FormattedText:
    """The default, greyed out in the empty input line (prompt_toolkit's placeholder)."""
    return FormattedText([("fg:ansibrightblack", default)])


def recognised(qid: str, value: Any) -> str | None:
    """What a typed GPU or model name was matched to in the bundled catalogues, or None where it names none."""
    if qid == "gpu_model":
        gpu = lookup_gpu(str(value))
        return f"Recognised: {gpu.name}, {gpu.memory_gib} GiB as its driver reports it." if gpu else None
    if qid == "model" and (name := catalog_model(value)) is not None:
        hub = catalog_hub_id(value)
        return f"Recognised: {name} from the bundled catalog, {shape_for_catalog(name).params:,} parameters" + (
            f" (its weights are {hub} on the Hub)." if hub else "."
        )
    return None


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

        windows = app.layout.find_all_windows()
        control = next((w.content for w in windows if isinstance(w.content, InquirerControl)), None)
        if control is not None:
            _stop_at_the_ends(bindings, control)
        app.key_bindings = merge_key_bindings([app.key_bindings or KeyBindings(), bindings])
    try:
        return question.unsafe_ask()
    except EOFError:
        raise KeyboardInterrupt from None


def _stop_at_the_ends(bindings: KeyBindings, control: InquirerControl) -> None:
    """Bind the menu's cursor keys so that the cursor stops at the first and last choices.

    questionary's own keys wrap around: Down on the last line ("? The rest of this help", "Back")
    jumps to the first ("Yes"), and a user who pressed it once too often picked an answer they
    never read. Bindings merged after questionary's win for the same keys.
    """

    def move(step: int) -> None:
        start = control.pointed_at
        index = start + step
        while 0 <= index < control.choice_count:
            control.pointed_at = index
            if control.is_selection_valid():
                return
            index += step
        control.pointed_at = start  # nothing to pick further on: the cursor stays

    for keys, step in ((Keys.Down, 1), ("j", 1), (Keys.ControlN, 1), (Keys.Up, -1), ("k", -1), (Keys.ControlP, -1)):
        bindings.add(keys, eager=True)(lambda event, step=step: move(step))


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
        self._empty_said: set[str] = set()  # sections said to have no questions
        self._dropped_said: set[tuple[str, str]] = set()  # dropped answers already named on a review
        self._not_offered_said: set[str] = set()  # extras already said to be left out, with why
        self._help_rest = ""  # the part of the current question's help not shown yet ("?" shows it)

    def offer_detect(self, *, gpu_seen: bool = True) -> bool:
        """Ask whether to fill the defaults from this machine before the first question.

        `gpu_seen`: whether this machine shows a GPU tool (nvidia-smi, rocm-smi) or is a Mac; where it shows
        none, the run is most likely planned for another machine, so the menu starts on No.
        """
        # What the answer does, before the question: it reads, never changes, and every default stays editable.
        self.console.print(
            "[dim]The wizard can read this machine (its GPUs from nvidia-smi or rocm-smi, or a Mac's chip and"
            " memory; its RAM and installed packages) to fill in the defaults; every answer can still be changed."
            " Planning for another machine (a cloud GPU, a cluster)? Answer n."
            + ("" if gpu_seen else " This machine shows no GPU, so n is the default.")
            + "[/]"
        )
        return bool(
            _ask(
                questionary.confirm(
                    # With its "? " and instruction, one line of 80 columns (the terminal would
                    # otherwise split the instruction).
                    "Use this machine's GPUs, memory and packages as defaults?",
                    default=gpu_seen,
                    auto_enter=False,  # y or n, then Enter: a single key must not also answer the next question
                    # Said, since every other yes/no here is a menu; the capital is the default.
                    instruction="(Y/n, then Enter) " if gpu_seen else "(y/N, then Enter) ",
                    **self.io,
                )
            )
        )

    def offer_suggested(self, folder: str) -> bool:
        """Ask whether to plan the suggested JSON now, into `folder`, where the brought one cannot run here."""
        # What the answer does, before the question, as offer_detect does: the question itself stays one line.
        self.console.print(
            f"[dim]Your JSON cannot run on these GPUs; ds_config.suggested.json, written beside it, fits by the"
            f" estimate. The wizard can plan it now, into {escape(folder)} (the command under Next does the same).[/]"
        )
        return bool(
            _ask(
                questionary.confirm(
                    "Plan ds_config.suggested.json now?",
                    default=True,
                    auto_enter=False,
                    instruction="(Y/n, then Enter) ",
                    **self.io,
                )
            )
        )

    def ask(self, step: Step) -> Any:
        """Ask one question; return the validated value, None for a skipped optional one, or BACK."""
        q = step.question
        if step.part and step.part != self._part:
            if self._part and step.part > self._part + 1:
                for skipped in step.sections[self._part : step.part - 1]:
                    if skipped not in step.skipped_sections:
                        continue  # answered earlier (an edit jumps ahead): nothing was dropped there
                    reason = step.skipped_sections.get(skipped)
                    self._empty_said.add(skipped)
                    why = f": {reason}" if reason else ""
                    part = f" (part {step.sections.index(skipped) + 1} of {step.parts})"
                    self.console.print(
                        f"[dim]No questions in {escape(skipped)}{part} for these answers{escape(why)}.[/]"
                    )
            first = not self._part
            if self._part:
                self.console.print()  # a blank line between one part's last answer and the next part's header
            self._part = step.part
            self.console.rule(
                f"[bold]{escape(q.section)}[/] [dim](part {step.part} of {step.parts})[/]", align="left", style="dim"
            )
            if first:
                # Said where the reader meets the first term, not only in the summary at the end.
                self.console.print("[dim]A term you do not know: backend-wizard glossary TERM, in another terminal.[/]")
        unsaid = {label: why for label, why in step.not_offered.items() if label not in self._not_offered_said}
        if unsaid:
            # Said once, before the first extra asked: an extra the user came for does not just vanish.
            self._not_offered_said.update(unsaid)
            self.console.print("[dim]Not offered for these answers:[/]")
            for label, why in unsaid.items():
                self.console.print(Padding(Text(f"{label}: {why}" if why else label, style="dim"), (0, 0, 0, 2)))
        if step.again:
            self.console.print(f"[yellow]Asked again:[/] {escape(step.again)}")
        shown, self._help_rest = fold_help(step.help or q.help)
        if self._help_rest:
            typed = q.type not in ("choice", "yesno")
            shown += " (more: type ?)" if typed else " (more: the menu's last line)"
        self.console.print(f"[dim]{escape(shown)}[/]")
        if step.detected_from and step.default in step.disabled:
            # The detected value cannot be chosen for these answers (Axolotl on a Mac): say so,
            # rather than announce a default the menu then does not start on.
            found = next((c.title for c in q.choices if c.id == step.default), str(step.default))
            self.console.print(
                f"[dim]detected on this machine ({escape(step.detected_from)}): {escape(found)}, which is not"
                " available for these answers (the reason is under the choices)[/]"
            )
        elif step.detected_from:
            self.console.print(f"[dim]default detected on this machine ({escape(step.detected_from)})[/]")
        if step.no_default:
            self.console.print(f"[dim]no default: {escape(step.no_default)}[/]")
        if step.note:
            self.console.print(escape(step.note))
        # "question 3": its place in the walk (the same when going back to it); a change from the
        # review screen is no step of the walk.
        prompt = step.prompt or q.prompt
        message = f"(question {step.number}) {prompt}" if step.number else f"(change) {prompt}"
        if q.type in ("choice", "yesno"):
            return self._select(step, message)
        # Room after the question for typing: the default shown greyed out, or a short answer.
        room = max(len(str(step.default or "")), TYPING_ROOM) + 1
        return self._text(step, prompt_lines(message, self.console.width, room))

    def _select(self, step: Step, message: str) -> Any:
        q = step.question
        if q.type == "yesno":
            choices: list[Any] = [questionary.Choice("Yes", value=True), questionary.Choice("No", value=False)]
            default: Any = bool(step.default) if step.default is not None else False
            if default is False and not step.detected_from:
                # The cursor opens on the second line: say whose choice that is, as for other menus.
                self.console.print(f"[dim]The menu starts on No, {escape(_whose_default(step))}.[/]")
        else:
            # The descriptions and the reasons a choice is unavailable are printed above the
            # menu, wrapped between words: the menu itself cuts lines at the terminal's edge.
            unavailable: dict[str, list[str]] = {}
            for choice in q.choices:
                reason = step.disabled.get(choice.id)
                if reason:
                    unavailable.setdefault(reason, []).append(choice.title)
                    continue
                # A wrapped description goes on under its own first word, not under the title.
                lead = Text(f"{choice.title}: ", style="dim")
                self.console.print(Hanging(lead, Text(choice.description, style="dim"), indent=2))
            # One line per reason, naming every choice it rules out (often the same reason for many).
            for reason, titles in unavailable.items():
                # The reason opens its own sentence after the titles' full stop.
                said = reason[:1].upper() + reason[1:]
                body = Text.from_markup(f"[dim]{escape(', '.join(titles))}.[/] {escape(said)}.")
                self.console.print(Hanging(Text("Not available: ", style="yellow"), body, indent=2))
            choices = [
                questionary.Choice(
                    title=choice.title, value=choice.id, disabled=UNAVAILABLE if choice.id in step.disabled else None
                )
                for choice in q.choices
            ]
            enabled = [c.id for c in q.choices if c.id not in step.disabled]
            default = step.default if step.default in enabled else (enabled[0] if enabled else None)
            if enabled and default != enabled[0] and not step.detected_from:
                # A menu that opens below its first line reads as a choice made for the user: say whose.
                title = next(c.title for c in q.choices if c.id == default)
                self.console.print(f"[dim]The menu starts on {escape(title)}, {escape(_whose_default(step))}.[/]")
        if step.can_go_back:
            title = CANCEL_TITLE if step.back_cancels else BACK_TITLE
            choices += [questionary.Separator(), questionary.Choice(title, value=BACK_CHOICE)]
        if self._help_rest:
            if not step.can_go_back:
                choices.append(questionary.Separator())
            choices.append(questionary.Choice(MORE_TITLE, value=MORE_CHOICE))
        # The key hint as the menu's first line (a separator, never selectable): the same place on
        # every menu, and the question keeps its whole line (on it, the hint wrapped questions early).
        choices = [questionary.Separator(KEY_HINT), *choices]
        message = prompt_lines(message, self.console.width, 2)
        while True:
            answer = _ask(questionary.select(message, choices=choices, default=default, instruction=" ", **self.io))
            if answer != MORE_CHOICE:
                break
            # The rest of the help, then the same menu again (its last line now gone: nothing more to show).
            self.console.print(f"[dim]{escape(self._help_rest)}[/]")
            choices = [c for c in choices if getattr(c, "value", None) != MORE_CHOICE]
        if answer == BACK_CHOICE:
            return BACK
        return step.validate(answer)

    def _text(self, step: Step, message: str) -> Any:
        """A typed answer. The default is shown greyed out (typing replaces it, Enter keeps it).

        A refused value is explained in full above the prompt, which is then asked again: the
        prompt's own error line is cut at the terminal's edge.
        """
        q = step.question
        optional = not q.required and step.default is None
        default = "" if step.default is None else str(step.default)
        hints = []
        if step.auto:
            hints.append(f"Enter for auto: {step.auto}; or type a number")
            default = "auto"  # shown greyed out, as a default is
        elif default and step.was_auto:
            # The answer was "auto": Enter takes the number auto picked, which is no longer auto.
            hints.append(f"Enter takes {default}, what auto picked; or type a number")
        elif default:
            # The note speaks of the question's own default, not of an earlier answer offered again.
            note = q.default_note and not step.default_is_earlier_answer
            hints.append(f"Enter keeps {default}" + (f", {q.default_note}" if note else ""))
        elif optional:
            hints.append("leave empty to skip")
        # An optional answer given earlier (changed from the review) can be taken out again.
        # Only one with no default of its own: left out, it stays unanswered (the host RAM, a DeepSpeed JSON).
        clearable = not q.required and q.default is None and step.default is not None and not step.auto
        if clearable:
            hints.append(f"type {CLEAR_TEXT} alone to leave it out")
        if step.can_go_back:
            hints.append(
                f"type {BACK_TEXT} to keep the answer as it was"
                if step.back_cancels
                else f"type {BACK_TEXT} to go back"
            )
        if hints:
            self.console.print(f"[dim]({escape('; '.join(hints))})[/]")

        def check(text: str) -> bool | str:
            return True if text.strip() or default or optional else "an answer is needed here"

        while True:
            text = _ask(
                questionary.text(message, validate=check, placeholder=_placeholder(default), **self.io),
                menu=False,
            ).strip()
            if not text or (step.auto and text.lower() == "auto"):
                if step.auto:
                    return AUTO
                if not default:
                    return None
                text = default
            if step.can_go_back and text == BACK_TEXT:
                return BACK
            if clearable and text == CLEAR_TEXT:
                return None  # no answer: the question is skipped, as an empty answer skips it
            if text == MORE_TEXT:
                # "?" alone asks for more help (docs/usage.md), never for a file or a model named "?".
                more = self._help_rest or "That is all the help this question has: it is printed above."
                self.console.print(f"[dim]{escape(more)}[/]")
                continue
            try:
                value = step.validate(text)
            except WizardError as exc:
                problem = exc.message
                if isinstance(exc, InvalidAnswerError) and not isinstance(exc, ModelUnavailableError):
                    problem = f"not allowed: {exc.allowed}"
                elif isinstance(exc, ModelUnavailableError):
                    problem = exc.allowed  # what happened ("is not in the Hugging Face cache ..."), not a rule
                back = f" (to go back, type {BACK_TEXT} alone)" if step.can_go_back else ""
                self.console.print(f"[red]{escape(text)}:[/] {escape(problem)}{escape(back)}")
                continue
            # A name the wizard matched is said at once, not first in the summary's Assumed line.
            matched = recognised(step.question.id, value)
            if matched:
                self.console.print(f"[dim]{escape(matched)}[/]")
            return value

    def review(self, tree: Tree, session: Session) -> str | None:
        """List every answer and skipped question; return the id of one to change, or None to go on."""
        rows = [
            (q, _review_text(q, session)) for q in tree.questions if q.id in session.answers or q.id in session.skipped
        ]
        # Parts after the last question asked had no questions either: said once, before the list.
        for name, reason in session.empty_sections.items():
            if name not in self._empty_said:
                self._empty_said.add(name)
                because = f": {reason}" if reason else ""
                sections = tree.sections
                part = f" (part {sections.index(name) + 1} of {len(sections)})" if name in sections else ""
                self.console.print(f"[dim]No questions in {escape(name)}{part} for these answers{escape(because)}.[/]")
        table = Table(title="Review your answers", title_justify="left", show_header=False, box=None, pad_edge=False)
        # The labels' column is as wide as the longest label (the tree's labels fit it); the other two
        # share the rest by ratio, the answers' a little more. A fixed width, not min/max widths: with
        # those, rich cut the last column's words at the right edge instead of wrapping them.
        table.add_column(style="bold", width=REVIEW_LABEL_WIDTH)
        table.add_column(overflow="fold", ratio=5)
        table.add_column(style="dim", overflow="fold", ratio=3)
        shown_origins: set[str] = set()
        example = ""  # the first "from X" the list shows, for its legend
        for question, text in rows:
            source = session.origins.get(question.id, "")
            origin = ORIGINS.get(source, source if source.startswith("detected") else "")
            if text == "auto" and question.id in session.auto:
                origin = AUTO_ORIGIN
            if question.id == GLOBAL_BATCH and source == "prompt" and session.batch_kept:
                origin = KEPT_BATCH_ORIGIN
            # A brought JSON's "auto" micro-batch leaves the default at 1: not "from deepspeed_config".
            from_json = question.id != "micro_batch_size" or json_micro_batch(session.inputs) is not None
            if source in ("default", KEPT_DEFAULT) and isinstance(question.default, Ref) and from_json:
                # Worked out from other answers (the memory of a GPU model): say which ones.
                hardware = session.answers.get("hardware")
                inputs = derived_from(
                    question.default, session.answers, labels={q.id: q.label_on(hardware) for q in tree.questions}
                )
                if inputs:
                    # Worked out from other answers; asked and kept at its prompt too, said as both, "kept" first.
                    origin = f"kept (from {inputs})" if source == KEPT_DEFAULT else f"from {inputs}"
                    example = example or f"from {inputs}"
            label = question.label_on(session.answers.get("hardware"))
            table.add_row(escape(label), escape(text), escape(origin))
            if origin not in (ORIGINS["answers file"], ORIGINS["--set"]):  # plain words, not "from X" worked out
                shown_origins.update(word.strip().split(" ")[0] for word in origin.split(","))
                if "(from " in origin:
                    shown_origins.add("from")
            else:
                shown_origins.add("given")
        self.console.print(table)
        meanings = [meaning.format(example=example) for key, meaning in ORIGIN_MEANINGS.items() if key in shown_origins]
        if meanings:
            self.console.print(f"[dim]{escape('; '.join(meanings))}.[/]")
        if session.before_change is not None:
            # What else the last change moved (a default worked out again, an answer asked again): said
            # once, so a reader sees that changing one answer changed others, not only which.
            changed, before = session.before_change
            session.before_change = None
            moved = [
                f"{q.label_on(session.answers.get('hardware'))} {answer_text(q, before[q.id])} -> "
                f"{_review_text(q, session)}"
                for q in tree.questions
                if q.id != changed
                and q.id in before
                and q.id in session.answers
                and before[q.id] != session.answers[q.id]
            ]
            edited = tree.question(changed)
            name = edited.label_on(session.answers.get("hardware")) if edited is not None else changed
            if moved:
                self.console.print(f"[dim]Your change to {escape(name)} also changed: {escape('; '.join(moved))}.[/]")
            # Defaults the wizard works out from the changed answer are worked out again: the ones that came out
            # the same are said too, so that "kept" does not read as "not looked at again".
            same = [
                f"{q.label_on(session.answers.get('hardware'))} {answer_text(q, session.answers[q.id])}"
                for q in tree.questions
                if q.id != changed
                and isinstance(q.default, Ref)
                and q.default.kind == "fact"
                # Only where the changed answer is one the default is worked out from.
                and q.default.name in FACTS
                and changed in FACTS[q.default.name].needs
                and q.id in before
                and q.id in session.answers
                and before[q.id] == session.answers[q.id]
                and session.origins.get(q.id) in ("default", KEPT_DEFAULT)
                and q.id not in session.auto  # left to the wizard: picked after the review, not shown as a value
            ]
            if same:
                self.console.print(
                    f"[dim]Worked out again after your change to {escape(name)}, the same as before:"
                    f" {escape('; '.join(same))}.[/]"
                )
        for qid, value in session.dropped.items():
            gone = tree.question(qid)
            # Said once, on the review after the change that dropped it, not on every later one.
            if gone is not None and (qid, repr(value)) not in self._dropped_said:
                self._dropped_said.add((qid, repr(value)))
                why = session.dropped_why.get(qid)
                self.console.print(
                    f"[dim]No longer asked after your change: {escape(gone.label)} "
                    f"(was {escape(answer_text(gone, value))})" + (f": {escape(why)}" if why else "") + ".[/]"
                )
        # Two short menus instead of one with a line per answer: the list above stays on screen.
        first = [
            questionary.Choice(title="Looks right: decide and write the configs", value=WRITE),
            questionary.Choice(title="Change an answer", value=CHANGE),
        ]
        while True:
            if _ask(questionary.select("Anything to change?", choices=first, **self.io)) == WRITE:
                return None
            which = [
                questionary.Choice(
                    title=f"{question.label_on(session.answers.get('hardware'))}: {text}", value=question.id
                )
                for question, text in rows
            ]
            which += [questionary.Separator(), questionary.Choice(title="<- Back to the review", value=WRITE)]
            picked = _ask(questionary.select("Which answer?", choices=which, **self.io))
            if picked != WRITE:
                self._part = 0  # an edit announces its section again
                return str(picked)

    def change_after_refusal(self) -> bool:
        """After "no backend fits": whether to go back to the review screen and change an answer."""
        return bool(
            _ask(
                questionary.select(
                    "No backend fits these answers. Change one?",
                    choices=[
                        questionary.Choice("Yes: back to the review screen", value=True),
                        questionary.Choice("No: stop here (the answers are saved)", value=False),
                    ],
                    **self.io,
                )
            )
        )

    def why_not(self, rec: Recommendation, *, brief: bool = True) -> None:
        """Offer "why not X?" for every backend that lost, until the user picks "done".

        The answer goes one step further than the summary (`brief`: it showed each main reason
        only): the paragraphs it left out, the backend's figures beside the chosen layout's, and
        the terms it uses, each with the first sentence of its glossary entry.
        """
        read: set[Any] = set()
        last: str | None = None
        groups = grouped_runner_ups(rec)
        while True:
            # Short names keep each entry on one line ("Why not Megatron-LM?", not the full title); one
            # already answered says so, since the cursor moves on to the next one.
            # Backends that lost for the same reason are one entry (one GPU alone and DDP, where a whole
            # copy does not fit): two entries would print the same paragraph twice.
            choices = [
                questionary.Choice(
                    title=f"Why not {' / '.join(t.split(' (')[0] for t in titles.split('; '))}?"
                    + (" (read)" if str(i) in read else ""),
                    value=str(i),
                )
                for i, (titles, _) in enumerate(groups)
            ]
            choices.append(questionary.Choice(title="Done", value=DONE))
            # The cursor starts on the next answer not read yet below the one just read (then from the top),
            # and on "Done" once all are read: it never jumps back above what the reader has just reached.
            values = [str(c.value) for c in choices if c.value != DONE]
            start = values.index(last) + 1 if last in values else 0
            default = next((v for v in values[start:] + values[:start] if v not in read), DONE)
            # After a refusal no backend was chosen: the questions are why each one does not fit.
            question = "Why does each backend not fit?" if rec.refused else "Questions about the choice?"
            picked = _ask(questionary.select(question, choices=choices, default=default, **self.io))
            if picked == DONE:
                return
            read.add(picked)
            last = str(picked)
            title, reason = groups[int(picked)]
            # The summary just above gave the main reason: this adds what it left out and the figures,
            # and says the whole reason again only where there is nothing to add.
            beyond = runner_up_beyond(rec, reason, brief=brief)
            # Wrapped as the summary is: between words, never at the no-break space that keeps a
            # figure with its unit (rich's own wrapping breaks there).
            if beyond:
                self.console.print(f"[bold]{escape(title)}[/], beyond the summary above:")
                for part in beyond:
                    self.console.print(Padding(Wrapped(Text(part)), (0, 0, 0, 2)))
            else:
                self.console.print(Wrapped(Text.assemble((title, "bold"), ": ", join_units(reason))))
            # The terms of what was just printed, in glossary order, less the everyday units.
            shown = f"{title} {' '.join(beyond) if beyond else reason}"
            # Nor the backends' own names (the menu asks about them) and, on one machine, "node".
            skip = (
                EVERYDAY_TERMS
                | BACKEND_TERMS
                | ({"node"} if int(rec.settings.get("num_machines") or 1) == 1 else set())
            )
            for term in [t for t in terms_in(shown) if t.term not in skip][:4]:
                first = term.definition.split(". ")[0].rstrip(".") + "."
                self.console.print(
                    Padding(Text.from_markup(f"[dim]{escape(term.term)}: {escape(first)}[/]"), (0, 0, 0, 2))
                )
