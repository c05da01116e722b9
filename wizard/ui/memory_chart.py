"""A bar chart of the memory table: one bar per strategy against the usable line.

Each bar is a strategy's total per GPU; the ``|`` column is the usable memory (the share of the
GPU the wizard counts as usable, `wizard.engine.memory.FIT_MARGIN`). A bar that fits stays left
of the line; one that does not crosses it, whatever the rounding to whole character cells, so
the drawing always agrees with the table's fits column. Only the track left of the line is drawn
(as free memory): past the usable line nothing is free to use, so that side stays blank. Where
the loss's fp32 temporaries add a moment's peak at the start of the backward pass, the bar goes on
in a lighter shade to that peak, across the line where the table says "tight". The
characters carry the meaning on their own (colour only repeats it), so the chart reads the same
with NO_COLOR, piped into a file, or on a console whose encoding has no block characters (then
it is drawn in ASCII).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, RenderResult
from rich.text import Text

from wizard.engine.device import GPU_WORDS, words_for
from wizard.engine.memory import FIT_MARGIN, Estimate, memory_gib, to_gib

# The axis ends at this multiple of the usable line when a bar is larger: a 1,000 GiB replicated
# run beside a 64 GiB budget would otherwise squeeze every bar that fits into one or two cells.
_AXIS_CAP = 2.0
# Narrower than this many bar cells, the bar moves under its label (on a line of its own).
_MIN_BAR = 12
_MARK_STYLE = {"yes": "green", "tight": "yellow", "risk": "yellow", "no": "red", "host": "red", "oom": "red"}


@dataclass(frozen=True)
class Glyphs:
    """The characters a chart is drawn with."""

    full: str  # a cell of the bar
    empty: str  # a cell of the track the bar did not reach, left of the usable line
    line: str  # the usable line
    beyond: str  # the last cell of a bar that runs past the end of the axis
    peak: str  # a cell of the moment's peak beyond the bar (the loss's temporaries)


UNICODE = Glyphs(full="█", empty="░", line="|", beyond="▶", peak="▒")
ASCII = Glyphs(full="#", empty=".", line="|", beyond=">", peak="+")


def glyphs_for(console: Console) -> Glyphs:
    """Block characters where the console's encoding can print them, ASCII otherwise."""
    sample = UNICODE.full + UNICODE.empty + UNICODE.beyond + UNICODE.peak
    try:
        sample.encode(console.encoding)
    except (UnicodeEncodeError, LookupError):
        return ASCII
    return UNICODE


@dataclass(frozen=True)
class Bar:
    """One strategy's bar: its figure, as the table prints it, and the table's fits verdict."""

    label: str
    value: float  # in the chart's unit (GiB or GB)
    text: str  # the value exactly as the table prints it
    fits: bool  # on the GPU: within the usable line
    mark: str  # the table's fits column: yes, tight, no, peak or host (`fits_mark`)
    bold: bool = False
    peak: float = 0.0  # the moment's peak (the total and the loss's temporaries); 0 where there is none


@dataclass(frozen=True)
class MemoryChart:
    """The chart, drawn to whatever width the console gives it (a rich renderable)."""

    bars: Sequence[Bar]
    usable: float  # the usable line, in the chart's unit
    title: str
    unit: str = "GiB"
    per: str = GPU_WORDS.per  # the legend's "GiB per GPU"; "on the Mac" on Apple silicon

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        """The title, one line (or two, when narrow) per bar, and the legend."""
        glyphs = glyphs_for(console)
        width = options.max_width
        yield Text(self.title, style="bold")
        if not self.bars:
            return
        label_width = max(cell_len(b.label) for b in self.bars)
        value_width = max(cell_len(b.text) for b in self.bars)
        mark_width = max(cell_len(b.mark) for b in self.bars)
        tail = 1 + value_width + 1 + mark_width  # " 106.3 no"
        # The bar's cells; the usable line takes one more column.
        beside = width - label_width - 1 - tail - 1
        if beside >= _MIN_BAR:
            for bar in self.bars:
                line = Text(bar.label.ljust(label_width) + " ", style="bold" if bar.bold else "")
                line.append_text(self._bar(bar, beside, glyphs))
                line.append_text(self._tail(bar, value_width, mark_width))
                yield line
        else:
            cells = max(width - 2 - tail - 1, 4)
            for bar in self.bars:
                yield Text(bar.label, style="bold" if bar.bold else "")
                line = Text("  ")
                line.append_text(self._bar(bar, cells, glyphs))
                line.append_text(self._tail(bar, value_width, mark_width))
                yield line
        yield Text(self._legend(glyphs))

    def _legend(self, glyphs: Glyphs) -> str:
        beyond = any(b.value > self._axis() for b in self.bars)
        parts = [f"{glyphs.full} {self.unit} {self.per}", f"{glyphs.empty} free, up to the usable line {glyphs.line}"]
        if any(b.peak > b.value for b in self.bars):
            parts.append(f"{glyphs.peak} a moment's peak (the loss)")
        if beyond:
            parts.append(f"{glyphs.beyond} off the scale")
        return "  ".join(parts)

    def _axis(self) -> float:
        """Where the axis ends: the largest bar, the usable line, at most `_AXIS_CAP` x usable."""
        largest = max(max(b.value, b.peak) for b in self.bars)
        return max(self.usable, min(largest, _AXIS_CAP * self.usable))

    def _bar(self, bar: Bar, cells: int, glyphs: Glyphs) -> Text:
        """`cells` cells of bar and track with the usable line after cell `line`."""
        axis = self._axis()
        crossing = any(not b.fits or b.peak > self.usable for b in self.bars)
        line = round(self.usable / axis * cells) if axis > 0 else cells
        # Leave room right of the line when some bar must cross it, and one cell left of it.
        line = max(1, min(line, cells - 1 if crossing else cells))
        filled = round(bar.value / axis * cells) if axis > 0 else 0
        if bar.value > 0:
            filled = max(filled, 1)  # a small figure is still visible
        # The table's verdict decides which side of the line the bar ends on.
        filled = min(filled, line) if bar.fits else max(filled, line + 1)
        filled = min(filled, cells)
        # The moment's peak, drawn on from the bar, on the side of the line the table's mark says.
        reach = filled
        if bar.peak > bar.value:
            reach = max(round(bar.peak / axis * cells) if axis > 0 else 0, filled + 1)
            reach = max(reach, line + 1) if bar.peak > self.usable else min(reach, line)
            reach = max(min(reach, cells), filled)
        style = "green" if bar.fits else "red"
        drawn: list[tuple[str, str]] = []
        for cell in range(cells):
            if cell < filled:
                drawn.append((glyphs.full, style))
            elif cell < reach:
                drawn.append((glyphs.peak, "yellow"))
            elif cell < line:
                drawn.append((glyphs.empty, "dim"))
            else:
                # Blank past the line: that memory is the margin the estimate leaves, not free to use.
                drawn.append((" ", ""))
        if bar.value > axis and filled > 0:
            drawn[filled - 1] = (glyphs.beyond, style)
        elif bar.peak > axis and reach > filled:
            drawn[reach - 1] = (glyphs.beyond, "yellow")
        text = Text()
        for cell, (char, cell_style) in enumerate(drawn):
            if cell == line:
                text.append(glyphs.line, style="bold")
            text.append(char, style=cell_style)
        if line >= cells:
            text.append(glyphs.line, style="bold")
        return text

    @staticmethod
    def _tail(bar: Bar, value_width: int, mark_width: int) -> Text:
        text = Text(" " + bar.text.rjust(value_width) + " ")
        text.append(bar.mark, style=_MARK_STYLE.get(bar.mark, ""))
        return text


def fits_mark(estimate: Estimate) -> str:
    """The summary table's fits column: yes, no, host, peak or tight.

    host: the GPU fits but the host RAM does not; peak: only the loss peak is more than the
    GPU; tight: that moment goes past the usable line, within the GPU.
    """
    if not estimate.fits:
        return "oom" if estimate.peak_short else "no"
    if estimate.host_fits is False:
        return "host"
    return "risk" if estimate.close_call else "tight" if estimate.tight else "yes"


def chart_for_estimates(
    estimates: Mapping[str, Estimate],
    highlight: set[str],
    marks: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
) -> MemoryChart:
    """The chart of the wizard's estimates, in GiB as the memory table prints them.

    `marks` and `labels` override a row's verdict and name where the table does too (the NVMe
    run's row, named for the drive, with its GPU-only fit).
    """
    first = next(iter(estimates.values()))
    bars = [
        Bar(
            label=(labels or {}).get(strategy, est.label),
            value=est.total / 2**30,
            text=f"{to_gib(est.total)}",
            # The side of the line is the total's; a row short only by the loss peak ("oom")
            # stays left of it, its mark says the rest.
            fits=est.total <= est.budget,
            mark=(marks or {}).get(strategy, fits_mark(est)),
            bold=strategy in highlight,
            peak=est.peak / 2**30 if est.transient else 0.0,
        )
        for strategy, est in estimates.items()
    ]
    usable = first.budget / 2**30
    words = words_for(first.device)
    title = usable_title(
        to_gib(first.budget),
        memory_gib(first.gpu_memory),
        "GiB",
        per=words.per,
        share=first.share,
        note=words.share_note,
    )
    return MemoryChart(bars, usable, title, per=words.per)


def usable_title(
    usable: float,
    memory: float | str,
    unit: str,
    what: str = "Total",
    per: str = GPU_WORDS.per,
    share: float = FIT_MARGIN,
    note: str = "",
) -> str:
    """The chart's first line: what the bars are and where the usable line sits."""
    return f"{what} {per} against the usable {usable} {unit} ({share:.0%} of {memory} {unit}{note})"
