"""What a backend does, as data: the traits the render, report, what-if and console layers read.

Each backend of the tree carries a ``traits:`` mapping (decision_tree.yaml). Code branches on a
trait (its Accelerate type, what it shards, how it offloads, whether it is configured by a
DeepSpeed JSON, which parallel axes it hosts), never on a backend's id, so a new backend with the
traits of an existing one is written the same way without touching Python. A trait left out takes
its first value below (or false): a backend that says nothing is plain data parallel.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from wizard.engine.names import ACCELERATE_TYPES

# What every device keeps of the training state (weights, gradients, optimizer state).
SHARDS = (
    "none",  # a full copy on every device (one device, DDP and the other data-parallel types)
    "zero",  # follows the ZeRO stage: optimizer state (1), gradients too (2), weights too (3)
    "all",  # weights, gradients and optimizer state, a layer gathered while it computes (FSDP)
    "model",  # the model itself split by tensor and pipeline parallel (Megatron-LM)
)
# How the backend moves training state to host memory.
OFFLOAD = (
    "none",  # it cannot
    "zero",  # ZeRO-Offload: the DeepSpeed JSON's offload_optimizer / offload_param (CPU or NVMe)
    "fsdp",  # FSDP's CPU offload: weights, gradients and optimizer state together
)
# Which parallel axes beside data parallel the backend hosts, and through what.
PARALLELISM_HOST = (
    "none",  # data parallel only
    "device_mesh",  # PyTorch's DeviceMesh: HSDP replication, tensor, context and expert parallel
    "ulysses",  # DeepSpeed's sequence parallelism (Ulysses)
    "megatron",  # Megatron-LM's own tensor and pipeline parallel
)
# Who switches gradient checkpointing on.
CHECKPOINTING = (
    "script",  # the training script (model.gradient_checkpointing_enable())
    "fsdp",  # the config, through FSDP's activation checkpointing
    "megatron",  # the config, through Megatron-LM's recompute flag
)
# The short names a backend may give the console for what it decided.
LABELS = ("layout",)  # the chosen row of the memory table, when the layout's own name misleads

# Trait -> the values it may take; `accelerate_type` is one of ACCELERATE_TYPES, `deepspeed_json`
# a boolean and `labels` a mapping of LABELS to text.
CHOICES: Mapping[str, tuple[str, ...]] = {
    "shards": SHARDS,
    "offload": OFFLOAD,
    "parallelism_host": PARALLELISM_HOST,
    "checkpointing": CHECKPOINTING,
}
TRAIT_KEYS = ("accelerate_type", "shards", "offload", "deepspeed_json", "parallelism_host", "checkpointing", "labels")


@dataclass(frozen=True)
class BackendTraits:
    """A backend's traits, read by Python and (as ``traits``) by the templates.

    `accelerate_type` is Accelerate's name for the backend (its DistributedType, the
    accelerate_config.yaml `distributed_type`): Accelerate's config file is laid out by it (a
    deepspeed_config block for DEEPSPEED, fsdp_config for FSDP, ...). None where the tree gives none.
    """

    accelerate_type: str | None = None
    shards: str = "none"
    offload: str = "none"
    deepspeed_json: bool = False
    parallelism_host: str = "none"
    checkpointing: str = "script"
    labels: Mapping[str, str] = field(default_factory=dict)

    @property
    def whole_copy(self) -> bool:
        """Whether every device keeps a full copy of the weights (nothing sharded)."""
        return self.shards == "none"

    @property
    def zero_stages(self) -> bool:
        """Whether what is sharded follows a ZeRO stage (the stage is then part of the decision)."""
        return self.shards == "zero"

    @property
    def shards_everything(self) -> bool:
        """Whether weights, gradients and optimizer state are all sharded (FSDP's way)."""
        return self.shards == "all"

    @property
    def fsdp(self) -> bool:
        """Whether the backend is PyTorch's FSDP, configured by an fsdp_config block (Accelerate, Axolotl)."""
        return self.accelerate_type == "FSDP"

    @property
    def device_mesh(self) -> bool:
        """Whether the backend hosts a PyTorch device mesh (HSDP, tensor, context, expert parallel)."""
        return self.parallelism_host == "device_mesh"

    @property
    def sequence_parallel(self) -> bool:
        """Whether the backend hosts DeepSpeed's sequence parallelism (Ulysses)."""
        return self.parallelism_host == "ulysses"

    def label(self, name: str) -> str | None:
        """The backend's label `name` (one of LABELS), if it gives one."""
        return self.labels.get(name)


NO_BACKEND = BackendTraits()
"""The traits of no backend at all (a refusal): nothing sharded, offloaded or configured."""


def trait_problem(key: str, value: Any) -> str | None:
    """Why `value` is no valid value of the trait `key` (with what is allowed), or None when it is.

    `key` must be one of TRAIT_KEYS.
    """
    if key == "accelerate_type":
        if value in ACCELERATE_TYPES:
            return None
        return f"{value!r} is not an Accelerate distributed_type; allowed: {', '.join(sorted(ACCELERATE_TYPES))}"
    if key == "deepspeed_json":
        return None if isinstance(value, bool) else f"{value!r} is not allowed; allowed: true, false"
    if key == "labels":
        if not isinstance(value, Mapping):
            return f"{value!r} is not allowed; allowed: a mapping of {', '.join(LABELS)} to text"
        for name, text in value.items():
            if name not in LABELS:
                return f"label {name!r} is not allowed; allowed: {', '.join(LABELS)}"
            if not isinstance(text, str) or not text.strip() or not text.isprintable():
                return f"label {name}: {text!r} is not allowed; allowed: one line of printable text"
        return None
    choices = CHOICES[key]
    return None if value in choices else f"{value!r} is not allowed; allowed: {', '.join(choices)}"
