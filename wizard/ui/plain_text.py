r"""Text for a stream whose encoding cannot print every character (PYTHONIOENCODING=ascii, LANG=C).

The summary, the trees and the charts use arrows, dots, bars and box-drawing lines. Printed to a
stream that cannot encode them, Python raises UnicodeEncodeError after the files are written.
Each such character gets a plain spelling instead (one character where a table's alignment
depends on it), and anything else, such as a name the user typed, an escape like ``\xe9``
(Python's "backslashreplace" error handler, https://docs.python.org/3/library/codecs.html#error-handlers).
"""

from __future__ import annotations

import codecs
import functools
import unicodedata

PLAIN = {
    "→": "->",
    "←": "<-",
    "·": ".",
    "•": "*",
    "…": "...",
    "—": "--",
    "\u2013": "-",
    "\u2212": "-",
    "≥": ">=",
    "≤": "<=",
    "≠": "!=",
    "\u00d7": "x",
    "²": "^2",
    "✓": "+",
    "✗": "x",
    "█": "#",
    "░": ".",
    "▶": ">",
    "\u2018": "'",
    "\u2019": "'",
    "\u201c": '"',
    "\u201d": '"',
}


@functools.cache
def _unicode_safe(encoding: str) -> bool:
    try:
        return codecs.lookup(encoding).name in ("utf-8", "utf-16", "utf-32", "utf-8-sig")
    except LookupError:
        return False


def fit_encoding(text: str, encoding: str | None) -> str:
    """`text` as it can be written in `encoding`: unchanged when it fits, plain characters otherwise."""
    encoding = encoding or "utf-8"
    if _unicode_safe(encoding):
        return text
    try:
        text.encode(encoding)
        return text
    except LookupError:
        encoding = "ascii"
    except UnicodeEncodeError:
        pass
    return "".join(_plain(char, encoding) for char in text)


def _plain(char: str, encoding: str) -> str:
    try:
        char.encode(encoding)
        return char
    except UnicodeEncodeError:
        pass
    if char in PLAIN:
        return PLAIN[char]
    name = unicodedata.name(char, "")
    if name.startswith("BOX DRAWINGS"):  # one character each: table borders stay aligned
        vertical, horizontal = "VERTICAL" in name or "UP" in name or "DOWN" in name, "HORIZONTAL" in name
        return "+" if vertical and ("LEFT" in name or "RIGHT" in name or horizontal) else "|" if vertical else "-"
    return char.encode(encoding, "backslashreplace").decode(encoding)
