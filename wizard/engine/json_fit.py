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

from wizard.engine.memory import STRATEGY_TITLES, Estimate, sum_gib, to_gib

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


def json_fit_warning(
    strategy: str, estimates: Mapping[str, Estimate], gpu_memory_gb: Any, cpu_memory_gb: Any = None
) -> str | None:
    """A warning when the brought JSON's `strategy` does not fit the GPU or the host RAM; None when it runs."""
    current = estimates.get(strategy)
    if current is None or (current.fits and current.host_fits is not False):
        return None
    if current.fits:
        head = (
            f"by the wizard's estimate your DeepSpeed JSON ({STRATEGY_TITLES[strategy]}) fits the GPU but not the "
            f"host RAM: what it offloads needs about {to_gib(current.host_per_node)} GiB per machine, more than 80% "
            f"of the {cpu_memory_gb} GiB there"
        )
        nvme = (
            ', or offload to a local NVMe drive instead ("device": "nvme" with an "nvme_path" in offload_optimizer '
            "and offload_param, ZeRO-3)"
        )
    elif current.peak_short:
        head = (
            f"by the wizard's estimate your DeepSpeed JSON ({STRATEGY_TITLES[strategy]}) does not fit: it needs "
            f"about {to_gib(current.total)} GiB per GPU through a step, within the {to_gib(current.budget)} GiB "
            f"usable, but at the start of the backward pass the loss's fp32 temporaries take it to about"
            f" {sum_gib(current.total, current.transient)} GiB for a moment, more than the GPU's {gpu_memory_gb} GiB"
        )
        nvme = ""
    else:
        head = (
            f"by the wizard's estimate your DeepSpeed JSON ({STRATEGY_TITLES[strategy]}) does not fit: it needs "
            f"about {to_gib(current.total)} GiB per GPU, more than the {to_gib(current.budget)} GiB usable of "
            f"{gpu_memory_gb} GiB"
        )
        nvme = ""
    for lever, block in LEVERS.items():
        est = estimates.get(lever)
        if lever == strategy or est is None or not est.fits or est.host_fits is False:
            continue
        host = f", about {to_gib(est.host_per_node)} GiB of host RAM per machine" if est.host_per_node else ""
        if est.host_per_node and est.host_fits is None:
            host += ", which cpu_memory_gb was not given to check"
        return (
            f'{head}. To make it fit, set "zero_optimization": {json.dumps(block)} in the JSON '
            f"({STRATEGY_TITLES[lever]}: about {to_gib(est.total)} GiB per GPU{host}){nvme}, then run the wizard "
            "again."
        )
    if current.fits:
        return f"{head}. Add host RAM{nvme}, or train fewer parameters (LoRA or QLoRA)."
    full = estimates.get("zero3_offload_all")
    if full is not None and full.fits:  # the GPU would hold it: the host RAM is the limit
        return (
            f"{head}; with weights and optimizer offloaded (ZeRO-3) each GPU would need only about "
            f"{to_gib(full.total)} GiB, but the host RAM would have to hold about {to_gib(full.host_per_node)} GiB "
            f"per machine. Add host RAM, offload to a local NVMe drive instead "
            '("device": "nvme" with an "nvme_path" in offload_optimizer and offload_param, ZeRO-3), add GPUs, '
            "or train fewer parameters (LoRA or QLoRA)."
        )
    # Activations are the only part a shorter sequence shrinks: name it only when they matter.
    shorter = ", or shorten sequence_length" if full is not None and full.activations > full.budget // 2 else ""
    if current.peak_short:  # only the loss peak is short: the levers that shrink it first
        return (
            f"{head}, and no ZeRO stage or CPU offload fits either: compute the loss in chunks in your training "
            "script (Liger Kernel's LigerFusedLinearCrossEntropyLoss builds no fp32 logits), shorten "
            "sequence_length, or split each sequence over GPUs (DeepSpeed sequence parallelism)."
        )
    return (
        f"{head}, and no ZeRO stage or CPU offload fits either: add GPUs or train fewer parameters "
        f"(LoRA or QLoRA){shorter}."
    )
