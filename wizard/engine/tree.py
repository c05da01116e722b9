"""The decision tree's schema and its loader.

`load_tree(text, source)` turns decision_tree.yaml into frozen dataclasses and runs the linter
(`wizard.engine.tree_lint`), so a tree that loads is a tree that can be evaluated: every error
names the file, the line and the reason. The shipped tree may be loaded with ``lint=False``: the
tests and ``backend-wizard tree --lint`` lint it, and it cannot change between them and a run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from jinja2 import TemplateSyntaxError

from wizard.engine.conditions import Condition, ConditionSyntaxError, Names, parse_condition
from wizard.engine.located_yaml import key_line, line_of, parse_yaml_or_raise
from wizard.engine.texts import SharedTexts, TreeText, included_texts, located
from wizard.engine.traits import TRAIT_KEYS, BackendTraits, trait_problem
from wizard.engine.tree_defs import SECTIONS, Definitions, Include, Resolver
from wizard.errors import TreeError

QUESTION_TYPES = ("choice", "yesno", "integer", "number", "text", "path")
VALIDATORS = (
    "model_size",
    "deepspeed_json",
    "nvme_path",
    "host",
    "divides_world_size",
    "divides_gpus_per_node",
    "class_names",
)
# The parallel sizes are outcome settings too (1 when a rule leaves them out): the rules take them
# from facts, so the arithmetic stays in wizard/engine/parallel.py and the decision in the tree.
OUTCOME_KEYS = (
    "backend",
    "zero_stage",
    "offload_optimizer",
    "offload_param",
    "strategy",
    "dp_replicate_size",
    "dp_shard_size",
    "tp_size",
    "cp_size",
    "sp_size",
    "ep_size",
    "pp_size",
)
SCHEMA_VERSION = 1


@dataclass(frozen=True)
class Ref:
    """A value taken from an answer or a fact (``{answer: x}`` / ``{fact: y}``)."""

    kind: str
    name: str


@dataclass(frozen=True)
class Choice:
    """One option of a choice question."""

    id: str
    title: str
    description: str
    disabled_when: Condition | None = None
    disabled_reason: str | None = None


@dataclass(frozen=True)
class Question:
    """One question: the prompt, its help, its type and constraints, and when it is asked."""

    id: str
    prompt: str
    help: str
    type: str
    line: int
    choices: tuple[Choice, ...] = ()
    default: Any = None
    when: Condition | None = None
    required: bool = False
    minimum: float | None = None
    maximum: float | None = None
    exclusive_minimum: bool = False
    validate: str | None = None
    label: str = ""  # a short name for the review screen ("GPUs per machine"); the id when empty
    section: str = ""  # the part of the interview it belongs to ("Hardware", "Memory", ...)
    # The prompt and help for one hardware answer where the general ones would speak of hardware the
    # user does not have (a Mac's unified memory, not "memory per GPU"): hardware id -> (prompt, help).
    on_hardware: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    labels_on_hardware: Mapping[str, str] = field(default_factory=dict)  # the review screen's label, likewise
    # Help sentences for some runs only (an Axolotl key, a DeepSpeed JSON's part): each with the
    # condition on the earlier answers under which the help adds it. The help a user reads then
    # speaks of their tool and hardware, not of every other.
    help_more: tuple[tuple[Condition, str], ...] = ()
    # Said beside "Enter keeps N" at a typed prompt: what that default is, where the help would
    # otherwise leave a newcomer to press Enter on a value it advises against (a batch of 4).
    default_note: str = ""

    def texts(self, hardware: Any) -> tuple[str, str]:
        """The prompt and help to show when the hardware answer is `hardware`."""
        return self.on_hardware.get(str(hardware), (self.prompt, self.help))

    def label_on(self, hardware: Any) -> str:
        """The review screen's label when the hardware answer is `hardware`."""
        return self.labels_on_hardware.get(str(hardware), self.label)

    def choice(self, choice_id: str) -> Choice | None:
        """The choice with this id, if any."""
        return next((c for c in self.choices if c.id == choice_id), None)


@dataclass(frozen=True)
class Outcome:
    """What a rule decides: a backend with settings, or a refusal."""

    refuse: bool
    backend: str | None
    settings: Mapping[str, Any]


@dataclass(frozen=True)
class Rule:
    """An ordered decision rule: first one whose condition holds wins."""

    id: str
    guidance: str
    sources: tuple[str, ...]
    when: Condition
    outcome: Outcome
    because: str
    line: int
    # What the rule decides, in a few words ("QLoRA on several GPUs → FSDP2"): the decision trace
    # names rules by it, since several rules share one guideline and the ids are internal.
    title: str = ""


@dataclass(frozen=True)
class Backend:
    """A backend the tree can recommend."""

    id: str
    title: str
    summary: str
    strategy: str | None
    available: Condition | None = None  # when false, the backend is no candidate at all
    # "Why not this backend?" when it would fit too: what it costs against the chosen one.
    compare: str | None = None
    # The memory layouts (estimate strategies) this backend can run, lightest traffic per step
    # first: "why not" looks for the first one that fits before it falls back to a rule's text.
    layouts: tuple[str, ...] = ()
    # Why this backend was chosen over another that would fit too, when the answers decided it
    # (a DeepSpeed JSON, NVMe offload, QLoRA ...); appended to that other backend's `compare`.
    preferred: str | None = None
    # A sentence added to every "why not this backend?" when it renders non-empty: what this
    # backend could still offer these answers and why the tree did not take it.
    also: str | None = None
    # The title on one hardware where `title` would misname the device (hardware choice id ->
    # title): on Apple silicon the one device is the Mac, not a GPU the user does not have.
    titles: Mapping[str, str] = field(default_factory=dict)
    # The summary for one of its layouts where `summary` would misdescribe it (layout -> text):
    # DDP with layer offloading keeps no full copy of the model on each GPU.
    summaries: Mapping[str, str] = field(default_factory=dict)
    # What it shards, how it offloads, how it is configured: what code reads instead of the id.
    traits: BackendTraits = field(default_factory=BackendTraits)

    @property
    def distributed_type(self) -> str | None:
        """Accelerate's name for the backend (its `accelerate_type` trait), if the tree gives one."""
        return self.traits.accelerate_type

    def title_on(self, hardware: Any) -> str:
        """The title a run on this hardware (a choice id such as "mps") reads; `title` by default."""
        return self.titles.get(str(hardware), self.title) if hardware is not None else self.title

    def summary_for(self, layout: Any) -> str:
        """The summary of a run in this memory layout (a strategy id); `summary` by default."""
        return self.summaries.get(str(layout), self.summary) if layout is not None else self.summary


@dataclass(frozen=True)
class FactText:
    """Plain-language sentences for a boolean fact, when it holds and when it does not."""

    holds: str
    fails: str


@dataclass(frozen=True)
class Tree:
    """A loaded, validated decision tree."""

    source: str
    questions: tuple[Question, ...]
    rules: tuple[Rule, ...]
    backends: Mapping[str, Backend]
    fact_texts: Mapping[str, FactText]
    guidance: Mapping[str, str]
    sources: Mapping[str, str]
    # Add-on questions: asked after the decision (listed after every other question); only their
    # conditions may use {outcome: ...}, and no rule may use their answers.
    addon_ids: frozenset[str] = frozenset()
    # Sources that speak of one target only (an Axolotl page): tag -> that target.
    source_targets: Mapping[str, str] = field(default_factory=dict)
    # Texts written once and included by others ({% include texts.NAME %}), and what the tree
    # names (conditions, groups, blocks, texts), for the linter (wizard.engine.tree_defs).
    texts: SharedTexts = field(default_factory=SharedTexts)
    definitions: Definitions = field(default_factory=Definitions)
    questions_line: int = 0  # the line of the tree's `questions:` key

    def sources_for(self, tags: Sequence[str], target: Any) -> tuple[str, ...]:
        """The tags worth citing to a run for `target` (Axolotl pages only to Axolotl users)."""
        return tuple(t for t in tags if self.source_targets.get(t, target) == target)

    def question(self, qid: str) -> Question | None:
        """The question with this id, if any."""
        return next((q for q in self.questions if q.id == qid), None)

    @property
    def question_ids(self) -> tuple[str, ...]:
        """Question ids in asking order."""
        return tuple(q.id for q in self.questions)

    @property
    def sections(self) -> tuple[str, ...]:
        """The sections of the interview, in asking order (empty when the tree names none)."""
        return tuple(dict.fromkeys(q.section for q in self.questions if q.section))


class _Reader:
    """Helpers that raise `TreeError` with file and line."""

    def __init__(self, source: str, check_templates: bool = True) -> None:
        self.source = source
        self.check_templates = check_templates
        self.names: Names | None = None  # the tree's named conditions and groups, once read
        self.includes: list[Include] = []  # every include of a shared text, when texts are checked
        self.within = ""  # the shared text being read, if any

    def fail(self, line: int, reason: str) -> TreeError:
        return TreeError(f"{self.source}, line {line}: {reason}")

    def mapping(self, raw: Any, what: str, line: int) -> Mapping[str, Any]:
        if not isinstance(raw, Mapping):
            raise self.fail(line_of(raw, line), f"{what} must be a mapping")
        return raw

    def text(
        self,
        raw: Mapping[str, Any],
        key: str,
        what: str,
        optional: bool = False,
        line: int | None = None,
        rendered: bool = False,
    ) -> str:
        """A text at `key` (on `line`, by default the mapping's), its template syntax checked.

        Only a `rendered` text (`template`) may include a shared text: the others (a help, a
        choice's title or disabled reason) are shown as written, so an include would show as is.
        """
        at = line_of(raw) if line is None else line
        value = raw.get(key)
        if value is None and optional:
            return ""
        if not isinstance(value, str) or not value.strip():
            raise self.fail(at, f"{what}: '{key}' must be non-empty text")
        try:
            if self.check_templates:
                # Parsing a text checks its syntax and finds the shared texts it includes.
                names = included_texts(value)
                if names and not rendered:
                    raise self.fail(at, f"{what}: '{key}' is shown as written, so it cannot include texts.{names[0]}")
                self.includes += (Include(name, at, self.within) for name in names)
        except TemplateSyntaxError as exc:
            line = at + (exc.lineno or 1) - 1
            raise self.fail(line, f"{what}: bad template in '{key}': {exc.message}") from None
        return value

    def template(self, raw: Mapping[str, Any], key: str, what: str, line: int | None = None) -> TreeText:
        """A text rendered later with the answers: it keeps its file and line for render-time errors."""
        at = line_of(raw) if line is None else line
        return located(self.text(raw, key, what, line=at, rendered=True), f"{self.source}, line {at}")

    def only(self, raw: Mapping[str, Any], allowed: tuple[str, ...], what: str) -> None:
        unknown = sorted(set(raw) - set(allowed))
        if unknown:
            raise self.fail(line_of(raw), f"{what}: unknown key(s) {', '.join(unknown)}; allowed: {', '.join(allowed)}")

    def condition(self, raw: Any, line: int, what: str) -> Condition:
        try:
            return parse_condition(raw, line, self.names)
        except ConditionSyntaxError as exc:
            raise self.fail(exc.line or line, f"{what}: {exc.reason}") from None


# The answers the code reads by name (wizard/engine/facts.py, wizard/render/context.py): a tree the wizard runs
# asks them (`check_engine_questions`; the tree language itself needs none of them).
ENGINE_QUESTIONS = (
    "target",
    "hardware",
    "model",
    "method",
    "gpus_per_node",
    "gpu_memory_gb",
    "sequence_length",
    "micro_batch_size",
    "gradient_checkpointing",
)


def check_engine_questions(tree: Tree) -> None:
    """Raise `TreeError` where `tree` lacks a question the wizard reads by name, naming its questions line.

    Without it a run would end in a traceback far from the edit that removed the question.
    """
    asked = set(tree.question_ids)
    missing = [name for name in ENGINE_QUESTIONS if name not in asked]
    if missing:
        raise TreeError(
            f"{tree.source}, line {tree.questions_line or 1}: questions: no question {missing[0]!r}, which the wizard"
            f" reads by name (the estimate and the files); a tree it runs asks {', '.join(ENGINE_QUESTIONS)}"
        )


def load_tree(text: str, source: str, *, lint: bool = True) -> Tree:
    """Parse and validate a decision tree; raise `TreeError` naming file, line and reason.

    ``lint=False`` still checks the schema but skips the linter and the template syntax check of
    every text, which cost most of a run's start (parsing ~400 Jinja texts, enumerating every
    path): only for the shipped tree, which the tests and ``tree --lint`` check in full.
    """
    reader = _Reader(source, check_templates=lint)
    raw = parse_yaml_or_raise(text, source, TreeError, check_depth=lint)  # unlinted is the shipped tree, never deep
    top = reader.mapping(raw, "the tree", 1)
    sections = ("sources", "guidance", "backends", "facts", "questions", "addons", "rules")
    reader.only(top, ("schema_version", *sections, *SECTIONS.values()), "the tree")
    if top.get("schema_version") != SCHEMA_VERSION:
        raise reader.fail(line_of(top, 1), f"schema_version must be {SCHEMA_VERSION}")
    resolver = _resolve_names(reader, top)
    shared = _shared_texts(reader, top.get("texts"))
    sources, source_targets = _sources(reader, top.get("sources"))
    guidance = _string_map(reader, top.get("guidance"), "guidance")
    backends = _backends(reader, top.get("backends"))
    fact_texts = _fact_texts(reader, top.get("facts"))
    questions = tuple(_question(reader, q) for q in _list(reader, top.get("questions"), "questions", top))
    hardware_ids = {c.id for q in questions if q.id == "hardware" for c in q.choices}
    for question in questions:
        for hardware in question.on_hardware:
            if hardware not in hardware_ids:
                raise reader.fail(
                    question.line,
                    f"question {question.id}: on_hardware names {hardware!r}, not a choice of the hardware question"
                    f" ({', '.join(sorted(hardware_ids))})",
                )
    raw_addons = _list(reader, top["addons"], "addons", top) if "addons" in top else []
    addons = tuple(_question(reader, q) for q in raw_addons)
    rules = tuple(_rule(reader, r) for r in _list(reader, top.get("rules"), "rules", top))
    tree = Tree(
        source,
        _sections(reader, questions + addons),
        rules,
        backends,
        fact_texts,
        guidance,
        sources,
        frozenset(q.id for q in addons),
        source_targets,
        SharedTexts(shared),
        Definitions(
            {**resolver.lines(), "text": {name: key_line(top["texts"], name) for name in shared}},
            {
                **{kind: frozenset(names) for kind, names in resolver.used.items()},
                "text": frozenset(i.name for i in reader.includes if i.name != i.within),
            },
            tuple(reader.includes),
        ),
        questions_line=key_line(top, "questions", 1),
    )
    if lint:
        from wizard.engine.tree_lint import lint_tree  # local: the linter imports this module

        lint_tree(tree)
    return tree


def _resolve_names(reader: _Reader, top: Mapping[str, Any]) -> Resolver:
    """Expand the tree's blocks, check its named conditions and groups, and let conditions use them."""
    resolver = Resolver(top, reader.fail)
    for key in list(top):
        if key != SECTIONS["block"] and isinstance(top, dict):  # parse_yaml's mappings are dicts
            top[key] = resolver.expand_blocks(top[key])
    try:
        resolver.resolve_all()
    except ConditionSyntaxError as exc:
        raise reader.fail(exc.line, exc.reason) from None
    reader.names = resolver
    return resolver


def _shared_texts(reader: _Reader, raw: Any) -> dict[str, TreeText]:
    """The tree's `texts`: name -> a text that any text of the tree may include by name."""
    if raw is None:
        return {}
    mapping = reader.mapping(raw, "'texts'", 1)
    result = {}
    for name in mapping:
        line = key_line(mapping, name)
        # The name is read as an attribute (texts.NAME), so it must be one; "_..." stays private.
        if not name.isidentifier() or name.startswith("_"):
            raise reader.fail(line, f"texts: the name {name!r} must be an identifier not starting with '_'")
        reader.within = name
        try:
            result[name] = reader.template(mapping, name, f"texts.{name}", line=line)
        finally:
            reader.within = ""
    return result


def _sections(reader: _Reader, questions: tuple[Question, ...]) -> tuple[Question, ...]:
    """Give every question its section: a `section` starts one, and it runs until the next.

    Sections are how the prompts show progress ("Memory, part 3 of 5"), so one must not come back
    after another has started: the progress would then move backwards.
    """
    result: list[Question] = []
    seen: list[str] = []
    for question in questions:
        if question.section:
            if question.section in seen:
                raise reader.fail(question.line, f"question {question.id}: section {question.section!r} already ended")
            seen.append(question.section)
        result.append(replace(question, section=seen[-1] if seen else ""))
    return tuple(result)


def _list(reader: _Reader, raw: Any, what: str, parent: Any) -> list[Any]:
    if not isinstance(raw, list) or not raw:
        raise reader.fail(line_of(raw, line_of(parent, 1)), f"'{what}' must be a non-empty list")
    return raw


def _sources(reader: _Reader, raw: Any) -> tuple[dict[str, str], dict[str, str]]:
    """Source tags: "Title https://..." or {text: "Title https://...", target: axolotl}."""
    mapping = reader.mapping(raw, "'sources'", 1)
    texts: dict[str, str] = {}
    targets: dict[str, str] = {}
    for key, value in mapping.items():
        if isinstance(value, Mapping):
            reader.only(value, ("text", "target"), f"sources.{key}")
            target = value.get("target")
            if not isinstance(target, str):
                raise reader.fail(line_of(value, line_of(mapping)), f"sources.{key}.target must be text")
            targets[key] = target
            value = value.get("text")
        texts[key] = value
    return _string_map(reader, texts, "sources", line_of(mapping)), targets


def _string_map(reader: _Reader, raw: Any, what: str, line: int | None = None) -> dict[str, str]:
    mapping = reader.mapping(raw, f"'{what}'", 1)
    at = line if line is not None else line_of(mapping)
    for key, value in mapping.items():
        if not key.isprintable():  # tags are pasted into the header comment of every file written
            raise reader.fail(at, f"{what}: the tag {key!r} must be one line of printable text")
        if not isinstance(value, str):
            raise reader.fail(at, f"{what}.{key} must be text")
    return dict(mapping)


def _backends(reader: _Reader, raw: Any) -> dict[str, Backend]:
    result = {}
    for bid, body in reader.mapping(raw, "'backends'", 1).items():
        body = reader.mapping(body, f"backend {bid}", line_of(raw))
        reader.only(
            body,
            (
                "title",
                "summary",
                "strategy",
                "available",
                "compare",
                "layouts",
                "preferred",
                "also",
                "titles",
                "summaries",
                "traits",
            ),
            f"backend {bid}",
        )
        strategy = body.get("strategy")
        available = body.get("available")
        title = reader.text(body, "title", f"backend {bid}")
        if not title.isprintable():  # pasted into the header comment of every file written
            raise reader.fail(line_of(body), f"backend {bid}: 'title' must be one line of printable text")
        result[bid] = Backend(
            bid,
            title,
            reader.text(body, "summary", f"backend {bid}"),
            strategy if isinstance(strategy, str) else None,
            reader.condition(available, line_of(body), f"backend {bid} available") if available is not None else None,
            reader.template(body, "compare", f"backend {bid}") if "compare" in body else None,
            _layouts(reader, body, bid, strategy if isinstance(strategy, str) else None),
            reader.template(body, "preferred", f"backend {bid}") if "preferred" in body else None,
            reader.template(body, "also", f"backend {bid}") if "also" in body else None,
            _hardware_titles(reader, body, bid),
            _layout_summaries(reader, body, bid),
            _traits(reader, body, bid),
        )
    return result


def _traits(reader: _Reader, body: Mapping[str, Any], bid: str) -> BackendTraits:
    """A backend's optional `traits`, each a known trait with a value it may take.

    An unknown trait or a bad value fails here, naming the line, the trait, the value and what is
    allowed: code reads these instead of the backend's id, so a typo would silently change what is
    written. A trait left out keeps BackendTraits' default (a plain data-parallel backend).
    """
    what = f"backend {bid}: traits"
    if "traits" not in body:
        return BackendTraits()
    raw = reader.mapping(body["traits"], what, key_line(body, "traits", line_of(body)))
    unknown = sorted(str(key) for key in set(raw) - set(TRAIT_KEYS))
    if unknown:
        line = key_line(raw, unknown[0], line_of(raw))
        raise reader.fail(line, f"{what}: unknown trait {unknown[0]!r}; allowed: {', '.join(TRAIT_KEYS)}")
    for key, value in raw.items():
        problem = trait_problem(key, value)
        if problem is not None:
            raise reader.fail(key_line(raw, key, line_of(raw)), f"{what}.{key}: {problem}")
    values: dict[str, Any] = {key: dict(value) if key == "labels" else value for key, value in raw.items()}
    return BackendTraits(**values)


def _layout_summaries(reader: _Reader, body: Mapping[str, Any], bid: str) -> dict[str, str]:
    """A backend's optional `summaries`: one of its layouts -> the summary a run in it reads.

    The linter (tree_lint) checks that each key is one of the backend's `layouts`.
    """
    raw = body.get("summaries")
    if raw is None:
        return {}
    raw = reader.mapping(raw, f"backend {bid}: 'summaries'", line_of(body))
    return {str(layout): reader.text(raw, layout, f"backend {bid}: summaries") for layout in raw}


def _hardware_titles(reader: _Reader, body: Mapping[str, Any], bid: str) -> dict[str, str]:
    """A backend's optional `titles`: hardware choice id -> a title, one printable line each.

    The ids are checked against the hardware question's choices by the linter (tree_lint), which
    sees the whole tree.
    """
    raw = body.get("titles")
    if raw is None:
        return {}
    raw = reader.mapping(raw, f"backend {bid}: 'titles'", line_of(body))
    titles = {}
    for hardware in raw:
        what = f"backend {bid}: titles"
        title = reader.text(raw, hardware, what)
        # Pasted into the header comment of every file written, as `title` is.
        if not isinstance(hardware, str) or not title.isprintable():
            raise reader.fail(
                line_of(raw), f"{what}: '{hardware}' must map a hardware id to one line of printable text"
            )
        titles[hardware] = title
    return titles


def _layouts(reader: _Reader, body: Mapping[str, Any], bid: str, strategy: str | None) -> tuple[str, ...]:
    """A backend's `layouts` list; without one, its single `strategy` (or none)."""
    raw = body.get("layouts")
    if raw is None:
        return (strategy,) if strategy else ()
    if not isinstance(raw, list) or not all(isinstance(item, str) for item in raw):
        raise reader.fail(line_of(body), f"backend {bid}: 'layouts' must be a list of memory strategy names")
    return tuple(raw)


def _fact_texts(reader: _Reader, raw: Any) -> dict[str, FactText]:
    result = {}
    for fid, body in reader.mapping(raw, "'facts'", 1).items():
        body = reader.mapping(body, f"fact {fid}", line_of(raw))
        reader.only(body, ("holds", "fails"), f"fact {fid}")
        result[fid] = FactText(
            reader.template(body, "holds", f"fact {fid}"), reader.template(body, "fails", f"fact {fid}")
        )
    return result


def _question(reader: _Reader, raw: Any) -> Question:
    body = reader.mapping(raw, "a question", 1)
    line = line_of(body)
    keys = (
        "id",
        "prompt",
        "help",
        "type",
        "choices",
        "default",
        "when",
        "required",
        "min",
        "max",
        "exclusive_min",
        "validate",
        "label",
        "section",
        "on_hardware",
        "help_more",
        "default_note",
    )
    reader.only(body, keys, f"question {body.get('id', '?')}")
    qid = body.get("id")
    if not isinstance(qid, str) or not qid.isidentifier():
        raise reader.fail(line, f"question id must be an identifier, not {qid!r}")
    what = f"question {qid}"
    qtype = body.get("type")
    if qtype not in QUESTION_TYPES:
        raise reader.fail(line, f"{what}: type must be one of {', '.join(QUESTION_TYPES)}, not {qtype!r}")
    validate = body.get("validate")
    if validate is not None and validate not in VALIDATORS:
        raise reader.fail(line, f"{what}: unknown validator {validate!r}; known: {', '.join(VALIDATORS)}")
    choices: tuple[Choice, ...] = ()
    if qtype == "choice":
        choices = tuple(_choice(reader, c, what) for c in _list(reader, body.get("choices"), "choices", body))
    elif "choices" in body:
        raise reader.fail(line, f"{what}: only choice questions have choices")
    bounds = {k: body.get(k) for k in ("min", "max")}
    for key, value in bounds.items():
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
            raise reader.fail(line, f"{what}: '{key}' must be a number")
    return Question(
        id=qid,
        prompt=reader.text(body, "prompt", what),
        help=reader.text(body, "help", what),
        type=qtype,
        line=line,
        choices=choices,
        default=_default(reader, body.get("default"), what, line),
        when=reader.condition(body["when"], line, f"{what} when") if "when" in body else None,
        required=bool(body.get("required", False)),
        minimum=bounds["min"],
        maximum=bounds["max"],
        exclusive_minimum=bool(body.get("exclusive_min", False)),
        validate=validate,
        label=reader.text(body, "label", what, optional=True) or qid,
        section=reader.text(body, "section", what, optional=True) or "",
        on_hardware=_on_hardware(reader, body, what),
        help_more=_help_more(reader, body, what),
        default_note=reader.text(body, "default_note", what, optional=True) or "",
        labels_on_hardware={
            str(hw): str(texts["label"])
            for hw, texts in (body.get("on_hardware") or {}).items()
            if isinstance(texts, Mapping) and texts.get("label")
        },
    )


def _help_more(reader: _Reader, body: Mapping[str, Any], what: str) -> tuple[tuple[Condition, str], ...]:
    """`help_more: [{when: CONDITION, text: ...}]`: help sentences added where their condition holds."""
    if "help_more" not in body:
        return ()
    parts = []
    for raw in _list(reader, body["help_more"], "help_more", body):
        where = f"{what}: help_more"
        item = reader.mapping(raw, where, line_of(body))
        reader.only(item, ("when", "text"), where)
        if "when" not in item:
            raise reader.fail(line_of(item), f"{where}: each entry needs a 'when'")
        parts.append((reader.condition(item["when"], line_of(item), f"{where} when"), reader.text(item, "text", where)))
    return tuple(parts)


def _on_hardware(reader: _Reader, body: Mapping[str, Any], what: str) -> dict[str, tuple[str, str]]:
    """`on_hardware: {mps: {prompt: ..., help: ...}}`: both texts for each hardware id named."""
    if "on_hardware" not in body:
        return {}
    variants = {}
    for hardware, texts in reader.mapping(body["on_hardware"], f"{what}: on_hardware", line_of(body)).items():
        where = f"{what}: on_hardware {hardware}"
        texts = reader.mapping(texts, where, line_of(body))
        reader.only(texts, ("prompt", "help", "label"), where)
        variants[str(hardware)] = (reader.text(texts, "prompt", where), reader.text(texts, "help", where))
    return variants


def _choice(reader: _Reader, raw: Any, what: str) -> Choice:
    body = reader.mapping(raw, f"{what}: a choice", 1)
    reader.only(body, ("id", "title", "description", "disabled"), f"{what} choice")
    cid = body.get("id")
    if not isinstance(cid, str) or not cid:
        raise reader.fail(line_of(body), f"{what}: choice id must be text, not {cid!r}")
    disabled = body.get("disabled")
    when, reason = None, None
    if disabled is not None:
        block = reader.mapping(disabled, f"{what} choice {cid} disabled", line_of(body))
        reader.only(block, ("when", "reason"), f"{what} choice {cid} disabled")
        when = reader.condition(block.get("when"), line_of(block), f"{what} choice {cid} disabled")
        reason = reader.text(block, "reason", f"{what} choice {cid} disabled")
    return Choice(
        cid,
        reader.text(body, "title", f"{what} choice {cid}"),
        reader.text(body, "description", f"{what} choice {cid}"),
        when,
        reason,
    )


def _default(reader: _Reader, raw: Any, what: str, line: int) -> Any:
    if isinstance(raw, Mapping):
        if set(raw) not in ({"answer"}, {"fact"}):
            raise reader.fail(line_of(raw, line), f"{what}: a computed default is {{answer: id}} or {{fact: id}}")
        kind = next(iter(raw))
        return Ref(kind, str(raw[kind]))
    return raw


def _rule(reader: _Reader, raw: Any) -> Rule:
    body = reader.mapping(raw, "a rule", 1)
    line = line_of(body)
    reader.only(
        body, ("id", "title", "guidance", "sources", "when", "outcome", "because"), f"rule {body.get('id', '?')}"
    )
    rid = body.get("id")
    if not isinstance(rid, str) or not rid.isidentifier():
        raise reader.fail(line, f"rule id must be an identifier, not {rid!r}")
    what = f"rule {rid}"
    srcs = body.get("sources", [])
    if not isinstance(srcs, list) or not all(isinstance(s, str) for s in srcs):
        raise reader.fail(line, f"{what}: 'sources' must be a list of source tags")
    if "when" not in body:
        raise reader.fail(line, f"{what}: 'when' is required (use 'always' for a catch-all rule)")
    out = reader.mapping(body.get("outcome"), f"{what} outcome", line)
    reader.only(out, ("refuse", *OUTCOME_KEYS), f"{what} outcome")
    refuse = bool(out.get("refuse", False))
    backend = out.get("backend")
    if refuse == (backend is not None):
        raise reader.fail(line_of(out, line), f"{what}: an outcome has either 'backend' or 'refuse: true'")
    settings = {k: _default(reader, v, what, line) for k, v in out.items() if k not in ("refuse", "backend")}
    return Rule(
        id=rid,
        guidance=reader.text(body, "guidance", what),
        sources=tuple(srcs),
        when=reader.condition(body["when"], line, f"{what} when"),
        outcome=Outcome(refuse, backend if isinstance(backend, str) else None, settings),
        because=reader.template(body, "because", what),
        line=line,
        title=_rule_title(reader, body, what),
    )


def _rule_title(reader: _Reader, body: Mapping[str, Any], what: str) -> str:
    """A rule's `title`: optional (a small tree of one's own may leave it out), but one line if given."""
    if "title" not in body:
        return ""
    title = reader.text(body, "title", what)
    if not title.isprintable() or "{" in title:
        raise reader.fail(line_of(body), f"{what}: 'title' must be one line of plain text")
    return title.strip()
