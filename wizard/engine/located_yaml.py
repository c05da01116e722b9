"""Safe YAML parsing that remembers where each mapping and list came from.

The decision tree and the answers file are both user-editable, so errors must point at a line.
PyYAML's safe constructor is used for scalars only; mappings and lists are built here so that
duplicate keys, aliases (the "billion laughs" vector) and non-string keys are rejected with the
line they occur on, and unknown tags such as ``!!python/object`` never construct anything.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from wizard.engine.nesting import MAX_DEPTH

__all__ = [
    "MAX_DEPTH",
    "LocatedDict",
    "LocatedList",
    "YamlProblem",
    "key_line",
    "line_of",
    "parse_yaml",
    "parse_yaml_or_raise",
]


class LocatedDict(dict[str, Any]):
    """A mapping parsed from YAML, with the 1-based line it started on and each key's line."""

    line: int = 0
    key_lines: dict[str, int] | None = None


class LocatedList(list[Any]):
    """A sequence parsed from YAML, with the 1-based line it started on."""

    line: int = 0


class YamlProblem(Exception):
    """A syntax or structure problem, with a 1-based line and column."""

    def __init__(self, reason: str, line: int, column: int) -> None:
        super().__init__(f"line {line}, column {column}: {reason}")
        self.reason = reason
        self.line = line
        self.column = column


_STR = "tag:yaml.org,2002:str"

# libyaml's parser is several times faster than the pure-Python one; both compose the same nodes.
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def line_of(value: object, default: int = 0) -> int:
    """Return the line a parsed mapping or list started on, or `default`."""
    return int(getattr(value, "line", default))


def key_line(mapping: object, key: str, default: int = 0) -> int:
    """The line a parsed mapping's `key` is written on, or the mapping's own line, or `default`."""
    lines = getattr(mapping, "key_lines", None) or {}
    return int(lines.get(key, line_of(mapping, default)))


def parse_yaml(text: str, *, check_depth: bool = True, duplicates: list[tuple[str, int]] | None = None) -> Any:
    """Parse one YAML document safely; raise `YamlProblem` with a line and column on failure.

    ``check_depth=False`` skips the pass that refuses deep nesting before composing: only for a
    file shipped with the wizard (the decision tree, the catalogues), whose depth the tests see.
    A duplicate key is a problem, unless ``duplicates`` is given: then the later value wins, as
    in PyYAML's ``safe_load`` (what Accelerate and Axolotl read configs with), and each repeat is
    appended to it as (dotted key path, line).
    """
    loader = _Loader(text)
    try:
        if check_depth:
            _check_depth(text)
        node = loader.get_single_node()
        if node is None:
            return None
        return _build(loader, node, set(), 0, duplicates)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line, col = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        raise YamlProblem(str(exc.problem or exc.context or "invalid YAML"), line, col) from None
    except yaml.YAMLError as exc:
        raise YamlProblem(str(exc).splitlines()[0], 1, 1) from None
    finally:
        loader.dispose()


def parse_yaml_or_raise(
    text: str,
    where: str,
    error: Callable[[str], Exception],
    *,
    check_depth: bool = True,
    duplicates: list[tuple[str, int]] | None = None,
) -> Any:
    """`parse_yaml`, with a problem raised as ``error("WHERE, line L, column C: reason")``.

    `where` names the file as the user knows it ("answers file answers.yaml"); `error` is the
    user-facing error type of that file (its exit code).
    """
    try:
        return parse_yaml(text, check_depth=check_depth, duplicates=duplicates)
    except YamlProblem as exc:
        raise error(f"{where}, line {exc.line}, column {exc.column}: {exc.reason}") from None


def _check_depth(text: str) -> None:
    """Refuse deep nesting from the event stream, before anything recursive sees the document.

    libyaml's composer (and PyYAML's pure-Python one) build nodes recursively: a flow list nested
    100,000 levels deep, which fits in a small file, crashes the interpreter there. The parser's
    events come from a loop, so counting them is safe at any depth. `_build` still checks the
    exact limit; this only stops what it could never be given.
    """
    loader = _Loader(text)
    depth = 0
    try:
        while loader.check_event():
            event = loader.get_event()
            if isinstance(event, yaml.CollectionStartEvent):
                depth += 1
                if depth > MAX_DEPTH + 1:  # node depths start at 0 in `_build`
                    mark = event.start_mark
                    line, col = (mark.line + 1, mark.column + 1) if mark else (1, 1)
                    raise YamlProblem(f"nesting deeper than {MAX_DEPTH} levels", line, col)
            elif isinstance(event, yaml.CollectionEndEvent):
                depth -= 1
    finally:
        loader.dispose()


def _build(
    loader: Any, node: Node, seen: set[int], depth: int, duplicates: list[tuple[str, int]] | None = None, at: str = ""
) -> Any:
    line, col = node.start_mark.line + 1, node.start_mark.column + 1
    if depth > MAX_DEPTH:
        raise YamlProblem(f"nesting deeper than {MAX_DEPTH} levels", line, col)
    if id(node) in seen:
        # compose() resolves an alias to the very node object it names, so a node met twice
        # anywhere in the document is an alias (the "billion laughs" expansion vector).
        raise YamlProblem("YAML anchors and aliases are not supported", line, col)
    seen.add(id(node))
    if isinstance(node, ScalarNode):
        if node.tag == _STR:
            # What SafeConstructor.construct_yaml_str returns, without its dispatch: most scalars
            # of the tree are text, and constructing each one was a third of parsing it.
            return node.value
        try:
            return loader.construct_object(node, deep=True)
        except yaml.constructor.ConstructorError as exc:
            raise YamlProblem(str(exc.problem or "unsupported value"), line, col) from None
        except ValueError as exc:  # an int past Python's 4300-digit limit, a date such as 2024-13-45
            raise YamlProblem(f"unreadable value: {str(exc).split(';')[0]}", line, col) from None
    if isinstance(node, SequenceNode):
        _check_tag(node, "tag:yaml.org,2002:seq", line, col)
        items = LocatedList(_build(loader, child, seen, depth + 1, duplicates, at) for child in node.value)
        items.line = line
        return items
    if isinstance(node, MappingNode):
        _check_tag(node, "tag:yaml.org,2002:map", line, col)
        result = LocatedDict()
        result.line = line
        result.key_lines = key_lines = {}
        for key_node, value_node in node.value:
            key_line, key_col = key_node.start_mark.line + 1, key_node.start_mark.column + 1
            # Checked before the key is built: PyYAML's safe constructor has no merge-tag scalar.
            key = "<<" if key_node.tag == "tag:yaml.org,2002:merge" else _build(loader, key_node, seen, depth + 1)
            if key == "<<":
                raise YamlProblem("YAML merge keys ('<<') are not supported", key_line, key_col)
            if not isinstance(key, str):
                raise YamlProblem(f"keys must be text, not {key!r}", key_line, key_col)
            path = f"{at}.{key}" if at else key
            if key in result and duplicates is None:
                raise YamlProblem(f"duplicate key '{key}'", key_line, key_col)
            if key in result and duplicates is not None:
                duplicates.append((path, key_line))
                del result[key]  # the later value wins, and sits where it is written
            result[key] = _build(loader, value_node, seen, depth + 1, duplicates, path)
            key_lines[key] = key_line
        return result
    raise YamlProblem("unsupported YAML node", line, col)  # pragma: no cover - PyYAML has 3 kinds


def _check_tag(node: Node, expected: str, line: int, col: int) -> None:
    if node.tag != expected:
        raise YamlProblem(f"unsupported YAML tag {node.tag!r}", line, col)
