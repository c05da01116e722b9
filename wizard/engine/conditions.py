"""Structured conditions: parsing, evaluation (two- and three-valued) and plain-language text.

A condition is data, never code. Its YAML forms are::

    {answer: hardware, eq: nvidia}        # a comparison on an answer ...
    {fact: fits_ddp, eq: true}            # ... or on a derived fact
    {outcome: backend, in: [ddp]}         # ... or on the decision (add-on questions only)
    {all: [cond, ...]}  {any: [cond, ...]}  {not: cond}
    always                                # the condition that always holds
    {condition: offload_allowed}          # a named condition (the tree's `conditions:`)

Comparison operators: eq, ne, in, not_in, gt, gte, lt, lte, and ``set`` (true when the subject has
a value). A comparison whose subject has no value is false, except ``set: false``. The list of
``in`` and ``not_in`` may name a group of values (the tree's `groups:`), alone or among values:
``in: {group: gpu}`` or ``in: [{group: gpu}, mps]``.

Names are resolved while parsing (`Names`): a parsed condition holds only the comparisons, so
evaluating, explaining and drawing it never see a name.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from wizard.engine.located_yaml import line_of

OPERATORS = ("eq", "ne", "in", "not_in", "gt", "gte", "lt", "lte", "set")
SUBJECT_KINDS = ("answer", "fact", "outcome")

_OP_WORDS = {
    "eq": "is",
    "ne": "is not",
    "in": "is one of",
    "not_in": "is none of",
    "gt": "is more than",
    "gte": "is at least",
    "lt": "is less than",
    "lte": "is at most",
}


class Missing:
    """Marker for "this answer or fact has no value"."""

    def __repr__(self) -> str:
        return "MISSING"


MISSING = Missing()


@dataclass(frozen=True)
class Compare:
    """A comparison of one answer, fact or decided outcome with a literal value."""

    kind: Literal["answer", "fact", "outcome"]
    name: str
    op: str
    value: Any
    line: int


@dataclass(frozen=True)
class AllOf:
    """Holds when every item holds (an empty list always holds)."""

    items: tuple[Condition, ...]
    line: int


@dataclass(frozen=True)
class AnyOf:
    """Holds when at least one item holds."""

    items: tuple[Condition, ...]
    line: int


@dataclass(frozen=True)
class Not:
    """Holds when its item does not."""

    item: Condition
    line: int


Condition = Compare | AllOf | AnyOf | Not

Lookup = Callable[[str, str], Any]
"""(kind, name) -> value, or MISSING."""


class Names(Protocol):
    """What a condition may name: the tree's named conditions and groups of values."""

    def condition(self, name: str, line: int) -> Condition:
        """The parsed condition called `name` (used on `line`); raises `ConditionSyntaxError`."""
        ...

    def group(self, name: str, line: int) -> tuple[Any, ...]:
        """The values of the group called `name` (used on `line`); raises `ConditionSyntaxError`."""
        ...


class ConditionSyntaxError(Exception):
    """A malformed condition; carries the line it was found on."""

    def __init__(self, reason: str, line: int) -> None:
        super().__init__(reason)
        self.reason = reason
        self.line = line


def parse_condition(raw: Any, line: int = 0, names: Names | None = None) -> Condition:
    """Turn the YAML form of a condition into a `Condition`.

    `names` resolves ``{condition: name}`` and ``{group: name}``; without it (a condition outside
    a tree) naming either is a syntax error.
    """
    line = line_of(raw, line)
    if raw == "always":
        return AllOf((), line)
    if not isinstance(raw, Mapping):
        raise ConditionSyntaxError(f"a condition must be a mapping or 'always', not {raw!r}", line)
    keys = set(raw)
    if keys == {"condition"}:
        name = raw["condition"]
        if not isinstance(name, str):
            raise ConditionSyntaxError(f"'condition' must name a condition, not {name!r}", line)
        if names is None:
            raise ConditionSyntaxError(f"the condition '{name}' is named outside a tree", line)
        return names.condition(name, line)
    for combinator in ("all", "any"):
        if keys == {combinator}:
            items = raw[combinator]
            if not isinstance(items, list) or not items:
                raise ConditionSyntaxError(f"'{combinator}' needs a non-empty list of conditions", line)
            parsed = tuple(parse_condition(item, line_of(items, line), names) for item in items)
            return AllOf(parsed, line) if combinator == "all" else AnyOf(parsed, line)
    if keys == {"not"}:
        return Not(parse_condition(raw["not"], line, names), line)
    subjects = keys & set(SUBJECT_KINDS)
    ops = keys & set(OPERATORS)
    extra = keys - subjects - ops
    if len(subjects) != 1 or len(ops) != 1 or extra:
        raise ConditionSyntaxError(
            "a comparison needs exactly one of answer/fact/outcome and one operator "
            f"({', '.join(OPERATORS)}); got keys {sorted(keys)}",
            line,
        )
    kind = subjects.pop()
    op = ops.pop()
    name, value = raw[kind], raw[op]
    if not isinstance(name, str):
        raise ConditionSyntaxError(f"'{kind}' must name an id, not {name!r}", line)
    if op in ("in", "not_in"):
        value = in_values(value, op, line, names)
    elif _is_group(value):
        raise ConditionSyntaxError(f"'{op}' compares with one value; a group goes with 'in' or 'not_in'", line)
    if op in ("gt", "gte", "lt", "lte") and (isinstance(value, bool) or not isinstance(value, int | float)):
        raise ConditionSyntaxError(f"'{op}' needs a number", line)
    if op == "set" and not isinstance(value, bool):
        raise ConditionSyntaxError("'set' needs true or false", line)
    return Compare(kind, name, op, tuple(value) if isinstance(value, list) else value, line)


def _is_group(value: Any) -> bool:
    return isinstance(value, Mapping) and set(value) == {"group"}


def in_values(value: Any, op: str, line: int, names: Names | None) -> list[Any]:
    """The list of an ``in``/``not_in``, with every ``{group: name}`` replaced by its values."""
    items = [value] if _is_group(value) else value
    if not isinstance(items, list):
        raise ConditionSyntaxError(f"'{op}' needs a list of values", line)
    values: list[Any] = []
    for item in items:
        if not _is_group(item):
            values.append(item)
            continue
        name = item["group"]
        if not isinstance(name, str):
            raise ConditionSyntaxError(f"'group' must name a group, not {name!r}", line)
        if names is None:
            raise ConditionSyntaxError(f"the group '{name}' is named outside a tree", line)
        values.extend(names.group(name, line))
    return values


def compare(op: str, actual: Any, expected: Any) -> bool:
    """Apply one comparison operator; a missing value fails everything but ``set: false``."""
    if op == "set":
        return bool((actual is not MISSING) == expected)
    if actual is MISSING:
        return False
    if op == "eq":
        return bool(actual == expected)
    if op == "ne":
        return bool(actual != expected)
    if op == "in":
        return bool(actual in expected)
    if op == "not_in":
        return bool(actual not in expected)
    if isinstance(actual, bool) or not isinstance(actual, int | float):
        return False
    return bool(
        {
            "gt": actual > expected,
            "gte": actual >= expected,
            "lt": actual < expected,
            "lte": actual <= expected,
        }[op]
    )


def evaluate(cond: Condition, lookup: Lookup) -> bool:
    """Evaluate a condition against concrete answers and facts."""
    if isinstance(cond, Compare):
        return compare(cond.op, lookup(cond.kind, cond.name), cond.value)
    if isinstance(cond, AllOf):
        return all(evaluate(item, lookup) for item in cond.items)
    if isinstance(cond, AnyOf):
        return any(evaluate(item, lookup) for item in cond.items)
    return not evaluate(cond.item, lookup)


def evaluate3(cond: Condition, known: Callable[[Compare], bool | None]) -> bool | None:
    """Kleene three-valued evaluation: `known` returns None for comparisons it cannot decide.

    The tree linter uses this to prove that a rule can never fire or a question can never be
    asked, whatever the numbers turn out to be.
    """
    if isinstance(cond, Compare):
        return known(cond)
    if isinstance(cond, Not):
        inner = evaluate3(cond.item, known)
        return None if inner is None else not inner
    results = [evaluate3(item, known) for item in cond.items]
    if isinstance(cond, AllOf):
        if any(r is False for r in results):
            return False
        return True if all(r is True for r in results) else None
    if any(r is True for r in results):
        return True
    return False if all(r is False for r in results) else None


def iter_compares(cond: Condition) -> list[Compare]:
    """All comparisons inside a condition, in order."""
    if isinstance(cond, Compare):
        return [cond]
    if isinstance(cond, Not):
        return iter_compares(cond.item)
    return [leaf for item in cond.items for leaf in iter_compares(item)]


def failing_compares(cond: Condition, lookup: Lookup) -> list[Compare]:
    """The comparisons that made a false condition false (for "why not" text)."""
    if evaluate(cond, lookup):
        return []
    if isinstance(cond, Compare):
        return [cond]
    if isinstance(cond, AllOf):
        return [leaf for item in cond.items if not evaluate(item, lookup) for leaf in failing_compares(item, lookup)]
    if isinstance(cond, AnyOf):
        return [leaf for item in cond.items for leaf in failing_compares(item, lookup)]
    return iter_compares(cond.item)


def describe_plain_compare(leaf: Compare, actual: Any, held: bool) -> str:
    """A plain sentence for a comparison the tree has no sentence for, with the user's value.

    The shipped tree has a sentence for every answer and fact its rules use (a test checks it);
    this generic wording is for trees that do not.
    """
    subject = leaf.name.replace("_", " ")
    if leaf.op == "set":
        given = actual is not MISSING
        return f"{subject} was given ({_show(actual)})" if given else f"no {subject} was given"
    wanted = f"{subject} {_OP_WORDS[leaf.op]} {_show(leaf.value)}"
    if held:
        return f"{subject}: {_show(actual)}"
    # A missing answer is a question these answers never reached (or one left empty).
    if actual is MISSING:
        return f"needs {wanted}; no {subject} was given"
    return f"needs {wanted}; yours is {_show(actual)}"


_NEGATED = {"eq": "ne", "ne": "eq", "in": "not_in", "not_in": "in", "gt": "lte", "lte": "gt", "gte": "lt", "lt": "gte"}


def negate(leaf: Compare) -> Compare:
    """The comparison that holds when `leaf` does not, for sentences about a ``not``.

    Exact only for a subject with a value (a missing one fails both); callers negate only a
    comparison that held, and a comparison that holds has a value.
    """
    if leaf.op == "set":
        return Compare(leaf.kind, leaf.name, "set", not leaf.value, leaf.line)
    return Compare(leaf.kind, leaf.name, _NEGATED[leaf.op], leaf.value, leaf.line)


def first_failure(cond: Condition, lookup: Lookup, answer_weight: Callable[[Condition], int]) -> Compare | None:
    """The comparison that says best why a false condition is false: the first failing part.

    In an ``any``, every branch failed; the branch that misses the fewest of the user's answers
    (``answer_weight``) is the one that came closest, so its failure is the one worth saying. A
    ``not`` fails because its inner comparison held: the negated comparison is returned.
    """
    if evaluate(cond, lookup):
        return None
    if isinstance(cond, Compare):
        return cond
    if isinstance(cond, Not):
        inner = cond.item
        return negate(inner) if isinstance(inner, Compare) else next(iter(iter_compares(inner)), None)
    if isinstance(cond, AllOf):
        failing = next(item for item in cond.items if not evaluate(item, lookup))
        return first_failure(failing, lookup, answer_weight)
    closest = min(cond.items, key=answer_weight)
    return first_failure(closest, lookup, answer_weight)


def held_compares(cond: Condition, lookup: Lookup) -> list[Compare]:
    """The comparisons that made a true condition true (in an ``any``, the first branch that held)."""
    if not evaluate(cond, lookup):
        return []
    if isinstance(cond, Compare):
        return [cond]
    if isinstance(cond, Not):
        inner = cond.item
        return [negate(inner)] if isinstance(inner, Compare) else []
    if isinstance(cond, AllOf):
        return [leaf for item in cond.items for leaf in held_compares(item, lookup)]
    return held_compares(next(item for item in cond.items if evaluate(item, lookup)), lookup)


def _show(value: Any) -> str:
    if isinstance(value, tuple | list):
        return ", ".join(_show(v) for v in value)
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


_SYMBOLS = {"eq": "=", "ne": "≠", "in": "in", "not_in": "not in", "gt": ">", "gte": "≥", "lt": "<", "lte": "≤"}


def condition_text(cond: Condition) -> str:
    """A compact one-line form of a condition, for drawings ("hardware = cpu and fits_ddp = yes")."""
    if isinstance(cond, Compare):
        if cond.op == "set":
            return f"{cond.name} {'given' if cond.value else 'not given'}"
        return f"{cond.name} {_SYMBOLS[cond.op]} {_show(cond.value)}"
    if isinstance(cond, Not):
        return f"not ({condition_text(cond.item)})"
    if not cond.items:
        return "always"
    joined = (" and " if isinstance(cond, AllOf) else " or ").join(
        f"({condition_text(i)})" if isinstance(i, AllOf | AnyOf) and i.items else condition_text(i) for i in cond.items
    )
    return joined
