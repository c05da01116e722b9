"""The hardware search, printed: which cards, how many, the layout the tree picks and why, and the cost."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from wizard.engine.hardware_search import MACHINE_GPUS, Needs, Row, Size, Verdict
from wizard.engine.memory import GIB
from wizard.engine.speed import band_text, rate_text
from wizard.ui.text_wrap import Wrapped, join_units, keep_options

TIB = 1024 * GIB


@dataclass(frozen=True)
class Question:
    """`--gpus N` with one `--gpu`: the tree's answer at that size, offload ruled out and allowed."""

    gpu: str
    size: Size
    without: Verdict
    with_offload: Verdict
    needs: Needs | None


def size_text(value: int) -> str:
    """Bytes as GiB, with TiB beside from 1 TiB: "1,043 GiB (~1.0 TiB)", "288 GiB", "12.1 GiB"."""
    gib = value / GIB
    text = f"{gib:,.0f} GiB" if gib >= 100 else f"{gib:.1f} GiB"
    return f"{text} (~{value / TIB:.1f} TiB)" if value >= TIB else text


def machines_text(size: Size) -> str:
    """The machines in words: "one machine" or "2 machines of 8"."""
    if size.machines == 1:
        return "one machine"
    return f"{size.machines} machines of {size.per_machine}"


def _count(size: Size) -> str:
    """The GPUs cell: "4", or "16 (2x8)" beyond one machine."""
    return str(size.gpus) if size.machines == 1 else f"{size.gpus} ({size.machines}x{size.per_machine})"


def _money(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 else f"{value:.2f}" if value >= 0.01 else f"{value:.4f}"


def layout_name(verdict: Verdict) -> str:
    """The picked layout as the estimate table names it ("FSDP2", "ZeRO-3 + optim->CPU", "1 GPU")."""
    chosen = verdict.estimate
    if chosen is None:
        return "-"
    if verdict.strategy == "ddp":
        return "1 GPU" if verdict.size.gpus == 1 else "DDP"
    return chosen.label


def hardware_table(rows: Sequence[Row], reasons: dict[str, str], priced: bool) -> Table:
    """Fewest GPUs first: card, its memory, GPUs (machines), layout with its reason's mark, step band, cost.

    Every figure column is as wide as its widest figure and never wraps; the card and layout
    columns wrap between words where the width runs short, so no figure is ever cut.
    """
    # tokens/s beside the step: a step trains more sequences on more GPUs (micro-batch x accumulation x
    # GPUs, unless global_batch_size is given), so only the rate compares rows of different sizes.
    headers = ["GPU", "GiB", "GPUs", "layout [reason]", "step", "tokens/s"] + (["$/hour", "$/step"] if priced else [])
    body: list[list[str]] = []
    for row in rows:
        verdict = row.result.verdict
        if verdict is None:
            continue
        mark = reasons.setdefault(verdict.reason, chr(ord("a") + len(reasons)))
        step = row.result.step
        cells = [
            row.result.gpu.short_name,
            f"{row.result.gpu.memory_gib:g}",
            _count(verdict.size),
            f"{layout_name(verdict)} [{mark}]",
            band_text(step) if step else "-",
            rate_text(step) if step else "-",
        ]
        if priced:
            hourly, per_step = row.cost_per_hour, row.cost_per_step
            cells.append(_money(hourly) if hourly is not None else "-")
            cells.append(f"{_money(per_step[0])}-{_money(per_step[1])}" if per_step else "-")
        body.append(cells)
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1))
    for index, header in enumerate(headers):
        words = index in (0, 3)  # the card's name and the layout wrap; figures never do
        widest = max((len(cells[index]) for cells in body), default=1)
        longest_word = max((len(w) for cells in body for w in cells[index].split()), default=1)
        table.add_column(
            Text(header),
            justify="left" if words else "right",
            no_wrap=not words,
            min_width=max(longest_word, len(header.split()[0])) if words else max(widest, len(header)),
            # A long card name wraps before the layout does: the layout and its mark read as one.
            max_width=max(longest_word, 14) if index == 0 else None,
        )
    for cells in body:
        table.add_row(*(Text(cell) for cell in cells))
    return table


def needs_line(needs: Needs) -> str:
    """What any GPU count is up against: the states of one copy, spread over the GPUs, and what each GPU keeps."""
    return (
        f"[bold]Needs[/]: the model states of one copy (weights, gradients and optimizer state), "
        f"{size_text(needs.states)}, spread over the GPUs when sharded; each GPU also keeps about "
        f"{size_text(needs.per_gpu)} (activations {size_text(needs.activations)}, the runtime's overhead and the "
        "layers gathered whole), and only 80% of its memory counts as usable."
    )


def dominant_text(needs: Needs, gpu: str) -> str:
    """Why the GPUs of a `--gpus` question are not enough without offload, naming what dominates."""
    all_gpus = f"{needs.gpus} x {needs.budget / 0.8 / GIB:.2f} GiB = {size_text(needs.memory)} in all"
    if needs.dominant == "model_states":
        return (
            f"the model states of one copy alone need {size_text(needs.states)}; {all_gpus}, "
            f"{size_text(needs.usable)} usable, so no sharding over {needs.gpus} x {gpu} holds them"
        )
    if needs.dominant == "activations":
        return (
            f"each GPU keeps about {size_text(needs.per_gpu)} whatever the sharding (activations "
            f"{size_text(needs.activations)}), more than the {size_text(needs.budget)} usable on one {gpu}: "
            "more GPUs cannot help; a shorter sequence or a smaller micro-batch can"
        )
    return (
        f"sharded over {needs.gpus} GPUs each still needs about {size_text(needs.sharded_total)}, more than the "
        f"{size_text(needs.budget)} usable on one {gpu}"
    )


def question_lines(question: Question, found: Sequence[Row], job: str) -> list[str]:
    """The yes/no answer for `--gpus N`, what dominates, and what is needed instead."""
    size, gpu = question.size, question.gpu
    where = f"{size.gpus} x {gpu}" + ("" if size.machines == 1 else f" ({machines_text(size)})")
    plain, offloaded = question.without, question.with_offload
    if plain.runs:
        head = f"[bold]{job} on {where}: yes[/], without offload: {layout_name(plain)} ({plain.reason})"
        return [head + _fit_tail(plain) + "."]
    lines = [f"[bold]{job} on {where}: no[/] without offload"]
    if question.needs is not None:
        lines[0] += ": " + dominant_text(question.needs, gpu)
    lines[0] += "."
    if offloaded.runs:
        lines.append(
            f"With CPU offload: yes, {layout_name(offloaded)} ({offloaded.reason})" + _fit_tail(offloaded) + "."
        )
    for row in found:
        verdict = row.result.verdict
        kind = "with CPU offload" if row.result.offload else "without offload"
        if verdict is None:
            lines.append(
                f"Needs, {kind}: more than {row.result.machines_cap} machines of {MACHINE_GPUS} {gpu}: it does not "
                f"fit within {row.result.machines_cap}."
            )
        elif not (row.result.offload and offloaded.runs):
            lines.append(
                f"Needs, {kind}: {verdict.size.gpus} x {gpu}"
                + ("" if verdict.size.machines == 1 else f" ({machines_text(verdict.size)})")
                + f", with {layout_name(verdict)}."
            )
    return lines


def _fit_tail(verdict: Verdict) -> str:
    chosen = verdict.estimate
    if chosen is None:
        return ""
    tail = f"; about {size_text(chosen.total)} per GPU of {size_text(chosen.budget)} usable"
    if chosen.host_per_node:
        host = verdict.answers.get("cpu_memory_gb")
        tail += f", {size_text(chosen.host_per_node)} of host RAM per machine of {host:g} GiB"
    return tail


def print_hardware(
    console: Console,
    header: str,
    rows: Sequence[Row],
    needs: Needs | None,
    assumed: str,
    question: Question | None = None,
    job: str = "",
    brought_json: bool = False,
) -> None:
    """The workload, the answer to `--gpus`, the table, the reasons, what does not fit, and the assumptions.

    `brought_json`: a DeepSpeed JSON decides the layout on every card, so no offload of the search's own was tried.
    """
    console.print(Wrapped(Text.from_markup(join_units(header))))
    if question is not None:
        mine = [row for row in rows if row.result.gpu.short_name == question.gpu]
        for line in question_lines(question, mine, job):
            console.print(Wrapped(Text.from_markup(join_units(line))))
    if needs is not None:
        console.print(Wrapped(Text.from_markup(join_units(needs_line(needs)))))
    priced = any(row.price is not None for row in rows)
    reasons: dict[str, str] = {}
    if any(row.result.verdict is not None for row in rows):
        title = "The fewest GPUs of each card that run it, by the wizard's estimate and decision tree"
        console.print(Wrapped(Text.from_markup(f"[bold]{title}[/]")))
        console.print(hardware_table(rows, reasons, priced))
        legend = "; ".join(f"[{mark}] {reason}" for reason, mark in reasons.items())
        console.print(Wrapped(Text(join_units(f"Reasons (the tree's rule): {legend}."))))
        notes = (
            "step: the rough time of one optimizer step, a band from the wizard's speed model, at the global batch"
            " each size trains (micro-batch x accumulation x data-parallel GPUs, unless global_batch_size is"
            " given): it grows with the GPUs, so compare sizes by tokens/s, the whole run's rate; GPUs: in all,"
            " (machines x GPUs each); a card appears twice where CPU offload needs"
            " fewer GPUs than the layouts without it"
        )
        if priced:
            notes += "; $/hour for all the GPUs at the prices given, $/step over the step band"
        console.print(Wrapped(Text(join_units(notes + "."))))
    short = [row for row in rows if row.result.verdict is None and not row.result.offload]
    if short:
        both = {row.result.gpu for row in rows if row.result.verdict is None and row.result.offload}
        names = [
            row.result.gpu.short_name + (" (even with offload)" * (row.result.gpu in both and not brought_json))
            for row in short
        ]
        cap = short[0].result.machines_cap
        how = "with your DeepSpeed JSON as written" if brought_json else "without offload"
        line = f"Does not fit within {cap} machines of {MACHINE_GPUS} {how}: {', '.join(names)}."
        console.print(Wrapped(Text(join_units(line))))
    console.print(Wrapped(Text.from_markup(keep_options(join_units(f"[bold]Assumed[/]: {assumed}")))))
