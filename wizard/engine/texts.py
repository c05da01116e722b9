"""Rendering the tree's explanation texts ("because ...", help, fact sentences).

Texts may use ``{{ ... }}`` with the answers and the estimator's numbers. A tree may come from a
user's file, so texts are rendered in Jinja's sandbox with StrictUndefined: a text can read the
values it is given and nothing else, and a misspelt name is an error, not an empty string.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from typing import Any

from jinja2 import BytecodeCache, StrictUndefined, Template, UndefinedError
from jinja2.exceptions import SecurityError
from jinja2.sandbox import SandboxedEnvironment

from wizard.errors import TreeError

MAX_REPEAT = 10_000


class _BoundedSandbox(SandboxedEnvironment):
    """The sandbox, plus limits on the operators that can make huge values from short text.

    Jinja's sandbox blocks attribute escapes but not `'x' * 10**10` or `9 ** 9 ** 9`; a tree
    from --tree is untrusted, so powers and repetition are capped.
    """

    intercepted_binops = frozenset({"*", "**"})

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        numbers = [v for v in (left, right) if isinstance(v, int) and not isinstance(v, bool)]
        sequences = [v for v in (left, right) if isinstance(v, str | list | tuple)]
        if operator == "**" and any(abs(v) > 64 for v in numbers):
            raise SecurityError("powers above 64 are not allowed in tree texts")
        if operator == "*" and sequences and any(abs(v) > MAX_REPEAT for v in numbers):
            raise SecurityError(f"repeating text more than {MAX_REPEAT} times is not allowed in tree texts")
        return super().call_binop(context, operator, left, right)


@cache
def _env() -> SandboxedEnvironment:
    return _BoundedSandbox(undefined=StrictUndefined, autoescape=False, keep_trailing_newline=False)


class TreeText(str):
    """A text as the tree file wrote it, with ``where`` ("FILE, line N") for errors found at render time."""

    where: str = ""


def located(text: str, where: str) -> TreeText:
    """`text` marked with the file and line it came from."""
    result = TreeText(text)
    result.where = where
    return result


def check_text(text: str) -> None:
    """Check a text's template syntax (raises jinja2.TemplateSyntaxError); cheaper than compiling."""
    _env().parse(text)


def use_bytecode_cache(bytecode_cache: BytecodeCache | None) -> None:
    """Keep compiled texts in `bytecode_cache` too (the CLI gives it an on-disk one); None: memory only."""
    _env().bytecode_cache = bytecode_cache


@cache
def compile_text(text: str) -> Template:
    """Compile a text once, on first use (or take its compiled code from the bytecode cache).

    This is what ``Environment.from_string`` does, with the cache step that Jinja's loaders add.
    """
    env = _env()
    store = env.bytecode_cache
    if store is None:
        return env.from_string(text)
    bucket = store.get_bucket(env, "tree text", None, text)
    if bucket.code is None:
        bucket.code = env.compile(text)
        store.set_bucket(bucket)
    return env.template_class.from_code(env, bucket.code, env.make_globals(None), None)


class TextError(TreeError):
    """A tree text that cannot be rendered for these answers: the tree file is broken (exit 3)."""


def render_text(text: str, context: Mapping[str, Any]) -> str:
    """Render a tree text with the given values; collapse whitespace, keeping written line breaks as paragraphs."""
    where = getattr(text, "where", "") or "decision tree"
    try:
        rendered = compile_text(text).render(**context)
    except UndefinedError as exc:
        raise TextError(f"{where}: text {text[:60]!r}... uses an unknown value: {exc.message}") from None
    except Exception as exc:
        # The text is the tree author's code: whatever it raises (the sandbox's SecurityError for
        # ''.__class__, a division by zero, a type error) is a broken tree, not a wizard bug.
        reason = " ".join(str(exc).split()) or type(exc).__name__  # one line, never empty
        raise TextError(f"{where}: text {text[:60]!r}... cannot be rendered: {reason}") from None
    # The tree's texts are folded YAML (a line break there is a space); a "\n" written in a quoted
    # text starts a paragraph, which the console indents and the file headers join again.
    return "\n".join(line for part in rendered.split("\n") if (line := " ".join(part.split())))
