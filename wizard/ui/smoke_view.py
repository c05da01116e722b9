"""The rich view of `backend-wizard smoke`: what each process resolved and held, beside the estimate."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.markup import escape
from rich.table import Table
from rich.text import Text

from wizard.engine.device import words_for
from wizard.engine.memory import GIB
from wizard.ui.text_wrap import wrapped_markup

if TYPE_CHECKING:
    from rich.console import Console

    from wizard.smoke import SmokePlan, SmokeResult

VERDICT_STYLES = {
    "matches": "bold green",
    "inconclusive": "bold",
    "differs": "bold yellow",
    "failed": "bold red",
    "not measured": "bold",
}


def _size(value: object) -> str:
    if not isinstance(value, int):
        return "-"
    return f"{value / 2**30:.2f} GiB" if abs(value) >= 2**30 // 10 else f"{value / 2**20:.1f} MiB"


def _mib(value: object) -> str:
    return f"{value / 2**20:,.0f}" if isinstance(value, int) else "-"


def print_running(console: Console, plan: SmokePlan, device: str, steps: int, timeout: int) -> None:
    """One line before the wait: what runs, where, and the time limit (seconds to minutes pass silently)."""
    processes = f"{plan.world_size} process{'es' if plan.world_size != 1 else ''}"
    console.print(
        f"[dim]running {escape(str(plan.folder))}/launch.sh on the {device.upper()}: {processes}, {steps}"
        f" step{'s' if steps != 1 else ''}, stopped after {timeout} s at most...[/]"
    )


def print_plan(console: Console, plan: SmokePlan, device: str) -> None:
    """The plan before the run: what runs where, the --tiny model's size, and the figure the run is held against."""
    from wizard.smoke import held_against

    stage = f", ZeRO-{plan.zero_stage}" if plan.zero_stage is not None else ""

    def _precision(plan: SmokePlan) -> str:
        # A frozen base in a 16-bit dtype without autocast (a Mac bf16 base) is said as such, not fp32.
        mixed = plan.mixed_precision if plan.mixed_precision != "no" else "fp32"
        if plan.method != "full" and plan.mixed_precision == "no" and plan.base_dtype != "fp32":
            return f"{plan.base_dtype} base (no autocast)"
        return mixed

    console.print(
        Text.assemble(
            ("Smoke of ", "bold"),
            (str(plan.folder), "bold"),
            f": {plan.title}{stage}, {plan.world_size} process{'es' if plan.world_size != 1 else ''},"
            f" {_precision(plan)}, model {plan.model_name},"
            f" sequence {plan.sequence_length} x micro-batch {plan.micro_batch_size}, on the {device.upper()}",
        ),
    )
    if plan.tiny_size:
        console.print(
            wrapped_markup(
                f"[dim]--tiny model: {escape(plan.tiny_size)}: the planned architecture (its layer types and"
                " proportions), scaled down.[/]"
            )
        )
    if plan.edited:
        console.print(
            Text(
                f"note: {', '.join(plan.edited)} {'differs' if len(plan.edited) == 1 else 'differ'} from what"
                " answers.yaml writes now;"
                " the run uses them as they are",
                style="yellow",
            )
        )
    figure, compared = held_against(plan, device)
    # The wizard does not estimate a CPU run; its formulas are applied in fp32 to one process.
    layout = "its formulas for one CPU process in fp32" if plan.hardware == "cpu" else plan.estimate.label
    if plan.world_size > 1:  # "DDP / 1 GPU" names two rows; this run is the DDP one
        layout = layout.replace("DDP / 1 GPU", "DDP")
    # Labelled as the verdict labels it ("measured X against Y estimated"), before the wait.
    console.print(
        wrapped_markup(
            f"[dim]Compared: {escape(compared)}; estimated {_size(figure)} per process ({escape(layout)}).[/]"
        )
    )


def print_smoke(console: Console, result: SmokeResult) -> None:
    """After the run: one row per rank (measured against estimated), the verdict in one line, the next step."""
    on_cpu = result.device == "cpu"
    if any(rank.get("status") == "ok" for rank in result.ranks):
        table = Table(title=None, show_edge=False, pad_edge=False, box=None)
        # On the CPU the step time is this run's own, never a forecast of the plan's GPU step band.
        step_column = "CPU s" if on_cpu else "step s"
        for column in ("rank", "resolved", "stage", "dtype/prec", "offload", "peak", "states", step_column):
            right = column in ("peak", "states", step_column)
            table.add_column(column, justify="right" if right else "left", no_wrap=True)
        for rank in result.ranks:
            stage_text = (
                f"ZeRO-{rank.get('zero_stage')}"
                if rank.get("zero_stage") is not None
                else (f"FSDP{rank.get('fsdp_version')}" if rank.get("fsdp_version") else "-")
            )
            precision = rank.get("engine_precision") or rank.get("mixed_precision") or "-"
            dtype = str(rank.get("param_dtype", "-")).replace("float", "fp").replace("bfp", "bf")
            offload = f"{rank.get('offload_optimizer', '-')}/{rank.get('offload_param', '-')}"
            step = rank.get("step_seconds")
            table.add_row(
                str(rank.get("rank")),
                # As Accelerate names it (its DistributedType), the JSON report's distributed_type.
                str(rank.get("backend", "-")),
                stage_text,
                f"{dtype}/{'fp32' if precision == 'no' else precision}",
                offload,
                _mib(rank.get("peak_bytes")),
                _mib(rank.get("states_bytes")),
                f"{step:.3f}" if isinstance(step, int | float) else "-",
            )
        console.print(table)
        console.print(
            Text(
                # One line at 80 columns: what the three short columns hold.
                "stage: ZeRO/FSDP version; dtype/prec: weights/compute; offload: optim/weights",
                style="dim",
            )
        )
        step_words = "step s: mean seconds per step after the first, a warm-up"
        if on_cpu:
            gpu_plan = result.plan.hardware != "cpu"
            step_words = "CPU s: this CPU smoke run's own mean seconds per step after the first, a warm-up" + (
                " (not a forecast of the plan's GPU step)" if gpu_plan else ""
            )
        console.print(
            Text(
                "resolved: the distributed type Accelerate resolved in each process (distributed_type in --output"
                " json); peak and states: MiB each process held"
                + (" (resident memory grown since before the model was built)" if on_cpu else "")
                + f"; {step_words}"
                + (" (with one step, that step itself, warm-up included)" if _one_step(result) else ""),
                style="dim",
            )
        )
    # Wrapped as the summary's paragraphs are: a figure is never parted from its unit.
    style = VERDICT_STYLES[result.verdict]
    console.print(
        wrapped_markup(
            f"[{style}]{escape(result.verdict)}[/]: {escape(result.reason)}"
            if style
            else f"{escape(result.verdict)}: {escape(result.reason)}"
        )
    )
    if result.memory_limit and result.verdict != "failed":
        peaks = [p for p in (rank.get("peak_bytes") for rank in result.ranks) if isinstance(p, int)]
        reached = f" (the highest peak {_size(max(peaks))})" if peaks else ""
        console.print(
            wrapped_markup(f"Memory limit: {_size(result.memory_limit)} per process, not reached{escape(reached)}.")
        )
    if (scope := cpu_scope(result)) is not None:
        console.print(wrapped_markup(f"[dim]{escape(scope)}[/]"))
    if result.next_step:
        # The same line after a pass and after a failure: what to do now.
        console.print(wrapped_markup(f"[bold]Next:[/] {escape(result.next_step)}"))


def _one_step(result: SmokeResult) -> bool:
    """Whether the ranks ran a single step, so that no step after the warm-up was timed."""
    return any(rank.get("steps") == 1 for rank in result.ranks)


def cpu_scope(result: SmokeResult) -> str | None:
    """What a CPU run of a GPU plan proves, and the GPU fit it leaves to the estimate (None otherwise)."""
    plan = result.plan
    if result.device != "cpu" or plan.hardware == "cpu" or result.verdict in ("failed",):
        return None
    # The planned model's estimate, never --tiny's scaled-down one: the question is the real plan's fit.
    est = plan.planned_estimate or plan.estimate
    verdict = "fits" if est.fits else "does NOT fit"
    words = words_for(est.device)  # a Mac plan speaks of the Mac, not of GPUs it does not have
    where = "the Mac" if plan.hardware == "mps" else "the planned GPUs"
    return (
        "On the CPU this checks what the processes resolve and the training state each one holds; whether the plan"
        f" fits {where} is the wizard's estimate: about {est.total / GIB:.1f} GiB {words.per} of"
        f" {est.budget / GIB:.1f} GiB usable, so it {verdict} (activations and {words.runtime} included)."
    )
