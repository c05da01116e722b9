"""One question loop for every mode (the copier pattern).

An answer comes from, in order: ``--set``, the answers file, the prompter (interactive mode), the
question's default (with ``--defaults``, or when it is derived from other answers), otherwise a
`MissingAnswerError`. Every value goes through the same validator, whatever its source.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from wizard.engine.answers import coerce_answer, disabled_reason, looks_like_path, unknown_keys
from wizard.engine.batch import GLOBAL_BATCH
from wizard.engine.batch_choice import MICRO, settle_batch
from wizard.engine.conditions import MISSING, evaluate, iter_compares
from wizard.engine.evaluate import (
    DecisionView,
    Recommendation,
    decided_outcome,
    is_applicable,
    make_lookup,
    prune,
    recommend,
    resolve_default,
    text_context,
    why_not,
)
from wizard.engine.facts import FACTS, QUESTION_NOTES, FactSet, Inputs, derive_facts, json_micro_batch
from wizard.engine.model_size import ModelSizeError, catalog_model, parse_model_size
from wizard.engine.tree import Question, Ref, Tree
from wizard.errors import InterruptedByUser, InvalidAnswerError, MissingAnswerError, WizardError
from wizard.inputs import check_nvme_path, load_deepspeed, load_model, resolve_inputs


class _Back:
    """The type of `BACK`."""

    def __repr__(self) -> str:
        return "BACK"


BACK = _Back()
"""What a prompter returns when the user asks to go back to the previous question."""
# The origin of a default the user kept at the prompt (Enter on the offered value).
KEPT_DEFAULT = "default, kept"


class _Auto:
    """The type of `AUTO`."""

    def __repr__(self) -> str:
        return "AUTO"


AUTO = _Auto()
"""What a prompter returns for Enter at a question that offers "auto" (`Step.auto`): the wizard picks."""
# What "auto" does at the micro-batch question, as its prompt says it: the pick an answers file
# without micro_batch_size gets (wizard.engine.batch_choice), so both ways of running agree.
AUTO_MICRO = (
    "the wizard picks the largest micro-batch that divides the global batch you give next and fits with room, else 1"
)


@dataclass(frozen=True)
class Step:
    """A question as the prompter shows it.

    ``number`` is the question's place in this run's questions (going back to a question shows
    its number again; 0 after the review screen, where a change is not a step of the walk), and
    ``part``/``parts`` place the question's section among the tree's sections. A total of
    questions would jump around, since each answer changes which later questions apply.
    """

    question: Question
    number: int
    default: Any
    disabled: Mapping[str, str]
    validate: Any  # Callable[[Any], Any]: raises InvalidAnswerError, returns the typed value
    detected_from: str | None = None  # where a detected default came from (nvidia-smi, ...)
    no_default: str | None = None  # why a usually derived default is missing ("gpu_model 'X' is not ...")
    part: int = 0  # 1-based index of the question's section, 0 when the tree names none
    parts: int = 0
    sections: tuple[str, ...] = ()  # the names of all parts, in order
    can_go_back: bool = False  # a previous question was asked in this run
    back_cancels: bool = False  # picked on the review screen: going back cancels the change
    again: str | None = None  # why an answer given before is asked again (a change made it invalid)
    # For each earlier section none of whose questions applies: why its first question was not asked.
    skipped_sections: Mapping[str, str] = field(default_factory=dict)
    default_is_earlier_answer: bool = False  # the default is the answer being changed (or a dropped one)
    moved_from: Any = None  # a default a change moved: the value kept before it (None where none moved)
    # The question's words for this run's hardware (a Mac's own where the tree gives them).
    prompt: str = ""
    help: str = ""
    # Extras the user asked for (tune: yes) that these answers leave out, each with why: label -> reason.
    not_offered: Mapping[str, str] = field(default_factory=dict)
    # Where Enter means "auto" (the prompter then returns AUTO): what the wizard does with it.
    auto: str = ""
    # The run's own figures the question's default follows (facts.QUESTION_NOTES), shown beside it.
    note: str = ""
    # The answer being changed was left to the wizard ("auto"): the default is what auto picked.
    was_auto: bool = False


class Prompter(Protocol):
    """Asks questions interactively (questionary in the terminal; scripted in tests)."""

    def offer_detect(self, *, gpu_seen: bool = True) -> bool:
        """Before the first question: whether to fill defaults from this machine (--detect).

        `gpu_seen`: whether the machine shows a GPU to read; where not, the offer leans to No.
        """

    def ask(self, step: Step) -> Any:
        """Return the answer (validated by step.validate), None to skip, or BACK; Ctrl-C raises KeyboardInterrupt."""

    def review(self, tree: Tree, session: Session) -> str | None:
        """Show every answer (and every skipped question); return a question id to change, or None to go on."""

    def change_after_refusal(self) -> bool:
        """After "no backend fits": True to show the review screen again and change an answer."""

    def why_not(self, rec: Recommendation, *, brief: bool = True) -> None:
        """After the recommendation, answer "why not X?" for the other backends until the user is done.

        `brief`: the summary printed just before showed each backend's main reason only.
        """

    def offer_suggested(self, folder: str) -> bool:
        """A brought JSON that cannot run on these GPUs: True to plan ds_config.suggested.json into `folder` now."""


@dataclass
class Sources:
    """Where non-interactive answers come from."""

    set_values: Mapping[str, Any] = field(default_factory=dict)
    file_values: Mapping[str, Any] = field(default_factory=dict)
    use_defaults: bool = False
    prompter: Prompter | None = None
    detected: Mapping[str, tuple[Any, str]] = field(default_factory=dict)  # key -> (value, source)
    # The option that gave a --set value on the command line (estimate's --model): errors name it.
    options: Mapping[str, str] = field(default_factory=dict)
    # Whether the run may read this machine's installed packages for the summary's install list:
    # not where the user declined to have the machine read (it is not the one that trains).
    read_machine: bool = True


@dataclass
class Session:
    """The answers collected so far, where each came from, and the files they point to."""

    answers: dict[str, Any] = field(default_factory=dict)
    origins: dict[str, str] = field(default_factory=dict)
    skipped: set[str] = field(default_factory=set)
    inputs: Inputs = field(default_factory=Inputs)
    ignored: list[str] = field(default_factory=list)
    # The ignored answers' values, typed as their questions read them: a lever that makes one apply
    # again (LoRA instead of a full fine-tune, for a Mac's base_dtype) counts it as the user gave it.
    set_aside: dict[str, Any] = field(default_factory=dict)
    previous: dict[str, Any] = field(default_factory=dict)  # answers being changed, as defaults
    # The decision as add-ons see it, for the answers it was made from (every add-on question
    # needs it, and the answers before the add-ons no longer change while they are asked).
    decided: tuple[Any, DecisionView] | None = None
    # The questions the prompter asked, in order, for going back one at a time.
    history: list[str] = field(default_factory=list)
    # Questions the user chose to answer again (review screen, back): asked even when the answers
    # file or --set has a value for them, since that value is what the user wants to change.
    reask: set[str] = field(default_factory=set)
    # The answer picked on the review screen, as it was (id, value or None if skipped, origin):
    # going back from its question puts it back.
    editing: tuple[str, Any, str] | None = None
    # The answers as they were when the review screen sent the user to change one (its id, a copy):
    # the next review says what else that change moved.
    before_change: tuple[str, dict[str, Any]] | None = None
    shown: int = 0  # questions shown by the prompter so far
    reviewed: bool = False  # the review screen was shown: questions from now on are changes
    # Where a reopened answer came from (going back): Enter on a default it kept still keeps it.
    previous_origin: dict[str, str] = field(default_factory=dict)
    # Why an answer is asked again: a changed answer made it invalid (question id -> the reason).
    again: dict[str, str] = field(default_factory=dict)
    # Answers a change made irrelevant, dropped since (question id -> the value), for the review.
    dropped: dict[str, Any] = field(default_factory=dict)
    # Defaults a change moved, asked again (question id -> the value kept before): not the user's answer.
    redefaulted: dict[str, Any] = field(default_factory=dict)
    # The global batch was kept with Enter at its prompt (planned as the user's all the same).
    batch_kept: bool = False
    dropped_why: dict[str, str] = field(default_factory=dict)  # the reason for each, when one is known
    # Questions answered "auto" at the prompt (Enter where `Step.auto` offers it): the wizard picks.
    auto: set[str] = field(default_factory=set)
    # When the questions run out: each section none of whose questions applied, with why, so the
    # review can say so rather than leave "part 3 of 5" the last part anyone heard of.
    empty_sections: dict[str, str] = field(default_factory=dict)
    # The facts of the answers as they last were: choosing the next question and answering it
    # read the same facts, and deriving them estimates every layout's memory.
    facts_of: tuple[tuple[tuple[str, Any], ...], Inputs, FactSet] | None = field(
        default=None, repr=False, compare=False
    )

    @property
    def given(self) -> frozenset[str]:
        """The answers the user gave (typed, from a file, --set or detected): all but the defaults.

        A default kept at the prompt counts as a default: one computed from other answers follows
        them when a lever changes them.
        """
        return frozenset(key for key in self.answers if self.origins.get(key) not in ("default", KEPT_DEFAULT))

    @property
    def prompted(self) -> bool:
        """Whether any answer so far was typed at a prompt (so it exists nowhere else)."""
        return bool({"prompt", KEPT_DEFAULT} & set(self.origins.values()))


def check_keys(tree: Tree, sources: Sources) -> None:
    """Unknown keys in the answers file or --set are errors, with a did-you-mean."""
    for origin, values in (("--set", sources.set_values), ("answers file", sources.file_values)):
        for key, suggestion in unknown_keys(tree, values):
            hint = f"did you mean '{suggestion}'?" if suggestion else f"known keys: {', '.join(tree.question_ids)}"
            raise WizardError(f"{origin}: unknown key '{key}'", hint=hint)


def validate_answer(
    question: Question, raw: Any, session: Session, facts: FactSet, outcome: DecisionView | None = None
) -> tuple[Any, Inputs]:
    """The single validator: type, range, choices, then the files an answer points to."""
    if question.validate == "model_size" and isinstance(raw, str) and _names_a_local_folder(raw.strip()):
        raw = os.path.join(".", raw.strip())  # "l1b", a folder here: a path, not a size the parser refuses
    value = coerce_answer(question, raw, make_lookup(session.answers, facts, outcome))
    inputs = session.inputs
    if question.validate == "model_size" and isinstance(value, str) and looks_like_path(value):
        # A local path (saved absolute) or a Hub id (read from the cache, else the Hub).
        value, config, origin = load_model(value)
        inputs = replace(inputs, model_config=config, model_origin=origin)
    elif question.validate == "model_size":
        inputs = replace(inputs, model_config=None, model_origin=None)  # a size: no file's numbers apply
    elif question.validate == "deepspeed_json":
        value = _absolute(value)
        data, summary = load_deepspeed(value)
        inputs = replace(inputs, deepspeed=summary, deepspeed_data=data)
    elif question.validate == "nvme_path":
        check_nvme_path(value)
    return value, inputs


def _names_a_local_folder(text: str) -> bool:
    """A bare word that is no size (7B, 1.3b, 8x7B) but names a folder or file in this directory."""
    if not text or looks_like_path(text):
        return False
    if catalog_model(text) is not None:
        return os.path.exists(text)  # a folder here wins over the catalogue's name, as in from_pretrained
    try:
        parse_model_size(text)
    except (ModelSizeError, ValueError, OverflowError):
        return os.path.exists(text)
    return False


def _absolute(path: str) -> str:
    """Paths are saved absolute, so the saved answers replay from any directory."""
    return os.path.abspath(os.path.expanduser(path))


def collect(tree: Tree, sources: Sources, session: Session | None = None) -> Session:
    """Ask or look up every applicable question until none is left."""
    check_keys(tree, sources)
    session = session or Session()
    while True:
        question = _next(tree, session)
        if question is None:
            if sources.prompter is None:
                break
            if _revalidate(tree, session):
                continue  # a changed answer made a later one invalid: ask that one again
            if _impossible_batch(tree, session):
                continue  # a typed global batch the layout cannot split exactly: ask it again, with why
            session.empty_sections = _empty_sections(tree, session)
            change = sources.prompter.review(tree, session)
            if change is None:
                break
            session.reviewed = True
            session.before_change = (change, dict(session.answers))
            session.editing = (change, session.answers.get(change), session.origins.get(change, "prompt"))
            _reopen(tree, session, change)
            session.history.clear()  # "back" now leads to the review screen, not the first run's questions
            continue
        _answer(tree, question, sources, session)
    _note_ignored(tree, sources, session)
    return session


def _current_facts(session: Session) -> FactSet:
    """The facts of the session's answers now, derived again only when the answers or inputs changed."""
    answers = tuple(session.answers.items())
    kept = session.facts_of
    if kept is None or kept[1] is not session.inputs or kept[0] != answers:
        kept = session.facts_of = (answers, session.inputs, derive_facts(session.answers, session.inputs))
    return kept[2]


def _next(tree: Tree, session: Session) -> Question | None:
    facts = _current_facts(session)
    for question in tree.questions:
        done = question.id in session.answers or question.id in session.skipped
        if not done and is_applicable(question, session.answers, facts, _outcome(tree, question, session)):
            return question
    return None


def _outcome(tree: Tree, question: Question, session: Session) -> DecisionView | None:
    """The decision, for an add-on question (every question before the add-ons is settled then)."""
    if question.id not in tree.addon_ids:
        return None
    key = (tuple((k, v) for k, v in session.answers.items() if k not in tree.addon_ids), session.inputs)
    if session.decided is None or session.decided[0] != key:
        session.decided = (key, decided_outcome(tree, session.answers, session.inputs))
    return session.decided[1]


def _answer(tree: Tree, question: Question, sources: Sources, session: Session) -> None:
    facts = _current_facts(session)
    outcome = _outcome(tree, question, session)
    default = resolve_default(question, session.answers, facts)
    reasked = question.id in session.reask and sources.prompter is not None
    for origin, values in (("--set", sources.set_values), ("answers file", sources.file_values)):
        if not reasked and question.id in values and values[question.id] is not None:
            label = sources.options.get(question.id, origin) if origin == "--set" else origin
            _store(question, values[question.id], origin, session, facts, outcome, label)
            return
    detected_from = None
    if question.id in sources.detected and not reasked:
        value, source = sources.detected[question.id]
        if sources.prompter is None:
            _store(question, value, f"detected ({source})", session, facts, outcome)
            return
        default, detected_from = value, source  # a detected value is only a default the user can change
    no_default = default is None and question.id not in session.previous  # an answer being changed is the default
    missing = _no_default_reason(question, session.answers) if no_default else None
    if sources.prompter is not None:
        step = replace(
            _step(tree, question, session, facts, default, outcome),
            detected_from=detected_from,
            no_default=missing,
            auto=_auto_text(question, session, sources),
            was_auto=question.id in session.auto,
        )
        try:
            raw = sources.prompter.ask(step)
        except KeyboardInterrupt:
            raise InterruptedByUser("no config was written", partial=dict(session.answers)) from None
        if raw is BACK:
            _go_back(tree, session, question)
            return
        before = dict(session.answers)
        session.auto.discard(question.id)
        if raw is None:
            session.skipped.add(question.id)
        elif raw is AUTO:
            # The wizard's to pick, as for an answers file that leaves it out: a default, not an answer.
            _store(question, default, "default", session, facts, outcome)
            session.auto.add(question.id)
        else:
            # Enter on the offered default keeps it a default: the review screen says so, and a
            # lever that changes the answers a computed default follows re-derives it (what_if).
            # Chosen again on the review screen, it is the user's answer, whatever the default.
            # Going back during the walk and pressing Enter on a default it had kept keeps it a default.
            was_kept = not session.reviewed and session.previous_origin.get(question.id) in ("default", KEPT_DEFAULT)
            # A default a change moved, asked again for that reason and taken with Enter, is kept too: the
            # user did not pick the question, the change brought it back.
            moved = question.id in session.redefaulted
            kept = default is not None and raw == default and (question.id not in session.reask or was_kept or moved)
            # Where Enter meant "auto", a number is typed, never kept: it is the user's answer even when it is
            # the number auto would pick.
            kept = kept and not _offers_auto(question, session)
            # A global batch answered at its prompt is the batch the user wants, typed or kept: it is
            # planned as one an answers file gives (the micro-batch picked for it), not as a default.
            if question.id == GLOBAL_BATCH:
                # Kept with Enter, it is still planned as the user's batch; the review says it was kept.
                session.batch_kept = kept
            kept = kept and question.id != GLOBAL_BATCH
            _store(question, raw, KEPT_DEFAULT if kept else "prompt", session, facts, outcome)
        session.again.pop(question.id, None)
        session.dropped.pop(question.id, None)
        session.redefaulted.pop(question.id, None)
        if question.id in session.reask:
            session.reask.discard(question.id)
            _settle(
                tree,
                session,
                {**before, **({question.id: session.previous[question.id]} if question.id in session.previous else {})},
            )
        if question.id in session.history:
            session.history.remove(question.id)
        session.history.append(question.id)
        return
    derived = isinstance(question.default, Ref)
    if default is not None and (sources.use_defaults or not question.required or derived):
        _store(question, default, "default", session, facts, outcome)
    elif question.required:
        # A question with no default at all (nvme_path): --defaults cannot answer it either.
        bare = (
            f"add '{question.id}: ...' to the answers file or pass --set {question.id}=VALUE (it has no default)"
            if default is None and missing is None
            else None
        )
        raise MissingAnswerError(question.id, question.prompt, missing, bare)
    else:
        session.skipped.add(question.id)


def _no_default_reason(question: Question, answers: Mapping[str, Any]) -> str | None:
    """Why a default derived from a fact is missing although the fact's answers were given.

    For `gpu_memory_gb`, whose default comes from the GPU catalogue: "gpu_model 'X' is not a GPU
    model the wizard knows". None when the question has no derived default or its inputs are
    not all answered.
    """
    ref = question.default
    spec = FACTS.get(ref.name) if isinstance(ref, Ref) and ref.kind == "fact" else None
    if spec is None or not spec.unknown or any(key not in answers for key in spec.needs):
        return None
    given = " and ".join(f"{key} {answers[key]!r}" for key in spec.needs)
    return f"{given} {spec.unknown}"


def _store(
    question: Question,
    raw: Any,
    origin: str,
    session: Session,
    facts: FactSet,
    outcome: DecisionView | None,
    label: str | None = None,
) -> None:
    try:
        value, inputs = validate_answer(question, raw, session, facts, outcome)
    except InvalidAnswerError as exc:
        if origin in ("--set", "answers file"):
            raise exc.given_in(label or origin) from None
        raise
    session.answers[question.id] = value
    session.origins[question.id] = origin
    session.inputs = inputs


def _auto_text(question: Question, session: Session, sources: Sources) -> str:
    """What Enter does at this question where it means "auto" (the micro-batch), or "" where it does not."""
    if not _offers_auto(question, session):
        return ""
    given = GLOBAL_BATCH in session.answers or GLOBAL_BATCH in {**sources.file_values, **sources.set_values}
    # With the global batch already given (a file, --set), it is not "the one you give next".
    return AUTO_MICRO.replace("you give next", "given") if given else AUTO_MICRO


def _offers_auto(question: Question, session: Session) -> bool:
    """Whether Enter at this question lets the wizard pick: the micro-batch on the first walk.

    Not where a brought DeepSpeed JSON numbers it (its value is the default), nor for a change
    made from the review screen or an answer being asked again (a number is wanted there).
    """
    return (
        question.id == MICRO
        and not session.reviewed
        and json_micro_batch(session.inputs) is None
        and question.id not in session.previous
        and question.id not in session.reask
    )


def _step(
    tree: Tree, question: Question, session: Session, facts: FactSet, default: Any, outcome: DecisionView | None
) -> Step:
    lookup = make_lookup(session.answers, facts, outcome)
    disabled = {c.id: r for c in question.choices if (r := disabled_reason(question, c.id, lookup))}
    session.shown += 1

    def validate(raw: Any) -> Any:
        return validate_answer(question, raw, session, facts, outcome)[0]

    # An answer being changed, or one a change dropped and that applies again, is the default.
    default = session.previous.get(question.id, session.dropped.get(question.id, default))
    sections = tree.sections
    part = sections.index(question.section) + 1 if question.section in sections else 0
    # Its place among the questions answered so far: the same number when going back to it.
    place = session.history.index(question.id) + 1 if question.id in session.history else len(session.history) + 1
    return Step(
        question,
        0 if session.reviewed else place,
        default,
        disabled,
        validate,
        part=part,
        parts=len(sections),
        sections=sections,
        can_go_back=bool(session.history) or (session.editing is not None and session.editing[0] == question.id),
        back_cancels=session.editing is not None and session.editing[0] == question.id,
        again=session.again.get(question.id),
        skipped_sections=_skipped_sections(tree, question, session, lookup, facts),
        default_is_earlier_answer=(question.id in session.previous or question.id in session.dropped)
        and question.id not in session.redefaulted,
        moved_from=session.redefaulted.get(question.id),
        prompt=question.texts(session.answers.get("hardware"))[0],
        help=" ".join(
            [question.texts(session.answers.get("hardware"))[1]]
            + [text for when, text in question.help_more if evaluate(when, lookup)]
        ),
        not_offered=_not_offered(tree, question, session, lookup, facts),
        note=_note(question, session, facts),
    )


# Said after a question's figures where the micro-batch is still the wizard's to pick: they are at 1, and the
# summary's may be at the larger one it takes after the last question.
AUTO_MICRO_NOTE = (
    " The micro-batch is auto: after the last question the wizard may take a larger one where it has room, and"
    " the summary's figures are then at that size, higher than these."
)


def _note(question: Question, session: Session, facts: FactSet) -> str:
    """The run's own figures beside a question (facts.QUESTION_NOTES), and why they may grow, or ""."""
    note = (QUESTION_NOTES[question.id](facts) or "") if question.id in QUESTION_NOTES else ""
    if note and "micro_batch_size" in session.auto:
        note += AUTO_MICRO_NOTE
    return note


def _not_offered(tree: Tree, question: Question, session: Session, lookup: Any, facts: FactSet) -> dict[str, str]:
    """After "yes" to the performance extras: the extras that will not be asked, each with why.

    Without it an extra the user came for (FP8 on an A100) would simply never appear. Only extras
    that hang on that "yes" and on nothing the user still answers after it (no other extra) count.
    """
    if question.id not in tree.addon_ids or session.answers.get("tune") is not True:
        return {}
    context: Mapping[str, Any] | None = None
    reasons = {}
    for other in tree.questions:
        if other.id == question.id or other.id not in tree.addon_ids or other.when is None:
            continue
        names = {(leaf.kind, leaf.name) for leaf in iter_compares(other.when)}
        if ("answer", "tune") not in names or any(k == "answer" and n in tree.addon_ids - {"tune"} for k, n in names):
            continue
        if other.id in session.answers or evaluate(other.when, lookup):
            continue
        if context is None:
            context = {**text_context(tree, session.answers, facts), "backend": lookup("outcome", "backend")}
        try:
            leaf, reason = why_not(tree, other.when, lookup, context)
        except WizardError:
            continue
        # An extra of the other tool, or of other hardware, was never on offer here: not worth a word.
        if leaf is not None and not (leaf.kind == "answer" and leaf.name in ("target", "hardware")):
            reasons[other.label] = reason
    return reasons


def _reason(tree: Tree, question: Question, lookup: Any, context: Mapping[str, Any]) -> str:
    """Why `question` is not asked, in the explanations' words; "" when that cannot be said.

    Only a courtesy on the way: a text of the tree that cannot be rendered for these answers
    leaves the reason out rather than stopping the run.
    """
    if question.when is None:
        return ""
    try:
        leaf, reason = why_not(tree, question.when, lookup, context)
    except WizardError:
        return ""
    if leaf is not None and leaf.kind == "outcome":
        # Asked only about a decision (the extras on top of a backend): say which, and what these
        # answers lead to, rather than claim that nothing fits.
        actual = lookup("outcome", leaf.name)
        wanted = leaf.value if isinstance(leaf.value, tuple) else (leaf.value,)

        def named(value: Any) -> str:
            backend = tree.backends.get(str(value)) if leaf.name == "backend" else None
            return backend.title if backend is not None else str(value)

        if actual is MISSING or actual is None:
            return "asked once a backend is decided for these answers"
        if leaf.name == "refused":
            return "asked only where a backend fits, and none fits these answers" if actual else ""
        if leaf.name != "backend":
            return "not for the backend these answers lead to"
        if leaf.op in ("eq", "in"):
            return f"only for {' or '.join(named(v) for v in wanted)}; these answers lead to {named(actual)}"
        return f"not for {named(actual)}, which these answers lead to"
    return reason


def _empty_sections(tree: Tree, session: Session) -> dict[str, str]:
    """Every section with no question for the answers so far, each with why (see `_skipped_sections`)."""
    facts = derive_facts(session.answers, session.inputs)
    try:
        # The add-on questions (Options) hang on the decision: their reason needs it.
        outcome: DecisionView | None = decided_outcome(tree, session.answers, session.inputs)
    except WizardError:
        outcome = None
    lookup = make_lookup(session.answers, facts, outcome)
    return _sections_without_answers(tree, tree.sections, session, lookup, facts)


def _skipped_sections(tree: Tree, question: Question, session: Session, lookup: Any, facts: FactSet) -> dict[str, str]:
    """Sections before `question`'s with no question for these answers, each with why (up to two reasons)."""
    sections = tree.sections
    if question.section not in sections:
        return {}
    return _sections_without_answers(tree, sections[: sections.index(question.section)], session, lookup, facts)


def _sections_without_answers(
    tree: Tree, names: Sequence[str], session: Session, lookup: Any, facts: FactSet
) -> dict[str, str]:
    """Of the sections `names`, those none of whose questions was answered, each with why."""
    reasons: dict[str, str] = {}
    context: Mapping[str, Any] | None = None
    for name in names:
        members = [q for q in tree.questions if q.section == name]
        if not members or any(q.id in session.answers for q in members):
            continue
        context = context if context is not None else text_context(tree, session.answers, facts)
        found = [(q.label, _reason(tree, q, lookup, context)) for q in members]
        # The section's first two questions are its own; the later ones follow from them (the sizes after
        # "Tensor parallel set by hand"), and their reasons would only add noise.
        said = list(dict.fromkeys(reason for _, reason in found[:2] if reason))
        said = said or list(dict.fromkeys(reason for _, reason in found if reason))[:1]
        if len(said) < 2:
            reasons[name] = said[0] if said else ""  # the one reason; empty when none explains it
            continue
        # Two reasons, each named by its question: the first question's alone missed why the next was not
        # asked either (a brought DeepSpeed JSON, beside a sequence too short for context parallel).
        first = next(label for label, reason in found if reason == said[0])
        second = next(label for label, reason in found if reason == said[1])
        reasons[name] = f'"{first}" not asked: {said[0]}. "{second}" not asked: {said[1]}'
    return reasons


def _go_back(tree: Tree, session: Session, question: Question) -> None:
    """Take back the last answer given at a prompt, so that question is asked next.

    At the question picked on the review screen, going back cancels the change: the answer it
    had is put back and the review screen comes again. At the first question there is nothing
    to go back to: it is simply asked again.
    """
    if session.history:
        _reopen(tree, session, session.history.pop())
    elif session.editing is not None and session.editing[0] == question.id:
        qid, value, origin = session.editing
        if value is None:
            session.skipped.add(qid)
        else:
            session.answers[qid] = value
            session.origins[qid] = origin
        session.reask.discard(qid)
        session.editing = None


def _revalidate(tree: Tree, session: Session, *, addons: bool = True) -> bool:
    """Take back the answers that changed earlier answers made invalid; True if any was.

    Changing the tool to Axolotl on the review screen, say, disables an Apple silicon answer
    given before; that answer is asked again (with the old value as its default) instead of
    reaching the decision unchecked. Add-on answers depend on the decision, which needs every
    earlier answer: ``addons=False`` leaves them for the check before the review screen.
    """
    kept = Session(previous=session.previous)
    outcome: DecisionView | None = None
    invalid: list[str] = []
    for question in tree.questions:
        if question.id not in session.answers or (not addons and question.id in tree.addon_ids):
            continue
        facts = derive_facts(kept.answers, kept.inputs)
        if question.id in tree.addon_ids and outcome is None:
            outcome = decided_outcome(tree, kept.answers, kept.inputs)
        try:
            _, kept.inputs = validate_answer(question, session.answers[question.id], kept, facts, outcome)
        except WizardError as exc:
            invalid.append(question.id)
            session.again[question.id] = exc.message
            continue
        kept.answers[question.id] = session.answers[question.id]
    for qid in invalid:
        _reopen(tree, session, qid)
    return bool(invalid)


def settle_given(session: Session) -> frozenset[str]:
    """The answers the batch is settled around: the user's, and a micro-batch kept at its prompt.

    A micro-batch typed at its prompt stays, even the value offered (the review screen says
    "kept"); only one never asked, or answered "auto" (Enter on the first walk), is the wizard's
    to choose.
    """
    kept = frozenset(k for k in (MICRO,) if session.origins.get(k) == KEPT_DEFAULT)
    return session.given | kept


def _impossible_batch(tree: Tree, session: Session) -> bool:
    """A typed global batch that no micro-batch x accumulation x data-parallel GPUs gives: asked again.

    The same check the run makes after the questions (exit 2 from a file or --set), made while the
    user can still answer: the question comes back with the numbers and the nearest values.
    """
    if GLOBAL_BATCH not in session.given or session.origins.get(GLOBAL_BATCH) != "prompt":
        return False
    try:
        answers = settle_batch(tree, session.answers, session.inputs, settle_given(session))
        rec = recommend(tree, answers, session.inputs)
    except WizardError:
        return False  # the run itself says what is wrong, as for an answers file
    plan = rec.facts.batch
    if rec.refused or plan is None or plan.problem is None:
        return False
    session.again[GLOBAL_BATCH] = plan.problem
    _reopen(tree, session, GLOBAL_BATCH)
    return True


def _reopen(tree: Tree, session: Session, qid: str) -> None:
    """Take one answer back so it is asked again (the old value becomes its default).

    The answers after it stay until the new answer is given; `_settle` then drops the ones that
    stopped applying, so an unchanged answer does not make the user answer its followers again.
    """
    if qid in session.answers:
        session.previous[qid] = session.answers.pop(qid)
    if (origin := session.origins.pop(qid, None)) is not None:
        session.previous_origin[qid] = origin
    session.skipped.discard(qid)
    session.reask.add(qid)


def _settle(tree: Tree, session: Session, before: Mapping[str, Any]) -> None:
    """After an answer was changed: drop answers that no longer apply, re-ask stale defaults.

    An answer the user took as a derived default (the memory of the GPU model, say) is asked
    again when the change gives that default another value; ``before`` is the answers as they
    were before the change.
    """
    kept = prune(tree, session.answers, session.inputs)
    # A skipped question that no longer applies leaves the review screen too.
    facts = derive_facts(kept, session.inputs)
    session.skipped = {
        qid
        for qid in session.skipped
        if (q := tree.question(qid)) is not None and q.id not in tree.addon_ids and is_applicable(q, kept, facts)
    } | (session.skipped & tree.addon_ids)
    # An extra hangs on the decision: its reason names the backend these answers now lead to.
    outcome: DecisionView | None = None
    if (set(session.answers) - set(kept)) & tree.addon_ids:
        try:
            outcome = decided_outcome(tree, kept, session.inputs)
        except WizardError:  # not decidable yet: the reason says so instead
            outcome = None
    lookup = make_lookup(kept, facts, outcome)
    context: Mapping[str, Any] | None = None
    for dropped in set(session.answers) - set(kept):
        session.origins.pop(dropped, None)
        session.dropped[dropped] = session.answers[dropped]
        gone = tree.question(dropped)
        if gone is not None and gone.when is not None:
            # Why it no longer applies, in the explanations' words ("needs 2 or more GPUs; ...").
            context = context if context is not None else text_context(tree, kept, facts)
            session.dropped_why[dropped] = _reason(tree, gone, lookup, context)
        if dropped in session.history:
            session.history.remove(dropped)
    session.answers = kept
    session.inputs = resolve_inputs(kept)
    old_facts = derive_facts(before, resolve_inputs(dict(before)))
    new_facts = derive_facts(kept, session.inputs)
    for question in tree.questions:
        if question.id not in kept or not isinstance(question.default, Ref):
            continue
        if session.origins.get(question.id) in ("answers file", "--set"):
            continue  # written by the user, not taken as a default: theirs to keep
        old = resolve_default(question, before, old_facts)
        new = resolve_default(question, kept, new_facts)
        if kept[question.id] == old and new != old:
            _reopen(tree, session, question.id)
            if new is None:
                session.previous.pop(question.id, None)  # no default now: do not offer the stale one
            else:
                session.previous[question.id] = new
                session.redefaulted[question.id] = old
    # An answer the change made invalid is asked next, before any question the change brought in.
    _revalidate(tree, session, addons=False)


def _note_ignored(tree: Tree, sources: Sources, session: Session) -> None:
    for values in (sources.set_values, sources.file_values):
        for key in values:
            question = tree.question(key)
            if key not in session.answers and key not in session.ignored and question:
                session.ignored.append(key)
                if question.validate is not None:
                    continue  # a path or a model: read only where it applies
                # A value its question would refuse stays out of the levers too.
                with contextlib.suppress(WizardError):
                    session.set_aside[key] = coerce_answer(
                        question, values[key], make_lookup(session.answers, _current_facts(session))
                    )
