"""Did-you-mean: the closest known name to a mistyped one.

One helper for every place that refuses a name it does not know (an answer's choice, an answers
file's key, a subcommand), so they all suggest alike. It uses the standard library's
``difflib.get_close_matches`` (https://docs.python.org/3/library/difflib.html#difflib.get_close_matches).
"""

from __future__ import annotations

from collections.abc import Iterable

# difflib's own default: "estimat" -> "estimate" and "glosary" -> "glossary" pass, "xyz" does not.
CUTOFF = 0.6


def closest(name: str, known: Iterable[str], cutoff: float = CUTOFF) -> str | None:
    """The known name closest to `name`, or None when none is close enough."""
    import difflib  # only on a mistake: a run that makes none need not import it

    close = difflib.get_close_matches(name, list(known), n=1, cutoff=cutoff)
    return close[0] if close else None
