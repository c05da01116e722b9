"""Rendering the tree's explanation texts ("because ...", help, fact sentences).

Texts may use ``{{ ... }}`` with the answers and the estimator's numbers. A tree may come from a
user's file, so texts are rendered in Jinja's sandbox with StrictUndefined: a text can read the
values it is given and nothing else, and a misspelt name is an error, not an empty string.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from typing import Any

from jinja2 import StrictUndefined, Template, UndefinedError
from jinja2.sandbox import SandboxedEnvironment


@cache
def _env() -> SandboxedEnvironment:
    return SandboxedEnvironment(undefined=StrictUndefined, autoescape=False, keep_trailing_newline=False)


def check_text(text: str) -> None:
    """Check a text's template syntax (raises jinja2.TemplateSyntaxError); cheaper than compiling."""
    _env().parse(text)


@cache
def compile_text(text: str) -> Template:
    """Compile a text once, on first use."""
    return _env().from_string(text)


class TextError(Exception):
    """A text refers to a value that does not exist for these answers."""


def render_text(text: str, context: Mapping[str, Any]) -> str:
    """Render a tree text with the given values; collapse whitespace to one line."""
    try:
        rendered = compile_text(text).render(**context)
    except UndefinedError as exc:
        raise TextError(f"text {text[:60]!r}... uses an unknown value: {exc.message}") from None
    return " ".join(rendered.split())
