"""DeepSpeed NVMe offload settings that depend on the model: swap buffers and asynchronous I/O.

What DeepSpeed 0.19.8 requires (read from its source; the options are described on the
"DeepSpeed Configuration JSON" page, https://www.deepspeed.ai/docs/config-json/):

* ``deepspeed/runtime/zero/partition_parameters.py`` gives every parameter partition of at least
  ``aio.block_size`` bytes (1 MiB) one buffer of the NVMe pool, through
  ``AsyncPartitionedParameterSwapper.get_buffer`` in
  ``deepspeed/runtime/swap_tensor/partitioned_param_swapper.py``, which asserts
  ``numel <= self.elements_per_buffer``, i.e. ``offload_param.buffer_size``. Its default
  (``deepspeed/runtime/zero/offload_config.py``) is 1e8 elements, smaller than the embedding of a
  13B model, so the buffer is sized from the model's largest parameter tensor. The partition is
  1/world of the tensor, but the whole tensor is used so that a run with fewer processes (one
  GPU to debug) still starts.
* ``offload_param.buffer_count`` (default 5) bounds how many partitions are swapped in at once:
  a module's own tensors (two for fused MoE experts) plus what the coordinator prefetches
  (``partitioned_param_coordinator.py`` stops at ``available_swap_in_buffers()``).
* ``offload_optimizer.buffer_count`` must cover the tensors of one optimizer sub-group that are
  swapped in together: for Adam the fp32 weights, momentum, variance and the gradient, 4
  (``optimizer_utils.py``/``partitioned_optimizer_swapper.py``; the configuration page says the
  same). With ``pipeline_read``/``pipeline_write`` the ``PipelinedOptimizerSwapper`` holds a
  synchronous swap-in, the next sub-group's asynchronous swap-in and the previous one's
  asynchronous swap-out at the same time, 3 x 4 buffers, else it asserts "ran out of swap
  buffers, try increasing 'buffer_count'". Each buffer is the largest sub-group (up to
  ``sub_group_size``, 1e9 elements) in fp32, pinned, so pipelining is only switched on when the
  answered host RAM holds it comfortably.
* ``offload_optimizer.fast_init`` stays false: its path (``_initialize_from_swapped_fp16_params``)
  also asserts that every parameter swap buffer holds a whole optimizer sub-group.
* The ``aio`` block is read by ``deepspeed/runtime/swap_tensor/aio_config.py`` with the names of
  ``deepspeed/runtime/swap_tensor/constants.py``: ``intra_op_parallelism`` (older DeepSpeed and
  ``ds_nvme_tune`` say ``thread_count``/``num_threads``, which 0.19.8 silently ignores).
* NVMe swapping loads DeepSpeed's ``async_io`` op (``AsyncIOBuilder``), which needs the libaio
  development files; ``ds_report`` shows whether it is compatible.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from wizard.engine.memory import FIT_MARGIN, to_gib
from wizard.engine.model_size import ModelShape

# DeepSpeed 0.19.8 defaults (offload_config.py, zero/config.py, swap_tensor/constants.py).
PARAM_BUFFER_COUNT = 5
PARAM_BUFFER_SIZE_DEFAULT = 100_000_000
MAX_IN_CPU = 1_000_000_000
SUB_GROUP_SIZE = 1_000_000_000
# Adam swaps the fp32 weights, momentum, variance and the gradient of a sub-group together.
ADAM_SWAP_TENSORS = 4
# Pipelined optimizer swapping: one synchronous swap-in, one asynchronous swap-in and one
# asynchronous swap-out in flight.
PIPELINE_OPS = 3
# Pipelining only when its pinned buffers take at most this share of the host RAM answered.
PIPELINE_HOST_SHARE = 0.25
AIO = {
    "block_size": 1_048_576,
    "queue_depth": 8,
    "intra_op_parallelism": 1,
    "single_submit": False,
    "overlap_events": True,
}
BUFFER_ROUNDING = 1_000_000
ASYNC_IO_CHECK = "install libaio-dev (apt) and check that ds_report lists async_io as compatible"
LIBAIO_INSTALL = (
    "sudo apt install libaio-dev (dnf: libaio-devel), then check that ds_report lists async_io "
    "as compatible; reinstall DeepSpeed if it was built without it"
)


@dataclass(frozen=True)
class NvmeSwap:
    """The NVMe swap settings for one model and process layout, and what they pin in host RAM."""

    largest_tensor: int
    param_buffer_size: int
    param_buffer_count: int
    optimizer_buffer_count: int
    pipeline: bool
    pinned_bytes_per_process: int

    def template_values(self) -> dict[str, Any]:
        """The values ds_config.json.j2 prints."""
        return {
            "param_buffer_size": self.param_buffer_size,
            "param_buffer_count": self.param_buffer_count,
            "optimizer_buffer_count": self.optimizer_buffer_count,
            "pipeline": self.pipeline,
            "aio": dict(AIO),
        }


def nvme_swap(
    shape: ModelShape,
    world_size: int,
    processes_per_node: int,
    cpu_memory_gb: float | None,
    bytes_per_weight: int = 2,
) -> NvmeSwap:
    """Size DeepSpeed's NVMe swap buffers for `shape` trained by `world_size` processes.

    Args:
        shape: The model; its largest parameter tensor sizes the parameter swap buffers.
        world_size: ZeRO-3 processes over all machines (each holds 1/world of every tensor).
        processes_per_node: GPU processes sharing one machine's host RAM.
        cpu_memory_gb: Host RAM per machine, when answered; pipelining needs it.
        bytes_per_weight: 2 for bf16/fp16 weights, 4 for fp32.
    """
    largest = shape.largest_param_tensor
    buffer_size = max(PARAM_BUFFER_SIZE_DEFAULT, math.ceil(largest / BUFFER_ROUNDING) * BUFFER_ROUNDING)
    world = max(int(world_size), 1)
    # The optimizer's largest sub-group: sub_group_size elements, overshot by at most one partition.
    per_rank = math.ceil(shape.params / world)
    sub_group = min(per_rank, SUB_GROUP_SIZE + math.ceil(largest / world))
    param_pool = PARAM_BUFFER_COUNT * buffer_size * bytes_per_weight
    in_cpu = min(per_rank, MAX_IN_CPU) * bytes_per_weight
    pipelined_pool = PIPELINE_OPS * ADAM_SWAP_TENSORS * sub_group * 4
    pipeline = False
    if cpu_memory_gb is not None:
        per_node = (param_pool + in_cpu + pipelined_pool) * max(int(processes_per_node), 1)
        pipeline = per_node <= PIPELINE_HOST_SHARE * float(cpu_memory_gb) * 1e9
    optimizer_count = ADAM_SWAP_TENSORS * (PIPELINE_OPS if pipeline else 1)
    pinned = param_pool + in_cpu + optimizer_count * sub_group * 4
    return NvmeSwap(largest, buffer_size, PARAM_BUFFER_COUNT, optimizer_count, pipeline, pinned)


def nvme_warning(
    swap: NvmeSwap, nvme_path: str | None, processes_per_node: int = 1, cpu_memory_gb: float | None = None
) -> str:
    """The summary line for NVMe offload: the async_io requirement and the pinned host RAM.

    The buffers are pinned by every GPU process, so a machine holds them once per process; with
    the machine's RAM known, the total is set against the usable part of it.
    """
    where = f" at {nvme_path}" if nvme_path else ""
    pinned = to_gib(swap.pinned_bytes_per_process)
    machine = ""
    if processes_per_node > 1 or cpu_memory_gb is not None:
        total = to_gib(swap.pinned_bytes_per_process * max(processes_per_node, 1))
        machine = f" ({processes_per_node} per machine: about {total} GiB"
        if cpu_memory_gb is not None:
            usable = round(float(cpu_memory_gb) * FIT_MARGIN, 1)
            verdict = "more than" if total > usable else "within"
            machine += f", {verdict} the {usable} GiB usable of the {cpu_memory_gb:g} GiB this run has"
            if total > usable:
                machine += ", so it will most likely fail to start on this machine"
            elif total > 0.9 * usable:
                machine += ", but close to that limit: other programs' RAM may be what is missing"
        machine += ")"
    pipelining = (
        "pipelined optimizer swapping is on"
        if swap.pipeline
        else "optimizer swapping is not pipelined (pipeline_read/pipeline_write need 3x the buffers)"
    )
    return (
        # DeepSpeed's async_io op and libaio are in the install-first line of the same run.
        f"NVMe offload{where}: ds_config.json sets "
        f"offload_param.buffer_size to {swap.param_buffer_size:,} elements, at least the model's "
        f"largest parameter tensor (with DeepSpeed's default of 1e8 its parameter swapper asserts at "
        f"start-up); the swap buffers pin about {pinned} GiB of host RAM per GPU process{machine}; {pipelining}."
    )


def brought_nvme_warning(swap: NvmeSwap, ds: Mapping[str, Any]) -> str:
    """The summary line for a brought DeepSpeed JSON that offloads to NVMe (it is not changed).

    Says what the JSON needs beside libaio: an ``offload_param.buffer_size`` of at least the
    model's largest parameter tensor when the parameters go to NVMe.
    """
    text = f"NVMe offload needs DeepSpeed's async_io op: {ASYNC_IO_CHECK}."
    zero = ds.get("zero_optimization")
    block = zero.get("offload_param") if isinstance(zero, Mapping) else None
    if not isinstance(block, Mapping):
        return text
    if block.get("device") != "nvme":
        return text
    size = block.get("buffer_size", PARAM_BUFFER_SIZE_DEFAULT)
    try:
        current = float(size)
    except (TypeError, ValueError):
        return text
    if current >= swap.largest_tensor:
        return text
    shown = f"{int(current):,}" if "buffer_size" in block else f"missing (DeepSpeed's default {current:,.0f})"
    return (
        f"{text} The JSON's zero_optimization.offload_param.buffer_size is {shown}, below the model's "
        f"largest parameter tensor: DeepSpeed's parameter swapper asserts at start-up. Set it to at "
        f"least {swap.largest_tensor:,}."
    )
