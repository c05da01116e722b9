"""What a decision tree defines once and uses in many places: conditions, groups and blocks.

A rule copied into several places drifts when one copy changes, so the tree may name it once:

    conditions:                       # name -> a condition, used as {condition: name}
      offload_allowed: {any: [{answer: offload, eq: cpu}, ...]}
    groups:                           # name -> a list of values, used in an in/not_in list
      gpu: [nvidia, amd]              # as {group: gpu}, alone or among values
    blocks:                           # name -> any YAML value, used as {block: name}
      axolotl_gpus_only: {when: ..., reason: ...}

Names are resolved while the tree loads (`Resolver`), so the parsed tree holds plain values and
conditions; what it keeps of them (`Definitions`) is for the linter, which refuses a definition
no one uses. Shared texts (``texts:``, included with ``{% include texts.NAME %}``) are rendered
with the texts instead (wizard.engine.texts), and their includes are recorded here too.
YAML's own anchors and aliases stay refused (wizard.engine.located_yaml): a name here is
expanded once per use and checked, where an alias could multiply a document without limit.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from wizard.engine.conditions import Condition, ConditionSyntaxError, in_values, parse_condition
from wizard.engine.located_yaml import key_line, line_of
from wizard.errors import TreeError

KINDS = ("condition", "group", "block", "text")
SECTIONS = {"condition": "conditions", "group": "groups", "block": "blocks", "text": "texts"}


@dataclass(frozen=True)
class Include:
    """One ``{% include texts.NAME %}``: the text included, the line, and the shared text it is in."""

    name: str
    line: int
    within: str = ""  # the shared text that includes it; "" for any other text of the tree


@dataclass(frozen=True)
class Definitions:
    """What a tree names, for the linter: where each name is defined and which names are used."""

    lines: Mapping[str, Mapping[str, int]] = field(default_factory=dict)  # kind -> name -> line
    used: Mapping[str, frozenset[str]] = field(default_factory=dict)  # kind -> names referred to
    includes: tuple[Include, ...] = ()  # every include of a shared text (only when texts were checked)


class Resolver:
    """Resolves the names of one tree while it loads, and remembers which ones were used.

    Each definition is resolved once, on first use (or by `resolve_all`, so that an unused one is
    checked too); one met again while it is being resolved refers to itself, which is refused
    with the chain of names, since expanding it would never end.
    """

    def __init__(self, top: Mapping[str, Any], fail: Callable[[int, str], TreeError]) -> None:
        self._fail = fail
        self._raw: dict[str, Mapping[str, Any]] = {}
        for kind in ("condition", "group", "block"):
            section = top.get(SECTIONS[kind], {})
            if not isinstance(section, Mapping):
                raise fail(line_of(top, 1), f"'{SECTIONS[kind]}' must be a mapping of names")
            self._raw[kind] = section
        self._done: dict[tuple[str, str], Any] = {}
        self._resolving: list[tuple[str, str]] = []
        self.used: dict[str, set[str]] = {kind: set() for kind in KINDS}

    def lines(self) -> dict[str, dict[str, int]]:
        """Each defined name's line, by kind (texts excluded: the loader adds them)."""
        return {kind: {name: key_line(raw, name) for name in raw} for kind, raw in self._raw.items()}

    # Names (wizard.engine.conditions): what parse_condition calls for {condition: ...} and {group: ...}.
    def condition(self, name: str, line: int) -> Condition:
        """The named condition, parsed; a `ConditionSyntaxError` names the line of the problem."""
        return self._use("condition", name, line, ConditionSyntaxError)  # type: ignore[no-any-return]

    def group(self, name: str, line: int) -> tuple[Any, ...]:
        """The named group's values, with the groups it names expanded in place."""
        return self._use("group", name, line, ConditionSyntaxError)  # type: ignore[no-any-return]

    def expand_blocks(self, value: Any) -> Any:
        """`value` with every ``{block: name}`` in it replaced by that block, in place where it can."""
        if _named(value, "block"):
            return self._use("block", value["block"], line_of(value), None)
        if isinstance(value, dict):
            for key, item in value.items():
                value[key] = self.expand_blocks(item)
        elif isinstance(value, list):
            value[:] = [self.expand_blocks(item) for item in value]
        return value

    def resolve_all(self) -> None:
        """Resolve every definition, used or not, so that each is checked once."""
        for kind, raw in self._raw.items():
            for name in raw:
                self._resolve(kind, name, key_line(raw, name), None)

    def _use(self, kind: str, name: Any, line: int, error: type[ConditionSyntaxError] | None) -> Any:
        raw = self._raw[kind]
        if not isinstance(name, str) or name not in raw:
            known = ", ".join(raw) or "none"
            reason = f"unknown {kind} {name!r} (the tree's {SECTIONS[kind]}: {known})"
            raise error(reason, line) if error is not None else self._fail(line, reason)
        self.used[kind].add(name)
        return self._resolve(kind, name, line, error)

    def _resolve(self, kind: str, name: str, line: int, error: type[ConditionSyntaxError] | None) -> Any:
        key = (kind, name)
        if key in self._done:
            return self._done[key]
        if key in self._resolving:
            chain = " -> ".join(n for _, n in [*self._resolving[self._resolving.index(key) :], key])
            reason = f"the {kind} '{name}' refers to itself ({chain})"
            raise error(reason, line) if error is not None else self._fail(line, reason)
        self._resolving.append(key)
        try:
            value = self._build(kind, name)
        finally:
            self._resolving.pop()
        self._done[key] = value
        return value

    def _build(self, kind: str, name: str) -> Any:
        raw, line = self._raw[kind][name], key_line(self._raw[kind], name)
        if kind == "condition":
            return parse_condition(raw, line, self)
        if kind == "block":
            return self.expand_blocks(raw)
        if not isinstance(raw, list) or not raw:
            raise ConditionSyntaxError(f"the group '{name}' must be a non-empty list of values", line)
        values = in_values(raw, "group", line, self)
        odd = [v for v in values if not isinstance(v, str | int | float | bool)]
        if odd:
            raise ConditionSyntaxError(f"the group '{name}' holds values only, not {odd[0]!r}", line)
        return tuple(values)


def _named(value: Any, kind: str) -> bool:
    return isinstance(value, Mapping) and set(value) == {kind}
