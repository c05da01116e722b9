"""The estimate table, printed with rich, and the figure table it shares with the summary.

A figure is never cut: at any width the table either shows every figure and every header whole
(headers wrap at spaces), or, when even the narrowest columns do not fit, switches to one block
of text per strategy.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from rich import box
from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.measure import Measurement
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from wizard.engine.device import GPU_DEVICE, GPU_WORDS, MAC_DEVICE, MAC_WORDS, DeviceWords, words_for
from wizard.engine.estimate_table import Row
from wizard.engine.memory import (
    CONTEXT_OVERHEAD,
    ESTIMATE_SHARE_WORDS,
    FIT_MARGIN,
    GIB,
    LONG_CONTEXT_TOKENS,
    OFFLOAD_STRATEGIES,
    STRATEGY_TITLES,
    UNDERSHOOT,
    UNDERSHOOT_PERCENT,
    UNDERSHOOT_SUM,
    memory_gib,
)
from wizard.ui.memory_chart import Bar, MemoryChart, usable_title
from wizard.ui.text_wrap import Hanging, Wrapped, join_units, keep_options, legend_item

GB = 10**9
_TITLES = {
    "wizard": "the wizard's estimate (model states + activations + overhead)",
    "deepspeed": "DeepSpeed's estimators, model states only (estimate_zero2/zero3_model_states_mem_needs, "
    "cold: from parameter counts, without loading the model)",
    "zero-paper": "the ZeRO paper's accounting, model states only (K = 12, Table 1)",
}
_MARK_STYLE = {"yes": "green", "tight": "yellow", "risk": "yellow", "no": "red", "host": "red", "oom": "red"}
# The fits column's "host": what the wizard refuses although the GPU has room.
HOST_SHORT_MEANING = (
    f"the GPU has room but host RAM does not: the offload needs more than {FIT_MARGIN:.0%} of cpu_memory_gb"
)
# The fits column's marks for the fp32 loss peak at the start of the backward pass
# (wizard.engine.memory.loss_extra_bytes), which the total leaves to the margin.
TIGHT_MEANING = (
    "fits, but for a moment at the start of the backward pass the loss's fp32 temporaries take it past the usable"
    " line, into the margin (still within the whole memory, not only its usable part)"
)
CLOSE_MEANING = (
    f"fits by the estimate, but may run out of memory: at {LONG_CONTEXT_TOKENS:,} tokens or more per GPU, with the"
    f" ordinary loss, the real peak as the backward pass starts may be up to {UNDERSHOOT_PERCENT} higher, past all of"
    f" the memory (at the longest contexts Unsloth's published tables fit on an 80 GB card, this estimate came to"
    f" only {ESTIMATE_SHARE_WORDS} of the card; {UNDERSHOOT_SUM} = {UNDERSHOOT}, the cautious end); with a loss"
    f" computed in chunks the wizard does not decide on it, but its Memory line says the same {UNDERSHOOT_PERCENT} more"
)
BUFFERS_MEANING = (
    "within the usable line by the estimate, past it with the overlap_comm buffers at your DeepSpeed JSON's bucket"
    " sizes (DeepSpeed's defaults where it sets none; Transformers' DeepSpeed guide: up to 4.5 times the two buckets,"
    " in 16 bit); lowering the two buckets"
    " (reduce_bucket_size and allgather_bucket_size) shrinks them"
)
PEAK_SHORT_MEANING = (
    "the total is within the usable line, but for a moment at the start of the backward pass the loss's fp32"
    " temporaries take it past all of the memory: out of memory unless the loss is computed in chunks"
)


# The same marks in a few words, for the summary's short table: --explain and the glossary give the long forms.
BRIEF_MEANINGS = {
    "host": "the GPU has room, host RAM does not",
    "tight": (
        "past the usable line for a moment as the backward pass starts, still within the whole memory, not only its"
        " usable part"
    ),
    "risk": (
        f"fits by the estimate, but at this long context the real peak as the backward pass starts can be up to"
        f" {UNDERSHOOT_PERCENT} higher than estimated, past the GPU's memory (glossary close call)"
    ),
    "oom": (
        "out of memory for a moment as the backward pass starts (the total itself is within the usable line),"
        " unless the loss is computed in chunks"
    ),
    "buffers": (
        "past the usable line with the overlap_comm buffers at your JSON's bucket sizes (DeepSpeed's defaults where"
        " it sets none), within it without them"
    ),
}


def fit_legend(marks: set[str], *, brief: bool = False) -> list[tuple[str, str]]:
    """The legend of the fits column's rarer marks that the table shows (host, tight, peak); `brief`: in a few words."""
    meanings = {
        "host": HOST_SHORT_MEANING,
        "tight": TIGHT_MEANING,
        "risk": CLOSE_MEANING,
        "oom": PEAK_SHORT_MEANING,
        "buffers": BUFFERS_MEANING,
    }
    if brief:
        meanings = BRIEF_MEANINGS
    return [(f"fits '{mark}'", meaning) for mark, meaning in meanings.items() if mark in marks]


# Why the host figure is larger than the states it holds: the offloaded optimizer keeps fp32
# copies. DeepSpeed's own estimators (estimate_zero2_model_states_mem_needs and the ZeRO-3 one,
# https://deepspeed.readthedocs.io/en/latest/memory.html) count the same 16 bytes and 1.5x buffer.
HOST_BYTES = (
    "Host RAM counts 16 bytes per trained parameter: the fp32 master weights, the fp32 gradients and Adam's two "
    "fp32 moments, 4 bytes each; with only the optimizer offloaded (optim->CPU) the GPU keeps the 16-bit weights "
    "beside them (in model states), 18 bytes in all, 16 of them in host RAM. With LoRA or QLoRA only the adapters"
    " are trained. When the weights move too, host RAM also holds the frozen ones as stored. DeepSpeed's full"
    " offload also keeps a 16-bit copy of the trained weights; FSDP2 keeps only their fp32 master copy. All that"
    " host RAM holds is counted 1.5 times,"
    " the allowance DeepSpeed's own estimator makes for pinned buffers and copies; FSDP2's offload pins its host "
    "copies too, so it gets the same 1.5"
)
# The layer-offload row's host figure is another quantity: the frozen layers as stored, pinned once.
LAYER_HOST_BYTES = (
    "On layer offload rows, host RAM holds the frozen decoder layers as stored: 16-bit, or 4-bit with"
    " QLoRA. Each GPU process has one copy, pinned once and reused, so these rows do not add the 1.5"
)


@dataclass(frozen=True)
class FigureRow:
    """One strategy: its name, its figures as printed (in column order) and its fits verdict."""

    label: str
    figures: tuple[str, ...]
    mark: str  # yes, no, host
    style: str = ""


@dataclass(frozen=True)
class FigureTable:
    """Strategies x figures, laid out for the width it gets (a rich renderable).

    Tried in order: the boxed table, a table without vertical rules, then one block per strategy.
    In the tables every column is at least as wide as its longest word, so a figure (one word)
    is never folded or cut with an ellipsis; headers wrap between words.
    """

    title: str
    headers: tuple[str, ...]  # the figure columns, between the strategy and the fits column
    rows: Sequence[FigureRow]
    caption: str | None = None
    fits_header: str = "fits"
    name_header: str = "strategy"  # the first column's header: what each row is
    # Figure columns (1 = the first after the names) kept whole and left-aligned: names, not figures.
    named: tuple[int, ...] = ()
    boxed: bool = True  # False: rules under the header only, a table whose names wrap reads shorter that way

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        """The widest layout that shows every figure whole."""
        width = options.max_width
        # Whole strategy names before rules between columns: a wrapped name doubles its row.
        for whole_names, boxed in ((True, True), (True, False), (False, True), (False, False)):
            if boxed and not self.boxed:
                continue
            table = self._table(console, width, boxed, whole_names)
            if table is not None:
                # Title and caption around the table, not in it: rich wraps those to the table's
                # width, which leaves a narrow table's text a narrow column.
                yield Wrapped(join_units(self.title))
                yield table
                if self.caption:
                    yield Wrapped(self.caption)
                return
        yield self._stacked()

    def _cells(self) -> list[list[str]]:
        """Every column's contents, header first (plain text, for measuring)."""
        columns = [[self.name_header, *(r.label for r in self.rows)]]
        for index, header in enumerate(self.headers):
            columns.append([header, *(r.figures[index] for r in self.rows)])
        columns.append([self.fits_header, *(r.mark for r in self.rows)])
        return columns

    def _table(self, console: Console, width: int, boxed: bool, whole_names: bool) -> Table | None:
        """The table with column widths that fit `width`, or None when its narrowest form does not."""
        columns = self._cells()
        # A column is never narrower than its longest word, so nothing is folded or cut.
        least = [max(max((cell_len(w) for w in cell.split()), default=1) for cell in column) for column in columns]
        most = [max(cell_len(cell) for cell in column) for column in columns]
        if whole_names:
            least[0] = max(cell_len(cell) for cell in columns[0][1:])
        for index in self.named:
            # Each name whole, and the header's longest word whole too.
            least[index] = max(least[index], *(cell_len(cell) for cell in columns[index][1:]))
        table = self._empty(boxed)
        for index, (cells, column_width) in enumerate(zip(columns, least, strict=True)):
            # "fold" only as a guard: no word is wider than its column, so nothing is ever folded.
            table.add_column(
                Text(cells[0]),
                justify="left" if index == 0 or index in self.named else "right",
                width=column_width,
                overflow="fold",
            )
        needed = Measurement.get(console, console.options.update_width(10**6), table).maximum
        if needed > width:
            return None
        # Spend what is left on the strategy names first (a wrapped name doubles its row), then
        # on the headers closest to their natural width (each one that gets there saves a line).
        spare = width - needed
        widths = list(least)
        for index in sorted(range(len(widths)), key=lambda i: (i != 0, most[i] - least[i])):
            grant = min(spare, most[index] - least[index])
            if index and grant < most[index] - least[index]:
                continue  # a header that still wraps gains nothing from a wider column, only blanks
            widths[index] += grant
            spare -= grant
        for column, column_width in zip(table.columns, widths, strict=True):
            column.width = column_width
        for row in self.rows:
            mark = Text(row.mark, style=_MARK_STYLE.get(row.mark, ""))
            table.add_row(Text(row.label), *(Text(f) for f in row.figures), mark, style=row.style)
        return table

    def _empty(self, boxed: bool) -> Table:
        # Unboxed, columns are apart by the box's one blank column only: the rule under the header
        # still separates names from figures.
        return Table() if boxed else Table(box=box.SIMPLE_HEAD, show_edge=False, padding=(0, 0))

    def _stacked(self) -> Group:
        """One block per strategy: its name, then each figure named by its header, the verdict last."""
        parts: list[RenderableType] = [Wrapped(join_units(self.title))]
        for row in self.rows:
            parts.append(Text(row.label, style="bold" if row.style == "bold" else ""))
            figures = Text(
                ", ".join(f"{h} {v}" for h, v in zip(self.headers, row.figures, strict=True)) + ", ",
                style=row.style,
            )
            figures.append(f"{self.fits_header} ")
            figures.append(row.mark, style=_MARK_STYLE.get(row.mark, ""))
            parts.append(Padding(figures, (0, 0, 0, 2)))
        if self.caption:
            parts.append(Wrapped(self.caption))
        return Group(*parts)


@dataclass(frozen=True)
class EstimateHeader:
    """The workload the table describes, and the assumptions it was computed under."""

    params: int
    largest_layer_params: int
    method: str
    world_size: int
    num_nodes: int
    gpu_memory_gb: float
    sequence_length: int
    micro_batch_size: int
    reference: str | None
    # Lines such as "method: lora (default; --method full|lora|qlora)": what was not given.
    assumptions: tuple[str, ...] = field(default_factory=tuple)
    device: str = GPU_DEVICE  # a Mac's output names the Mac, not a GPU (wizard.engine.device)
    # The model and where its count came from, when it names one ("org/name, its safetensors
    # headers in the Hugging Face cache"); None for a size.
    source: str | None = None


# What the row labels' abbreviations mean, for the legend under a table that shows them:
# (text a label contains, the legend's label, its meaning). The memory model is in
# wizard/engine/memory.py: optimizer offload moves the fp32 gradients with the optimizer state
# (16 bytes per trainable parameter), a full offload the weights too.
_LABEL_LEGEND = (
    ("DDP / 1 GPU", "DDP / 1 GPU", "a full copy of the training state on every GPU"),
    (re.compile(r"^1 GPU$"), "1 GPU", GPU_WORDS.single_note),
    # A Mac's one row, named for the Mac rather than a GPU it does not have (wizard.engine.device).
    (re.compile(rf"^{re.escape(MAC_WORDS.single_row)}$"), MAC_WORDS.single_row, MAC_WORDS.single_note),
    (
        "layer offload",
        "layer offload",
        "the frozen decoder layers wait in host RAM and come to the GPU layer by layer, about three there at"
        " once: the one computing, the next arriving, the last leaving (Axolotl's layer_offloading); embeddings,"
        " output head and the adapters with their gradients and"
        " optimizer state stay on the GPU",
    ),
    ("optim->CPU", "optim->CPU", "optimizer state and gradients in host RAM"),
    ("all->CPU", "all->CPU", "DeepSpeed moves weights, gradients and optimizer state to host RAM"),
    (
        "all->NVMe",
        "all->NVMe",
        "DeepSpeed moves weights, gradients and optimizer state to the NVMe drive (host RAM holds only its swap"
        " buffers, so the row has no host figure)",
    ),
    (
        "FSDP2 + offload",
        "FSDP2 + offload",
        "FSDP2's own CPU offload of weights, gradients and optimizer state (fsdp_offload_params in Accelerate,"
        " offload_params in Axolotl)",
    ),
    ("HSDP + offload", "HSDP + offload", "the same, but each machine holds a whole replica in its host RAM"),
    # The N-D row is named by the run's sizes ("FSDP2 + CP 2"); the fixed name is for a table
    # printed without a run (estimate with --tp/--cp/--ep names its sizes too).
    ("TP/CP/EP", "TP/CP/EP", "FSDP2 with whichever of tensor, context and expert parallelism the run sets above 1"),
    (re.compile(r"\bTP \d"), "TP n", "tensor parallel, each layer's matrices split over n GPUs"),
    (re.compile(r"\bCP \d"), "CP n", "context parallel, each sequence split over n GPUs"),
    (re.compile(r"\bEP \d"), "EP n", "expert parallel, the experts split over n GPUs"),
    ("TP x PP", "TP x PP", "tensor parallel x pipeline stages"),
)
ROUNDED = "parts are rounded, so a total can differ from their sum in the last digit"


def host_notes(layer_offload: bool) -> list[str]:
    """How the host RAM column is counted, as notes for a table's caption (plain sentences)."""
    return [HOST_BYTES, *([LAYER_HOST_BYTES] if layer_offload else [])]


# Row names whose meaning the short table says in fewer words (the long form is in --explain and the glossary).
_BRIEF_LABELS = {
    "layer offload": (
        "the frozen layers wait in host RAM and come to the GPU layer by layer (Axolotl's layer_offloading)"
    ),
    "all->NVMe": "DeepSpeed moves weights, gradients and optimizer state to the NVMe drive",
    "FSDP2 + offload": "FSDP2's own CPU offload of weights, gradients and optimizer state",
}


def label_legend(labels: Sequence[str], *, brief: bool = False) -> list[str]:
    """The meaning of each abbreviation the shown row labels use, one legend item each; `brief`: the short ones."""
    return [
        legend_item(name, _BRIEF_LABELS.get(name, text) if brief else text)
        for key, name, text in _LABEL_LEGEND
        if any(_shows(key, label) for label in labels)
    ]


def _shows(key: str | re.Pattern[str], label: str) -> bool:
    """Whether a row label uses the abbreviation `key` (text, or a pattern for sized names)."""
    return key in label if isinstance(key, str) else key.search(label) is not None


def table_caption(
    columns: Sequence[tuple[str, str]], labels: Sequence[str], notes: Sequence[str] = (), *, brief: bool = False
) -> str:
    """The caption: what the columns mean, the row labels' abbreviations, then notes (glossary has each).

    Each "label: meaning" keeps its label whole and each figure with its unit (see
    wizard.ui.text_wrap); the caption is printed with `Wrapped`, which honours that.
    """
    items = [legend_item(label, text) for label, text in columns]
    legend = label_legend(labels, brief=brief)
    # A note is prose; legend items start with a label, printed as the table prints it.
    prose = [join_units(f"{note[:1].upper()}{note[1:]}") for note in notes]
    if not brief:
        # The long form's legend runs to a dozen items: one per line, so a reader finds a column's or a row's
        # meaning without reading the rest; each note after them is a line of its own too.
        return "\n".join(f"{line}." for line in [*items, *legend, *prose])
    sentences = ["; ".join(items)]
    if legend:
        sentences.append("; ".join(legend))
    sentences += prose
    return " ".join(f"{sentence}." for sentence in sentences)


def parts_differ(rows: Sequence[FigureRow], parts: int) -> bool:
    """Whether a row's first `parts` figures, as shown, do not add up to the shown total after them.

    Each figure is rounded from exact bytes on its own (the decision uses the exact bytes), so a
    sum of rounded parts can miss the rounded total by a last digit; the caption then says so.
    """
    for row in rows:
        shown = row.figures[: parts + 1]
        if "-" in shown:
            continue
        *values, total = (float(f) for f in shown)
        digits = len(shown[-1].partition(".")[2])
        if round(sum(values), digits) != round(total, digits):
            return True
    return False


def host_short(strategy: str, host_bytes: int, host_memory: int | None) -> bool:
    """Whether an offload needs more host RAM per machine than the wizard counts as usable.

    The wizard's own rule (`wizard.engine.memory.Estimate.host_fits`): what is offloaded must fit
    in `FIT_MARGIN` of cpu_memory_gb; unknown host RAM is not judged. Only offloading strategies
    are judged, as the wizard does: DeepSpeed's estimators also give a host figure without
    offload (the RAM to load the model), which no decision depends on.
    """
    if strategy not in OFFLOAD_STRATEGIES or host_memory is None or host_bytes == 0:
        return False
    return host_bytes > host_memory * FIT_MARGIN


def row_mark(row: Row, host_memory: int | None) -> str:
    """The fits column: no, peak, host, close, tight or yes (`wizard.ui.memory_chart.fits_mark`, for a Row).

    no: the GPU cannot hold it; peak: only the loss peak is more than the GPU; host: the host
    RAM cannot hold the offload; tight: the loss peak goes past the usable line.
    """
    usable = row.gpu_memory * row.share
    if not row.fits:
        return "oom" if row.gpu_bytes <= usable else "no"
    if host_short(row.strategy, row.cpu_bytes_per_node, host_memory):
        return "host"
    peak = row.gpu_bytes + row.transient
    if row.close_call:  # the estimate's own verdict (Estimate.close_call)
        return "risk"
    return "yes" if peak <= usable else "tight"


def units(formula: str) -> tuple[str, int, int]:
    """The formula's unit, its size in bytes, and the decimals it is printed with."""
    if formula == "zero-paper":
        return "GB", GB, 3
    return "GiB", GIB, 2 if formula == "deepspeed" else 1


def estimate_table(
    formula: str, rows: list[Row], host_memory: int | None = None, words: DeviceWords = GPU_WORDS
) -> FigureTable:
    """The table in the formula's own units (the paper: GB = 10^9; the others: GiB = 2^30).

    `host_memory` is cpu_memory_gb in bytes (None when not given): offloads that need more than
    the usable share of it are marked "host" in the fits column, as the wizard refuses them.
    """
    unit, scale, digits = units(formula)
    paper = formula == "zero-paper"
    headers = ["model states", "activations", "other"] if formula == "wizard" else []
    # Nothing can be offloaded on a Mac (its CPU uses the same memory): no host RAM column there.
    host_column = words is not MAC_WORDS
    headers += ["total" if formula == "wizard" else "model states"] + (["host RAM"] if host_column else [])
    figure_rows = []
    for row in rows:
        figures = []
        if formula == "wizard":
            figures += [
                _fmt(row.model_states, scale, digits),
                _fmt(row.activations, scale, digits),
                _fmt(row.overhead, scale, digits),
            ]
        figures.append(_fmt(row.gpu_bytes, scale, digits))
        if host_column:
            figures.append(_fmt(row.cpu_bytes_per_node, scale, digits) if row.cpu_bytes_per_node else "-")
        figure_rows.append(
            FigureRow(row.title or STRATEGY_TITLES[row.strategy], tuple(figures), row_mark(row, host_memory))
        )
    marks = {r.mark for r in figure_rows}
    columns: list[tuple[str, str]] = []
    if formula == "wizard":
        columns += [
            ("model states", "weights, gradients and optimizer state"),
            # Not only CUDA: ROCm, MPS and the other runtimes reserve memory of their own too.
            ("other", f"a fixed {CONTEXT_OVERHEAD // GIB} GiB for {words.runtime}"),
        ]
    if formula == "deepspeed":
        # DeepSpeed's host figure is not only what is offloaded: without offload it is the RAM
        # the processes need to load the model, so the caption must not call it the offload.
        columns.append(
            (
                "host RAM",
                "per machine, DeepSpeed's figure: with offload what is offloaded, without it the RAM to load the model",
            )
        )
    elif host_column:
        columns.append(("host RAM", "per machine, for what is offloaded"))
    columns.append(("fits", f"at most {rows[0].share:.0%} of {words.memory}{words.share_note}"))
    columns += fit_legend(marks)
    if formula == "deepspeed":
        columns.append(("no ZeRO-1 row", "DeepSpeed has no estimator for it"))
    # How the host figure is counted: sentences after the column legend, not brackets inside it.
    layer_offload = any(r.strategy == "ddp_layer_offload" for r in rows)
    notes = host_notes(layer_offload) if formula != "deepspeed" and host_column else []
    notes += [ROUNDED] if formula == "wizard" and parts_differ(figure_rows, 3) else []
    heading = words.per[:1].upper() + words.per[1:]  # "Per GPU", or "On the Mac"
    return FigureTable(
        title=f"{heading} in {unit} ({'10^9' if paper else '2^30'} bytes): {_TITLES[formula]}",
        headers=tuple(headers),
        rows=figure_rows,
        caption=table_caption(columns, [r.label for r in figure_rows], notes),
    )


def estimate_chart(
    formula: str, rows: list[Row], host_memory: int | None = None, words: DeviceWords = GPU_WORDS
) -> MemoryChart:
    """The chart of the table's per-GPU column, in the same unit and decimals, with its verdicts."""
    unit, scale, digits = units(formula)
    memory = rows[0].gpu_memory / scale
    usable = rows[0].gpu_memory * rows[0].share / scale
    bars = [
        Bar(
            label=row.title or STRATEGY_TITLES[row.strategy],
            value=row.gpu_bytes / scale,
            text=_fmt(row.gpu_bytes, scale, digits),
            # The total's side of the line; a row short only by the loss peak says "oom" in its mark.
            fits=row.gpu_bytes <= row.gpu_memory * row.share,
            mark=row_mark(row, host_memory),
            # The loss's moment, drawn on from the bar as the summary's chart does.
            peak=(row.gpu_bytes + row.transient) / scale if row.transient else 0.0,
        )
        for row in rows
    ]
    what = "Total" if formula == "wizard" else "Model states"
    # The GPU's memory as the user gave it (79.65, not 79.6), as the summary prints it; the paper's
    # GB figures keep their own decimals.
    shown = memory_gib(rows[0].gpu_memory) if unit == "GiB" else round(memory, digits)
    title = usable_title(round(usable, digits), shown, unit, what, words.per, rows[0].share, words.share_note)
    return MemoryChart(bars, usable, title, unit, words.per)


def print_estimate(
    console: Console, header: EstimateHeader, formula: str, rows: list[Row], host_memory: int | None = None
) -> None:
    """The workload line, the assumptions it rests on, the table and the chart."""
    # The count is the size given; the reference model only lends its layer shape to the activations.
    shape = f" (layer shape of {header.reference}, for the activations)" if header.reference else ""
    if header.source and not header.reference:
        shape = f" ({header.source})"
    workload = (
        f"[bold]{header.params:,}[/] parameters{shape}"
        # The largest layer sizes DeepSpeed's buffers, which do not exist on a Mac.
        + ("; " if header.device == MAC_DEVICE else f", largest layer {header.largest_layer_params:,}; ")
        + (
            # A Mac is one device whose memory is the Mac's own (unified memory): no GPU count to give.
            f"{header.method}, on a Mac with {header.gpu_memory_gb:g} GiB of unified memory; "
            if header.device == MAC_DEVICE
            else f"{header.method}, {header.world_size} GPU(s) of {header.gpu_memory_gb:g} GiB"
            f" on {header.num_nodes} node(s); "
        )
        + f"sequence {header.sequence_length}, micro-batch {header.micro_batch_size}"
    )
    console.print(Wrapped(Text.from_markup(join_units(workload))))
    if header.assumptions:
        console.print("[bold]Assumed[/] (not given; pass the option shown to change it):")
        for line in header.assumptions:
            # "key: value": a wrapped value goes on under the value, so the key stands out.
            key, _, value = line.partition(": ")
            console.print(Hanging(f"{key}: ", keep_options(join_units(value)), indent=2))
    words = words_for(header.device)
    console.print(estimate_table(formula, rows, host_memory, words))
    console.print(estimate_chart(formula, rows, host_memory, words))
    note = formula_note(formula, header.method)
    if note:
        console.print(Wrapped(Text.from_markup(join_units(note))))


def formula_note(formula: str, method: str) -> str | None:
    """How a second-opinion formula's figures differ from the wizard's table, and why.

    DeepSpeed's cold estimators (https://deepspeed.readthedocs.io/en/latest/memory.html) and the
    ZeRO paper (https://arxiv.org/abs/1910.02054, Table 1) count the model states of a full
    fine-tune only: every parameter trained, no activations, no runtime overhead. Without this
    note a LoRA run's figures read as a contradiction of the wizard's own table.
    """
    if formula == "wizard":
        return None
    trained = (
        "every parameter trained, as in a full fine-tune"
        if method == "full"
        else f"every parameter trained, as in a full fine-tune, although this {method} run trains only its adapters"
    )
    if formula == "deepspeed":
        per_param = (
            "for ZeRO-2, beside the 16-bit weights every GPU keeps, 18 bytes per trained parameter for"
            " gradients and optimizer state (DeepSpeed's figure, which counts fp32 gradients too) where the"
            " wizard counts 14 (16-bit gradients, an fp32 copy of the weights and Adam's two fp32 moments);"
            " for ZeRO-3, which shards the weights too, 18 bytes per parameter in all where the wizard"
            " counts 16; and for ZeRO-2 with optimizer offload a host figure of"
            " max(4 x the run's GPUs, 16) bytes per parameter per machine, times 1.5 (DeepSpeed's own"
            " formula, which grows with the GPU count), where the wizard counts 16 bytes per trained"
            " parameter, spread over the machines"
        )
    else:
        per_param = (
            "16 bytes per trained parameter (16-bit weights and gradients, K = 12 bytes of fp32 optimizer"
            " state), the wizard's own accounting, in GB of 10^9 bytes where the wizard prints GiB"
        )
    return (
        "[bold]Against the wizard's table[/] (--formula wizard, the default): these figures are model"
        f" states only, for {trained}; {per_param}; no activations and no runtime overhead. "
        + (
            "Set them against the wizard's model-states column, not its total, which is what the fits decision uses."
            if method == "full"
            else "So they describe a full fine-tune of this model, not this run: compare them with"
            " --method full --formula wizard."
        )
    )


def _fmt(value: int | None, scale: int, digits: int) -> str:
    return "-" if value is None else f"{value / scale:.{digits}f}"
