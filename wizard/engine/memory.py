"""Per-GPU training-memory estimates for every strategy the wizard can recommend.

Accounting (the ZeRO paper, Rajbhandari et al. 2020, https://arxiv.org/abs/1910.02054, and
DeepSpeed's memory estimators, https://deepspeed.readthedocs.io/en/latest/memory.html), bytes,
mixed precision with AdamW:

* weights W: 2 B/param in bf16/fp16 (4 B in fp32); QLoRA stores the block linears in NF4 with
  double quantization (0.516 B/param) and keeps embeddings and norms in 16 bit.
* trainable parameters T (all of them for a full fine-tune, the LoRA adapters otherwise) carry
  2 B of gradient and K = 12 B of optimizer state (fp32 master copy, Adam momentum and variance):
  the ZeRO paper's 16 B/param for a full fine-tune. (fp32 training: 4 B grads + 8 B Adam.)
  Adam's two fp32 moments are 8 of those bytes; another optimizer (`Workload.optimizer`, see
  `moment_bytes`) changes that term only: bitsandbytes' 8-bit AdamW keeps two 1-byte moments plus
  an fp32 scale per block of 256 (about 2.03 B), Adafactor a factored second moment (4 B per row
  and per column of each matrix, about 0 B per parameter). The layouts that offload the optimizer
  step to the CPU always count AdamW (`optimizer_of`).
* sharding over N data-parallel ranks, the ZeRO paper's formulas: ZeRO-1 W+G+O/N; ZeRO-2
  W+(G+O)/N; ZeRO-3 and FSDP2 full shard (W+G+O)/N plus what they hold gathered: for ZeRO-3 the
  largest layer in 16 bit with its gradient (DeepSpeed's 4·LL), for FSDP2 its wrapped units (the
  root unit, embeddings and output head, for the whole step, and two decoder layers: see
  `fsdp_gathered_bytes`); optimizer offload keeps W (ZeRO-2) or W/N (ZeRO-3) on the GPU; full
  offload keeps only the gathered part.
* activations (Korthikanti et al.): 34·s·b·h bytes per layer with FlashAttention-style kernels
  (no s² score matrices); with gradient checkpointing only each layer's input (2·s·b·h) is kept,
  plus one layer being recomputed; plus the output logits (4·s·b·V bytes; the loss's further
  temporaries are left to the usable margin, see `loss_extra_bytes`).
* parallel layouts (the strategies below are estimated only where the layout applies):
  - `fsdp2_nd`, FSDP2 with tensor (TP), context (CP) and expert (EP) parallelism: TP splits the
    weights, gradients and optimizer state of its layers over TP ranks and FSDP2 shards what is
    left over the other world/TP ranks, so the states come to (W+G+O)/world, the same as a full
    shard over the world; what TP saves is the gathered layer (/TP) and the activations of the
    TP-sharded layers. EP is approximated the same way: experts are split over the EP ranks and
    the dense weights are FSDP-sharded over every rank (Axolotl's layout), again (W+G+O)/world.
    CP splits the sequence, so every activation term is divided by CP.
  - `hsdp` and `hsdp_offload`, hybrid sharding: FSDP2 shards over one node's GPUs (the shard
    group) and every node holds a replica, so the states are divided by the GPUs per node only;
    offloaded, each node's host RAM holds a full copy.
  - `megatron`, Megatron-LM: TP x PP (pipeline stages) split the weights and gradients, the
    distributed optimizer shards the optimizer state over all ranks; nothing is gathered. With
    1F1B scheduling the first stage holds activations of PP micro-batches of its 1/PP of the
    layers, about the same as one micro-batch through every layer, so PP leaves activations as
    they are.
  Activations under TP (Korthikanti et al.): per layer (10 + 24/TP)·s·b·h, since layer norms,
  dropout and the layer input stay replicated; Megatron's sequence parallelism also splits those
  (34/TP) and its vocabulary-parallel head splits the logits. DeepSpeed sequence parallelism (SP,
  Ulysses) splits the sequence of the ZeRO strategies' activations like CP.
* overhead: 1 GiB for the CUDA context, cuBLAS workspace and allocator.
* host RAM per node when offloading: the offloaded states (16 B per trainable parameter, plus
  the frozen weights as stored, and for DeepSpeed's full offload the 16-bit copy of the trained
  weights too: FSDP2 keeps each parameter once, the trained ones as their fp32 master) with
  DeepSpeed's 1.5x buffer factor.
* `ddp_layer_offload`, Axolotl's layer offloading (`layer_offloading: true`, LoRA and QLoRA
  only; axolotl/core/trainers/mixins/layer_offloading.py in Axolotl 0.21): the frozen weights of
  the decoder layers F (16 bit for LoRA, NF4-packed linears with 16-bit norms for QLoRA) wait in
  pinned host RAM, and hooks bring each layer to the GPU just before it computes. The GPU keeps
  W - F (embeddings, output head, final norm and the adapters), about three layers' share of F
  (the one computing, the next one prefetched on a side stream, the previous one being copied
  out), and the adapters' gradients and optimizer state, which never leave it; activations and
  overhead as for DDP. Host RAM per node: F per process, as stored and without the 1.5x factor,
  since the pinned buffers are allocated once per parameter and reused every step.

"Fits" means the total is at most `FIT_MARGIN` (80%) of the GPU's memory: the rest covers
fragmentation, communication buckets and temporary tensors the estimate leaves out. On Apple
silicon the share is the GPU working set macOS recommends instead (`usable_share`). One such
temporary is known and can outgrow that margin: the fp32 loss at the start of the backward pass
(`loss_extra_bytes`). The total with it (`Estimate.peak`) must stay within the whole device, or
the first backward pass runs out of memory whatever the margin says.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from wizard.engine.device import GPU_DEVICE, MAC_DEVICE, words_for
from wizard.engine.model_size import ModelShape

GIB = 2**30
FIT_MARGIN = 0.8
CONTEXT_OVERHEAD = 1 * GIB
HOST_BUFFER_FACTOR = 1.5
# Offload within the usable host RAM but above this share of it is a close fit: the summary says how
# little is left.
HOST_CLOSE_SHARE = 0.95
NF4_BYTES_PER_PARAM = 0.516  # 4 bit + double-quantized constants (QLoRA paper)
# The LoRA rank where the answers give none (the lora_rank question's default).
LORA_RANK = 16
# On Apple silicon the GPU shares the Mac's memory with macOS, and Metal names how much of it the
# GPU may use "without affecting the runtime performance": MTLDevice.recommendedMaxWorkingSetSize
# (https://developer.apple.com/documentation/metal/mtldevice/recommendedmaxworkingsetsize), which
# PyTorch reports as torch.mps.recommended_max_memory()
# (https://docs.pytorch.org/docs/stable/generated/torch.mps.recommended_max_memory.html). Macs
# report two thirds of their memory up to 32 GB (10,922.67 MiB on 16 GB, 21,845.34 MiB on 32 GB)
# and three quarters above (49,152 MiB on 64 GB, 73,728 MiB on 96 GB). PyTorch's allocator lets a
# process go past it (to 1.7 times by default, PYTORCH_MPS_HIGH_WATERMARK_RATIO), but then macOS
# compresses and swaps: the working set is the line an estimate must stay under.
MAC_SMALL_SHARE = 2 / 3
MAC_LARGE_SHARE = 3 / 4
MAC_LARGE_FROM = 32 * GIB  # more than this: the larger share


def usable_share(device: str, memory: int) -> float:
    """The part of a device's memory (bytes) an estimate may use: 80% of a GPU's, a Mac's GPU working set."""
    if device != MAC_DEVICE:
        return FIT_MARGIN
    return MAC_LARGE_SHARE if memory > MAC_LARGE_FROM else MAC_SMALL_SHARE


STRATEGY_TITLES = {
    "ddp": "DDP / 1 GPU",
    "ddp_layer_offload": "DDP + layer offload",
    "zero1": "ZeRO-1",
    "zero2": "ZeRO-2",
    "zero2_offload_optimizer": "ZeRO-2 + optim->CPU",
    "zero3": "ZeRO-3",
    "zero3_offload_optimizer": "ZeRO-3 + optim->CPU",
    "zero3_offload_all": "ZeRO-3 + all->CPU",
    "fsdp2": "FSDP2",
    "fsdp2_offload": "FSDP2 + offload",
    "fsdp2_nd": "FSDP2 + TP/CP/EP",
    "hsdp": "HSDP",
    "hsdp_offload": "HSDP + offload",
    "megatron": "Megatron-LM TP x PP",
}
STRATEGIES = tuple(STRATEGY_TITLES)  # in the order the estimate table shows them

OFFLOAD_STRATEGIES = frozenset(
    {
        "ddp_layer_offload",
        "zero2_offload_optimizer",
        "zero3_offload_optimizer",
        "zero3_offload_all",
        "fsdp2_offload",
        "hsdp_offload",
    }
)
# FSDP2's own CPU offload (offload_params), plain or hybrid-sharded: it copies in its fp32 shards
# and out its fp32 gradients (`fsdp2_offload_copies`).
FSDP2_OFFLOADS = frozenset({"fsdp2_offload", "hsdp_offload"})
# Decoder layers resident on the GPU under layer offloading: the one computing, the next one being
# prefetched on the side stream, and the previous one whose copy back to host RAM is in flight.
LAYER_OFFLOAD_RESIDENT = 3


# The layouts that gather each layer's weights whole while it computes (ZeRO-3 and FSDP2 kinds).
GATHERING = frozenset(
    {
        "zero3",
        "zero3_offload_optimizer",
        "zero3_offload_all",
        "fsdp2",
        "fsdp2_offload",
        "fsdp2_nd",
        "hsdp",
        "hsdp_offload",
    }
)
# FSDP2's layouts: they gather by wrapped unit (the root module and each decoder layer), not by
# DeepSpeed's largest layer (see `fsdp_gathered_bytes`).
FSDP_GATHERING = frozenset({"fsdp2", "fsdp2_offload", "fsdp2_nd", "hsdp", "hsdp_offload"})
# DeepSpeed's strategies: sequence parallelism (SP) only exists there.
_ZERO = frozenset(
    {"zero1", "zero2", "zero2_offload_optimizer", "zero3", "zero3_offload_optimizer", "zero3_offload_all"}
)


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
    # The parallel layout (1 = not used). `megatron` marks a Megatron-LM code base, where the
    # tensor and pipeline sizes apply; otherwise TP, CP and EP are FSDP2's (`fsdp2_nd`).
    tensor_parallel: int = 1
    context_parallel: int = 1
    sequence_parallel: int = 1
    expert_parallel: int = 1
    pipeline_parallel: int = 1
    megatron: bool = False
    # What the run trains on (wizard.engine.device): "mac" names the one-device row "Mac (MPS)"
    # instead of "1 GPU", and its usable share is the Mac's GPU working set (`usable_share`).
    device: str = GPU_DEVICE
    # The optimizer whose state the trained parameters carry (`OPTIMIZERS`): its moments are the
    # only term it changes (`moment_bytes`).
    optimizer: str = "adamw"
    # DPO (answers' objective: dpo): each micro-batch item is a pair, a chosen and a rejected answer,
    # which TRL's DPOTrainer runs as two sequences in one forward pass (its concatenated_forward).
    pairs: bool = False
    # How DPO's frozen reference model scores each pair (`REFERENCES`); "" for supervised training.
    reference: str = ""
    # Whether a reference copy outside DeepSpeed is the trained model's fp32 deep copy (an Accelerate
    # script whose model trains fp32 weights under mixed precision) rather than a 16-bit one (Axolotl).
    reference_fp32: bool = False
    # The loss is computed in chunks (Cut Cross Entropy, Liger's fused linear cross entropy): the
    # output logits are never built whole, nor the loss's fp32 temporaries beside them.
    chunked_loss: bool = False
    # The LoRA adapters' rank (answers' lora_rank), on every linear layer; read for LoRA and QLoRA only.
    lora_rank: int = LORA_RANK


# DPO's reference model, by how the run keeps it. TRL's DPOTrainer ("DPO Trainer",
# https://huggingface.co/docs/trl/main/dpo_trainer) uses the PEFT model with its adapters switched
# off as the reference ("base": no memory beyond the trained model), precomputes the reference
# log-probs over the dataset before training when DPOConfig.precompute_ref_log_probs is set and no
# ref_model is passed ("precomputed": nothing held while training; TRL pull request 5542), and
# otherwise keeps a frozen copy of the model ("copy"). It prepares that copy as the trained model is
# sharded (trl/models/utils.py: prepare_deepspeed shards it with ZeRO-3 and runs it unsharded at
# stage 0 under ZeRO-1/2; prepare_fsdp wraps it with the FSDP plugin, CPU offload included), in the
# run's 16-bit dtype under Axolotl (its ensure_dtype on trainer.ref_model, axolotl/core/builders/rl.py)
# and under DeepSpeed (its engine casts the copy to the JSON's bf16 or fp16). An Accelerate script
# that passes no ref_model gets create_reference_model's deep copy of the model it trains: fp32 where
# mixed precision keeps fp32 weights, as the estimate's DDP and FSDP2 rows count them
# (`Workload.reference_fp32`).
REFERENCES = ("", "copy", "base", "precomputed")


def sequences_per_micro_batch(workload: Workload) -> int:
    """Sequences one GPU's micro-batch runs through the model: two per DPO pair, one otherwise."""
    return workload.micro_batch_size * (2 if workload.pairs else 1)


# How far a real long-context peak can sit above this estimate's, at the cautious end: the estimate with
# the loss moment came to 72% to 76% of an 80 GB card at the longest contexts Unsloth measured
# (https://unsloth.ai/blog/llama3-3), and 1 / 0.72 is about 1.39. The cautious end, since the verdict
# it drives is whether a run may run out of memory.
ESTIMATE_SHARE = (0.72, 0.76)
UNDERSHOOT = round(1 / ESTIMATE_SHARE[0], 2)
# As the texts say them: "39%", "72% to 76%", "1 / 0.72".
UNDERSHOOT_PERCENT = f"{round((UNDERSHOOT - 1) * 100)}%"
ESTIMATE_SHARE_WORDS = f"{ESTIMATE_SHARE[0]:.0%} to {ESTIMATE_SHARE[1]:.0%}"
UNDERSHOOT_SUM = f"1 / {ESTIMATE_SHARE[0]:g}"
# The sequence tokens per GPU from which that calibration is applied: Unsloth's limits are long contexts,
# while at 2,048 and 4,096 tokens peaks measured on an H200 came to 0.84x to 1.13x of this estimate's.
LONG_CONTEXT_TOKENS = 8192


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
    title: str = ""  # the row label with the run's own sizes ("FSDP2 + CP 2"); "" = the fixed one
    device: str = GPU_DEVICE  # the Workload's: its words and its usable share (wizard.engine.device)
    # The fp32 loss's temporaries at the start of the backward pass beyond the logits counted
    # (`loss_extra_bytes`): a moment's peak, left to the margin above the usable line.
    transient: int = 0
    # Whether a micro-batch's sequence on each GPU is LONG_CONTEXT_TOKENS or more (where UNDERSHOOT applies).
    long_context: bool = False

    @property
    def label(self) -> str:
        """The strategy's name as tables and explanations print it."""
        return self.title or STRATEGY_TITLES[self.strategy]

    @property
    def total(self) -> int:
        """Estimated peak bytes on each GPU."""
        return self.model_states + self.activations + self.overhead

    @property
    def budget(self) -> int:
        """Usable bytes per GPU after the safety margin (a Mac: its GPU working set)."""
        return int(self.gpu_memory * self.share)

    @property
    def share(self) -> float:
        """The part of `gpu_memory` counted as usable (`usable_share`)."""
        return usable_share(self.device, self.gpu_memory)

    @property
    def peak(self) -> int:
        """The moment's peak: the total and the loss's temporaries at the start of the backward pass."""
        return self.total + self.transient

    @property
    def high(self) -> int:
        """The figure held against the usable memory near the line: the peak where the moment is worth naming.

        The moment counts from 5% of the usable memory; below that, the total. The near-limit note, the Your JSON
        line and the Memory line weigh this one, so that they give the same share.
        """
        return self.peak if self.transient >= self.budget // 20 else self.total

    @property
    def fits(self) -> bool:
        """Whether the total stays within the budget and the moment's peak within the device."""
        return self.total <= self.budget and self.peak <= self.gpu_memory

    @property
    def card_needed_gib(self) -> int:
        """The smallest GPU, in whole GiB, whose usable share holds the total (what a layout past the card needs)."""
        return math.ceil(self.total / self.share / GIB)

    @property
    def past_device(self) -> bool:
        """The total alone is more than the device's memory: the layout cannot start (a brought JSON as written)."""
        return self.total > self.gpu_memory

    @property
    def peak_short(self) -> bool:
        """The total is within the budget, but the loss peak takes the peak past the device."""
        return self.total <= self.budget < self.gpu_memory < self.peak

    @property
    def tight(self) -> bool:
        """It fits, but the loss peak takes the peak past the usable line (into the margin)."""
        return self.fits and self.peak > self.budget

    @property
    def close_call(self) -> bool:
        """It fits on a GPU at a long context, and the real peak, UNDERSHOOT times the estimate's, may pass the card.

        `UNDERSHOOT` more (39%); whether or not the estimate's own peak passes the usable line.

        The calibration is for long contexts with the ordinary loss, so a run below LONG_CONTEXT_TOKENS or one
        whose loss is computed in chunks (no moment) is judged by the usable line alone. The one verdict the
        Memory line, the Why, the why-nots, the levers and the offload rules give it.
        """
        return (
            self.fits
            and self.device == GPU_DEVICE
            and self.long_context
            and self.transient > 0
            and float(sum_gib(self.total, self.transient)) * UNDERSHOOT > float(memory_gib(self.gpu_memory))
        )

    @property
    def close_call_likely(self) -> bool:
        """A close call past the card even at the calibration's kinder end (the estimate at 76% of the real peak).

        Then the run would likely run out of memory at that moment, not only possibly: the texts say so.
        """
        return self.close_call and sum_gib(self.total, self.transient) / ESTIMATE_SHARE[1] > float(
            memory_gib(self.gpu_memory)
        )

    @property
    def real_peak_gib(self) -> tuple[float, float]:
        """The loss peak as the long-context calibration puts it, in GiB as shown: (kinder end, cautious end).

        The estimate at 76% and at 72% of the real peak (`ESTIMATE_SHARE`): the figures the Risk line, the close-call
        clauses and the long-context margin name.
        """
        peak = float(sum_gib(self.total, self.transient))
        return round(peak / ESTIMATE_SHARE[1], 1), round(peak * UNDERSHOOT, 1)

    @property
    def close_call_words(self) -> str:
        """A close call's allowance with its figure and the verdict it gives, as a clause.

        The kinder end (32%) where even it passes the card ("would likely"), else the cautious one (39%, "may").
        """
        kinder, cautious = self.real_peak_gib
        if self.close_call_likely:
            more, percent = kinder, f"{round((1 / ESTIMATE_SHARE[1] - 1) * 100)}%"
            return (
                f"at this long context even {percent} more (the kinder end of the {percent}-{UNDERSHOOT_PERCENT}"
                f" allowance), about {more} GiB, would pass the GPU's {memory_gib(self.gpu_memory)} GiB, so it would"
                " likely run out of memory"
            )
        return (
            f"at this long context {UNDERSHOOT_PERCENT} more, about {cautious} GiB, would pass the"
            f" GPU's {memory_gib(self.gpu_memory)} GiB, so it may run out of memory"
        )

    @property
    def may(self) -> str:
        """How sure a close call's risk is said: "would likely" where `close_call_likely`, else "may"."""
        return "would likely" if self.close_call_likely else "may"

    @property
    def host_stored(self) -> int:
        """What is offloaded per node as stored: `host_per_node` without the pinned buffers' allowance.

        Layer offloading pins each frozen layer once and gets no allowance; the other offloads are
        counted `HOST_BUFFER_FACTOR` times (an NVMe drive, or a CPU run's own memory, holds them as stored).
        """
        if self.strategy == "ddp_layer_offload":
            return self.host_per_node
        return int(self.host_per_node / HOST_BUFFER_FACTOR)

    @property
    def host_fits(self) -> bool | None:
        """Whether host RAM holds what is offloaded; None when host RAM is unknown."""
        if self.host_per_node == 0:
            return True
        if self.host_memory is None:
            return None
        return self.host_per_node <= self.host_memory * FIT_MARGIN


# The optimizers the estimate counts, and what their state is called in the breakdown.
OPTIMIZERS = ("adamw", "adamw_8bit", "paged_adamw_8bit", "adafactor")
OPTIMIZER_WORDS = {
    "adamw": "Adam's two moments",
    "adamw_8bit": "8-bit AdamW's two 1-byte moments and their block scales",
    "paged_adamw_8bit": "paged 8-bit AdamW's two 1-byte moments and their block scales",
    "adafactor": "Adafactor's factored second moment",
}
# bitsandbytes' 8-bit optimizers quantize each state tensor blockwise, 256 values per block, with
# one fp32 absolute maximum per block ("8-bit optimizers", Dettmers et al. 2022,
# https://arxiv.org/abs/2110.02861; bitsandbytes' Optimizer2State.init_state): per moment 1 byte
# plus 4/256 bytes per parameter, for the two moments 2 + 8/256. Parameters of fewer than 4,096
# values keep 32-bit state (min_8bit_size); they are the norms, a negligible share, left out.
BNB_BLOCK = 256
# Paged AdamW keeps the same state in CUDA unified memory, which the driver pages out to CPU RAM
# under memory pressure ("bitsandbytes: Paged optimizers",
# https://huggingface.co/docs/bitsandbytes/main/en/explanations/optimizers): on the GPU it is
# counted like 8-bit AdamW, and what it can spill is a safety net, not a saving the estimate counts.
EIGHT_BIT_OPTIMIZERS = frozenset({"adamw_8bit", "paged_adamw_8bit"})
# The layouts whose optimizer step runs on the CPU. DeepSpeed's CPU offload runs its own CPU Adam
# (Accelerate swaps a client optimizer for DeepSpeedCPUAdam when offload_optimizer is set:
# accelerate/accelerator.py, _prepare_deepspeed, https://github.com/huggingface/accelerate), and
# FSDP2's CPU offload steps the optimizer on CPU tensors, where bitsandbytes' GPU kernels do not
# run: these layouts count AdamW whatever the answer.
CPU_STEP_STRATEGIES = frozenset(
    {"zero2_offload_optimizer", "zero3_offload_optimizer", "zero3_offload_all", "fsdp2_offload", "hsdp_offload"}
)


# The layouts where bitsandbytes' 8-bit optimizers run: each GPU steps whole, plain parameters (one
# GPU, or DDP's copy on every GPU). FSDP2 hands the optimizer DTensor shards, which they do not
# handle ("illegal memory access with FSDP2",
# https://github.com/bitsandbytes-foundation/bitsandbytes/issues/1633; Axolotl refuses
# adamw_bnb_8bit with fsdp_config: axolotl/utils/schemas/validation.py), and DeepSpeed's ZeRO
# stages hand it flattened partitions, where the bitsandbytes kernels have failed ("DeepSpeed: Error
# invalid configuration argument ... bitsandbytes/csrc/ops.cu",
# https://github.com/axolotl-ai-cloud/axolotl/issues/1244): those layouts count and write AdamW.
EIGHT_BIT_STRATEGIES = frozenset({"ddp", "ddp_layer_offload"})


def run_optimizer(answer: str, strategy: str | None) -> str:
    """The optimizer a layout runs: the answer, or AdamW where it cannot run there.

    AdamW where the optimizer step moves to the CPU, or where an 8-bit optimizer would meet
    sharded parameters (`EIGHT_BIT_STRATEGIES`).
    """
    if strategy in CPU_STEP_STRATEGIES:
        return "adamw"
    if answer in EIGHT_BIT_OPTIMIZERS and strategy is not None and strategy not in EIGHT_BIT_STRATEGIES:
        return "adamw"
    return answer


def optimizer_of(workload: Workload, strategy: str) -> str:
    """The optimizer `strategy` runs for this workload (`run_optimizer`)."""
    return run_optimizer(workload.optimizer, strategy)


def moment_bytes(workload: Workload, strategy: str = "ddp") -> int:
    """Bytes of the optimizer's own state (Adam's moments or their stand-ins) for all trained parameters.

    AdamW: two fp32 moments, 8 bytes per trained parameter. bitsandbytes' 8-bit AdamW (and its
    paged form): two 1-byte moments and an fp32 scale per block of `BNB_BLOCK` values. Adafactor
    (Transformers' default, beta1=None: no first moment) keeps for each matrix one fp32 value per
    row and one per column; the estimate simplifies every trained matrix to its smallest and
    largest side: a full fine-tune's matrices are at least hidden_size wide (4 x 2/hidden bytes per
    parameter, plus the norms' full 4-byte second moment), LoRA's adapters are rank x hidden
    (4 x (1/rank + 1/hidden) bytes per parameter).
    """
    t = trainable_params(workload)
    optimizer = optimizer_of(workload, strategy)
    if optimizer in EIGHT_BIT_OPTIMIZERS:
        return 2 * t + -(-8 * t // BNB_BLOCK)
    if optimizer == "adafactor":
        shape = workload.shape
        h = max(shape.hidden_size, 1)
        if workload.method == "full":
            vectors = (2 * shape.layers + 1) * shape.hidden_size  # the norms: a full second moment
            return -(-8 * t // h) + 4 * vectors
        return -(-4 * t * (workload.lora_rank + h) // (workload.lora_rank * h))
    return 8 * t


def optimizer_words(workload: Workload, strategy: str = "ddp") -> str:
    """What the optimizer's own state is, as the breakdown names it ("Adam's two moments")."""
    return OPTIMIZER_WORDS[optimizer_of(workload, strategy)]


def lora_rank_of(answers: Mapping[str, Any]) -> int:
    """The LoRA rank the answers give (lora_rank), or the default where they give none."""
    return int(answers.get("lora_rank") or LORA_RANK)


def trainable_params(workload: Workload) -> int:
    """Parameters that get gradients and optimizer state."""
    if workload.method == "full":
        return workload.shape.params
    return workload.shape.lora_params(workload.lora_rank)


def weight_bytes(workload: Workload) -> int:
    """Bytes of the model's weights as stored on the GPU (adapters included)."""
    shape = workload.shape
    width = 2 if workload.half_precision else 4
    adapters = 0 if workload.method == "full" else trainable_params(workload) * width
    if workload.method == "qlora":
        quantized = shape.quantizable_params
        return int(quantized * NF4_BYTES_PER_PARAM) + (shape.params - quantized) * 2 + adapters
    return shape.params * width + adapters


def frozen_decoder_bytes(workload: Workload) -> int:
    """Bytes of the frozen decoder-layer weights as stored: what layer offloading keeps in host RAM.

    Every parameter of the decoder layers except the final norm, the embeddings and the output
    head (which stay on the GPU); 16 bit for LoRA, and for QLoRA the NF4-packed linear layers plus
    the layers' 16-bit norms. 0 for a full fine-tune, where nothing is frozen.
    """
    shape = workload.shape
    if workload.method == "full":
        return 0
    width = 2 if workload.half_precision else 4
    if workload.method == "qlora":
        norms = 2 * shape.layers * shape.hidden_size
        return int(shape.quantizable_params * NF4_BYTES_PER_PARAM) + norms * 2
    return shape.decoder_params * width


def fsdp_gathered_bytes(workload: Workload, strategy: str = "fsdp2") -> int:
    """What FSDP2 holds unsharded at its peak: the root unit for the whole step, two decoder layers.

    Accelerate applies fully_shard to every decoder layer and then to the model itself (the root
    unit: the embeddings, the final norm and the output head). The root's forward and backward
    enclose every layer's, so its weights stay gathered from the start of the forward pass to the
    end of the backward pass ("fully_shard",
    https://docs.pytorch.org/docs/stable/distributed.fsdp.fully_shard.html). One decoder layer
    computes while the next one is gathered ahead of it (FSDP2's implicit prefetching): two
    layers' weights as stored (4-bit linears under QLoRA), three units in all, as torchtitan's
    FSDP notes describe the unit computing and the one prefetched. Under expert parallelism a
    layer holds only its share of the experts (`expert_share`). The unsharded gradients a full
    fine-tune's units produce before their reduce-scatter (the output head's first) are left to
    the usable margin, like the loss's temporaries.
    """
    shape = workload.shape
    width = 2 if workload.half_precision else 4
    root = shape.outside_params or (shape.embedding_params + shape.hidden_size)
    layers = max(shape.layers, 1)
    if workload.method == "qlora":
        layer_bytes = frozen_decoder_bytes(workload) // layers
    else:
        layer_bytes = shape.decoder_params * width // layers
    if strategy != "fsdp2_nd":
        return root * width + 2 * layer_bytes
    # TP splits every gathered unit; EP a layer's experts.
    tp = max(workload.tensor_parallel, 1)
    return (root * width + 2 * layer_bytes // expert_share(workload)) // tp


def expert_share(workload: Workload) -> int:
    """How many ways expert parallelism splits a mixture-of-experts layer's weights (1 without it)."""
    return max(workload.expert_parallel, 1) if workload.shape.is_moe else 1


def gathered_bytes(workload: Workload, strategy: str) -> int:
    """The unsharded weights (and their gradients) a gathering layout adds to its shard; 0 for the others."""
    if strategy not in GATHERING:
        return 0
    if strategy in FSDP_GATHERING:
        return fsdp_gathered_bytes(workload, strategy)
    # DeepSpeed's own rule: the largest layer's 16-bit weights and a buffer as large.
    return 4 * workload.shape.largest_layer_params


def activation_bytes(workload: Workload, strategy: str = "ddp") -> int:
    """Activations kept for the backward pass, per GPU (bf16/fp16 activations).

    The sequence is split by CP (`fsdp2_nd`) or SP (the ZeRO strategies); TP splits the
    TP-sharded part of each layer (`fsdp2_nd`, `megatron`), see the module docstring;
    `activation_parts` gives the parts.
    """
    return sum(size for _, size in activation_parts(workload, strategy))


def mps_attention_bytes(workload: Workload) -> int:
    """The score matrices attention builds whole on Apple's MPS (0 on every other device).

    PyTorch's scaled_dot_product_attention has no memory-efficient kernel on MPS: it computes
    softmax(QK^T) as a whole micro-batch x heads x sequence x sequence matrix per layer, in the
    activations' precision ("PyTorch: MPS backend", https://docs.pytorch.org/docs/stable/notes/mps.html).
    The backward pass of one layer holds its probabilities and their gradient: two matrices with
    gradient checkpointing (one layer recomputed at a time); without it every layer keeps its
    probabilities for the backward pass, and one more is computed at a time.
    """
    if workload.device != MAC_DEVICE:
        return 0
    matrix = score_matrix_bytes(workload)
    return 2 * matrix if workload.gradient_checkpointing else (workload.shape.layers + 1) * matrix


def score_matrix_bytes(workload: Workload) -> int:
    """One layer's attention score matrix: micro-batch x heads x sequence^2, 2 or 4 bytes each."""
    width = 2 if workload.half_precision else 4
    return sequences_per_micro_batch(workload) * workload.shape.heads * workload.sequence_length**2 * width


def applicable_strategies(workload: Workload) -> tuple[str, ...]:
    """The strategies that exist for this layout, in `STRATEGIES` order.

    `ddp_layer_offload` only for LoRA and QLoRA (the frozen layers it offloads). The parallel ones
    only where they differ from the plain ones: `fsdp2_nd` with TP, CP or EP
    above 1, `hsdp`/`hsdp_offload` on several nodes of several GPUs each, `megatron` for a
    Megatron-LM code base.
    """
    nd = workload.tensor_parallel * workload.context_parallel * workload.expert_parallel > 1
    hybrid = workload.num_nodes > 1 and workload.world_size > workload.num_nodes
    skip = {
        # Layer offloading moves frozen layers only: a full fine-tune has none.
        "ddp_layer_offload": workload.method not in ("lora", "qlora"),
        "fsdp2_nd": workload.megatron or not nd,
        "hsdp": not hybrid,
        "hsdp_offload": not hybrid,
        "megatron": not workload.megatron,
    }
    return tuple(s for s in STRATEGIES if not skip.get(s, False))


def state_parts(workload: Workload, strategy: str) -> tuple[tuple[str, int], ...]:
    """The model states one GPU holds under `strategy`, part by part: (what, bytes).

    They sum to the estimate's model_states (see the module docstring for the formulas).
    """
    n = max(workload.world_size, 1)
    nodes = max(workload.num_nodes, 1)
    shard_group = max(n // nodes, 1)  # HSDP shards over one node's GPUs
    model_parallel = max(workload.tensor_parallel * workload.pipeline_parallel, 1)  # Megatron TP x PP
    t = trainable_params(workload)
    w = weight_bytes(workload)
    grad = t * (2 if workload.half_precision else 4)
    moments = moment_bytes(workload, strategy)
    optim = t * (4 if workload.half_precision else 0) + moments  # the fp32 master copy in mixed precision
    gathered = 4 * workload.shape.largest_layer_params
    frozen = frozen_decoder_bytes(workload)
    resident = frozen * min(LAYER_OFFLOAD_RESIDENT, workload.shape.layers) // max(workload.shape.layers, 1)
    weights = "weights" if workload.method == "full" else "weights (the frozen base and the adapters)"
    grads = "gradients" if workload.method == "full" else "the adapters' gradients"
    words = optimizer_words(workload, strategy)
    adam = (
        f"optimizer state ({words} and the fp32 master weights)"
        if workload.half_precision
        else (f"optimizer state ({words})")
    )
    everything = "weights, gradients and optimizer state"
    shape = workload.shape
    # Which module it is, so that the figure can be checked: DeepSpeed's "largest layer" is one module.
    which = (
        f" (the embeddings or the output head, {shape.vocab_size:,} x {shape.hidden_size:,})"
        if shape.largest_layer_params == shape.vocab_size * shape.hidden_size
        else f" (one MLP projection, {shape.hidden_size:,} x {shape.intermediate_size:,})"
        if shape.largest_layer_params == shape.hidden_size * shape.intermediate_size
        else ""
    )
    largest = f"the largest layer{which}, gathered whole while it computes"
    units = (
        "gathered whole: the embeddings and output head for the whole step, and two decoder layers (one"
        " computing, the next fetched ahead)"
    )
    fsdp = gathered_bytes(workload, "fsdp2")
    fsdp_nd = gathered_bytes(workload, "fsdp2_nd")
    # DDP under mixed precision (PyTorch AMP, as Accelerate runs it) keeps the trained weights and
    # their gradients in fp32 beside Adam's two moments: the same 16 bytes, split as it holds them
    # (DeepSpeed's split, 16-bit weights and gradients beside an fp32 master copy, is the one above).
    half = workload.half_precision
    ddp_parts = (
        (
            ("weights in fp32 (mixed precision computes in 16 bit from them)", w + 2 * t)
            if workload.method == "full"
            else ("weights (the frozen base as loaded, the adapters in fp32)", w + 2 * t)
        )
        if half
        else (weights, w),
        ("gradients in fp32" if workload.method == "full" else "the adapters' gradients in fp32", 4 * t)
        if half
        else (grads, grad),
        (f"optimizer state ({words})", moments) if half else (adam, optim),
    )
    parts: dict[str, tuple[tuple[str, int], ...]] = {
        "ddp": ddp_parts,
        # The same AMP split as DDP's: the adapters and their gradients in fp32 beside Adam's moments.
        "ddp_layer_offload": (
            (
                ("weights kept on the GPU (embeddings, head, the adapters in fp32)", w - frozen + 2 * t)
                if half
                else ("weights kept on the GPU (embeddings, head, adapters)", w - frozen)
            ),
            ("frozen layers streaming through the GPU", resident),
            ("the adapters' gradients in fp32", 4 * t) if half else (grads, grad),
            (f"optimizer state ({words})", moments) if half else (adam, optim),
        ),
        "zero1": ((weights, w), (grads, grad), (f"1/{n} of the {adam}", optim // n)),
        "zero2": ((weights, w), (f"1/{n} of the gradients and optimizer state", (grad + optim) // n)),
        "zero2_offload_optimizer": ((weights, w),),
        "zero3": ((f"1/{n} of the {everything}", (w + grad + optim) // n), (largest, gathered)),
        "zero3_offload_optimizer": ((f"1/{n} of the weights", w // n), (largest, gathered)),
        "zero3_offload_all": ((largest, gathered),),
        "fsdp2": ((f"1/{n} of the {everything}", (w + grad + optim) // n), (units, fsdp)),
        "fsdp2_offload": ((units, fsdp),),
        "fsdp2_nd": ((f"1/{n} of the {everything}", (w + grad + optim) // n), (units, fsdp_nd)),
        "hsdp": ((f"1/{shard_group} of the {everything}", (w + grad + optim) // shard_group), (units, fsdp)),
        "hsdp_offload": ((units, fsdp),),
        "megatron": (
            (f"1/{model_parallel} of the weights and gradients", (w + grad) // model_parallel),
            (f"1/{n} of the {adam}", optim // n),
        ),
    }
    shards = reference_shards(workload, strategy)
    if not shards:
        return parts[strategy]
    words = "DPO's frozen reference copy, whole"
    if shards > 1:
        words = f"1/{shards} of DPO's frozen reference copy"
    return (*parts[strategy], (words, reference_bytes(workload, strategy) // shards))


# The layouts that shard DPO's reference copy as they shard the weights, over how many GPUs
# (`reference_gpu_bytes`); the rest (one GPU, DDP, ZeRO-1/2: TRL runs the copy at ZeRO stage 0)
# keep it whole on every GPU, and the offloading FSDP2 and full ZeRO-3 offload keep it in host RAM.
_REFERENCE_SHARDED = frozenset({"zero3", "zero3_offload_optimizer", "fsdp2", "fsdp2_nd", "hsdp", "megatron"})
_REFERENCE_ON_HOST = frozenset({"zero3_offload_all", "fsdp2_offload", "hsdp_offload"})


def reference_bytes(workload: Workload, strategy: str) -> int:
    """The bytes of DPO's whole frozen reference copy under `strategy` (0 where there is none).

    16-bit under DeepSpeed and Axolotl; an fp32 deep copy of the trained model for an Accelerate
    script outside DeepSpeed (`Workload.reference_fp32`).
    """
    if workload.reference != "copy":
        return 0
    if workload.reference_fp32 and workload.half_precision and strategy not in _ZERO:
        return 2 * weight_bytes(workload)  # the 16-bit count's fp32 twin
    return weight_bytes(workload)


def reference_shards(workload: Workload, strategy: str) -> int:
    """Over how many GPUs `strategy` splits the reference copy: 1 whole on each, 0 none on the GPU."""
    if not reference_bytes(workload, strategy) or strategy in _REFERENCE_ON_HOST:
        return 0
    if strategy not in _REFERENCE_SHARDED:
        return 1
    if strategy == "hsdp":
        return max(workload.world_size // max(workload.num_nodes, 1), 1)
    if strategy == "megatron":
        return max(workload.tensor_parallel * workload.pipeline_parallel, 1)
    return max(workload.world_size, 1)


def reference_gpu_bytes(workload: Workload, strategy: str) -> int:
    """The reference copy's bytes on each GPU under `strategy`: placed as the trained weights are."""
    shards = reference_shards(workload, strategy)
    return reference_bytes(workload, strategy) // shards if shards else 0


def figure_parts(workload: Workload, strategy: str) -> tuple[tuple[str, int], ...]:
    """Everything the estimate's total per GPU adds up: model states, activations, the overhead."""
    return (
        *state_parts(workload, strategy),
        *activation_parts(workload, strategy),
        (f"{words_for(workload.device).runtime} (the fixed overhead)", CONTEXT_OVERHEAD),
    )


def logits_bytes(workload: Workload) -> int:
    """The output logits of one micro-batch in fp32, 4 bytes per token per vocabulary entry.

    What the loss builds whole without a chunked loss such as Cut Cross Entropy; the activations
    count it per layout (split with the sequence or the vocabulary where a layout splits them).
    """
    return 4 * workload.sequence_length * sequences_per_micro_batch(workload) * workload.shape.vocab_size


# The loss's temporaries beyond the logits the estimate counts. Transformers' causal-LM loss
# (ForCausalLMLoss in transformers/loss/loss_utils.py, https://github.com/huggingface/transformers)
# casts the logits to fp32 and calls cross_entropy; when the backward pass starts, the fp32
# log-probabilities that log_softmax saved, their gradient and the gradient for the logits live
# together: three fp32 tensors of tokens x vocabulary, 12 bytes per entry, 8 more than counted.
# torchtune's CEWithChunkedOutputLoss docstring describes the same fp32 upcast ("the memory usage
# doubles"). Like the guidance's 0.8 x memory rule, the fit line leaves them to the margin; the
# warnings say when they outgrow it, and a layout whose peak with them is more than the device
# does not fit (`Estimate.fits`).
LOSS_PEAK_BYTES_PER_LOGIT = 12


def loss_extra_bytes(workload: Workload, strategy: str = "ddp") -> int:
    """The loss's temporaries at the start of the backward pass beyond the logits the layout counts."""
    return _layout_logits(workload, strategy) * (LOSS_PEAK_BYTES_PER_LOGIT - 4) // 4


def layout_tokens(workload: Workload, strategy: str = "ddp") -> int:
    """The tokens of one micro-batch on each GPU: CP (FSDP2) and SP (ZeRO) split the sequence."""
    split = 1
    if strategy == "fsdp2_nd":
        split = workload.context_parallel
    elif strategy in _ZERO:
        split = workload.sequence_parallel
    return -(-workload.sequence_length // max(split, 1)) * sequences_per_micro_batch(workload)  # ceil: uneven chunks


def layout_logits_bytes(workload: Workload, strategy: str) -> int:
    """The fp32 logits the layout's activations count on each GPU (split where the layout splits them)."""
    return _layout_logits(workload, strategy)


def _layout_logits(workload: Workload, strategy: str) -> int:
    """The output logits on each GPU in fp32; Megatron's vocabulary-parallel head splits them by TP.

    None with a chunked loss, which computes the loss a block of tokens at a time from the hidden
    states and the output head's weight.
    """
    if workload.chunked_loss:
        return 0
    tp = workload.tensor_parallel if strategy == "megatron" else 1
    return 4 * layout_tokens(workload, strategy) * workload.shape.vocab_size // tp


def activation_parts(workload: Workload, strategy: str = "ddp") -> tuple[tuple[str, int], ...]:
    """The activations of `activation_bytes`, part by part: (what, bytes), without empty parts."""
    shape = workload.shape
    tp = workload.tensor_parallel if strategy in ("fsdp2_nd", "megatron") else 1
    tokens = layout_tokens(workload, strategy)
    sbh = tokens * shape.hidden_size
    megatron_sp = strategy == "megatron" and tp > 1  # Megatron's sequence parallelism (always on with TP)
    # 34·s·b·h per layer: 24 in the TP-sharded matmuls and attention, 10 in norms, dropout masks
    # and inputs, which TP alone keeps replicated.
    per_layer = 34 * sbh // tp if megatron_sp else 10 * sbh + 24 * sbh // tp
    layer_input = 2 * sbh // (tp if megatron_sp else 1)
    width = 1 if workload.half_precision else 2  # fp32 activations double every term
    logits = _layout_logits(workload, strategy)
    # "for all ... together (x each)": the figure before the words is the sum over the layers, never one
    # layer's share (read as "0.2 GiB each of the 16 layers" it would be 16 times too small).
    if workload.gradient_checkpointing:
        layers: tuple[tuple[str, int], ...] = (
            (
                f"for all {shape.layers} layers' inputs together ({_share(layer_input * width)} each),"
                " kept for recomputing them",
                layer_input * shape.layers * width,
            ),
            ("one layer's activations, recomputed in the backward pass", per_layer * width),
        )
    else:
        layers = (
            (
                f"for all {shape.layers} layers' activations together ({_share(per_layer * width)} each)",
                per_layer * shape.layers * width,
            ),
        )
    attention = mps_attention_bytes(workload)
    parts = (
        *layers,
        ("the output logits in fp32 (tokens x vocabulary x 4 bytes)", logits),
        ("attention score matrices, built whole on MPS", attention),
    )
    return tuple(part for part in parts if part[1])


def _share(size: int) -> str:
    """One layer's share in words: GiB with one decimal, or MiB below a tenth of a GiB (not "0.0 GiB")."""
    if size >= GIB:
        return f"{to_gib(size)} GiB"
    # Two decimals below 1 GiB: "0.25 GiB each" times 80 layers is the 20 GiB beside it, "0.2" is not.
    return f"{size / GIB:.2f} GiB" if size >= GIB // 10 else f"{round(size / 2**20):,} MiB"


# Layouts whose step holds a 16-bit copy of the trained weights beside the states when they train
# fp32 weights in 16-bit mixed precision. DDP (and one process) under Accelerate's mixed precision
# runs the forward and backward passes in autocast, which keeps a 16-bit cast of every trained
# weight until the pass ends ("Automatic Mixed Precision package - torch.amp", its weight cast
# cache: https://docs.pytorch.org/docs/stable/amp.html). ZeRO-1 and ZeRO-2 end each step with an
# all-gather of the updated 16-bit weights into their flat buffer; over gloo (the backend of a run
# on the CPU) the gathered weights pass through a flat buffer as large before they are copied in
# ("Distributed communication package - torch.distributed", all_gather_into_tensor:
# https://docs.pytorch.org/docs/stable/distributed.html).
WORKING_COPY_STRATEGIES = frozenset({"ddp", "zero1", "zero2", "zero2_offload_optimizer"})


def cpu_run_parts(est: Estimate, workload: Workload, buffers: int = 0) -> tuple[tuple[str, int], ...]:
    """What one process of a run on the CPU holds at its peak, part by part: (what, bytes), without empty parts.

    On the CPU the host RAM is the device too, so what a GPU run splits between the GPU and the
    host is in one resident memory:

    * the model states of the layout (`Estimate.model_states`);
    * what it offloads, with the allowance for pinned buffers and copies the host figure carries
      (`HOST_BUFFER_FACTOR`): DeepSpeed's CPU offload keeps staging buffers of the largest
      parameter and its gradient beside the offloaded state, in this same memory;
    * the backend's gradient buffers (`buffers`: DDP's buckets, DeepSpeed's reduce bucket, as the
      run's config sizes them);
    * the activations, and the loss's temporaries at the start of the backward pass
      (`Estimate.transient`), which a GPU run leaves to the fit margin but a limit on the
      process's memory counts;
    * a 16-bit working copy of the trained weights where the layout makes one
      (`WORKING_COPY_STRATEGIES`).
    """
    world = max(workload.world_size, 1)
    offloaded = est.host_per_node * max(workload.num_nodes, 1) // world
    copy = 0
    if workload.half_precision and est.strategy in WORKING_COPY_STRATEGIES:
        copy = 2 * trainable_params(workload)
    parts = (
        ("model states", est.model_states),
        ("what it offloads, with the allowance for pinned buffers", offloaded),
        ("gradient buffers", buffers),
        ("activations", est.activations),
        ("the loss's temporaries", est.transient),
        ("a 16-bit working copy of the trained weights", copy),
    )
    return tuple(part for part in parts if part[1])


def cpu_run_bytes(est: Estimate, workload: Workload, buffers: int = 0) -> int:
    """The peak resident memory of one process of a run on the CPU: the sum of `cpu_run_parts`."""
    return sum(size for _, size in cpu_run_parts(est, workload, buffers))


# Pure (frozen arguments, frozen result): the facts ask again for the same few layouts after every
# answer of an interactive run, for each size question's default, and in every variant `what_if` decides.
@lru_cache(maxsize=16384)
def estimate(workload: Workload, strategy: str, gpu_memory_gib: float, host_memory_gib: float | None) -> Estimate:
    """The estimate for one strategy (see the module docstring for the formulas)."""
    n = max(workload.world_size, 1)
    nodes = max(workload.num_nodes, 1)
    t = trainable_params(workload)
    w = weight_bytes(workload)
    trained_weights = t * (2 if workload.half_precision else 4)  # the trained parameters' own weights
    # fp32 master weights and gradients (8 bytes) and the optimizer's state (`moment_bytes`: Adam's
    # 8, since the layouts that offload step with AdamW): the 16 bytes per trained parameter.
    offloaded_states = 8 * t + moment_bytes(workload, strategy)
    frozen = frozen_decoder_bytes(workload)
    states = sum(size for _, size in state_parts(workload, strategy))
    host = {
        "zero2_offload_optimizer": offloaded_states,
        "zero3_offload_optimizer": offloaded_states,
        "zero3_offload_all": offloaded_states + w,
        # FSDP2 keeps one copy of each offloaded parameter: the trained ones as their fp32 master
        # (already in the 16 bytes), the frozen ones as stored; DeepSpeed's full offload keeps the
        # 16-bit weights beside the fp32 master, as its estimator counts.
        "fsdp2_offload": offloaded_states + w - trained_weights,
        # Every node's shard group holds a full copy: per node, not divided by the nodes.
        "hsdp_offload": (offloaded_states + w - trained_weights) * nodes,
    }.get(strategy, 0)
    if host and strategy in _REFERENCE_ON_HOST:
        # The reference copy is offloaded with the weights: per node as they are (HSDP: every node whole).
        host += reference_bytes(workload, strategy) * (nodes if strategy == "hsdp_offload" else 1)
    host_per_node = int(host * HOST_BUFFER_FACTOR / nodes)
    if strategy == "ddp_layer_offload":
        # Each process pins its own copy once (no buffer margin): one per GPU of the machine.
        host_per_node = frozen * max(n // nodes, 1)
    return Estimate(
        strategy=strategy,
        model_states=int(states),
        gathered=gathered_bytes(workload, strategy),
        activations=activation_bytes(workload, strategy),
        overhead=CONTEXT_OVERHEAD,
        host_per_node=host_per_node,
        gpu_memory=int(gpu_memory_gib * GIB),
        host_memory=None if host_memory_gib is None else int(host_memory_gib * GIB),
        title=_title(workload, strategy, n),
        device=workload.device,
        transient=loss_extra_bytes(workload, strategy),
        long_context=layout_tokens(workload, strategy) >= LONG_CONTEXT_TOKENS * sequences_per_micro_batch(workload),
    )


def _title(workload: Workload, strategy: str, n: int) -> str:
    """The row's label with this run's sizes, or "" for the fixed one (`STRATEGY_TITLES`)."""
    if strategy == "fsdp2_nd":
        return _nd_title(workload)
    if n == 1 and strategy in ("ddp", "ddp_layer_offload"):
        one = words_for(workload.device).single_row  # "1 GPU", or "Mac (MPS)" on Apple silicon
        return {"ddp": one, "ddp_layer_offload": f"{one} + layer offload"}[strategy]
    return ""


def _nd_title(workload: Workload) -> str:
    """The N-D row named by the sizes this run sets above 1, such as "FSDP2 + TP 2 x CP 4"."""
    sizes = (("TP", workload.tensor_parallel), ("CP", workload.context_parallel), ("EP", workload.expert_parallel))
    used = [f"{name} {size}" for name, size in sizes if size > 1]
    return f"FSDP2 + {' x '.join(used)}" if used else STRATEGY_TITLES["fsdp2_nd"]


def estimate_all(workload: Workload, gpu_memory_gib: float, host_memory_gib: float | None) -> dict[str, Estimate]:
    """Estimates for every strategy that applies to the layout (`applicable_strategies`), in order.

    A new dict each call (callers drop rows from it); the estimates themselves are frozen and shared.
    """
    return dict(_estimates(workload, gpu_memory_gib, host_memory_gib))


# An interactive run derives its facts again after every answer, and `what_if` decides a dozen
# variants of one run: most of them ask for the same workload's estimates again.
@lru_cache(maxsize=4096)
def _estimates(workload: Workload, gpu_gib: float, host_gib: float | None) -> tuple[tuple[str, Estimate], ...]:
    return tuple((s, estimate(workload, s, gpu_gib, host_gib)) for s in applicable_strategies(workload))


def memory_gib(value: float) -> str:
    """A device's memory in GiB as the user gave it (79.65, 23.99, 80.0): two decimals at most."""
    text = f"{value / GIB:.2f}".rstrip("0")
    return text + "0" if text.endswith(".") else text


def to_gib(value: int) -> float:
    """Bytes to GiB, rounded to one decimal for display."""
    return round(value / GIB, 1)


def spare_gib(estimate: Estimate) -> float:
    """What the device keeps at the loss peak for all the estimate does not count, as the shown figures give it.

    The usable line keeps the rest of the device (20% of a GPU) for fragmentation and buffers the
    estimate leaves out; a tight layout's moment takes part of that, and this is what remains
    (23.99 - 21.7 = 2.3 GiB on an RTX 4090).
    """
    return round(float(memory_gib(estimate.gpu_memory)) - sum_gib(estimate.total, estimate.transient), 1)


def sum_gib(*values: int) -> float:
    """A sum as a reader adds its shown parts: each part rounded first (7.4 + 2.0 shows 9.4, not 9.3)."""
    return round(sum(to_gib(value) for value in values), 1)


# What one GPU's PCIe link carries per step when state is offloaded, and a rough floor on the time:
# 25 GB/s is what a PCIe 4.0 x16 link moves in practice (PCIe 5.0 doubles it).
PCIE_BYTES_PER_SECOND = 25 * 10**9


def pcie_bytes_per_step(workload: Workload, strategy: str) -> int:
    """Bytes one GPU moves between its memory and host RAM per step, for an offload layout.

    Optimizer offload: the 16-bit gradients go out and the updated 16-bit weights come back
    (2 + 2 bytes per trained parameter, each GPU its 1/N share under ZeRO). ZeRO-3's offloaded
    weights also come in twice, for the forward and the backward pass (each GPU fetches its
    shard, then gathers it over the GPU links). FSDP2's offload moves its fp32 shards and fp32
    gradients instead, and nothing comes back (`fsdp2_offload_copies`). Layer offloading brings the frozen decoder
    layers in for the forward and again for the backward pass, and copies each one back to host
    RAM after use (Axolotl 0.21 copies it out although it did not change): 4 x their bytes per
    micro-batch, every process its own (recomputing checkpointed layers can move more). 0 for a
    layout that offloads nothing.
    """
    if strategy not in OFFLOAD_STRATEGIES:
        return 0
    if strategy == "ddp_layer_offload":
        return 4 * frozen_decoder_bytes(workload)
    nodes = max(workload.num_nodes, 1)
    n = max(workload.world_size // nodes if strategy == "hsdp_offload" else workload.world_size, 1)
    if strategy in FSDP2_OFFLOADS:
        into, out = fsdp2_offload_copies(workload)
        return (into + out) // n
    moved = 4 * trainable_params(workload)
    if strategy == "zero3_offload_all":
        moved += 2 * weight_bytes(workload)
    return moved // n


def fsdp2_offload_copies(workload: Workload) -> tuple[int, int]:
    """Bytes FSDP2's CPU offload copies per micro-batch, all GPUs together: (into the GPUs, out).

    FSDP2 keeps each shard in host RAM in the parameter's own dtype (fp32 for the trained weights
    under mixed precision) and copies it to the GPU before casting it for the all-gather, for the
    forward and again for the backward pass; the reduced gradient is cast back to that dtype
    before its copy to host RAM. The optimizer updates the shards in host RAM, so no weights come
    back after the step (PyTorch, torch/distributed/fsdp/_fully_shard/_fsdp_param.py
    `all_gather_inputs` and _fsdp_collectives.py `foreach_reduce_scatter`:
    https://github.com/pytorch/pytorch/tree/main/torch/distributed/fsdp/_fully_shard).
    """
    width = 2 if workload.half_precision else 4
    trained = trainable_params(workload)
    per_pass = weight_bytes(workload) + (4 - width) * trained  # the trained weights in fp32
    return 2 * per_pass, 4 * trained
