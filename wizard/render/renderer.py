"""Render the planned files with jinja2 and prove each one parses back.

A copied JSON document (a DeepSpeed JSON the user brought) is serialized with ``json.dumps``,
never pasted into a template.

Every value a template prints goes through the ``yaml``, ``json``, ``sh`` or ``py`` filter, which
serializes it: a model name with a colon, a quote or a line break stays one string value of its
field, and a host name with a quote, a space or ``$(...)`` stays one inert shell word. The
messages the shell scripts print go through ``sh_message`` (one double-quoted word). Python files
are compiled back as the same guard.

Comment lines are at most `COMMENT_WIDTH` characters (the ``comment`` and ``requirement``
filters wrap them), so a file opened or previewed in an 80-column terminal shows each comment on
lines of its own that all start with ``#``. Only an install command, which must stay whole to be
copied, may be longer.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache, lru_cache
from pathlib import Path
from typing import Any

import yaml
from jinja2 import BytecodeCache, Environment, FileSystemLoader, StrictUndefined, Undefined

from wizard.engine.deepspeed_json import MAX_JSON_BYTES
from wizard.render.context import RenderPlan, comment_lines, wrap_words
from wizard.resources import templates_dir

# 78 leaves room for a terminal's last column and for the two-space indent of a comment inside
# a YAML block at 80 columns.
COMMENT_WIDTH = 78


def comment(text: Any) -> list[str]:
    """Text as YAML/shell/Python comment lines of at most `COMMENT_WIDTH` characters."""
    return comment_lines(text, COMMENT_WIDTH)


def requirement_lines(text: Any) -> list[str]:
    """An install requirement, "package (what for): command", as indented comment lines.

    The package and its reason wrap like any comment; the command goes on a line of its own and
    is never broken, so it can be copied whole (it is the one comment line that may be longer).
    """
    what, _, command = str(text).partition("): ")
    if not command:
        return [f"#   {line}" for line in _wrapped(str(text), COMMENT_WIDTH - 4)]
    lines = [f"#   {line}" for line in _wrapped(what + "):", COMMENT_WIDTH - 4)]
    return [*lines, f"#     {' '.join(command.split())}"]


def comment_item(text: Any) -> list[str]:
    """A list item as comment lines: "#   - text", continued under the text's first letter."""
    lines = _wrapped(str(text), COMMENT_WIDTH - 6)
    return [f"#   - {lines[0]}", *(f"#     {line}" for line in lines[1:])]


def _wrapped(text: str, width: int) -> list[str]:
    return wrap_words(text, width) or [""]


@dataclass(frozen=True)
class RenderedFile:
    """One output file's name and full text."""

    name: str
    text: str
    executable: bool = False
    # The YAML or JSON file parsed back (render_plan's guard), so the self-check need not parse
    # it again; None for other files and for files made elsewhere.
    data: Any = field(default=None, compare=False, repr=False)


def yaml_scalar(value: Any) -> str:
    """A YAML flow representation of a value on one line (strings quoted when YAML needs it)."""
    try:
        return _yaml_scalar_cached(value)
    except TypeError:  # a list or a mapping: not hashable, so dumped each time
        return _yaml_scalar(value)


# typed: True and 1 (equal, with one hash) are written "true" and "1". Every config file writes its
# settings through here, and most values (a few strategy names, sizes and switches) recur run after run.
@lru_cache(maxsize=4096, typed=True)
def _yaml_scalar_cached(value: Any) -> str:
    return _yaml_scalar(value)


def _yaml_scalar(value: Any) -> str:
    text = yaml.safe_dump(value, default_flow_style=True, width=2**31, allow_unicode=True, sort_keys=False)
    if "\n" in text.rstrip("\n").removesuffix("\n...").rstrip("\n"):
        text = yaml.safe_dump(value, default_style='"', width=2**31, allow_unicode=True)
    return text.rstrip("\n").removesuffix("...").rstrip("\n")


def json_value(value: Any) -> str:
    """A JSON representation of a value."""
    return json.dumps(value)


def json_document(data: Any, limit: int = MAX_JSON_BYTES) -> str:
    """A whole JSON file for parsed data: indented, or on one line when indenting passes ``limit``.

    ASCII only (a lone surrogate read from a JSON escape stays an escape), NaN/Infinity kept as
    Python's ``json`` reads them and whole-valued floats written as integers (`_whole_numbers`),
    so ``json.loads`` gives back data equal to ``data``. The
    one-line form keeps a deeply nested file within the size the checks read.
    """
    data = _whole_numbers(data)
    text = json.dumps(data, indent=2, ensure_ascii=True)
    if len(text) >= limit:
        text = json.dumps(data, ensure_ascii=True, separators=(",", ":"))
    return text + "\n"


def _whole_numbers(value: Any) -> Any:
    """Large whole-valued floats as integers: a bucket size written 5e8 becomes 500000000.

    Python's json reads 5e8 as a float and writes it back as 500000000.0; DeepSpeed's integer
    settings accept either, and the integer reads as the number the user wrote (a small one
    such as 1.0 keeps its decimal point, as written). Equal in value, so ``json.loads`` of the
    document still compares equal to the data read.
    """
    if isinstance(value, float) and value.is_integer() and 1e4 <= abs(value) < 2**53:
        return int(value)
    if isinstance(value, dict):
        return {key: _whole_numbers(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_whole_numbers(item) for item in value]
    return value


def python_literal(value: Any) -> str:
    """A Python literal for a plain value (str, number, bool, None, or a dict/list of them).

    A value the context lacks fails the render, as StrictUndefined does elsewhere: repr() of it
    would print the name `Undefined` into the script, which fails only when the script runs.
    """
    if isinstance(value, Undefined):
        value._fail_with_undefined_error()
    return repr(value)


def shell_quote(value: Any) -> str:
    """One shell word that bash reads back as exactly ``str(value)`` (quoted only when needed).

    See Python's ``shlex.quote``: https://docs.python.org/3/library/shlex.html#shlex.quote
    """
    return shlex.quote(str(value))


_DOUBLE_QUOTE_SPECIAL = re.compile(r'([$`"\\])')


def shell_message(value: Any) -> str:
    """A message as one double-quoted bash word that bash prints as written, on one line.

    Inside double quotes bash gives only ``$``, backquote, ``"`` and backslash a meaning (bash
    manual, "Double Quotes": https://www.gnu.org/software/bash/manual/bash.html#Double-Quotes),
    so they are escaped; an apostrophe stays as it is and reads naturally.
    """
    return '"' + _DOUBLE_QUOTE_SPECIAL.sub(r"\\\1", " ".join(str(value).split())) + '"'


_bytecode_cache: BytecodeCache | None = None


def use_bytecode_cache(bytecode_cache: BytecodeCache | None) -> None:
    """Keep compiled templates in `bytecode_cache` too (the CLI gives it an on-disk one)."""
    global _bytecode_cache
    _bytecode_cache = bytecode_cache
    _environment.cache_clear()


@cache
def _environment(folder: str) -> Environment:
    env = Environment(
        loader=FileSystemLoader(folder),
        bytecode_cache=_bytecode_cache,
        undefined=StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
    )
    filters: dict[str, Callable[..., Any]] = {
        "yaml": yaml_scalar,
        "json": json_value,
        "comment": comment,
        "requirement": requirement_lines,
        "comment_item": comment_item,
        "sh": shell_quote,
        "sh_message": shell_message,
        "py": python_literal,
    }
    env.filters.update(filters)
    return env


def render_template(template: str, **values: Any) -> str:
    """One template of templates/ rendered with these values (the same filters as the set's files)."""
    return _environment(str(templates_dir())).get_template(template).render(**values)


class RenderCheckError(Exception):
    """A rendered file does not parse back: a bug in a template, never the user's fault."""


def render_plan(plan: RenderPlan, folder: Path | None = None) -> list[RenderedFile]:
    """Render every planned file, then parse YAML/JSON outputs back as a guard."""
    env = _environment(str(folder or templates_dir()))
    rendered = []
    for name, template in plan.files:
        if template is None:
            text = json_document(plan.documents[name])
        else:
            # The config file (always first) carries the full why; the others point to it.
            text = env.get_template(template).render(**plan.context, this_file=name, head_file=plan.files[0][0])
        data = _parse_back(name, text)
        rendered.append(RenderedFile(name, text, executable=name.endswith((".sh", ".sbatch")), data=data))
    return rendered


# libyaml's parser when PyYAML has it: the same data as the pure-Python one, several times faster.
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _parse_back(name: str, text: str) -> Any:
    """The data of a rendered YAML or JSON file (None for others); raise if a file does not parse."""
    try:
        if name.endswith((".yaml", ".yml")):
            return yaml.load(text, Loader=_YAML_LOADER)  # a safe loader either way
        if name.endswith(".json"):
            return json.loads(text)
        if name.endswith(".py"):
            compile(text, name, "exec")
    except (yaml.YAMLError, json.JSONDecodeError, SyntaxError) as exc:
        raise RenderCheckError(f"rendered {name} does not parse: {exc}") from exc
    return None
