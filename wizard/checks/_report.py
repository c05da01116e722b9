"""Collecting findings in file order, and reading values of any type without crashing.

Every check reads the parsed file through the helpers here: a value of the wrong type is a
finding (or is ignored), never an exception, because the checker sees files nobody validated.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from wizard.checks._types import SEVERITIES, Finding
from wizard.checks.catalog import BY_ID

# Findings of these checks give way to a more specific finding at the same path (a removed
# DeepSpeed feature is also an unknown key, but "removed" is the useful message).
GENERIC = frozenset(
    {"ds-unknown-top-key", "ds-unknown-key", "acc-unknown-key", "acc-unknown-nested-key", "ax-unknown-key"}
)
_RANK = {severity: rank for rank, severity in enumerate(SEVERITIES)}
_TRUE = frozenset({"true", "yes", "on", "1", "y", "t"})
_FALSE = frozenset({"false", "no", "off", "0", "n", "f"})
# Texts that read as false when a string setting is tested for being off.
_FALSY_TEXT = frozenset({"", "false", "0", "none", "null"})
_INT_TEXT = re.compile(r"[+-]?\d{1,18}")


def _preorder(data: object) -> dict[str, int]:
    """Pre-order index of every mapping key path, so findings can be sorted in file order."""
    order: dict[str, int] = {}
    stack: list[tuple[str, object]] = [("", data)]
    while stack:
        path, value = stack.pop()
        if path:
            order.setdefault(path, len(order))
        if isinstance(value, Mapping):
            items = [(f"{path}.{key}" if path else str(key), child) for key, child in value.items()]
            stack.extend(reversed(items))
    return order


class Report:
    """The findings about one document, in a list shared with the documents it references."""

    def __init__(
        self,
        data: object,
        *,
        prefix: str = "",
        separator: str = ".",
        anchor: tuple[int, ...] = (),
        sink: list[tuple[tuple[int, ...], Finding]] | None = None,
    ) -> None:
        self._order = _preorder(data)
        self._prefix = prefix
        self._separator = separator
        self._anchor = anchor
        self._sink: list[tuple[tuple[int, ...], Finding]] = [] if sink is None else sink

    def _position(self, path: str) -> int:
        # A missing key sorts with its closest existing parent; a file-level finding comes first.
        while path:
            if path in self._order:
                return self._order[path]
            path = path.rpartition(".")[0]
        return -1

    def full_path(self, path: str) -> str:
        """The path as reported: prefixed with the inline section or the referenced file."""
        if not self._prefix:
            return path
        return f"{self._prefix}{self._separator}{path}" if path else self._prefix

    def add(self, check: str, path: str, message: str, fix: str) -> None:
        """Record a finding of catalogue check ``check`` at ``path`` (relative to this document)."""
        info = BY_ID[check]
        finding = Finding(
            info.severity, printable(self.full_path(path)), printable(message), printable(fix), info.tag, check
        )
        self._sink.append(((*self._anchor, self._position(path)), finding))

    def child(self, data: object, *, at: str, prefix: str, separator: str) -> Report:
        """A report for a document found at ``at`` (inline section or referenced file)."""
        anchor = (*self._anchor, self._position(at))
        return Report(data, prefix=prefix, separator=separator, anchor=anchor, sink=self._sink)

    def findings(self) -> list[Finding]:
        """Errors, then warnings, then info; each group in file order."""
        specific = {f.path for _, f in self._sink if f.check not in GENERIC}
        kept = [(pos, f) for pos, f in self._sink if not (f.check in GENERIC and f.path in specific)]
        kept.sort(key=lambda item: (_RANK[item[1].severity], item[0]))
        return [f for _, f in kept]


def printable(text: str) -> str:
    """Text with every non-printable character escaped (a key holding a line break stays one line)."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


def mapping(value: object) -> Mapping[Any, Any] | None:
    """The value if it is a mapping, else None."""
    return value if isinstance(value, Mapping) else None


def as_int(value: object) -> int | None:
    """An integer, or a string of digits, as int; anything else (bools, floats) is None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and _INT_TEXT.fullmatch(value.strip()):
        return int(value.strip())
    return None


def flag(value: object) -> bool | None:
    """A boolean the way the tools coerce one (true/false, yes/no, 1/0); None if it is not one."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str):
        text = value.strip().lower()
        if text in _TRUE:
            return True
        if text in _FALSE:
            return False
    return None


def truthy(value: object) -> bool:
    """Whether a setting counts as on; "false", "0", "none" and "null" strings count as off."""
    if isinstance(value, str):
        return value.strip().lower() not in _FALSY_TEXT
    if isinstance(value, bool | int | float):
        return bool(value)
    if isinstance(value, Mapping | list | tuple):
        return len(value) > 0
    return value is not None


def text(value: object) -> str | None:
    """The value if it is a string, else None."""
    return value if isinstance(value, str) else None


def show(value: object) -> str:
    """A short rendering of a value for a message: true, null, 7, 'FULL_SHARD', a list, ..."""
    if isinstance(value, str):
        rendered = repr(value)
    else:
        try:
            rendered = json.dumps(value, default=str, sort_keys=False)
        except (TypeError, ValueError, RecursionError):
            rendered = type(value).__name__
    return rendered if len(rendered) <= 60 else rendered[:57] + "..."


def get_any(section: Mapping[Any, Any], *names: str) -> tuple[str, Any] | None:
    """The first of ``names`` present in ``section``, as (key, value)."""
    for name in names:
        if name in section:
            return name, section[name]
    return None


def join(*parts: str) -> str:
    """Dotted key path of the non-empty parts."""
    return ".".join(part for part in parts if part)
