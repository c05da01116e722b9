"""What a smoke run plans, gets back and concludes: the plan, each rank's record, the result."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wizard.engine.memory import LORA_RANK, Estimate
from wizard.errors import ExitCode, WizardError

MARKER = "@@backend-wizard-smoke@@"
MAX_CONFIG_BYTES = 1_000_000
# What a process holds whatever the model: the communication library's buffers and the allocator's
# pages (the smoke's tolerance adds it to every comparison; a CPU lever's need adds it to the limit).
PROCESS_FIXED_BYTES = 64 * 2**20
TAIL_LINES = 1


# Where the wizard's own training processes would find their packages (pip names).
NEEDS = {"torch": "torch", "accelerate": "accelerate", "transformers": "transformers"}


class SmokeError(WizardError):
    """The set cannot be smoke-tested here (not a set, several machines, missing tools)."""


@dataclass(frozen=True)
class SmokePlan:
    """What the probe runs and what it is compared with."""

    folder: Path
    answers: dict[str, Any]
    backend: str
    title: str
    strategy: str
    world_size: int
    zero_stage: int | None
    mixed_precision: str
    offload_optimizer: str
    offload_param: str
    target: str
    method: str
    estimate: Estimate
    model_name: str
    model_config: dict[str, Any]
    tiny: bool
    sequence_length: int
    micro_batch_size: int
    gradient_checkpointing: bool
    needs: tuple[str, ...]
    hardware: str
    deepspeed: bool = False  # the backend's traits: its settings live in a DeepSpeed JSON
    # Files of the set that differ from what its answers write now (edited by hand, or an older
    # wizard): the run uses them as they are, so what it proves is theirs.
    edited: tuple[str, ...] = ()
    # The tree's memory levers down from this plan (wizard.smoke.plan.Lever), in order.
    levers: tuple[Any, ...] = ()
    # The set's copy of a DeepSpeed JSON the user brought (as shown), where a resolved difference is fixed.
    brought_json: str | None = None
    # Accelerate's name for the planned backend (its DistributedType: "MULTI_CPU", "DEEPSPEED", ...).
    distributed_type: str | None = None
    # The decision's own estimate of the planned model on the planned GPUs; with --tiny, `estimate`
    # is the scaled-down model's, which says nothing about whether the plan fits.
    planned_estimate: Estimate | None = None
    # With --tiny, the scaled-down model in words (layers, width, parameters); None otherwise.
    tiny_size: str | None = None
    # The dtype the probe builds a LoRA or QLoRA run's frozen base in: the planned mixed precision's
    # 16-bit type, or bf16 for a Mac base the script loads in bf16 with no autocast (base_dtype: bf16).
    base_dtype: str = "fp32"
    # The LoRA adapters' rank the estimate counts (answers' lora_rank).
    lora_rank: int = LORA_RANK

    def expected_distributed_type(self, device: str) -> str | None:
        """The DistributedType the processes should resolve on `device`.

        A MULTI_GPU plan run on the CPU (ACCELERATE_USE_CPU=true) is Accelerate's MULTI_CPU.
        """
        if device == "cpu" and self.distributed_type == "MULTI_GPU":
            return "MULTI_CPU"
        return self.distributed_type

    # Buffers the backend documents and the estimate leaves to its margin: (what, bytes per process).
    buffers: tuple[tuple[str, int], ...] = ()


@dataclass
class RankResult:
    """One rank's JSON line (the probe's record) as it came back."""

    record: dict[str, Any]

    def get(self, key: str, default: Any = None) -> Any:
        """One field of the record."""
        return self.record.get(key, default)


@dataclass
class SmokeResult:
    """The run, the ranks' lines, the comparison and the verdict."""

    plan: SmokePlan
    device: str
    ranks: list[RankResult] = field(default_factory=list)
    verdict: str = "failed"  # matches | inconclusive | differs | failed | not measured
    reason: str = ""
    compared: str = ""  # what was compared, in words
    measured_bytes: list[int] = field(default_factory=list)
    estimate_bytes: int = 0
    seconds: float = 0.0
    command: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # what the processes resolved that the plan did not
    memory_limit: int = 0  # --memory-limit-gib in bytes per process (0: none)
    # What to do next, as the report's "Next:" line says it ("" where the reason is all there is).
    next_step: str = ""

    @property
    def exit_code(self) -> int:
        """0 for matches, inconclusive and not measured (the report says which), 8 differs, 7 a failed run."""
        if self.verdict == "failed":
            return int(ExitCode.SMOKE_FAILED)
        return int(ExitCode.SMOKE_DIFFERS) if self.verdict == "differs" else 0


def copy_command(folder: Path, change: str, suffix: str) -> str:
    """The command that writes a copy of the set in `folder` with one answer changed, then smokes it.

    smoke takes no --set: a hint names the wizard run that writes the copy, with its real paths.
    """
    other = folder.with_name(f"{folder.name}-{suffix}")
    answers = shlex.quote(str(folder / "answers.yaml"))
    return (
        f"write a copy with backend-wizard --answers {answers} --set {change} --output-dir"
        f" {shlex.quote(str(other))}, then run backend-wizard smoke {shlex.quote(str(other))}"
    )
