"""Rendering the tree's explanation texts ("because ...", help, fact sentences).

Texts may use ``{{ ... }}`` with the answers and the estimator's numbers. A tree may come from a
user's file, so texts are rendered in Jinja's sandbox with StrictUndefined: a text can read the
values it is given and nothing else, and a misspelt name is an error, not an empty string.

A tree may write a paragraph once, in its `texts:` mapping, and include it in any of its texts
with ``{% include texts.NAME %}``: the shared text renders in the same sandbox, with the same
values, including the ``{% set %}`` variables of the text that includes it, and an error inside
it names the shared text's own file and line.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from functools import cache
from typing import Any

from jinja2 import BytecodeCache, StrictUndefined, Template, TemplateSyntaxError, UndefinedError, nodes
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


SHARED = "texts"
"""The name under which texts reach the tree's shared texts: ``{% include texts.NAME %}``."""


def included_texts(text: str) -> list[str]:
    """The shared texts `text` includes, in order; checks its template syntax too.

    A shared text is only ever included: ``{{ texts.NAME }}`` would print a template object, so
    any other use of ``texts`` is a syntax error here (raised as jinja2.TemplateSyntaxError), and
    so is an include, import or extends of anything else: the sandbox has no template files.
    """
    tree = _env().parse(text)
    included = [node.template for node in tree.find_all(nodes.Include)]
    only = f"a tree text includes only shared texts ({{% include {SHARED}.NAME %}})"
    for other in tree.find_all((nodes.Extends, nodes.Import, nodes.FromImport)):
        raise TemplateSyntaxError(only, other.lineno)
    for template in included:
        if not (isinstance(template, nodes.Getattr | nodes.Getitem) and _names_shared(template, template.node)):
            raise TemplateSyntaxError(only, template.lineno)
    names = []
    for name in tree.find_all(nodes.Name):
        if name.name != SHARED:
            continue
        named = next((n for n in included if _names_shared(n, name)), None)
        if named is None:
            raise TemplateSyntaxError(f"'{SHARED}' is used only as {{% include {SHARED}.NAME %}}", name.lineno)
        names.append((named.lineno, _shared_name(named)))
    return [name for _, name in sorted(names, key=lambda item: item[0])]


def _names_shared(node: nodes.Node, name: nodes.Node) -> bool:
    """Whether `node` is ``texts.NAME`` or ``texts['NAME']`` for this very `name` node."""
    if not (isinstance(name, nodes.Name) and name.name == SHARED):
        return False
    if isinstance(node, nodes.Getattr):
        return node.node is name
    return isinstance(node, nodes.Getitem) and node.node is name and isinstance(node.arg, nodes.Const)


def _shared_name(node: nodes.Node) -> str:
    return str(node.attr if isinstance(node, nodes.Getattr) else node.arg.value)  # type: ignore[attr-defined]


class UnknownSharedText(Exception):
    """An include of a shared text the tree does not define (the linter refuses such a tree)."""


class SharedTexts:
    """The tree's shared texts, as ``{% include texts.NAME %}`` reaches them: name -> template.

    Only dunder methods, so that no text's name is shadowed by a method when a template reads
    ``texts.NAME`` (Jinja tries the attribute before the item). Each text compiles on its first
    include: most runs include few of them.
    """

    __slots__ = ("_texts",)

    def __init__(self, texts: Mapping[str, TreeText] | None = None) -> None:
        self._texts = dict(texts or {})

    def __getitem__(self, name: str) -> Template:
        text = self._texts.get(name)
        if text is None:
            # Not a LookupError: Jinja would turn that into an undefined value and a vague error.
            raise UnknownSharedText(f"no shared text '{name}' in the tree's texts")
        return _compile_shared(name, text, text.where)

    def __contains__(self, name: object) -> bool:
        return name in self._texts

    def __iter__(self) -> Iterator[str]:
        return iter(self._texts)

    def __len__(self) -> int:
        return len(self._texts)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SharedTexts) and self._texts == other._texts

    def __hash__(self) -> int:
        return hash(tuple(self._texts))

    def __getstate__(self) -> dict[str, TreeText]:
        return self._texts

    def __setstate__(self, state: dict[str, TreeText]) -> None:
        self._texts = state


_SHARED_MARK = " shared text "


@cache
def _compile_shared(name: str, text: str, where: str) -> Template:
    """A shared text compiled with its own file name, so that a traceback names it and its line.

    The name is "FILE, line N shared text NAME": `render_text` reads it back from the traceback.
    """
    return _compile(text, f"{where or 'decision tree'}{_SHARED_MARK}{name}")


def use_bytecode_cache(bytecode_cache: BytecodeCache | None) -> None:
    """Keep compiled texts in `bytecode_cache` too (the CLI gives it an on-disk one); None: memory only."""
    _env().bytecode_cache = bytecode_cache


@cache
def compile_text(text: str) -> Template:
    """Compile a text once, on first use (or take its compiled code from the bytecode cache).

    This is what ``Environment.from_string`` does, with the cache step that Jinja's loaders add.
    """
    return _compile(text, None)


def _compile(text: str, filename: str | None) -> Template:
    env = _env()
    store = env.bytecode_cache
    if store is None and filename is None:
        return env.from_string(text)
    if store is None:
        return env.template_class.from_code(env, env.compile(text, filename=filename), env.make_globals(None), None)
    bucket = store.get_bucket(env, "tree text", filename, text)
    if bucket.code is None:
        bucket.code = env.compile(text, filename=filename)
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
        where += _in_shared(exc)
        raise TextError(f"{where}: text {text[:60]!r}... uses an unknown value: {exc.message}") from None
    except Exception as exc:
        where += _in_shared(exc)
        # The text is the tree author's code: whatever it raises (the sandbox's SecurityError for
        # ''.__class__, a division by zero, a type error) is a broken tree, not a wizard bug.
        reason = " ".join(str(exc).split()) or type(exc).__name__  # one line, never empty
        raise TextError(f"{where}: text {text[:60]!r}... cannot be rendered: {reason}") from None
    # The tree's texts are folded YAML (a line break there is a space); a "\n" written in a quoted
    # text starts a paragraph, which the console indents and the file headers join again.
    return "\n".join(line for part in rendered.split("\n") if (line := " ".join(part.split())))


def _in_shared(exc: BaseException) -> str:
    """The words ", in shared text NAME (FILE, line N)" for an error inside an included shared text.

    Jinja rewrites a template's traceback frames to the template's file name: the innermost frame
    of a shared text (named by `_compile_shared`) is the one that failed.
    """
    import traceback  # only for a text that failed to render

    for frame, _ in reversed(list(traceback.walk_tb(exc.__traceback__))):
        filename = frame.f_code.co_filename
        if _SHARED_MARK in filename:
            where, name = filename.rsplit(_SHARED_MARK, 1)
            return f", in shared text '{name}' ({where})"
    return ""
