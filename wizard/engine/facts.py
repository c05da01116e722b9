"""Facts derived from the answers: sizes, world size, precision, and what fits where.

Facts are computed here (they are arithmetic), but every decision that uses them is a
condition in decision_tree.yaml. `FACTS` declares each fact with the answers it is computed
from, so the tree loader can check that a question's condition only uses facts whose inputs
were asked before it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from wizard.engine.catalog import lookup_gpu
from wizard.engine.deepspeed_json import DeepSpeedSummary
from wizard.engine.memory import STRATEGIES, Estimate, Workload, estimate_all, to_gib
from wizard.engine.model_size import ModelShape, parse_model_size, shape_for_size, shape_from_config

GPU_HARDWARE = ("nvidia", "amd")

_MEMORY_NEEDS = (
    "hardware",
    "gpus_per_node",
    "num_nodes",
    "gpu_memory_gb",
    "cpu_memory_gb",
    "model",
    "method",
    "sequence_length",
    "micro_batch_size",
    "gradient_checkpointing",
)


@dataclass(frozen=True)
class Inputs:
    """Files the answers point to, already read and parsed by the layer above."""

    model_config: Mapping[str, Any] | None = None
    deepspeed: DeepSpeedSummary | None = None
    deepspeed_data: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class FactSpec:
    """A fact's inputs (answers) and its kind, for the tree linter."""

    needs: tuple[str, ...]
    kind: str  # bool | int | number | text


def _fit_facts() -> dict[str, FactSpec]:
    specs = {}
    for strategy in STRATEGIES:
        specs[f"fits_{strategy}"] = FactSpec(_MEMORY_NEEDS, "bool")
        specs[f"host_fits_{strategy}"] = FactSpec(_MEMORY_NEEDS, "bool")
    return specs


FACTS: dict[str, FactSpec] = {
    "params": FactSpec(("model",), "int"),
    "world_size": FactSpec(("hardware", "gpus_per_node", "num_nodes", "cpu_processes"), "int"),
    "gpu_model_memory_gb": FactSpec(("gpu_model",), "number"),
    "gpu_bf16": FactSpec(("hardware", "gpu_model"), "bool"),
    "mixed_precision": FactSpec(("hardware", "gpu_model", "deepspeed_config"), "text"),
    "gradient_checkpointing_default": FactSpec(("model", "sequence_length"), "bool"),
    "lora_fits_single_gpu": FactSpec(_MEMORY_NEEDS, "bool"),
    "host_memory_known": FactSpec(("cpu_memory_gb",), "bool"),
    "ds_stage": FactSpec(("deepspeed_config",), "int"),
    "ds_offload_optimizer": FactSpec(("deepspeed_config",), "text"),
    "ds_offload_param": FactSpec(("deepspeed_config",), "text"),
    "ds_strategy": FactSpec(("deepspeed_config",), "text"),
    **_fit_facts(),
}


@dataclass
class FactSet:
    """The facts known for a set of answers, plus the objects behind the numbers."""

    values: dict[str, Any] = field(default_factory=dict)
    shape: ModelShape | None = None
    workload: Workload | None = None
    estimates: dict[str, Estimate] = field(default_factory=dict)

    def get(self, name: str, default: Any = None) -> Any:
        """A fact's value, or `default` when it is not known."""
        return self.values.get(name, default)


def model_shape(answers: Mapping[str, Any], inputs: Inputs) -> ModelShape | None:
    """The model's shape, from its config.json when given, else from its size."""
    if inputs.model_config is not None:
        return shape_from_config(inputs.model_config)
    if "model" not in answers:
        return None
    return shape_for_size(parse_model_size(answers["model"]))


def derive_facts(answers: Mapping[str, Any], inputs: Inputs) -> FactSet:
    """Compute every fact whose inputs are present in `answers`."""
    facts = FactSet()
    values = facts.values
    hardware = answers.get("hardware")
    gpu = lookup_gpu(answers.get("gpu_model"))
    if gpu is not None:
        values["gpu_model_memory_gb"] = gpu.memory_gb
    if hardware is not None:
        values["gpu_bf16"] = hardware in GPU_HARDWARE and (gpu.bf16 if gpu else True)
        values["mixed_precision"] = _mixed_precision(hardware, values["gpu_bf16"], inputs.deepspeed)
        world = _world_size(answers)
        if world is not None:
            values["world_size"] = world
    shape = model_shape(answers, inputs)
    if shape is not None:
        facts.shape = shape
        values["params"] = shape.params
        if "sequence_length" in answers:
            values["gradient_checkpointing_default"] = (
                shape.params >= 1_000_000_000 or answers["sequence_length"] >= 8192
            )
    if "cpu_memory_gb" in answers:
        values["host_memory_known"] = True
    if inputs.deepspeed is not None:
        values["ds_stage"] = inputs.deepspeed.stage
        values["ds_offload_optimizer"] = inputs.deepspeed.offload_optimizer
        values["ds_offload_param"] = inputs.deepspeed.offload_param
        values["ds_strategy"] = _ds_strategy(inputs.deepspeed)
    _memory_facts(facts, answers)
    return facts


def _memory_facts(facts: FactSet, answers: Mapping[str, Any]) -> None:
    needed = ("gpu_memory_gb", "method", "sequence_length", "micro_batch_size", "gradient_checkpointing")
    if facts.shape is None or "world_size" not in facts.values or any(k not in answers for k in needed):
        return
    if answers.get("hardware") not in (*GPU_HARDWARE, "mps"):
        return
    workload = Workload(
        shape=facts.shape,
        method=answers["method"],
        world_size=facts.values["world_size"],
        num_nodes=answers.get("num_nodes", 1),
        sequence_length=answers["sequence_length"],
        micro_batch_size=answers["micro_batch_size"],
        gradient_checkpointing=answers["gradient_checkpointing"],
        half_precision=facts.values.get("mixed_precision") != "no",
    )
    host = answers.get("cpu_memory_gb")
    facts.workload = workload
    facts.estimates = estimate_all(workload, answers["gpu_memory_gb"], host)
    for strategy, est in facts.estimates.items():
        facts.values[f"fits_{strategy}"] = est.fits
        # Unknown host RAM does not block offload; the summary warns instead.
        facts.values[f"host_fits_{strategy}"] = est.host_fits is not False
    if workload.method == "full":
        lora = Workload(**{**workload.__dict__, "method": "lora", "world_size": 1})
        single = estimate_all(lora, answers["gpu_memory_gb"], host)["ddp"]
        facts.values["lora_fits_single_gpu"] = single.fits


def _ds_strategy(ds: DeepSpeedSummary) -> str:
    """The memory-table row that a DeepSpeed JSON's stage and offload correspond to."""
    if ds.stage == 3:
        if ds.offload_param != "none":
            return "zero3_offload_all"
        return "zero3_offload_optimizer" if ds.offload_optimizer != "none" else "zero3"
    if ds.stage == 2:
        return "zero2_offload_optimizer" if ds.offload_optimizer != "none" else "zero2"
    return "zero1" if ds.stage == 1 else "ddp"


def _world_size(answers: Mapping[str, Any]) -> int | None:
    hardware = answers["hardware"]
    if hardware == "mps":
        return 1
    if hardware == "cpu":
        return int(answers.get("cpu_processes", 1))
    if "gpus_per_node" not in answers:
        return None
    return int(answers["gpus_per_node"]) * int(answers.get("num_nodes", 1))


def _mixed_precision(hardware: str, bf16: bool, deepspeed: DeepSpeedSummary | None) -> str:
    if hardware not in GPU_HARDWARE:
        return "no"  # fp16 needs CUDA and CPU/MPS bf16 support varies (triage H4, H5)
    if deepspeed is not None and deepspeed.precision is not None:
        return deepspeed.precision
    return "bf16" if bf16 else "fp16"


def estimate_context(facts: FactSet) -> dict[str, Any]:
    """Numbers for explanation texts: GiB per strategy and the usable budget."""
    est = {
        s: {
            "total_gib": to_gib(e.total),
            "states_gib": to_gib(e.model_states),
            "activations_gib": to_gib(e.activations),
            "host_gib": to_gib(e.host_per_node),
        }
        for s, e in facts.estimates.items()
    }
    budget = next(iter(facts.estimates.values())).budget if facts.estimates else 0
    return {"est": est, "budget_gib": to_gib(budget)}
