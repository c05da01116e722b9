"""Whether a brought DeepSpeed JSON fits, and the zero_optimization block that would.

A DeepSpeed JSON the user brings runs as written (the tree's rule for it does not look at
memory), so the estimate of its stage and offload is checked here and, when it does not fit,
the warning names the cheapest ZeRO setting that does, as the exact JSON to put in the file.
The keys are DeepSpeed's own ("ZeRO optimizations" in https://www.deepspeed.ai/docs/config-json/).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from wizard.engine.memory import STRATEGY_TITLES, Estimate, to_gib

_CPU = {"device": "cpu", "pin_memory": True}

# The ZeRO settings to try, cheapest in speed first: more sharding before any offload, then the
# optimizer on the CPU, then the weights too.
LEVERS: dict[str, dict[str, Any]] = {
    "zero1": {"stage": 1},
    "zero2": {"stage": 2},
    "zero3": {"stage": 3},
    "zero2_offload_optimizer": {"stage": 2, "offload_optimizer": _CPU},
    "zero3_offload_optimizer": {"stage": 3, "offload_optimizer": _CPU},
    "zero3_offload_all": {"stage": 3, "offload_optimizer": _CPU, "offload_param": _CPU},
}


def json_fit_warning(strategy: str, estimates: Mapping[str, Estimate], gpu_memory_gb: Any) -> str | None:
    """A warning when the brought JSON's `strategy` does not fit; None when it fits or is unknown."""
    current = estimates.get(strategy)
    if current is None or current.fits:
        return None
    head = (
        f"by the wizard's estimate your DeepSpeed JSON ({STRATEGY_TITLES[strategy]}) does not fit: it needs about "
        f"{to_gib(current.total)} GiB per GPU, more than the {to_gib(current.budget)} GiB usable of "
        f"{gpu_memory_gb} GiB"
    )
    for lever, block in LEVERS.items():
        est = estimates.get(lever)
        if lever == strategy or est is None or not est.fits or est.host_fits is False:
            continue
        host = f", about {to_gib(est.host_per_node)} GiB of host RAM per node" if est.host_per_node else ""
        return (
            f'{head}. To make it fit, set "zero_optimization": {json.dumps(block)} in the JSON '
            f"({STRATEGY_TITLES[lever]}: about {to_gib(est.total)} GiB per GPU{host}), then run the wizard again."
        )
    return (
        f"{head}, and no ZeRO stage or CPU offload fits either: add GPUs, train fewer parameters (LoRA or QLoRA), "
        "or shorten sequence_length."
    )
