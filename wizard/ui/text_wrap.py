"""Wrapping for the console views that keeps a number with its unit and a label with its colon.

Rich breaks lines at any whitespace, the no-break space (U+00A0) included, so "about 106.3 GiB"
can end a line with "106.3" and start the next with "GiB", and a legend label such as
"DDP / 1 GPU:" can be split in two. Text for the terminal marks the spaces that must not break
with `NBSP` (`join_units`, `keep_together`) and is printed through `Wrapped`, which breaks at
plain spaces only and prints every `NBSP` as an ordinary space, so copied text has no odd
characters. Only the console uses this: written files keep plain spaces.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, RenderResult
from rich.measure import Measurement
from rich.text import Text

NBSP = "\u00a0"
# A figure ("15.6", "1,024", "80") and the unit after it: memory sizes and times ("0.28 s") as the
# wizard prints them.
_NUMBER_UNIT = re.compile(r"(?<![\w.])(\d+(?:[.,]\d+)*) (?=(?:GiB|GB|Gb|MiB|MB|TiB|TB|KiB|KB|TFLOPS|bytes?|B|s)\b)")
# A figure that ends a clause ("this run has 1.", "(offload: 2)"): kept with the word before it.
_TAIL_NUMBER = re.compile(r"(?<=\w) (?=\d+(?:[.,]\d+)*[.;:)](?:\s|$))")
# Break opportunities: a run of plain spaces ends a word; a no-break space does not.
_WORD = re.compile(r"[^ ]+ *| +")
# A web address, perhaps in brackets or quotes: never folded, since a URL cut in two can be
# neither clicked nor copied whole.
_URL = re.compile(r"^[(\[\"']?https?://")


def join_units(text: str) -> str:
    """`text` with each number joined to the size unit after it ("106.3 GiB" stays on one line).

    A number that ends a clause is joined to the word before it too, so that "1." never starts a
    line on its own ("this run has 1.").
    """
    return _TAIL_NUMBER.sub(NBSP, _NUMBER_UNIT.sub(lambda m: m.group(1) + NBSP, text))


# A command-line option and its value: "--set gradient_checkpointing=true|false",
# "--gpu-model 'a100 40 pcie'" (a quoted value with its spaces).
_OPTION_VALUE = re.compile(r"(?<!\S)--[a-z][a-z-]* (?:'[^']*'|[^\s;,)]+)")


def keep_options(text: str) -> str:
    """`text` with each "--option value" kept on one line, so a line never ends with a bare option."""
    return _OPTION_VALUE.sub(lambda m: keep_together(m.group()), text)


def wrapped_markup(markup: str) -> Wrapped:
    """Console markup (already escaped where it must be) with its units joined, printed through `Wrapped`."""
    return Wrapped(Text.from_markup(join_units(markup)))


def keep_together(words: str) -> str:
    """`words` that must stay on one line (a legend label such as "DDP / 1 GPU")."""
    return words.replace(" ", NBSP)


def legend_item(label: str, meaning: str) -> str:
    """The legend item `label: meaning`, its label kept on one line with the colon, its units joined."""
    return f"{keep_together(label)}: {join_units(meaning)}"


def _breaks(plain: str, width: int) -> Iterator[int]:
    """Offsets where a paragraph (no line breaks) is cut to lines of at most `width` cells.

    Greedy, like rich: a word moves to the next line when it does not fit; a word longer than a
    whole line (a path) is folded, as rich's "fold" overflow would. A URL longer than a line is
    the exception: it gets a line of its own, whole, and the terminal shows it as it can.
    """
    column = 0
    for match in _WORD.finditer(plain):
        start = match.start()
        word = match.group().rstrip(" ")
        size = cell_len(word)
        if column and column + size > width:
            yield start
            column = 0
        if size > width and _URL.match(word):
            column = width  # whatever follows starts a new line
            continue
        if size > width:
            # Fold the long word at the width, character by character.
            position = start
            for char in word:
                char_size = cell_len(char)
                if column + char_size > width:
                    yield position
                    column = 0
                column += char_size
                position += 1
            column += len(match.group()) - len(word)
            continue
        column += cell_len(match.group())


@dataclass(frozen=True)
class Wrapped:
    """Text wrapped at plain spaces only, with each no-break space printed as a space (a rich renderable)."""

    text: Text | str

    def _text(self) -> Text:
        return Text(self.text) if isinstance(self.text, str) else self.text

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        """As wide as the longest paragraph, at least as wide as the longest unbreakable word."""
        plain = self._text().plain
        words = [w for line in plain.split("\n") for w in line.split(" ")]
        longest = max((cell_len(w) for w in words), default=0)
        widest = max((cell_len(line) for line in plain.split("\n")), default=0)
        return Measurement(min(longest, options.max_width), min(widest, options.max_width))

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        """One rich Text per output line, each at most the width it is given."""
        width = max(1, options.max_width)
        text = self._text()
        offsets: list[int] = []
        start = 0
        for paragraph in text.plain.split("\n"):
            if start:
                offsets.append(start)  # the line break itself starts a new line
            offsets += [start + cut for cut in _breaks(paragraph, width)]
            start += len(paragraph) + 1
        for line in text.divide(offsets):
            if line.plain.startswith("\n"):
                line = line[1:]
            line.rstrip()
            shown = Text(line.plain.replace(NBSP, " "), style=line.style, spans=list(line.spans))
            shown.no_wrap = True  # already cut to the width; rich must not cut it again
            shown.overflow = "fold"
            yield shown


def url_line(url: str, indent: int, width: int) -> str:
    """A URL on a line of its own: indented when the indent still lets it fit `width`, else unindented.

    Never cut: a line wider than `width` is then the URL alone, longer than the width itself.
    """
    return " " * indent + url if indent + cell_len(url) <= width else url


@dataclass(frozen=True)
class Hanging:
    """`lead` then `body`, wrapped so that every further line starts under the body's first character.

    "[2] Hugging Face blog: ... multi-GPU" continues under "Hugging", not under "[2]". `indent`
    columns come before the lead. When the lead leaves the body fewer than `min_body` cells, the
    further lines start `indent + fallback` columns in instead, so that a long lead (a long key in
    `check`) does not squeeze the text into a narrow column.
    """

    lead: Text | str
    body: Text | str
    indent: int = 0
    fallback: int = 2
    min_body: int = 30

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        """As wide as the lead and the widest paragraph of the body together."""
        lead = cell_len(Text(self.lead).plain if isinstance(self.lead, str) else self.lead.plain)
        body = Wrapped(self.body).__rich_measure__(console, options)
        extra = self.indent + lead
        return Measurement(min(body.minimum + extra, options.max_width), min(body.maximum + extra, options.max_width))

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        """The first line with its lead, the others indented under the body."""
        lead = Text(self.lead) if isinstance(self.lead, str) else self.lead
        width = max(1, options.max_width)
        offset = self.indent + cell_len(lead.plain)
        body_plain = self.body if isinstance(self.body, str) else self.body.plain
        longest = max((cell_len(word) for word in body_plain.split() if not _URL.match(word)), default=0)
        if width - offset < max(self.min_body, longest):
            # Too little room beside the lead: the first line as one paragraph, the rest under it.
            offset = self.indent + self.fallback
            first = Text(" " * self.indent) + lead + (Text(self.body) if isinstance(self.body, str) else self.body)
            lines = _lines(first, console, options, width)
            lines = lines[:1] + [
                line
                for rest in _rest_paragraph(first, lines[0])
                for line in _lines(rest, console, options, width - offset)
            ]
            for index, line in enumerate(lines):
                yield line if index == 0 else Text(" " * offset) + line
            return
        for index, line in enumerate(_lines(self.body, console, options, width - offset)):
            head = Text(" " * self.indent) + lead if index == 0 else Text(" " * offset)
            joined = head + line
            joined.no_wrap, joined.overflow = True, "fold"
            yield joined


def _lines(text: Text | str, console: Console, options: ConsoleOptions, width: int) -> list[Text]:
    """`text` as `Wrapped` prints it at `width`: one Text per line."""
    rendered = Wrapped(text).__rich_console__(console, options.update_width(max(width, 1)))
    return [line for line in rendered if isinstance(line, Text)]


def _rest_paragraph(whole: Text, first_line: Text) -> list[Text]:
    """What `whole` holds after the text of its first printed line (spaces between them dropped)."""
    plain = whole.plain.replace(NBSP, " ")
    shown = len(first_line.plain)
    if shown >= len(plain):
        return []
    rest = whole[shown:]
    return [rest[len(rest.plain) - len(rest.plain.lstrip(" \n")) :]]
