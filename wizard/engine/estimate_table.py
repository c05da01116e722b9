"""One memory table, three accountings.

* ``wizard`` (the default, used for decisions): model states, activations and overhead for the
  method (full, LoRA, QLoRA), every strategy (`wizard.engine.memory`).
* ``deepspeed``: DeepSpeed's own model-state estimators, cold variant (its memory docs); only
  the ZeRO strategies, and ZeRO-1 uses the ZeRO-2 estimator as DeepSpeed does. Full fine-tune.
* ``zero-paper``: the ZeRO paper's accounting, K = 12 and 16 bytes per parameter (Table 1); the
  baseline (DDP) and stages 1-3 without offload. Full fine-tune.
"""

from __future__ import annotations

from dataclasses import dataclass

from wizard.engine.deepspeed_estimator import zero2_model_states, zero3_model_states
from wizard.engine.memory import FIT_MARGIN, GIB, Estimate

FORMULAS = ("wizard", "deepspeed", "zero-paper")
ZERO_PAPER_K = 12


@dataclass(frozen=True)
class Row:
    """One strategy's figures under one formula (bytes; None where the formula says nothing)."""

    strategy: str
    gpu_bytes: int
    cpu_bytes_per_node: int
    gpu_memory: int
    model_states: int | None = None
    activations: int | None = None
    overhead: int | None = None
    title: str = ""  # the row's label with the run's sizes ("FSDP2 + CP 2", "1 GPU"); "" = the fixed one
    share: float = FIT_MARGIN  # the usable part of gpu_memory (a Mac's: its GPU working set)
    transient: int = 0  # the fp32 loss peak beyond gpu_bytes (the wizard's rows only)
    close_call: bool = False  # Estimate.close_call (the wizard's rows only)

    @property
    def fits(self) -> bool:
        """Within the same usable share the wizard uses for decisions, its moment's peak within the device."""
        return self.gpu_bytes <= self.gpu_memory * self.share and self.gpu_bytes + self.transient <= self.gpu_memory


@dataclass(frozen=True)
class TableInput:
    """What every formula needs."""

    params: int
    largest_layer_params: int
    gpus_per_node: int
    num_nodes: int
    gpu_memory_gib: float


def wizard_rows(estimates: dict[str, Estimate]) -> list[Row]:
    """The wizard's own estimates as rows."""
    return [
        Row(
            e.strategy,
            e.total,
            e.host_per_node,
            e.gpu_memory,
            e.model_states,
            e.activations,
            e.overhead,
            e.title,
            e.share,
            e.transient,
            e.close_call,
        )
        for e in estimates.values()
    ]


def deepspeed_rows(spec: TableInput) -> list[Row]:
    """DeepSpeed's estimator figures (model states only), per strategy."""
    memory = int(spec.gpu_memory_gib * GIB)
    g, n = spec.gpus_per_node, spec.num_nodes
    figures = {
        "zero1": zero2_model_states(spec.params, g, n, offload_optimizer=False),
        "zero2": zero2_model_states(spec.params, g, n, offload_optimizer=False),
        "zero2_offload_optimizer": zero2_model_states(spec.params, g, n, offload_optimizer=True),
        "zero3": zero3_model_states(spec.params, spec.largest_layer_params, g, n, False, False),
        "zero3_offload_optimizer": zero3_model_states(spec.params, spec.largest_layer_params, g, n, True, False),
        "zero3_offload_all": zero3_model_states(spec.params, spec.largest_layer_params, g, n, True, True),
    }
    return [Row(s, f.gpu_bytes, f.cpu_bytes_per_node, memory, model_states=f.gpu_bytes) for s, f in figures.items()]


def zero_paper_bytes(params: float, strategy: str, n: int, k: int = ZERO_PAPER_K) -> float:
    """Per-device model states of the ZeRO paper (arXiv:1910.02054, section 3.1): fp16 weights and gradients + K."""
    return {
        "ddp": (2 + 2 + k) * params,
        "zero1": 4 * params + k * params / n,
        "zero2": 2 * params + (2 + k) * params / n,
        "zero3": (2 + 2 + k) * params / n,
    }[strategy]


def zero_paper_rows(spec: TableInput) -> list[Row]:
    """The ZeRO paper's Table 1 accounting for this model and data-parallel degree."""
    memory = int(spec.gpu_memory_gib * GIB)
    n = spec.gpus_per_node * spec.num_nodes
    rows = []
    for strategy in ("ddp", "zero1", "zero2", "zero3"):
        value = round(zero_paper_bytes(spec.params, strategy, n))
        rows.append(Row(strategy, value, 0, memory, model_states=value))
    return rows
