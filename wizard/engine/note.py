"""A warning with a short form: the summary prints the short one, the files and --explain the whole.

Notes such as "Your script's optimizer is replaced ..." carry their sources, the exceptions and
the figures behind them; on the summary's first screen that reads as a wall. A `Note` is the whole
text (it is a `str`: the templates, the JSON report and every check read it unchanged) and keeps
its short form beside it, written where the whole text is, from the same figures.
"""

from __future__ import annotations


class Note(str):
    """The whole text of a warning, with `brief`: what the short summary prints in its place."""

    brief: str

    def __new__(cls, text: str, brief: str) -> Note:
        """`text` whole, `brief` its short form (the action and its key figure, in a sentence or two)."""
        note = super().__new__(cls, text)
        note.brief = brief
        return note

    def __getnewargs__(self) -> tuple[str, str]:  # type: ignore[override]
        """Both forms, so that a copy or a pickle keeps the short one."""
        return (str(self), self.brief)


def brief_of(warning: str) -> str:
    """What the short summary prints for `warning`: its short form where it has one, else the text."""
    return warning.brief if isinstance(warning, Note) else warning
