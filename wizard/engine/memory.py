"""Per-GPU training-memory estimates for every strategy the wizard can recommend.

Accounting (memory-anchors sections 1, 2.1, 4 and 7), bytes, mixed precision with AdamW:

* weights W: 2 B/param in bf16/fp16 (4 B in fp32); QLoRA stores the block linears in NF4 with
  double quantization (0.516 B/param) and keeps embeddings and norms in 16 bit.
* trainable parameters T (all of them for a full fine-tune, the LoRA adapters otherwise) carry
  2 B of gradient and K = 12 B of optimizer state (fp32 master copy, Adam momentum and variance):
  the ZeRO paper's 16 B/param for a full fine-tune. (fp32 training: 4 B grads + 8 B Adam.)
* sharding over N data-parallel ranks, the ZeRO paper's formulas: ZeRO-1 W+G+O/N; ZeRO-2
  W+(G+O)/N; ZeRO-3 and FSDP2 full shard (W+G+O)/N plus the largest layer gathered in 16 bit
  with its gradient (DeepSpeed's 4·LL); optimizer offload keeps W (ZeRO-2) or W/N (ZeRO-3) on
  the GPU; full offload keeps only the gathered layer.
* activations (Korthikanti et al.): 34·s·b·h bytes per layer with FlashAttention-style kernels
  (no s² score matrices); with gradient checkpointing only each layer's input (2·s·b·h) is kept,
  plus one layer being recomputed; plus the output logits (4·s·b·V bytes).
* overhead: 1 GiB for the CUDA context, cuBLAS workspace and allocator.
* host RAM per node when offloading: the offloaded states (16 B per trainable parameter, plus
  the weights for a full offload) with DeepSpeed's 1.5x buffer factor.

"Fits" means the total is at most `FIT_MARGIN` (80%) of the GPU's memory: the rest covers
fragmentation, communication buckets and temporary tensors the estimate leaves out (the
triage guidance's own suggestion, section 2.6).
"""

from __future__ import annotations

from dataclasses import dataclass

from wizard.engine.model_size import ModelShape

GIB = 2**30
FIT_MARGIN = 0.8
CONTEXT_OVERHEAD = 1 * GIB
HOST_BUFFER_FACTOR = 1.5
NF4_BYTES_PER_PARAM = 0.516  # 4 bit + double-quantized constants (QLoRA paper)
LORA_RANK = 16

STRATEGIES = (
    "ddp",
    "zero1",
    "zero2",
    "zero2_offload_optimizer",
    "zero3",
    "zero3_offload_optimizer",
    "zero3_offload_all",
    "fsdp2",
    "fsdp2_offload",
)

STRATEGY_TITLES = {
    "ddp": "DDP / 1 GPU",
    "zero1": "ZeRO-1",
    "zero2": "ZeRO-2",
    "zero2_offload_optimizer": "ZeRO-2 + optim->CPU",
    "zero3": "ZeRO-3",
    "zero3_offload_optimizer": "ZeRO-3 + optim->CPU",
    "zero3_offload_all": "ZeRO-3 + all->CPU",
    "fsdp2": "FSDP2",
    "fsdp2_offload": "FSDP2 + offload",
}

OFFLOAD_STRATEGIES = frozenset(
    {"zero2_offload_optimizer", "zero3_offload_optimizer", "zero3_offload_all", "fsdp2_offload"}
)


_GATHERING = frozenset({"zero3", "zero3_offload_optimizer", "zero3_offload_all", "fsdp2", "fsdp2_offload"})


@dataclass(frozen=True)
class Workload:
    """Everything about the job that memory depends on."""

    shape: ModelShape
    method: str  # full | lora | qlora
    world_size: int
    num_nodes: int
    sequence_length: int
    micro_batch_size: int
    gradient_checkpointing: bool
    half_precision: bool = True


@dataclass(frozen=True)
class Estimate:
    """Bytes per GPU (and host bytes per node) for one strategy."""

    strategy: str
    model_states: int  # includes `gathered`
    gathered: int  # the largest layer gathered unsharded (ZeRO-3 / FSDP), 0 otherwise
    activations: int
    overhead: int
    host_per_node: int
    gpu_memory: int
    host_memory: int | None

    @property
    def total(self) -> int:
        """Estimated peak bytes on each GPU."""
        return self.model_states + self.activations + self.overhead

    @property
    def budget(self) -> int:
        """Usable bytes per GPU after the safety margin."""
        return int(self.gpu_memory * FIT_MARGIN)

    @property
    def fits(self) -> bool:
        """Whether the total stays within the budget."""
        return self.total <= self.budget

    @property
    def host_fits(self) -> bool | None:
        """Whether host RAM holds what is offloaded; None when host RAM is unknown."""
        if self.host_per_node == 0:
            return True
        if self.host_memory is None:
            return None
        return self.host_per_node <= self.host_memory * FIT_MARGIN


def trainable_params(workload: Workload) -> int:
    """Parameters that get gradients and optimizer state."""
    if workload.method == "full":
        return workload.shape.params
    return workload.shape.lora_params(LORA_RANK)


def weight_bytes(workload: Workload) -> int:
    """Bytes of the model's weights as stored on the GPU (adapters included)."""
    shape = workload.shape
    width = 2 if workload.half_precision else 4
    adapters = 0 if workload.method == "full" else trainable_params(workload) * width
    if workload.method == "qlora":
        quantized = shape.quantizable_params
        return int(quantized * NF4_BYTES_PER_PARAM) + (shape.params - quantized) * 2 + adapters
    return shape.params * width + adapters


def activation_bytes(workload: Workload) -> int:
    """Activations kept for the backward pass, per GPU (bf16/fp16 activations)."""
    shape = workload.shape
    sbh = workload.sequence_length * workload.micro_batch_size * shape.hidden_size
    width = 1 if workload.half_precision else 2  # fp32 activations double every term
    layers = 2 * sbh * shape.layers + 34 * sbh if workload.gradient_checkpointing else 34 * sbh * shape.layers
    logits = 4 * workload.sequence_length * workload.micro_batch_size * shape.vocab_size
    return layers * width + logits


def estimate(workload: Workload, strategy: str, gpu_memory_gib: float, host_memory_gib: float | None) -> Estimate:
    """The estimate for one strategy (see the module docstring for the formulas)."""
    n = max(workload.world_size, 1)
    t = trainable_params(workload)
    w = weight_bytes(workload)
    grad = t * (2 if workload.half_precision else 4)
    optim = t * (12 if workload.half_precision else 8)
    gathered = 4 * workload.shape.largest_layer_params
    offloaded_states = 16 * t
    states = {
        "ddp": w + grad + optim,
        "zero1": w + grad + optim // n,
        "zero2": w + (grad + optim) // n,
        "zero2_offload_optimizer": w,
        "zero3": (w + grad + optim) // n + gathered,
        "zero3_offload_optimizer": w // n + gathered,
        "zero3_offload_all": gathered,
        "fsdp2": (w + grad + optim) // n + gathered,
        "fsdp2_offload": gathered,
    }[strategy]
    nodes = max(workload.num_nodes, 1)
    host = {
        "zero2_offload_optimizer": offloaded_states,
        "zero3_offload_optimizer": offloaded_states,
        "zero3_offload_all": offloaded_states + w,
        "fsdp2_offload": offloaded_states + w,
    }.get(strategy, 0)
    return Estimate(
        strategy=strategy,
        model_states=int(states),
        gathered=gathered if strategy in _GATHERING else 0,
        activations=activation_bytes(workload),
        overhead=CONTEXT_OVERHEAD,
        host_per_node=int(host * HOST_BUFFER_FACTOR / nodes),
        gpu_memory=int(gpu_memory_gib * GIB),
        host_memory=None if host_memory_gib is None else int(host_memory_gib * GIB),
    )


def estimate_all(workload: Workload, gpu_memory_gib: float, host_memory_gib: float | None) -> dict[str, Estimate]:
    """Estimates for every strategy, keyed by strategy id, in `STRATEGIES` order."""
    return {s: estimate(workload, s, gpu_memory_gib, host_memory_gib) for s in STRATEGIES}


def to_gib(value: int) -> float:
    """Bytes to GiB, rounded to one decimal for display."""
    return round(value / GIB, 1)
