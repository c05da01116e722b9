"""Static checks on a parsed decision tree.

Beyond the schema: ids are unique and every reference resolves; a question's condition only uses
answers asked before it; and, by enumerating every combination of the choice answers with
three-valued logic (numbers and facts stay "unknown"), no question is unaskable, no rule is dead,
and no path through the questions ends without a rule. What the tree names once (conditions,
groups, blocks, shared texts) is each used, and no shared text includes itself.
`check_line_lengths` is the style check of `backend-wizard tree --lint`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

from wizard.engine.conditions import MISSING, Compare, Condition, compare, evaluate3, iter_compares
from wizard.engine.facts import FACTS
from wizard.engine.memory import STRATEGIES
from wizard.engine.texts import SHARED
from wizard.engine.tree import OUTCOME_KEYS, Backend, Ref, Tree
from wizard.engine.tree_defs import SECTIONS
from wizard.errors import TreeError

MAX_COMBINATIONS = 200_000
MAX_LINE = 120  # characters per line of a tree file: long texts fold over several lines
# What an add-on condition may ask of the decision ({outcome: backend, in: [...]}).
OUTCOME_NAMES = ("refused", "distributed_type", *OUTCOME_KEYS)


def lint_tree(tree: Tree) -> None:
    """Raise `TreeError` (file, line, reason) for the first problem found."""
    _check_ids(tree)
    _check_references(tree)
    _check_definitions(tree)
    _check_reachability(tree)


def check_line_lengths(text: str, source: str, limit: int = MAX_LINE) -> None:
    """Raise `TreeError` for the first line of a tree file longer than `limit` characters.

    A style rule for the shipped tree and `tree --lint`, not for loading: a long line is still a
    valid tree. YAML folds a long text over several lines (``>-``, or a quoted one broken at a
    space) into the same string.
    """
    for number, line in enumerate(text.splitlines(), 1):
        if len(line) > limit:
            raise TreeError(f"{source}, line {number}: {len(line)} characters, more than {limit}; fold the text")


def _fail(tree: Tree, line: int, reason: str) -> TreeError:
    return TreeError(f"{tree.source}, line {line}: {reason}")


def _check_ids(tree: Tree) -> None:
    seen: dict[str, int] = {}
    for q in tree.questions:
        if q.id in seen:
            raise _fail(tree, q.line, f"duplicate question id '{q.id}' (first at line {seen[q.id]})")
        seen[q.id] = q.line
        ids = [c.id for c in q.choices]
        dupes = sorted({c for c in ids if ids.count(c) > 1})
        if dupes:
            raise _fail(tree, q.line, f"question {q.id}: duplicate choice id(s) {', '.join(dupes)}")
        if q.type == "choice" and isinstance(q.default, str) and q.choice(q.default) is None:
            raise _fail(tree, q.line, f"question {q.id}: default '{q.default}' is not one of its choices")
    rule_ids: dict[str, int] = {}
    for r in tree.rules:
        if r.id in rule_ids:
            raise _fail(tree, r.line, f"duplicate rule id '{r.id}' (first at line {rule_ids[r.id]})")
        rule_ids[r.id] = r.line
    # The trace names rules by title: two rules with one title would read as one rule tested twice.
    titles: dict[str, str] = {}
    for r in tree.rules:
        if r.title and r.title.casefold() in titles:
            raise _fail(tree, r.line, f"rule {r.id}: title '{r.title}' is also rule {titles[r.title.casefold()]}'s")
        titles[r.title.casefold()] = r.id
    # Sentences may explain a fact or an answer (the conditions of rules use both), or a part of the
    # decision that an add-on's condition reads (the backend).
    for fid in tree.fact_texts:
        if fid not in FACTS and fid not in seen and fid not in OUTCOME_NAMES:
            raise _fail(tree, 1, f"facts: '{fid}' is neither a fact the wizard computes, a question nor an outcome")
    for b in tree.backends.values():
        if b.strategy is not None and b.strategy not in STRATEGIES:
            raise _fail(tree, 1, f"backend {b.id}: unknown memory strategy '{b.strategy}'")
        unknown = [layout for layout in b.layouts if layout not in STRATEGIES]
        if unknown:
            raise _fail(tree, 1, f"backend {b.id}: unknown memory layout(s) {', '.join(unknown)} in 'layouts'")
        _check_traits(tree, b)
        # A summary keyed by a layout no rule decides for this backend would silently never be shown.
        decided = {str(r.outcome.settings.get("strategy")) for r in tree.rules if r.outcome.backend == b.id}
        stray = [layout for layout in b.summaries if layout not in decided]
        if stray:
            raise _fail(
                tree, 1, f"backend {b.id}: 'summaries' names layout(s) no rule decides for it: {', '.join(stray)}"
            )
        # A per-hardware title is keyed by the hardware question's choice ids: a typo ("mac")
        # would silently never apply.
        hardware = tree.question("hardware")
        known = {c.id for c in hardware.choices} if hardware is not None else set()
        unknown = [h for h in b.titles if h not in known]
        if unknown:
            raise _fail(tree, 1, f"backend {b.id}: 'titles' names unknown hardware {', '.join(unknown)}")


# A trait value that only one Accelerate type can carry: its settings live in that type's block
# of Accelerate's config (deepspeed_config, fsdp_config, megatron_lm_config), which the templates
# write by the type.
_TRAIT_TYPES = {
    ("deepspeed_json", True): "DEEPSPEED",
    ("shards", "zero"): "DEEPSPEED",
    ("offload", "zero"): "DEEPSPEED",
    ("parallelism_host", "ulysses"): "DEEPSPEED",
    ("shards", "all"): "FSDP",
    ("offload", "fsdp"): "FSDP",
    ("parallelism_host", "device_mesh"): "FSDP",
    ("checkpointing", "fsdp"): "FSDP",
    ("shards", "model"): "MEGATRON_LM",
    ("parallelism_host", "megatron"): "MEGATRON_LM",
    ("checkpointing", "megatron"): "MEGATRON_LM",
}


def _check_traits(tree: Tree, backend: Backend) -> None:
    """A backend's traits agree with its accelerate_type (the block of Accelerate's config they need)."""
    traits = backend.traits
    for (key, value), wanted in _TRAIT_TYPES.items():
        if getattr(traits, key) == value and traits.accelerate_type != wanted:
            raise _fail(
                tree,
                1,
                f"backend {backend.id}: traits.{key} {value!r} needs traits.accelerate_type {wanted}, "
                f"not {traits.accelerate_type}",
            )
    if traits.accelerate_type == "DEEPSPEED" and not traits.deepspeed_json:
        raise _fail(tree, 1, f"backend {backend.id}: accelerate_type DEEPSPEED needs traits.deepspeed_json: true")


def _check_references(tree: Tree) -> None:
    order = {q.id: i for i, q in enumerate(tree.questions)}
    for index, q in enumerate(tree.questions):
        conditions = [q.when] if q.when else []
        conditions += [c.disabled_when for c in q.choices if c.disabled_when]
        # A help sentence's condition reads earlier answers too: a later one is never set when it is shown.
        conditions += [when for when, _ in q.help_more]
        refs = [leaf for cond in conditions for leaf in iter_compares(cond)]
        if isinstance(q.default, Ref):
            refs.append(Compare(q.default.kind, q.default.name, "set", True, q.line))  # type: ignore[arg-type]
        for leaf in refs:
            _check_leaf(tree, leaf, f"question {q.id}")
            if leaf.kind == "outcome":
                if q.id not in tree.addon_ids:
                    raise _fail(
                        tree,
                        leaf.line or q.line,
                        f"question {q.id} uses the outcome '{leaf.name}': only add-ons (asked after the decision) may",
                    )
                continue
            needs = (leaf.name,) if leaf.kind == "answer" else FACTS[leaf.name].needs
            for need in needs:
                if need in order and order[need] >= index:
                    raise _fail(
                        tree,
                        leaf.line or q.line,
                        f"question {q.id} depends on '{need}', which is asked later (or is itself)",
                    )
    for b in tree.backends.values():
        for leaf in iter_compares(b.available) if b.available else []:
            _check_leaf(tree, leaf, f"backend {b.id}")
            _check_decision_leaf(tree, leaf, f"backend {b.id}")
    for r in tree.rules:
        for leaf in iter_compares(r.when):
            _check_leaf(tree, leaf, f"rule {r.id}")
            _check_decision_leaf(tree, leaf, f"rule {r.id}")
        if r.outcome.backend is not None and r.outcome.backend not in tree.backends:
            raise _fail(tree, r.line, f"rule {r.id}: unknown backend '{r.outcome.backend}'")
        strategy = r.outcome.settings.get("strategy")
        if isinstance(strategy, str) and strategy not in STRATEGIES:
            raise _fail(tree, r.line, f"rule {r.id}: unknown strategy '{strategy}'")
        for value in r.outcome.settings.values():
            if isinstance(value, Ref):
                leaf = Compare(value.kind, value.name, "set", True, r.line)  # type: ignore[arg-type]
                _check_leaf(tree, leaf, f"rule {r.id}")
                _check_decision_leaf(tree, leaf, f"rule {r.id}")
        for tag in r.sources:
            if tag not in tree.sources:
                raise _fail(tree, r.line, f"rule {r.id}: unknown source tag '{tag}'")
        if r.guidance not in tree.guidance:
            raise _fail(tree, r.line, f"rule {r.id}: unknown guidance id '{r.guidance}'")


def _check_definitions(tree: Tree) -> None:
    """Every include names a shared text, none includes itself, and every definition is used."""
    defined = tree.definitions
    shared = defined.lines.get("text", {})
    if SHARED in {q.id for q in tree.questions}:
        line = next(q.line for q in tree.questions if q.id == SHARED)
        raise _fail(tree, line, f"question id '{SHARED}' is the name texts use for the shared texts")
    for include in defined.includes:
        if include.name not in shared:
            known = ", ".join(shared) or "none"
            raise _fail(tree, include.line, f"unknown text '{include.name}' (the tree's texts: {known})")
    _check_include_loops(tree)
    for kind, lines in defined.lines.items():
        for name, line in lines.items():
            if name not in defined.used.get(kind, frozenset()):
                raise _fail(tree, line, f"{SECTIONS[kind]}: '{name}' is defined but never used")


def _check_include_loops(tree: Tree) -> None:
    """A shared text that includes itself, directly or through others, would never finish rendering."""
    edges: dict[str, list[tuple[str, int]]] = {}
    for include in tree.definitions.includes:
        if include.within:
            edges.setdefault(include.within, []).append((include.name, include.line))
    finished: set[str] = set()

    def visit(name: str, path: list[str]) -> None:
        for target, line in edges.get(name, []):
            if target in path:
                chain = " -> ".join([*path[path.index(target) :], target])
                raise _fail(tree, line, f"the text '{target}' includes itself ({chain})")
            if target not in finished:
                visit(target, [*path, target])
        finished.add(name)

    for name in edges:
        if name not in finished:
            visit(name, [name])


def _check_decision_leaf(tree: Tree, leaf: Compare, where: str) -> None:
    """Rules and backends decide before the add-ons are asked: they may not depend on them."""
    if leaf.kind == "outcome":
        raise _fail(tree, leaf.line, f"{where}: only add-on questions may use the outcome '{leaf.name}'")
    needs = (leaf.name,) if leaf.kind == "answer" else FACTS[leaf.name].needs
    for need in needs:
        if need in tree.addon_ids:
            raise _fail(tree, leaf.line, f"{where} depends on the add-on '{need}', which is asked after the decision")


def _check_leaf(tree: Tree, leaf: Compare, where: str) -> None:
    line = leaf.line
    if leaf.kind == "outcome":
        if leaf.name not in OUTCOME_NAMES:
            raise _fail(tree, line, f"{where}: unknown outcome '{leaf.name}' (known: {', '.join(OUTCOME_NAMES)})")
        if leaf.name == "backend" and leaf.op in ("eq", "ne", "in", "not_in"):
            values = leaf.value if isinstance(leaf.value, tuple) else (leaf.value,)
            for value in values:
                if value not in tree.backends:
                    raise _fail(tree, line, f"{where}: '{value}' is not a backend ({', '.join(tree.backends)})")
        return
    if leaf.kind == "fact":
        if leaf.name not in FACTS:
            raise _fail(tree, line, f"{where}: unknown fact '{leaf.name}'")
        return
    question = tree.question(leaf.name)
    if question is None:
        raise _fail(tree, line, f"{where}: unknown answer '{leaf.name}'")
    if question.type == "choice" and leaf.op in ("eq", "ne", "in", "not_in"):
        values = leaf.value if isinstance(leaf.value, tuple) else (leaf.value,)
        for value in values:
            if question.choice(str(value)) is None:
                allowed = ", ".join(c.id for c in question.choices)
                raise _fail(tree, line, f"{where}: '{value}' is not a choice of {leaf.name} ({allowed})")
    if question.type == "yesno" and leaf.op in ("eq", "ne") and not isinstance(leaf.value, bool):
        raise _fail(tree, line, f"{where}: {leaf.name} is yes/no; compare it with true or false")


def _domains(tree: Tree) -> dict[str, list[Any]]:
    """Answers enumerated by the reachability check, with the values each can take.

    Add-on answers are not enumerated: no rule depends on them.
    """
    set_tested = {
        leaf.name
        for cond in _all_conditions(tree)
        for leaf in iter_compares(cond)
        if leaf.kind == "answer" and leaf.op == "set"
    }
    domains: dict[str, list[Any]] = {}
    for q in tree.questions:
        if q.id in tree.addon_ids:
            continue
        if q.type == "choice":
            domains[q.id] = [c.id for c in q.choices]
        elif q.type == "yesno":
            domains[q.id] = [True, False]
        elif q.id in set_tested:
            domains[q.id] = ["<given>", MISSING]
    return domains


def _all_conditions(tree: Tree) -> Iterator[Condition]:
    for q in tree.questions:
        if q.when:
            yield q.when
        for c in q.choices:
            if c.disabled_when:
                yield c.disabled_when
    for r in tree.rules:
        yield r.when


def _known(answers: Mapping[str, Any]) -> Any:
    def known(leaf: Compare) -> bool | None:
        if leaf.kind != "answer" or leaf.name not in answers:
            return None
        value = answers[leaf.name]
        if value == "<given>":
            return (leaf.op == "set" and leaf.value is True) if leaf.op == "set" else None
        return compare(leaf.op, value, leaf.value)

    return known


_ABSENT = object()  # an answer not in the walk's answers yet (MISSING is one the walk skipped)


def _memoized(cond: Condition) -> Callable[[Mapping[str, Any]], bool | None]:
    """`evaluate3(cond, _known(answers))`, kept per value of the answers `cond` names.

    The walk meets the same few values of those answers at thousands of leaves; the verdict
    depends on nothing else (facts and outcomes stay unknown), so it is worked out once per value.
    """
    names = tuple(sorted({leaf.name for leaf in iter_compares(cond) if leaf.kind == "answer"}))
    verdicts: dict[tuple[Any, ...], bool | None] = {}

    def verdict(answers: Mapping[str, Any]) -> bool | None:
        key = tuple(answers.get(name, _ABSENT) for name in names)
        try:
            return verdicts[key]
        except KeyError:
            found = verdicts[key] = evaluate3(cond, _known(answers))
            return found
        except TypeError:  # an unhashable value: no shortcut
            return evaluate3(cond, _known(answers))

    return verdict


# Condition sets whose reachability walk passed, in this process (see `_check_reachability`).
_REACHABLE: set[Any] = set()


def _check_reachability(tree: Tree) -> None:
    """Walk every combination of choice answers, depth first in question order.

    A question whose condition is surely false gets no answer and no branch, so the walk visits
    only the combinations a user can actually produce.
    """
    domains = _domains(tree)
    # The walk depends only on the conditions, the answers' domains and the lines it names; a tree
    # loaded again with other texts (each test of a changed tree, `tree --lint` after an edit of
    # prose) is not walked again once it passed.
    try:
        key: Any = (
            tuple((q.id, q.when, tuple(domains.get(q.id, ())), q.id in tree.addon_ids, q.line) for q in tree.questions),
            tuple((r.id, r.when, r.line) for r in tree.rules),
            MAX_COMBINATIONS,
        )
        if key in _REACHABLE:
            return
    except TypeError:  # an unhashable value in a condition: walk it every time
        key = None
    decision = [q for q in tree.questions if q.id not in tree.addon_ids]
    addons = [q for q in tree.questions if q.id in tree.addon_ids]
    asked = {q.id: False for q in tree.questions}
    fires = {r.id: False for r in tree.rules}
    leaves = 0
    rule_verdicts = [(rule, _memoized(rule.when)) for rule in tree.rules]
    addon_verdicts = [(q, _memoized(q.when) if q.when is not None else None) for q in addons]
    asked_verdicts = {q.id: _memoized(q.when) for q in decision if q.when is not None}

    def at_leaf(answers: dict[str, Any]) -> None:
        nonlocal leaves
        leaves += 1
        if leaves > MAX_COMBINATIONS:
            raise _fail(tree, 1, f"too many choice combinations to check (over {MAX_COMBINATIONS}); split the tree")
        any_possible = False
        for rule, rule_verdict in rule_verdicts:
            result = rule_verdict(answers)
            if result is False:
                continue
            fires[rule.id] = True
            any_possible = True
            if result is True:
                break
        if not any_possible:
            shown = ", ".join(f"{k}={v}" for k, v in answers.items() if v is not MISSING and v != "<given>")
            raise _fail(tree, tree.rules[-1].line, f"no rule applies to the answers {shown}; add a catch-all rule")
        # Add-ons: outcome comparisons and other add-ons' answers stay unknown.
        for q, addon_verdict in addon_verdicts:
            if addon_verdict is None or addon_verdict(answers) is not False:
                asked[q.id] = True

    def walk(index: int, answers: dict[str, Any]) -> None:
        if index == len(decision):
            at_leaf(answers)
            return
        q = decision[index]
        possible = True if q.when is None else asked_verdicts[q.id](answers)
        if possible is not False:
            asked[q.id] = True
        if q.id not in domains:
            walk(index + 1, answers)
        elif possible is False:
            walk(index + 1, {**answers, q.id: MISSING})
        else:
            for value in domains[q.id]:
                walk(index + 1, {**answers, q.id: value})

    walk(0, {})
    for q in tree.questions:
        if not asked[q.id]:
            raise _fail(tree, q.line, f"question {q.id} can never be asked: its 'when' never holds")
    for r in tree.rules:
        if not fires[r.id]:
            raise _fail(
                tree, r.line, f"rule {r.id} can never fire: its condition never holds, or earlier rules always win"
            )
    if key is not None:
        _REACHABLE.add(key)
