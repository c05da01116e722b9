"""Everything printed for people, with rich: the summary, dry-run contents and errors."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich.console import Console, Group
from rich.markup import escape
from rich.panel import Panel
from rich.syntax import Syntax
from rich.table import Table
from rich.text import Text

from wizard.app import Result
from wizard.engine.memory import STRATEGY_TITLES, Estimate, to_gib
from wizard.engine.tree import Tree
from wizard.errors import WizardError
from wizard.render.writer import CONFLICT, CREATE, OVERWRITE, UNCHANGED

_ACTION_STYLE = {CREATE: "green", OVERWRITE: "yellow", UNCHANGED: "dim", CONFLICT: "red"}


def print_error(console: Console, error: WizardError) -> None:
    """One line naming the problem, with the hint at its end when there is one."""
    hint = f" [dim](hint: {escape(error.hint)})[/]" if error.hint else ""
    console.print(f"[bold red]error:[/] {escape(error.message)}{hint}", soft_wrap=True)


def print_result(console: Console, tree: Tree, result: Result, *, dry_run: bool) -> None:
    """The summary: decision, reasons, settings, memory table, runner-ups, files, next step."""
    rec = result.recommendation
    if rec.refused:
        console.print(Panel(escape(rec.because), title="[bold red]No backend fits", border_style="red"))
    else:
        backend = tree.backends[str(rec.backend)]
        body = Group(
            Text(backend.summary, style="italic"),
            Text(""),
            Text.from_markup(f"[bold]Why:[/] {escape(rec.because)}"),
            Text.from_markup(
                f"[dim]Rule {rec.rule.id}, guidance {rec.rule.guidance}: {escape(tree.guidance[rec.rule.guidance])}[/]"
            ),
        )
        console.print(Panel(body, title=f"[bold green]{escape(backend.title)}", border_style="green"))
        console.print(_settings_table(rec.settings))
    if rec.facts.estimates:
        console.print(memory_table(rec.facts.estimates, _highlight(result)))
    if rec.runner_ups:
        console.print(_runner_up_table(rec))
    for warning in result.warnings:
        console.print(f"[yellow]warning:[/] {escape(warning)}", soft_wrap=True)
    if result.files:
        _print_files(console, result, dry_run)


def _settings_table(settings: Mapping[str, Any]) -> Table:
    table = Table(title="Key settings", title_justify="left", show_header=False, box=None, padding=(0, 2))
    table.add_column(style="bold")
    table.add_column()
    labels = {
        "mixed_precision": "mixed precision",
        "num_processes": "processes (all machines)",
        "num_machines": "machines",
        "zero_stage": "ZeRO stage",
        "offload_optimizer": "optimizer offload",
        "offload_param": "weight offload",
        # The parallel layout: the sizes above 1 (HSDP, N-D, Megatron-LM, DeepSpeed SP).
        "dp_replicate_size": "data-parallel replicas",
        "dp_shard_size": "FSDP2 shard group",
        "tp_size": "tensor parallel",
        "pp_size": "pipeline stages",
        "cp_size": "context parallel",
        "sp_size": "sequence parallel",
        "ep_size": "expert parallel",
    }
    for key, label in labels.items():
        value = settings.get(key)
        if (key == "zero_stage" and value is None) or (key.endswith("_size") and value in (None, 1)):
            continue
        table.add_row(label, escape(str(value)))
    return table


def _highlight(result: Result) -> set[str]:
    rec = result.recommendation
    strategies = {str(rec.settings.get("strategy"))}
    strategies |= {r.strategy for r in rec.runner_ups if r.strategy}
    return strategies


def memory_table(estimates: Mapping[str, Estimate], highlight: set[str]) -> Table:
    """Every strategy's estimate; the `highlight` ones in bold, the others dimmed."""
    first = next(iter(estimates.values()))
    short_of_host = any(e.fits and e.host_fits is False for e in estimates.values())
    table = Table(
        title=f"Memory per GPU in GiB (2^30 bytes); fits = at most 80% of {to_gib(first.gpu_memory)} GiB",
        title_justify="left",
        caption="host: host RAM per machine for what is offloaded"
        + ("; fits 'host': not enough of it" if short_of_host else ""),
        caption_justify="left",
    )
    for column in ("strategy", "states", "activations", "other", "total", "host", "fits"):
        table.add_column(column, justify="left" if column == "strategy" else "right", no_wrap=True)
    for strategy, est in estimates.items():
        host = f"{to_gib(est.host_per_node)}" if est.host_per_node else "-"
        # An offload that fits the GPU but not the host RAM does not run: say which limit failed.
        fits = "[red]no[/]" if not est.fits else ("[red]host[/]" if est.host_fits is False else "[green]yes[/]")
        style = "bold" if strategy in highlight else "dim"
        table.add_row(
            STRATEGY_TITLES[strategy],
            f"{to_gib(est.model_states)}",
            f"{to_gib(est.activations)}",
            f"{to_gib(est.overhead)}",
            f"{to_gib(est.total)}",
            host,
            fits,
            style=style,
        )
    return table


def _runner_up_table(rec: Any) -> Table:
    table = Table(title="Why not the others", title_justify="left", show_header=False, box=None, padding=(0, 2))
    table.add_column(style="bold")
    table.add_column()
    for runner in rec.runner_ups:
        table.add_row(escape(runner.title), escape(runner.reason))
    return table


def _print_files(console: Console, result: Result, dry_run: bool) -> None:
    by_path = {str(a.path): a for a in result.actions}
    title = "Would write (dry run, nothing written)" if dry_run else "Files"
    table = Table(title=title, title_justify="left", show_header=False, box=None, padding=(0, 2))
    table.add_column()
    table.add_column()
    for action in result.actions:
        style = _ACTION_STYLE[action.action]
        table.add_row(f"[{style}]{action.action}[/]", escape(str(action.path)))
    console.print(table)
    if dry_run:
        for file in result.files:
            action = next(a for p, a in by_path.items() if p.endswith(file.name))
            lexer = "json" if file.name.endswith(".json") else "bash" if file.name.endswith(".sh") else "yaml"
            console.print(Panel(Syntax(file.text, lexer, word_wrap=True), title=escape(str(action.path))))
            if action.diff:
                console.print(Syntax(action.diff, "diff"))
    else:
        for action in result.actions:
            if action.action in (OVERWRITE, CONFLICT) and action.diff:
                console.print(Syntax(action.diff, "diff"))
    if not dry_run and not result.conflicts:
        launch = next((a.path for a in result.actions if a.path.name == "launch.sh"), None)
        if launch is not None:
            answers = result.session.answers
            target = answers["target"]
            command = f"{launch} YOUR_TRAINING_SCRIPT.py" if target == "accelerate" else str(launch)
            machines = int(result.recommendation.settings.get("num_machines") or 1)
            if machines > 1 and not answers.get("use_ray"):
                # Each machine runs the same script with its own rank (launch.sh refuses without it).
                rank = "MACHINE_RANK" if target == "accelerate" else "NODE_RANK"
                address = "" if answers.get("main_process_ip") else " MAIN_PROCESS_IP=<machine 0's address>"
                command = f"on each machine, {rank}=<0..{machines - 1}>{address} {command}"
                sbatch = next((a.path for a in result.actions if a.path.name == "slurm.sbatch"), None)
                if sbatch is not None:
                    script = " YOUR_TRAINING_SCRIPT.py" if target == "accelerate" else ""
                    command += f"   (under SLURM, from {sbatch.parent}: sbatch slurm.sbatch{script})"
            console.print(f"[bold]Next:[/] {escape(command)}")
