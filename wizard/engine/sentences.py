"""Splitting a paragraph into its sentences, and keeping its first ones, for the short forms the summary prints."""

from __future__ import annotations

import re

# A sentence ends at ". " (or "! ", "? ") before a capital letter or a digit, outside brackets.
_END = re.compile(r"[.!?]\s+(?=[A-Z0-9\"'(])")


def sentences(paragraph: str) -> list[str]:
    """`paragraph` split into sentences, never inside brackets ("(80% of 80 GiB. ...)" stays whole)."""
    found: list[str] = []
    start = depth = 0
    for index, char in enumerate(paragraph):
        if char in "([{":
            depth += 1
        elif char in ")]}":
            depth = max(depth - 1, 0)
        elif depth == 0 and (end := _END.match(paragraph, index)) is not None:
            found.append(paragraph[start : index + 1].strip())
            start = end.end()
    tail = paragraph[start:].strip()
    return [*found, tail] if tail else found


def leading_sentences(said: list[str], limit: int) -> list[str]:
    """The first of `said` always, then the next ones while all of them, space-joined, stay within `limit`."""
    kept = said[:1]
    for sentence in said[1:]:
        if sum(len(s) + 1 for s in kept) + len(sentence) > limit:
            break
        kept.append(sentence)
    return kept


def more_sentences(count: int) -> str:
    """What a short form left out, counted: "1 more sentence", "3 more sentences"."""
    return f"{count} more sentence{'' if count == 1 else 's'}"
