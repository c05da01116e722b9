"""Glossary entries and the list of terms, printed with rich.

Everything here wraps at word boundaries to the console width. URLs are the exception: a URL
folded onto two lines can no longer be clicked or copied, so it is printed whole on a line of its
own, indented with the entry when it fits there, at the margin when not.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from rich.console import Console
from rich.text import Text

from wizard.engine.glossary import Term, normalise
from wizard.engine.sentences import leading_sentences, more_sentences, sentences
from wizard.ui.text_wrap import url_line

INDENT = 2
COLUMN_GAP = 3


def _paragraph(console: Console, text: Text, first: int, rest: int) -> None:
    """`text` wrapped at spaces to the console width, indented `first` columns, then `rest`.

    A hanging indent keeps a long heading readable as one item.

    Wrapped here rather than with rich's Padding, which pads every line with trailing spaces to
    the full width: noise in a pipe or a file.
    """
    width = max(console.width - max(first, rest), 20)
    for number, line in enumerate(text.wrap(console, width)):
        line.rstrip()
        console.print(Text(" " * (first if number == 0 else rest)) + line, soft_wrap=True)


# A definition's opening shown by default: about seven lines at 80 columns; --full prints the rest.
OPENING_CHARS = 560


def opening(definition: str) -> tuple[str, int]:
    """The first sentences of `definition` within `OPENING_CHARS` (the first always), and how many are left out."""
    said = sentences(definition)
    kept = leading_sentences(said, OPENING_CHARS)
    return " ".join(kept), len(said) - len(kept)


def print_glossary(console: Console, terms: Sequence[Term], *, full: bool = True) -> None:
    """Each term in bold, its other names, its definition, related terms and its source.

    Without `full`, a long definition stops after its opening sentences and says how to read the rest:
    an entry of twenty lines read as a wall where the reader wanted what a word means.
    """
    for index, term in enumerate(terms):
        if index:
            console.print()
        heading = Text(term.term, style="bold")
        # "sdpa" beside "SDPA" is there for matching config values in text, not worth showing.
        aliases = [a for a in term.aliases if normalise(a) != normalise(term.term)]
        if aliases:
            heading.append(f" (also: {', '.join(aliases)})", style="dim")
        _paragraph(console, heading, 0, INDENT)
        shown, left = (term.definition, 0) if full else opening(term.definition)
        _paragraph(console, Text(shown), INDENT, INDENT)
        if left:
            name = term.term if " " not in term.term else f'"{term.term}"'
            more = f"({more_sentences(left)}: backend-wizard glossary {name} --full)"
            _paragraph(console, Text(more, style="dim"), INDENT, INDENT)
        if term.see:
            _paragraph(console, Text(f"See: {', '.join(term.see)}", style="dim"), INDENT, INDENT)
        if term.source is not None:
            _paragraph(console, Text(f"Source: {term.source.title}", style="dim"), INDENT, INDENT)
            console.print(Text(url_line(term.source.url, INDENT, console.width), style="dim"), soft_wrap=True)


def print_term_list(console: Console, terms: Sequence[Term]) -> None:
    """Every term's name, alphabetically down columns that fit the console, and how to read one.

    Laid out here rather than with rich's Columns, which pads every row with trailing spaces.
    """
    intro = (
        f"{len(terms)} terms. `backend-wizard glossary TERM [TERM ...]` defines each term given (case,"
        " spaces and hyphens do not matter; quote a term of several words); `backend-wizard glossary"
        " --all` prints every definition."
    )
    _paragraph(console, Text(intro), 0, 0)
    console.print()
    # "_no_split_modules" sorts under n, where a reader looks for it.
    names = sorted((t.term for t in terms), key=lambda n: n.lstrip("_").casefold())
    cell = max(len(n) for n in names) + COLUMN_GAP
    columns = max(1, (console.width + COLUMN_GAP) // cell)
    rows = math.ceil(len(names) / columns)
    for row in range(rows):
        line = "".join(names[i].ljust(cell) for i in range(row, len(names), rows))
        console.print(Text(line.rstrip()), soft_wrap=True)
