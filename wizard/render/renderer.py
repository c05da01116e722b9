"""Render the planned files with jinja2 and prove each one parses back.

Every value a template prints goes through the ``yaml``, ``json``, ``sh`` or ``py`` filter, which
serializes it: a model name with a colon, a quote or a line break stays one string value of its
field. Python files are compiled back as the same guard.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import yaml
from jinja2 import Environment, FileSystemLoader, StrictUndefined

from wizard.render.context import RenderPlan, comment_lines
from wizard.resources import templates_dir


@dataclass(frozen=True)
class RenderedFile:
    """One output file's name and full text."""

    name: str
    text: str
    executable: bool = False


def yaml_scalar(value: Any) -> str:
    """A YAML flow representation of a value on one line (strings quoted when YAML needs it)."""
    text = yaml.safe_dump(value, default_flow_style=True, width=2**31, allow_unicode=True, sort_keys=False)
    if "\n" in text.rstrip("\n").removesuffix("\n...").rstrip("\n"):
        text = yaml.safe_dump(value, default_style='"', width=2**31, allow_unicode=True)
    return text.rstrip("\n").removesuffix("...").rstrip("\n")


def json_value(value: Any) -> str:
    """A JSON representation of a value."""
    return json.dumps(value)


def python_literal(value: Any) -> str:
    """A Python literal for a plain value (str, number, bool, None, or a dict/list of them)."""
    return repr(value)


def shell_quote(value: Any) -> str:
    """Single-quote a value for bash."""
    return "'" + str(value).replace("'", "'\"'\"'") + "'"


@cache
def _environment(folder: str) -> Environment:
    env = Environment(
        loader=FileSystemLoader(folder),
        undefined=StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
    )
    filters: dict[str, Callable[..., Any]] = {
        "yaml": yaml_scalar,
        "json": json_value,
        "comment": comment_lines,
        "sh": shell_quote,
        "py": python_literal,
    }
    env.filters.update(filters)
    return env


class RenderCheckError(Exception):
    """A rendered file does not parse back: a bug in a template, never the user's fault."""


def render_plan(plan: RenderPlan, folder: Path | None = None) -> list[RenderedFile]:
    """Render every planned file, then parse YAML/JSON outputs back as a guard."""
    env = _environment(str(folder or templates_dir()))
    rendered = []
    for name, template in plan.files:
        text = env.get_template(template).render(**plan.context)
        _parse_back(name, text)
        rendered.append(RenderedFile(name, text, executable=name.endswith((".sh", ".sbatch"))))
    return rendered


def _parse_back(name: str, text: str) -> None:
    try:
        if name.endswith((".yaml", ".yml")):
            yaml.safe_load(text)
        elif name.endswith(".json"):
            json.loads(text)
        elif name.endswith(".py"):
            compile(text, name, "exec")
    except (yaml.YAMLError, json.JSONDecodeError, SyntaxError) as exc:
        raise RenderCheckError(f"rendered {name} does not parse: {exc}") from exc
