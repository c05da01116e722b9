"""DeepSpeed's own model-state estimators, restated (https://deepspeed.readthedocs.io/en/latest/memory.html).

These reproduce ``estimate_zero2_model_states_mem_needs`` and
``estimate_zero3_model_states_mem_needs`` (the "cold" variants, DeepSpeed >= 0.14.3): model
states only, bytes per GPU and host bytes per node, with DeepSpeed's additional_buffer_factor.
DeepSpeed prints them in GiB (2^30) with two decimals. They are a second opinion beside the
wizard's own estimate, which also counts activations.
"""

from __future__ import annotations

from dataclasses import dataclass

BUFFER_FACTOR = 1.5


@dataclass(frozen=True)
class DeepSpeedFigure:
    """One row of DeepSpeed's estimator output."""

    gpu_bytes: int
    cpu_bytes_per_node: int


def zero2_model_states(params: int, gpus_per_node: int, num_nodes: int, offload_optimizer: bool) -> DeepSpeedFigure:
    """ZeRO-2 (also used for ZeRO-1) per DeepSpeed's estimator."""
    total_gpus = gpus_per_node * num_nodes
    if offload_optimizer:
        gpu = 2 * params
        cpu = params * max(4 * total_gpus, 16) * BUFFER_FACTOR
    else:
        gpu = 2 * params + int(18 * params / total_gpus)
        cpu = params * 4 * gpus_per_node * BUFFER_FACTOR
    return DeepSpeedFigure(int(gpu), int(cpu))


def zero3_model_states(
    params: int,
    largest_layer_params: int,
    gpus_per_node: int,
    num_nodes: int,
    offload_optimizer: bool,
    offload_param: bool,
    zero_init: bool = True,
) -> DeepSpeedFigure:
    """ZeRO-3 per DeepSpeed's estimator (parameter offload implies optimizer offload there)."""
    total_gpus = gpus_per_node * num_nodes
    per_node = 1 / num_nodes
    largest = 4 * largest_layer_params
    if offload_param:
        gpu = largest
        cpu = params * (18 * per_node if zero_init else max(4 * gpus_per_node, 18 * per_node)) * BUFFER_FACTOR
    elif offload_optimizer:
        gpu = largest + int(2 * params / total_gpus)
        cpu = params * (16 * per_node if zero_init else max(4 * gpus_per_node, 16 * per_node)) * BUFFER_FACTOR
    else:
        gpu = largest + int(18 * params / total_gpus)
        cpu = (largest_layer_params if zero_init else params) * 4 * gpus_per_node * BUFFER_FACTOR
    return DeepSpeedFigure(int(gpu), int(cpu))
