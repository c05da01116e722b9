"""A rough band for the time of one optimizer step in each layout: a planning figure, not a forecast.

Four costs make a step, each from the run's own numbers:

* compute: the floating-point operations of the step over the GPU's peak dense 16-bit tensor
  throughput (the vendor's datasheet figure in wizard/data/gpus.yaml) times the share of it a
  training run reaches (`UTILISATION`). Per token: 2 FLOPs per parameter in the forward pass
  and 4 in the backward pass (gradients of the activations and of the weights), the count of
  Kaplan et al., "Scaling Laws for Neural Language Models" (https://arxiv.org/abs/2001.08361);
  LoRA and QLoRA skip the frozen weights' gradients (2 instead of 4 in the backward pass);
  activation checkpointing recomputes the forward pass (2 more). Attention adds its score and
  value products, 2 x layers x sequence x width per token forward with a causal mask, three times
  that with the backward pass. A mixture of experts computes with its active parameters only.
* traffic between GPUs: the bytes each GPU sends in its collectives, as NCCL's bus bandwidth
  counts them ("Performance reported by NCCL tests",
  https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md): an all-reduce sends
  2(n-1)/n of the data, an all-gather or reduce-scatter (n-1)/n. DDP all-reduces the 16-bit
  gradients once per optimizer step (gradient accumulation skips the exchange in between);
  ZeRO-2 reduce-scatters them every micro-batch and gathers the updated weights after the
  step; ZeRO-3 and FSDP2 gather every layer's weights in the forward and again in the backward
  pass and reduce-scatter the gradients, every micro-batch. Inside one machine this runs over
  NVLink where the card has it, else PCIe; once it spans machines, over the network.
* traffic to host RAM (offload), over the card's PCIe link, which carries both directions at
  once: the gradients out every micro-batch and the updated weights back once per step;
  offloaded weights in for the forward and the backward pass; under Axolotl's layer offloading,
  every frozen layer in twice and out twice per micro-batch (`memory.pcie_bytes_per_step`).
* the optimizer step on the CPU (offload): Adam over each machine's share of the trained
  parameters, at `CPU_ADAM_PARAMS_PER_SECOND`.

The band's fast end lets traffic hide behind compute (what the frameworks' prefetching aims
for) at the high utilisation; its slow end adds every cost at the low one. Neither counts data
loading, logging, evaluation or saving checkpoints.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache

from wizard.engine.catalog import GpuInfo
from wizard.engine.memory import (
    FSDP2_OFFLOADS,
    GATHERING,
    GIB,
    OFFLOAD_STRATEGIES,
    STRATEGY_TITLES,
    Estimate,
    Workload,
    estimate,
    frozen_decoder_bytes,
    fsdp2_offload_copies,
    sequences_per_micro_batch,
    sum_gib,
    trainable_params,
    weight_bytes,
)

# The share of the GPU's peak dense 16-bit throughput a training run reaches ("model FLOPs
# utilisation"): about 30% for a plain fine-tuning script with small micro-batches, up to about
# 60% for a tuned stack (the published runs the test suite checks the band against reach 33 to
# 64%). QLoRA dequantizes every 4-bit weight before each use, which costs it about a fifth of
# LoRA's throughput in published comparisons and more with small batches.
UTILISATION = {"full": (0.60, 0.30), "lora": (0.60, 0.30), "qlora": (0.45, 0.20)}

# Bytes per second, as NCCL's bus bandwidth counts them, between the GPUs of one machine linked by
# PCIe only: peer-to-peer through a PCIe switch (4.0 x16), and through host RAM on cards without
# peer-to-peer (GeForce RTX 40 and 50 series), about half of it.
PCIE_GPU_LINK = {3: 8e9, 4: 16e9, 5: 32e9}
NO_P2P_FACTOR = 0.5
# GPU to host RAM for offload, pinned memory over PCIe x16 in practice.
PCIE_HOST_LINK = {3: 12e9, 4: 25e9, 5: 50e9}
# Between machines: 400 Gb/s per GPU (InfiniBand or EFA, as H100 clusters are built) at best,
# 100 Gb/s Ethernet for the whole machine at worst.
# An NVMe drive's sequential bandwidth, (read, write) in bytes per second: a PCIe 4.0 drive at
# its best, about 7 and 5 GB/s (the figures drive makers state), down to 2 and 1 GB/s for an
# older or shared drive. DeepSpeed's swapping reads and writes large blocks, the sequential case.
NVME_FAST = (7e9, 5e9)
NVME_SLOW = (2e9, 1e9)
NETWORK_FAST = 50e9
NETWORK_SLOW = 12.5e9
# Adam's update on the CPU, parameters per second for one machine: it reads and writes about 30
# bytes per parameter, so host memory bandwidth bounds it at a few billion per second. DeepSpeed's
# CPU Adam is "5X-7X faster than the standard PyTorch implementation" (DeepSpeed's ZeRO-Offload
# tutorial, https://www.deepspeed.ai/tutorials/zero-offload/): PyTorch's unfused loop. FSDP2's
# offload runs PyTorch's fused AdamW instead (torch.optim.AdamW(fused=True), on the CPU since
# PyTorch 2.4; Axolotl's adamw_torch_fused, which the wizard writes, and the Transformers Trainer's
# default), one pass over memory as DeepSpeed's: bench/cpu_adam.py measures the two within a factor
# of 1.5 of each other and the unfused loop 3 to 6 times slower. So both run at the same rate.
CPU_ADAM_PARAMS_PER_SECOND = {"deepspeed": (4e9, 1.5e9), "torch": (4e9, 1.5e9)}
# The host memory traffic behind that rate, bytes per parameter: the fp32 weight and its two moments read
# and written, the gradient read and the 16-bit copy written.
CPU_ADAM_BYTES_PER_PARAM = 30
# The rate as the summary's Step line says it (both kinds run at the same rate).
CPU_ADAM_RATE_WORDS = (
    f"{CPU_ADAM_PARAMS_PER_SECOND['deepspeed'][1] / 1e9:g} to {CPU_ADAM_PARAMS_PER_SECOND['deepspeed'][0] / 1e9:g}"
    " billion parameters a second per machine"
)

# The layouts whose gradients are exchanged every micro-batch (the others once per step).
_REDUCES_EVERY_MICRO_BATCH = GATHERING | {"zero2", "zero2_offload_optimizer"}
# Each offload layout and the layout it offloads from (same sharding, same GPU traffic).
OFFLOADED_FROM = {
    "zero2_offload_optimizer": "zero2",
    "zero3_offload_optimizer": "zero3",
    "zero3_offload_all": "zero3",
    "fsdp2_offload": "fsdp2",
    "hsdp_offload": "hsdp",
    "ddp_layer_offload": "ddp",
}


# The GPU-to-GPU links by vendor: NVIDIA's NVLink, AMD's Infinity Fabric, Gaudi's on-chip RoCE ports.
_OWN_LINK = {"nvidia": "NVLink", "amd": "Infinity Fabric", "intel": "Gaudi's own RoCE links"}


@dataclass(frozen=True)
class Links:
    """The GPU's throughput and the links around it, in bytes (or FLOPs) per second."""

    gpu: str  # the card's short name, for the assumptions line
    flops: float  # peak dense 16-bit tensor FLOPs per second
    flops_note: str  # what the rate rests on where no datasheet gives it ("" where one does)
    gpu_link: tuple[float, float]  # between the GPUs of one machine: (fast, slow)
    gpu_link_words: str  # "NVLink", "PCIe 4.0", "NVLink (SXM boards) or PCIe 4.0"
    host_link: float  # GPU <-> host RAM
    host_link_words: str
    # Each machine's network in bytes per second, as the user gave it (network_gbps); None for the
    # band from NETWORK_SLOW per machine to NETWORK_FAST per GPU.
    network: float | None = None
    told_link: bool = False  # the GPU links are the user's answer (gpu_link), not the card's default
    # gpu_link: nvlink answered for a card without NVLink: PCIe is counted, and the assumptions say why.
    no_nvlink: bool = False
    # Where the card's boards differ: each link said on its own, fast first ("NVLink (SXM boards)",
    # "PCIe 4.0 (PCIe boards)"), for comparisons that hold over one link and not the other.
    each_link: tuple[str, ...] = ()


def links_for(gpu: GpuInfo | None, gpu_link: str | None = None, network_gbps: float | None = None) -> Links | None:
    """The card's figures for the speed band; None for a card without a throughput figure.

    `gpu_link` ("nvlink", "pcie"; anything else leaves the card's own) and `network_gbps` (each
    machine's network) are the user's answers where given.
    """
    if gpu is None or gpu.tflops is None:
        return None
    pcie = PCIE_GPU_LINK[gpu.pcie_gen] * (1.0 if gpu.p2p else NO_P2P_FACTOR)
    pcie_words = f"PCIe {gpu.pcie_gen}.0" + ("" if gpu.p2p else " through host RAM (no peer-to-peer)")
    own = _OWN_LINK.get(gpu.vendor, "NVLink")
    each: tuple[str, ...] = ()
    if gpu.gpu_link_gbs is None:
        link, words = (pcie, pcie), pcie_words
    elif gpu.gpu_link_varies:
        each = (f"{own} (SXM boards)", f"{pcie_words} (PCIe boards)")
        link, words = (gpu.gpu_link_gbs * 1e9, pcie), " or ".join(each)
    else:
        link, words = (gpu.gpu_link_gbs * 1e9, gpu.gpu_link_gbs * 1e9), own
    told = False
    if gpu_link == "pcie":
        link, words, told, each = (pcie, pcie), pcie_words, True, ()
    elif gpu_link == "nvlink" and gpu.gpu_link_gbs is not None:
        link, words, told, each = (gpu.gpu_link_gbs * 1e9, gpu.gpu_link_gbs * 1e9), own, True, ()
    return Links(
        gpu=gpu.short_name,
        flops=gpu.tflops * 1e12,
        flops_note=gpu.tflops_note,
        gpu_link=link,
        gpu_link_words=words,
        host_link=PCIE_HOST_LINK[gpu.pcie_gen],
        host_link_words=f"PCIe {gpu.pcie_gen}.0 x16",
        network=network_gbps * 1e9 / 8 if network_gbps else None,
        told_link=told,
        no_nvlink=gpu_link == "nvlink" and gpu.gpu_link_gbs is None,
        each_link=each,
    )


@dataclass(frozen=True)
class StepTime:
    """One layout's optimizer step: its costs in seconds, each as (fast, slow) where it varies."""

    strategy: str
    accumulation: int  # micro-batches per optimizer step on each GPU
    group: int  # GPUs that work on the same sequences (tensor, context or sequence parallel), 1 without
    tokens: int  # tokens trained per optimizer step, all GPUs together
    compute: tuple[float, float]
    gpu_bytes: int  # bytes each GPU sends to the GPUs of its own machine per optimizer step
    network_bytes: int  # bytes each machine sends to the other machines per optimizer step
    gpu_comm: tuple[float, float]  # the exchange inside each machine
    network_comm: tuple[float, float]  # the exchange between machines, after it
    host_bytes: int  # bytes each GPU moves to and from host RAM per optimizer step
    host_s: float
    cpu_s: tuple[float, float]  # the optimizer step on the CPU
    # One collective over every GPU of every machine runs through both kinds of link at once (a
    # ring is as fast as its slowest link); HSDP's exchange inside a machine and its exchange
    # between machines are separate collectives, one after the other.
    one_ring: bool = False
    # NVMe offload: what each machine reads from and writes to the drive per optimizer step, and
    # the time it takes at both ends of the drive band (0 and (0, 0) when nothing goes to a drive).
    drive_bytes: int = 0
    drive_s: tuple[float, float] = (0.0, 0.0)
    # Of host_bytes, what comes into the GPU (the rest goes out to host RAM, at the same time).
    host_in: int = 0

    @property
    def host_gib(self) -> float:
        """GiB over PCIe per GPU per step, both directions, as a reader adds the in and out figures shown."""
        return sum_gib(self.host_in, self.host_bytes - self.host_in)

    def comm(self, end: int) -> float:
        """The GPU-to-GPU exchange at one end of the band (0 fast, 1 slow)."""
        if self.one_ring:
            return max(self.gpu_comm[end], self.network_comm[end])
        return self.gpu_comm[end] + self.network_comm[end]

    @property
    def low(self) -> float:
        """The fast end: traffic hidden behind compute, the optimizer step on the CPU after it."""
        return max(self.compute[0], self.comm(0), self.host_s) + self.cpu_s[0] + self.drive_s[0]

    @property
    def high(self) -> float:
        """The slow end: every cost one after the other."""
        return self.compute[1] + self.comm(1) + self.host_s + self.cpu_s[1] + self.drive_s[1]

    @property
    def middle(self) -> float:
        """The band's middle, halfway between its ends, for comparing two layouts."""
        return (self.low + self.high) / 2

    @property
    def tokens_per_second(self) -> tuple[float, float]:
        """Tokens per second for the whole run: (slow, fast)."""
        return self.tokens / self.high, self.tokens / self.low

    @property
    def bound(self) -> str:
        """What takes the most time: compute, gpu_links, network, host_link or cpu_optimizer."""
        costs = {
            "compute": _mid(self.compute),
            "gpu_links": _mid(self.gpu_comm),
            "network": _mid(self.network_comm),
            "host_link": self.host_s,
            "cpu_optimizer": _mid(self.cpu_s),
            "nvme_drive": _mid(self.drive_s),
        }
        return max(costs, key=lambda name: costs[name])

    def bound_at(self, end: int) -> str:
        """What takes the most time at one end of the band (0 fast, 1 slow)."""
        costs = self.costs(end)
        return max(costs, key=lambda name: costs[name])

    def close_behind(self, end: int) -> str | None:
        """The cost within `CLOSE_BEHIND` of the one that bounds an end of the band, where there is one.

        "Bound by compute" reads as "the network does not matter"; with the network a tenth behind,
        a slower network than assumed would bound the step instead.
        """
        costs = self.costs(end)
        first = max(costs, key=lambda name: costs[name])
        rest = {name: cost for name, cost in costs.items() if name != first}
        second = max(rest, key=lambda name: rest[name])
        return second if costs[first] > 0 and rest[second] >= CLOSE_BEHIND * costs[first] else None

    def costs(self, end: int) -> dict[str, float]:
        """Each cost of one end of the band (0 fast, 1 slow), in seconds, by name."""
        return {
            "compute": self.compute[end],
            "gpu_links": self.gpu_comm[end],
            "network": self.network_comm[end],
            "host_link": self.host_s,
            "cpu_optimizer": self.cpu_s[end],
            "nvme_drive": self.drive_s[end],
        }


def bound_text(step: StepTime) -> str:
    """What bounds the step: one cost ("network"), or two where it differs between the band's ends.

    A band spans slow and fast networks, CPUs and utilisations: naming one bottleneck where the
    other end has another would hold at one end only. The slow end's comes first.
    """
    slow, fast = BOUND_WORDS[step.bound_at(1)], BOUND_WORDS[step.bound_at(0)]
    return slow if slow == fast else f"{slow} or {fast}"


# A second cost at least this share of the bounding one is "close behind" it (said beside the bound).
CLOSE_BEHIND = 0.9


def bound_sentence(step: StepTime) -> str:
    """`bound_text` in words for a sentence: which cost bounds which end of the band, and a close second."""
    slow, fast = BOUND_WORDS[step.bound_at(1)], BOUND_WORDS[step.bound_at(0)]
    said = f"bound by {slow}" if slow == fast else f"bound by {slow} at its slow end, {fast} at its fast end"
    behind = {BOUND_WORDS[name] for end in (0, 1) if (name := step.close_behind(end)) is not None}
    behind -= {slow, fast}
    if behind:
        # "the network", "the GPU links", but "compute" bare, as "bound by compute" says it.
        named = [word if word == BOUND_WORDS["compute"] else f"the {word}" for word in sorted(behind)]
        said += f", with {' and '.join(named)} close behind"
    return said


def _mid(band: tuple[float, float]) -> float:
    return (band[0] + band[1]) / 2


def flops_per_token(workload: Workload) -> float:
    """Forward and backward FLOPs per trained token (see the module docstring)."""
    shape = workload.shape
    active = shape.active_params or shape.params
    # The input embedding is a lookup, not a product; a tied head still multiplies by it.
    matmul = active - (0 if shape.tied_embeddings else shape.vocab_size * shape.hidden_size)
    passes = 3 if workload.method == "full" else 2  # forward 1 + backward 2 (weights' gradients) or 1
    if workload.gradient_checkpointing:
        passes += 1
    # DPO's reference model scores the same tokens in one more forward pass, unless precomputed.
    reference = 1 if workload.reference in ("copy", "base") else 0
    passes += reference
    attention = 2 * shape.layers * workload.sequence_length * shape.heads * shape.head_dim
    # Attention's backward pass always computes both operands' gradients: 3x the forward.
    attention_passes = 3 + (1 if workload.gradient_checkpointing else 0) + reference
    return 2.0 * matmul * passes + attention * attention_passes


# Pure, and asked again for the same layout after every answer of an interactive run and by `what_if`.
@lru_cache(maxsize=8192)
def step_time(workload: Workload, strategy: str, links: Links, accumulation: int = 1) -> StepTime | None:
    """The band for one layout, or None for one this model does not cover (Megatron-LM's pipeline)."""
    if strategy == "megatron":
        return None
    n = max(workload.world_size, 1)
    nodes = max(workload.num_nodes, 1)
    per_node = max(n // nodes, 1)
    split = workload.tensor_parallel * workload.context_parallel * workload.sequence_parallel
    split = split if strategy in ("fsdp2_nd",) or workload.sequence_parallel > 1 else 1
    data_parallel = max(n // max(split, 1), 1)
    micro_tokens = sequences_per_micro_batch(workload) * workload.sequence_length
    tokens = micro_tokens * accumulation * data_parallel
    flops = flops_per_token(workload) * micro_tokens * accumulation / max(split, 1)
    fast_util, slow_util = UTILISATION.get(workload.method, UTILISATION["full"])
    compute = (flops / (links.flops * fast_util), flops / (links.flops * slow_util))
    gpu_bytes, network_bytes = _gpu_traffic(workload, strategy, accumulation)
    # A machine's network: 400 Gb/s for each of its GPUs at best, 100 Gb/s for all of them at worst.
    if links.network is not None:
        network = (network_bytes / links.network, network_bytes / links.network)
    else:
        network = (network_bytes / (NETWORK_FAST * per_node), network_bytes / NETWORK_SLOW)
    inside = (gpu_bytes / links.gpu_link[0], gpu_bytes / links.gpu_link[1])
    host_in, host_out = host_traffic(workload, strategy, accumulation)
    cpu = (0.0, 0.0)
    if strategy in OFFLOAD_STRATEGIES and strategy != "ddp_layer_offload":
        # Each machine's CPU updates its GPUs' shares (ZeRO and FSDP2 shard the optimizer state).
        shard = trainable_params(workload) * per_node / n
        if strategy == "hsdp_offload":
            shard = trainable_params(workload)  # every machine holds a full copy
        fast, slow = CPU_ADAM_PARAMS_PER_SECOND["deepspeed" if strategy.startswith("zero") else "torch"]
        cpu = (shard / fast, shard / slow)
    return StepTime(
        strategy=strategy,
        accumulation=accumulation,
        group=max(split, 1),
        tokens=tokens,
        compute=compute,
        gpu_bytes=gpu_bytes,
        network_bytes=network_bytes,
        gpu_comm=inside,
        network_comm=network,
        one_ring=nodes > 1 and strategy not in ("hsdp", "hsdp_offload"),
        host_bytes=host_in + host_out,
        host_s=max(host_in, host_out) / links.host_link,
        cpu_s=cpu,
        host_in=host_in,
    )


def with_nvme(step: StepTime, workload: Workload) -> StepTime:
    """The step of ZeRO-3 offloading to NVMe: the CPU offload row's, plus each machine's drive traffic.

    DeepSpeed's optimizer swapper reads each sub-group's fp32 weights, momentum, variance and
    gradient (16 bytes per trained parameter) and writes them back after the update; its parameter
    swapper reads each 16-bit weight for the forward and the backward pass of every micro-batch and
    writes the updated trained ones once per step. Counted after the other costs at both ends, as
    the optimizer waits for its sub-groups (pipelined swapping hides part of it).
    """
    nodes = max(workload.num_nodes, 1)
    share = max(workload.world_size // nodes, 1) / max(workload.world_size, 1)  # this machine's shards
    trained = trainable_params(workload)
    reads = (16 * trained + 2 * weight_bytes(workload) * step.accumulation) * share
    writes = (16 * trained + 2 * trained) * share
    fast = reads / NVME_FAST[0] + writes / NVME_FAST[1]
    slow = reads / NVME_SLOW[0] + writes / NVME_SLOW[1]
    return replace(step, drive_bytes=int(reads + writes), drive_s=(fast, slow))


def _gpu_traffic(workload: Workload, strategy: str, accumulation: int) -> tuple[int, int]:
    """Bytes per optimizer step: (each GPU sends inside its machine, each machine sends to the others).

    A collective over every GPU of every machine crosses each machine's boundary with about what
    one GPU's ring carries (NCCL runs one ring per network card, and the ring passes each machine
    once); HSDP's exchange between replicas runs one all-reduce per GPU of a machine at once, so
    the machine sends all of them.
    """
    n = max(workload.world_size, 1)
    nodes = max(workload.num_nodes, 1)
    if n == 1:
        return 0, 0
    grads = 2 * trainable_params(workload)  # 16-bit gradients
    weights = weight_bytes(workload)
    ring = (n - 1) / n
    if strategy in ("hsdp", "hsdp_offload"):
        group = max(n // nodes, 1)
        inside = (2 * weights + grads) * (group - 1) / group * accumulation
        # Every GPU all-reduces its shard's gradients with its peers on the other machines.
        across = 2 * (nodes - 1) / nodes * grads / group * accumulation * group
        return int(inside), int(across)
    if strategy in GATHERING:
        tp = workload.tensor_parallel if strategy == "fsdp2_nd" else 1
        sent = (2 * weights + grads) / tp * ring * accumulation + _mesh_traffic(workload, strategy) * accumulation
    elif strategy in _REDUCES_EVERY_MICRO_BATCH:
        sent = grads * ring * accumulation + grads * ring  # gradients every micro-batch, weights once
    else:
        sent = 2 * grads * ring  # DDP and ZeRO-1: one exchange per optimizer step
    # Across machines, one ring carries these bytes over the GPU links and the network alike.
    return (int(sent), int(sent)) if nodes > 1 else (int(sent), 0)


def _mesh_traffic(workload: Workload, strategy: str) -> float:
    """Per micro-batch: tensor parallelism's activation all-reduces and context parallelism's key/value ring."""
    if strategy != "fsdp2_nd":
        return 0.0
    shape = workload.shape
    tp, cp = workload.tensor_parallel, workload.context_parallel
    local_tokens = sequences_per_micro_batch(workload) * workload.sequence_length / cp
    passes = 3 + (1 if workload.gradient_checkpointing else 0)  # forward, backward x2, recompute
    sent = 0.0
    if tp > 1:
        # Two all-reduces of the layer's 16-bit activations per forward pass (attention and MLP).
        sent += 2 * passes * 2 * (tp - 1) / tp * local_tokens * shape.hidden_size * 2 * shape.layers
    if cp > 1:
        # Ring attention passes every other rank's keys and values around once per pass.
        kv = 2 * local_tokens * shape.kv_heads * shape.head_dim * 2
        sent += passes * (cp - 1) * kv * shape.layers / max(tp, 1)
    return sent


def host_traffic(workload: Workload, strategy: str, accumulation: int) -> tuple[int, int]:
    """Bytes each GPU moves per optimizer step: (into the GPU, out to host RAM); 0 without offload.

    PCIe carries both directions at once, so the time is the larger of the two over the link.
    """
    if strategy not in OFFLOAD_STRATEGIES:
        return 0, 0
    if strategy == "ddp_layer_offload":
        # Every micro-batch, each frozen layer comes in for the forward and the backward pass and
        # is copied back out after each (Axolotl 0.21), see memory.pcie_bytes_per_step.
        frozen = 2 * frozen_decoder_bytes(workload) * accumulation
        return frozen, frozen
    nodes = max(workload.num_nodes, 1)
    n = max(workload.world_size // nodes if strategy == "hsdp_offload" else workload.world_size, 1)
    trained = trainable_params(workload)
    if strategy in FSDP2_OFFLOADS:
        # fp32 shards in for both passes and fp32 gradients out, every micro-batch; nothing comes back.
        copied_in, copied_out = fsdp2_offload_copies(workload)
        return copied_in * accumulation // n, copied_out * accumulation // n
    # Gradients go out every micro-batch, the updated 16-bit weights come back once per step.
    into, out = 2 * trained, 2 * trained * accumulation
    if strategy == "zero3_offload_all":
        into += 2 * weight_bytes(workload) * accumulation  # for the forward and the backward pass
    return into // n, out // n


# What limits a layout's step, as the speed table and the explanations say it.
BOUND_WORDS = {
    "compute": "compute",
    "gpu_links": "GPU links",
    "network": "network",
    "host_link": "PCIe",
    "cpu_optimizer": "CPU optimizer",
    "nvme_drive": "NVMe drive",
}


def seconds_text(value: float) -> str:
    """A time as the band prints it: two significant digits ("0.75", "3.2", "14", "105")."""
    if value < 1:
        return f"{value:.2f}"
    return f"{value:.1f}" if value < 10 else f"{value:.0f}"


def shown_middle(step: StepTime) -> float:
    """The middle of the band as printed: what a reader gets from the two figures they see.

    Comparisons said in percent use it, so "26% shorter" can be checked against the printed bands.
    """
    return (float(seconds_text(step.low)) + float(seconds_text(step.high))) / 2


def band_text(step: StepTime) -> str:
    """The step's band in seconds, "0.75-3.2 s" (one figure when both ends round alike)."""
    low, high = seconds_text(step.low), seconds_text(step.high)
    return f"{low} s" if low == high else f"{low}-{high} s"


def rate_text(step: StepTime) -> str:
    """Tokens per second for the whole run, two significant digits: "3,200-11,000"."""
    slow, fast = (_two_digits(value) for value in step.tokens_per_second)
    return slow if slow == fast else f"{slow}-{fast}"


def _two_digits(value: float) -> str:
    if value < 10:
        return f"{value:.1f}"
    digits = len(str(int(value))) - 2
    return f"{round(value, -digits):,.0f}"


def ratio_text(step: StepTime, chosen: StepTime) -> str:
    """This layout's step time over the chosen one's, at the bands' middles: "1.0x", "5.4x", "15x"."""
    ratio = step.middle / chosen.middle
    return f"{ratio:.1f}x" if ratio < 9.95 else f"{ratio:.0f}x"


def cpu_adam_text(kinds: set[str]) -> str:
    """The CPU optimizer rates the shown offload rows assume ("deepspeed", "torch")."""
    said = {
        "deepspeed": "DeepSpeed's CPU Adam (ZeRO offload rows) at {slow:g} to {fast:g} billion parameters per second",
        "torch": "PyTorch's fused AdamW on the CPU (FSDP2 offload rows; adamw_torch_fused, or"
        " torch.optim.AdamW(fused=True)) at the same {slow:g} to {fast:g} billion: like DeepSpeed's, its kernel makes"
        " one pass over memory (DeepSpeed's '5 to 7 times faster' is against PyTorch's unfused loop)",
    }
    rates = [
        said[kind].format(
            slow=CPU_ADAM_PARAMS_PER_SECOND[kind][1] / 1e9, fast=CPU_ADAM_PARAMS_PER_SECOND[kind][0] / 1e9
        )
        for kind in ("deepspeed", "torch")
        if kind in kinds
    ]
    # Both kinds run at the same rate (CPU_ADAM_PARAMS_PER_SECOND): the bandwidth behind it is said once.
    fast, slow = (rate / 1e9 for rate in CPU_ADAM_PARAMS_PER_SECOND["deepspeed"])
    return (
        "Adam's update on the CPU, per machine: "
        + ", and ".join(rates)
        + f" (the wizard's own figure, not a published benchmark: Adam reads and writes about"
        f" {CPU_ADAM_BYTES_PER_PARAM} bytes per parameter (the fp32 weight, its two moments, the gradient and the"
        f" 16-bit copy), so host memory bandwidth bounds it, and {slow:g} to {fast:g} billion a second is"
        f" {slow * CPU_ADAM_BYTES_PER_PARAM:g} to {fast * CPU_ADAM_BYTES_PER_PARAM:g} GB/s, what a server's memory"
        " channels give: more channels, the fast end)"
    )


def cpu_adam_kind(strategy: str) -> str | None:
    """Which CPU optimizer an offload layout runs: DeepSpeed's CPU Adam, PyTorch's AdamW, or none."""
    if strategy not in OFFLOAD_STRATEGIES or strategy == "ddp_layer_offload":
        return None
    return "deepspeed" if strategy.startswith("zero") else "torch"


def assumptions_text(
    step: StepTime,
    links: Links,
    workload: Workload,
    accumulation_source: str = "",
    cpu_adam: set[str] | None = None,
    offloads: bool = True,
) -> str:
    """What the band assumes, in one sentence of the run's own numbers.

    `accumulation_source` says where the micro-batches per step come from ("gradient_accumulation_steps:
    4 in axolotl.yaml"); `cpu_adam` the CPU optimizers of the rows shown (`cpu_adam_kind`);
    `offloads` whether a row shown moves state to host RAM (the PCIe link is said only then).
    """
    gpus = workload.world_size
    micro = (f"{step.accumulation} micro-batches" if step.accumulation > 1 else "1 micro-batch") + (
        # A DPO pair is two sequences, and the reference scores them in one more forward pass.
        f" of {workload.micro_batch_size} pair{'s' if workload.micro_batch_size > 1 else ''}"
        f" ({sequences_per_micro_batch(workload)} x {workload.sequence_length:,} tokens"
        + (", with the reference's forward pass" if workload.reference in ("copy", "base") else "")
        + ")"
        if workload.pairs
        else f" of {workload.micro_batch_size} x {workload.sequence_length:,} tokens"
    )
    if accumulation_source:
        micro += f" ({accumulation_source})"
    where = "on the GPU" if gpus == 1 else f"on each of the {gpus} GPUs"
    if step.group > 1:
        kinds = [
            name
            for name, size in (
                ("tensor", workload.tensor_parallel),
                ("context", workload.context_parallel),
                ("sequence", workload.sequence_parallel),
            )
            if size > 1
        ]
        where = (
            f"on each of the {gpus // step.group} groups of {step.group} GPUs that split one sequence"
            f" ({' and '.join(kinds)} parallel)"
        )
    fast, slow = UTILISATION.get(workload.method, UTILISATION["full"])
    qlora = " (QLoRA dequantizes every 4-bit weight before use)" if workload.method == "qlora" else ""
    parts = [
        f"a step is {micro} {where}, then the optimizer step",
        f"{slow:.0%}-{fast:.0%} of the {links.gpu}'s {links.flops / 1e12:g} TFLOPS (peak dense 16-bit"
        + (f"; {links.flops_note}" if links.flops_note else "")
        + f"){qlora}",
    ]
    if gpus > 1:
        card = links.gpu.split()[0]
        board = f" (answer gpu_link, or name the board in gpu_model, {card} SXM or {card} PCIe, for one figure)"
        parts.append(
            f"{links.gpu_link_words} between the GPUs of a machine"
            + (" (gpu_link)" if links.told_link else "")
            + (f" (gpu_link: nvlink was answered, but the {links.gpu} has no NVLink)" if links.no_nvlink else "")
            + (board if links.gpu_link[0] != links.gpu_link[1] else "")
        )
    if workload.num_nodes > 1 and links.network is not None:
        parts.append(f"{links.network * 8 / 1e9:g} Gb/s for each machine's network (your network_gbps)")
    elif workload.num_nodes > 1:
        parts.append(
            f"between machines, from {NETWORK_FAST * 8 / 1e9:.0f} Gb/s for each GPU (a network card per GPU, as"
            f" InfiniBand or EFA clusters are built) down to {NETWORK_SLOW * 8 / 1e9:.0f} Gb/s for the whole machine"
            " (answer network_gbps for one figure)"
        )
    if offloads:
        parts.append(
            f"{links.host_link_words} to host RAM ({links.host_link / 1e9:g} GB/s each way; it carries both"
            " directions at once, so a step's copies in and out overlap)"
        )
    if cpu_adam:
        parts.append(cpu_adam_text(cpu_adam))
    if step.drive_bytes:
        parts.append(
            f"an NVMe drive reading {NVME_FAST[0] / 1e9:g} GB/s and writing {NVME_FAST[1] / 1e9:g} GB/s at best"
            f" (a PCIe 4.0 drive), {NVME_SLOW[0] / 1e9:g} and {NVME_SLOW[1] / 1e9:g} GB/s at worst, for about"
            f" {step.drive_bytes / GIB:.0f} GiB read and written per machine every step (the optimizer state and"
            " gradients in and out, the 16-bit weights in for every forward and backward pass)"
        )
    return "; ".join(parts)


def larger_batch_words(workload: Workload, step: StepTime, wider: StepTime) -> str:
    """What a larger micro-batch at the same accumulation does to the global batch, said with its numbers.

    The step-time levers keep the accumulation steps: the global batch then grows with the
    micro-batch, a training change the reader must see ("a global batch of 1,024 sequences
    instead of 32"), not one hidden in a tokens-per-second figure.
    """
    return (
        f" (with the same {step.accumulation} accumulation step{'s' if step.accumulation > 1 else ''}: a global"
        f" batch of {_sequences(wider, workload):,} sequences instead of {_sequences(step, workload):,})"
    )


def _sequences(step: StepTime, workload: Workload) -> int:
    """The global batch of a step in sequences: its tokens over the sequence length."""
    return step.tokens // (workload.sequence_length * (2 if workload.pairs else 1))


def _within_batch(workload: Workload, step: StepTime, roomier: Workload | None) -> tuple[Workload, int] | None:
    """The largest micro-batch up to `roomier`'s that splits the same global batch, with its accumulation.

    For a global batch the user gave: a lever that grew it would change the training, not its speed.
    None where no larger micro-batch divides the sequences each GPU takes per step.
    """
    if roomier is None:
        return None
    per_gpu = workload.micro_batch_size * step.accumulation
    for micro in range(roomier.micro_batch_size, workload.micro_batch_size, -1):
        if per_gpu % micro == 0:
            return replace(workload, micro_batch_size=micro), per_gpu // micro
    return None


def larger_micro(
    workload: Workload, step: StepTime, links: Links, roomier: Workload | None, keep_global: bool
) -> tuple[Workload, StepTime, str] | None:
    """A larger micro-batch that fits, its step, and the words on what it does to the global batch."""
    if keep_global:
        within = _within_batch(workload, step, roomier)
        if within is None:
            return None
        larger, accumulation = within
        wider = step_time(larger, step.strategy, links, accumulation)
        words = (
            f" (the same global batch of {_sequences(step, workload):,} sequences: {accumulation} accumulation"
            f" step{'s' if accumulation > 1 else ''} instead of {step.accumulation})"
        )
    else:
        if roomier is None or roomier.micro_batch_size <= workload.micro_batch_size:
            return None
        larger, wider = roomier, step_time(roomier, step.strategy, links, step.accumulation)
        words = ""
    if wider is None:
        return None
    return larger, wider, words or larger_batch_words(workload, step, wider)


# A larger micro-batch offered as a speed lever fits the usable memory, not necessarily the room the
# wizard keeps when it picks one itself (batch_choice): said, or the two read as a contradiction.
FITS_BY_ESTIMATE = "fits the usable memory by the estimate, where the wizard's own pick keeps its peak within 70% of it"


def bottleneck_note(
    workload: Workload,
    step: StepTime,
    links: Links,
    accumulation_key: str,
    roomier: Workload | None = None,
    *,
    keep_global: bool = False,
    brief: bool = False,
) -> str | None:
    """What dominates the chosen layout's step, with the lever that eases it; a multi-machine run's network.

    `brief` (the summary): a CPU-bound step's first lever only, the others left to the long form.

    `accumulation_key` says where the user sets gradient accumulation (the Axolotl key, or the
    Accelerator argument in an Accelerate training script); `roomier` is the workload with the
    largest micro-batch that still fits (`largest_micro_batch`), a lever for a CPU-bound step.
    `keep_global`: the user gave the global batch, so a larger micro-batch keeps it (less accumulation).
    """
    gib = 2**30
    nvme_bound = "nvme_drive" in (step.bound_at(0), step.bound_at(1))
    larger = larger_micro(workload, step, links, roomier, keep_global)
    if nvme_bound and larger is not None:
        # The drive's reads of the weights come once per micro-batch whatever its size: a larger
        # micro-batch carries more tokens through the same traffic.
        bigger, wider, batch_words = larger
        if wider is not None:
            wider = with_nvme(wider, bigger)
            return (
                f"Most of this step is the NVMe drive's reads and writes (about {seconds_text(step.drive_s[0])}-"
                f"{seconds_text(step.drive_s[1])} s): each micro-batch reads every 16-bit weight from the drive"
                f" for its forward and backward pass, whatever its size, so a larger micro-batch carries more"
                f" tokens through the same traffic: micro_batch_size {bigger.micro_batch_size} {FITS_BY_ESTIMATE}"
                f" and gives about {rate_text(wider)} tokens/s instead of {rate_text(step)}" + batch_words + "."
            )
    # The CPU optimizer's lever holds wherever it bounds either end of the band (a multi-machine run
    # with an unknown network is network-bound at its slow end and CPU-bound at its fast end).
    if "cpu_optimizer" in (step.bound, step.bound_at(0), step.bound_at(1)):
        setting = accumulation_key.format(n=step.accumulation * 8)
        more = step_time(workload, step.strategy, links, step.accumulation * 8)
        if more is None:
            return None
        # Short sentences, one lever each: the update's cost first, then what spreads it over more tokens.
        accumulate = (
            f"Accumulating gradients over 8 times as many micro-batches ({setting} instead of the"
            f" {step.accumulation} there now) gives about {rate_text(more)} tokens/s instead of {rate_text(step)},"
            f" with a global batch 8 times as large ({_sequences(more, workload):,} sequences instead of"
            f" {_sequences(step, workload):,})."
        )
        levers = [accumulate]
        # For a given global batch the CPU's update stays once per step: a larger micro-batch then
        # helps only where it shortens the rest of the step.
        if larger is not None and not (keep_global and larger[1].middle > step.middle / 1.1):
            bigger, wider, batch_words = larger
            # With the global batch kept, a step trains the same tokens: the update's share stays, and
            # what a larger micro-batch saves is the rest of the step (fewer passes, fewer transfers).
            larger_words = (
                f"a larger micro-batch (micro_batch_size {bigger.micro_batch_size} {FITS_BY_ESTIMATE})"
                f" gives about {rate_text(wider)} tokens/s" + batch_words
            )
            if keep_global:
                levers.append(
                    f"For the same global batch, {larger_words}: fewer micro-batches make fewer passes and"
                    " transfers, while the update itself stays."
                )
            else:
                levers.insert(0, f"{larger_words[:1].upper()}{larger_words[1:]}.")
        # "Most of" only where the CPU bounds both ends; else it bounds one end (the network the other).
        lead = (
            "The largest part of this step is Adam's update on the CPU"
            if step.bound_at(0) == step.bound_at(1) == "cpu_optimizer"
            else "Adam's update on the CPU takes a large part of this step"
        )
        if brief:
            levers = [levers[0].replace(FITS_BY_ESTIMATE, "fits by the estimate")]
        return (
            f"{lead} (about {seconds_text(step.cpu_s[0])}-{seconds_text(step.cpu_s[1])} s). It runs once per"
            " optimizer step, however many tokens the step trains, so more tokens per step make it weigh less. "
            + " ".join(levers)
        )
    if step.bound == "host_link":
        return (
            f"Most of this step is traffic between the GPU and host RAM over PCIe: about"
            f" {step.host_bytes / gib:.0f} GiB per GPU per step, in and out, at about"
            f" {links.host_link / 1e9:g} GB/s each way; a PCIe 5.0 host doubles that rate."
        )
    if step.bound == "gpu_links":
        inside = step.gpu_comm
        what = (
            "every layer's weights gathered for the forward and again for the backward pass, and the gradients"
            " reduce-scattered, every micro-batch"
            if step.strategy in GATHERING
            else "the gradients exchanged and the updated weights shared"
        )
        sent = f"each GPU sends about {step.gpu_bytes / gib:.1f} GiB to the others per optimizer step ({what})"
        if links.gpu_link[0] != links.gpu_link[1]:
            return (
                f"The links between the GPUs decide much of this step: {sent}, about"
                f" {seconds_text(inside[0])} s over NVLink (SXM boards) and {seconds_text(inside[1])} s over PCIe"
                " (PCIe boards); `nvidia-smi topo -m` shows which links your GPUs have (NV# is NVLink)."
            )
        # "Most of" only where the traffic is at least half of the band's slow end.
        lead = (
            "Most of this step is traffic between the GPUs"
            if inside[1] >= step.high / 2
            else "Traffic between the GPUs takes a large part of this step"
        )
        fewer = ""
        if step.strategy in GATHERING and larger is not None and larger[1].middle < step.middle / 1.1:
            # Each micro-batch gathers every layer again: fewer, larger ones gather less per optimizer step.
            bigger, wider, batch_words = larger
            fewer = (
                f"; a larger micro-batch gathers the weights fewer times per optimizer step: micro_batch_size"
                f" {bigger.micro_batch_size} {FITS_BY_ESTIMATE} and gives about {rate_text(wider)} tokens/s instead"
                f" of {rate_text(step)}" + batch_words
            )
        return (
            f"{lead} over {links.gpu_link_words}: {sent}, about"
            f" {seconds_text(inside[1])} s; GPUs linked by NVLink would shorten it{fewer}."
        )
    return None


def offload_cost_note(
    step: StepTime, base: StepTime | None, *, brief: bool = False, base_fits: bool = False, one_gpu: bool = False
) -> str | None:
    """How much the chosen offload layout's step costs against the same layout without offload.

    `base` is the layout it offloads from (ZeRO-2 for ZeRO-2 + optim->CPU), timed on a GPU with
    room for it: the answer to "how much slower is offload?", even where that layout does not fit.
    `base_fits`: it fits these GPUs too (the offload was asked for, as layer offloading is), so
    the note does not speak of it as a run that could not fit.
    `brief`: the two bands and their ratio only, for the summary (explain says what each cost is).
    `one_gpu`: the run has one GPU, said so ("this GPU").
    """
    if base is None or step.strategy == base.strategy:
        return None
    fast, slow = step.low / base.low, step.high / base.high
    costs = []
    # The copies over PCIe hide behind the computation only where it is the longer of the two.
    hidden = step.host_s <= step.compute[0]
    if step.host_s:
        costs.append(
            f"the copies over PCIe (about {seconds_text(step.host_s)} s per step) hide behind the computation at"
            " the fast end and add to it at the slow end"
            if hidden
            else f"the copies over PCIe (about {seconds_text(step.host_s)} s per step) take longer than the"
            f" computation (about {seconds_text(step.compute[0])} s at the fast end): even there the step waits on"
            " them, and at the slow end they add to it"
        )
    if step.cpu_s[0]:
        costs.append(
            f"Adam's update on the CPU adds about {seconds_text(step.cpu_s[0])}-{seconds_text(step.cpu_s[1])} s"
            " once the backward pass is done"
        )
    if step.drive_s[0]:
        costs.append(
            f"the NVMe drive's reads and writes add about {seconds_text(step.drive_s[0])}-"
            f"{seconds_text(step.drive_s[1])} s, the largest cost"
            if step.bound_at(0) == step.bound_at(1) == "nvme_drive"
            else f"the NVMe drive's reads and writes add about {seconds_text(step.drive_s[0])}-"
            f"{seconds_text(step.drive_s[1])} s"
        )
    times = (
        f"about {fast:.1f}x as long"
        if f"{fast:.1f}" == f"{slow:.1f}"
        else f"{fast:.1f}x as long at the fast end and {slow:.1f}x at the slow end"
    )
    gpus = "this GPU" if one_gpu else "these GPUs"
    # The layout named: a reader comparing step times meets more than one "without offload".
    plain = ("one GPU" if one_gpu else "DDP") if base.strategy == "ddp" else STRATEGY_TITLES.get(base.strategy, "")
    without = (
        f"Without offload ({plain}) at the same micro-batch (to weigh the offload's cost alone; it fits {gpus} too),"
        if base_fits
        else f"Without offload ({plain}), if the whole run fitted on {gpus},"
    )
    if brief:
        # The summary's line: the ratio first, the two bands after it, in one sentence; the offload named as the
        # layout has it (Axolotl's layer offloading is no backend's offload).
        low, high = sorted((fast, slow))
        what = "Layer offloading" if step.strategy.endswith("layer_offload") else "Offload"
        other = f"{plain}" + ("" if base_fits else ", if it fitted")
        bands = f"{band_text(step)} against {band_text(base)} without it ({other})"
        # What the PCIe copies take, in seconds: the cost an offload is weighed for, said here too.
        copies = (
            f" The copies over PCIe take about {seconds_text(step.host_s)} s per step, hidden behind the computation"
            " at the fast end"
            if step.host_s and hidden
            else f" The copies over PCIe take about {seconds_text(step.host_s)} s per step, longer than the"
            " computation even at the fast end"
            if step.host_s
            else ""
        )
        copies += "." if copies else ""
        if high < 1.25:
            # "1.0x as long" says nothing to a reader: that the cost is small is the point.
            return f"{what} costs little time here: {bands}.{copies}"
        ratio = f"about {fast:.1f}x" if f"{fast:.1f}" == f"{slow:.1f}" else f"{low:.1f}x to {high:.1f}x"
        return f"{what} makes each step {ratio} as long: {bands}.{copies}"
    said = (
        f"{without} the same step would take about {band_text(base)}; with offload it takes {band_text(step)}, {times}"
    )
    return f"{said}." if not costs else f"{said}: {'; '.join(costs)}."


def network_note(step: StepTime, network: float | None = None) -> str | None:
    """A multi-machine run's traffic between machines: what it is, and its time at the network's speed.

    `network` is each machine's network in bytes per second where the user gave it (`Links.network`).
    """
    if not step.network_bytes:
        return None
    gigabytes = step.network_bytes / 1e9
    what = (
        "the gradients, all-reduced between the machines' copies"
        + (
            " every micro-batch, since FSDP2 synchronises them every micro-batch rather than hold whole gradients"
            " until the step"
            if step.accumulation > 1
            else ""
        )
        + "; HSDP keeps the weight gathers inside each machine"
        if not step.one_ring
        else "the gradients (reduce-scattered, or all-reduced where nothing is sharded) and, where the layout gathers"
        " weights, every layer's weights twice (all-gathered in the forward and again in the backward pass), in"
        " collectives that span every GPU of every machine; GB here are 10^9 bytes, as network speeds count"
    )
    share = step.network_comm[1] / step.high
    slow_end, fast_end = step.bound_at(1), step.bound_at(0)
    if network is None and slow_end == "network" and fast_end != "network":
        verdict = (
            f"at 100 Gb/s for the machine the network decides this run's speed, at {NETWORK_FAST * 8 / 1e9:.0f} Gb/s"
            f" for each GPU the {BOUND_WORDS[fast_end]} does"
        )
    elif step.bound == "network":
        verdict = "the network decides this run's speed"
    elif network is not None:
        verdict = f"that is {share:.0%} of the slow end of the band"
    else:
        verdict = f"at 100 Gb/s that is {share:.0%} of the slow end of the band, less on a faster network"
    if network is not None:
        speed = (
            f"That takes about {seconds_text(step.network_comm[1])} s at your {network * 8 / 1e9:g} Gb/s per machine"
        )
    else:
        speed = (
            f"That takes about {seconds_text(step.network_comm[0])} s with {NETWORK_FAST * 8 / 1e9:.0f} Gb/s for each"
            f" GPU and {seconds_text(step.network_comm[1])} s with {NETWORK_SLOW * 8 / 1e9:.0f} Gb/s for the whole"
            f" machine; at S Gb/s per machine, {gigabytes * 8:.0f} / S seconds (answer network_gbps for one figure)"
        )
    return (
        f"Between machines: each machine sends about {gigabytes:.1f} GB per optimizer step ({what}; counted as"
        " NCCL's ring algorithm sends it, 2(n-1)/n of the data for an all-reduce and (n-1)/n for an all-gather or"
        " reduce-scatter, over n GPUs; a ring crosses each machine's boundary once in each direction, so a machine"
        " sends about what one GPU of the ring sends; NCCL's tree algorithm and multi-NIC routing can send less)."
        f" {speed}; {verdict}. The band includes it."
    )


def largest_micro_batch(workload: Workload, fitted: Estimate, check_host: bool = True) -> Workload | None:
    """The workload with the largest micro-batch (doubling, up to 64 times) whose layout still fits.

    None when no larger one fits the GPU (and the host RAM, where known and `check_host`: an NVMe
    run keeps the offloaded states on the drive, not in host RAM).
    """
    best = None
    for factor in (2, 4, 8, 16, 32, 64):
        wider = replace(workload, micro_batch_size=workload.micro_batch_size * factor)
        host = None if fitted.host_memory is None or not check_host else fitted.host_memory / GIB
        trial = estimate(wider, fitted.strategy, fitted.gpu_memory / GIB, host)
        if not trial.fits or trial.host_fits is False:
            break
        best = wider
    return best
