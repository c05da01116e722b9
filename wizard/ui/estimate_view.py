"""The estimate table, printed with rich."""

from __future__ import annotations

from dataclasses import dataclass

from rich.console import Console
from rich.table import Table

from wizard.engine.estimate_table import Row
from wizard.engine.memory import GIB, STRATEGY_TITLES

GB = 10**9
_TITLES = {
    "wizard": "the wizard's estimate (model states + activations + overhead)",
    "deepspeed": "DeepSpeed's estimators, model states only (estimate_zero2/zero3_model_states_mem_needs, cold)",
    "zero-paper": "the ZeRO paper's accounting, model states only (K = 12, Table 1)",
}


@dataclass(frozen=True)
class EstimateHeader:
    """The workload the table describes."""

    params: int
    largest_layer_params: int
    method: str
    world_size: int
    num_nodes: int
    gpu_memory_gb: float
    sequence_length: int
    micro_batch_size: int
    reference: str | None


def print_estimate(console: Console, header: EstimateHeader, formula: str, rows: list[Row]) -> None:
    """Print the table in the formula's own units (the paper: GB = 10^9; the others: GiB = 2^30)."""
    paper = formula == "zero-paper"
    unit, scale, digits = ("GB", GB, 3) if paper else ("GiB", GIB, 2 if formula == "deepspeed" else 1)
    shape = f" (shape of {header.reference})" if header.reference else ""
    console.print(
        f"[bold]{header.params:,}[/] parameters{shape}, largest layer {header.largest_layer_params:,}; "
        f"{header.method}, {header.world_size} GPU(s) on {header.num_nodes} node(s) of {header.gpu_memory_gb:g} GiB; "
        f"sequence {header.sequence_length}, micro-batch {header.micro_batch_size}"
    )
    table = Table(
        title=f"Per GPU in {unit} ({'10^9' if paper else '2^30'} bytes): {_TITLES[formula]}", title_justify="left"
    )
    columns = ["strategy"]
    if formula == "wizard":
        columns += ["model states", "activations", "other"]
    columns += ["total" if formula == "wizard" else "model states", "host RAM/node", "fits (80%)"]
    for column in columns:
        table.add_column(column, justify="left" if column == "strategy" else "right", no_wrap=True)
    for row in rows:
        cells = [STRATEGY_TITLES[row.strategy]]
        if formula == "wizard":
            cells += [
                _fmt(row.model_states, scale, digits),
                _fmt(row.activations, scale, digits),
                _fmt(row.overhead, scale, digits),
            ]
        cells += [
            _fmt(row.gpu_bytes, scale, digits),
            _fmt(row.cpu_bytes_per_node, scale, digits) if row.cpu_bytes_per_node else "-",
            "[green]yes[/]" if row.fits else "[red]no[/]",
        ]
        table.add_row(*cells)
    console.print(table)


def _fmt(value: int | None, scale: int, digits: int) -> str:
    return "-" if value is None else f"{value / scale:.{digits}f}"
