"""Names the real tools accept, shared by the tree linter and the config checker."""

from __future__ import annotations

# Accelerate 1.15's DistributedType values (config files are case-sensitive).
ACCELERATE_TYPES = frozenset(
    {
        "NO",
        "MULTI_CPU",
        "MULTI_GPU",
        "MULTI_NPU",
        "MULTI_MLU",
        "MULTI_SDAA",
        "MULTI_MUSA",
        "MULTI_XPU",
        "MULTI_HPU",
        "MULTI_NEURON",
        "DEEPSPEED",
        "FSDP",
        "XLA",
        "MEGATRON_LM",
    }
)
