"""Facts derived from the answers: sizes, world size, precision, and what fits where.

Facts are computed here (they are arithmetic), but every decision that uses them is a
condition in decision_tree.yaml. `FACTS` declares each fact with the answers it is computed
from, so the tree loader can check that a question's condition only uses facts whose inputs
were asked before it.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from wizard.engine.batch import BatchPlan, default_global_batch, plan_batch
from wizard.engine.catalog import GpuInfo, lookup_gpu, models_catalog
from wizard.engine.deepspeed_json import SUGGESTED_JSON, DeepSpeedSummary, batch_number, launched_precision
from wizard.engine.device import device_of
from wizard.engine.memory import (
    FIT_MARGIN,
    STRATEGIES,
    Estimate,
    Workload,
    estimate,
    estimate_all,
    layout_logits_bytes,
    lora_rank_of,
    reference_gpu_bytes,
    sum_gib,
    to_gib,
)
from wizard.engine.model_origin import ModelOrigin
from wizard.engine.model_size import (
    ModelShape,
    active_size,
    alias_model,
    catalog_model,
    shape_for_catalog,
    shape_for_model,
    shape_for_size_of,
    shape_from_config,
)
from wizard.engine.nvme_offload import nvme_swap
from wizard.engine.parallel import (
    Layout,
    context_parallel_default,
    expert_parallel_default,
    layout_from_answers,
    pipeline_parallel_default,
)
from wizard.engine.speed import Links, StepTime, band_text, links_for, step_time, with_nvme

GPU_HARDWARE = ("nvidia", "amd")


def json_micro_batch(inputs: Inputs) -> int | None:
    """The micro-batch a brought DeepSpeed JSON numbers (train_micro_batch_size_per_gpu); None for "auto" or none."""
    return batch_number(inputs.deepspeed.batch, "train_micro_batch_size_per_gpu") if inputs.deepspeed else None


def mac_bf16_base(answers: Mapping[str, Any]) -> bool:
    """A Mac run whose frozen base the script loads in bf16 (base_dtype: bf16): 16-bit weights and activations."""
    return answers.get("hardware") == "mps" and answers.get("base_dtype") == "bf16"


def frozen_base_dtype(answers: Mapping[str, Any], mixed_precision: str) -> str:
    """The dtype a LoRA run's frozen base is loaded in, as the estimate counts it: "bf16", "fp16" or "fp32".

    16-bit under mixed precision (bf16 under FP8, whose base weights stay bf16), a Mac's bf16 base where
    base_dtype says so, else fp32.
    """
    if mac_bf16_base(answers) or mixed_precision in ("bf16", "fp8"):
        return "bf16"
    return "fp16" if mixed_precision == "fp16" else "fp32"


# How close a base_model's own count must be to the size answered for its layer shape to be used.
BASE_MODEL_SHARE = 0.15
# A replicated run is "tight" above this share of the usable memory: the summary then names the
# layer-offloading add-on as the lever to pull if the run runs short (it stays off unless asked).
TIGHT_SHARE = 0.7
# From this share of the usable memory a run that fits has little to spare: the near-limit note, the Your JSON line
# and the Memory line say so alike.
LITTLE_TO_SPARE = 0.9


def near_line_share(est: Estimate, extra: int = 0) -> float | None:
    """The share of the usable memory a run comes to near the line (`Estimate.high` and `extra` bytes), else None.

    None below LITTLE_TO_SPARE; above 1, past the line (a ZeRO-1/2 JSON's overlap_comm buffers, say, as `extra`).
    """
    share = (est.high + extra) / est.budget
    return share if share >= LITTLE_TO_SPARE else None


def has_room(est: Estimate) -> bool:
    """Whether a layout's peak stays within `TIGHT_SHARE` of the usable memory: the room the wizard keeps."""
    return est.peak <= TIGHT_SHARE * est.budget


# Accelerators outside CUDA/ROCm with a device count and memory per device (guidelines H3, H6).
ACCELERATOR_HARDWARE = ("hpu", "xpu", "npu", "mlu", "musa")
# Hardware whose mixed precision is bf16: TPUs and Gaudi compute it natively (guidelines H1, H3).
BF16_HARDWARE = ("tpu", "hpu")
# Hardware with a per-device memory answer, so the memory estimate applies.
ESTIMATED_HARDWARE = (*GPU_HARDWARE, "mps", *ACCELERATOR_HARDWARE)

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
    "optimizer",
    "base_dtype",
)


@dataclass(frozen=True)
class Inputs:
    """Files the answers point to, already read and parsed by the layer above."""

    model_config: Mapping[str, Any] | None = None
    deepspeed: DeepSpeedSummary | None = None
    deepspeed_data: Mapping[str, Any] | None = None
    # Where the model's numbers came from (a Hub id, a local folder's headers, ...), with the
    # exact count the checkpoint's safetensors headers give; None for a size.
    model_origin: ModelOrigin | None = None


@dataclass(frozen=True)
class FactSpec:
    """A fact's inputs (answers) and its kind, for the tree linter."""

    needs: tuple[str, ...]
    kind: str  # bool | int | number | text
    # Why the fact can be missing although its inputs were answered, completing "<answer> ..."
    # (a question whose default is this fact then says so instead of just "no answer given").
    unknown: str = ""
    # What the fact is worked out by, where it takes many answers ("the memory estimate"): the
    # review then names that rather than a bare count of the answers it reads.
    basis: str = ""


# The answers that set the parallel layout: they change the N-D and Megatron estimates, and the
# ZeRO ones through DeepSpeed sequence parallelism.
_LAYOUT_NEEDS = (
    "target",
    "deepspeed_config",
    "megatron",
    "context_parallel_size",
    "tensor_parallel_size",
    "pipeline_parallel_size",
    "expert_parallel_size",
)
# Accelerate's DeepSpeed CPU offloads, lightest first, as its offload rules try them.
DEEPSPEED_CPU_OFFLOADS = ("zero2_offload_optimizer", "zero3_offload_optimizer", "zero3_offload_all")
_LAYOUT_STRATEGIES = ("fsdp2_nd", "megatron", "zero1", "zero2", "zero2_offload_optimizer", "zero3")


def _fit_facts() -> dict[str, FactSpec]:
    specs = {}
    for strategy in STRATEGIES:
        needs = (*_MEMORY_NEEDS, *_LAYOUT_NEEDS) if strategy.startswith(_LAYOUT_STRATEGIES) else _MEMORY_NEEDS
        specs[f"fits_{strategy}"] = FactSpec(needs, "bool")
        specs[f"host_fits_{strategy}"] = FactSpec(needs, "bool")
    return specs


def _layout_facts() -> dict[str, FactSpec]:
    """The sizes of the parallel layout: the rules' outcomes take them from here."""
    needs = (*_MEMORY_NEEDS, *_LAYOUT_NEEDS)
    sizes = ("nd_tp", "nd_cp", "nd_sp", "nd_ep", "nd_dp_shard", "mp_tp", "mp_pp", "mp_dp")
    return {**{name: FactSpec(needs, "int") for name in sizes}, "nd_parallel": FactSpec(needs, "bool")}


# The basis of the facts the memory estimate decides (a default that fits the memory).
MEMORY_BASIS = "the memory estimate"

FACTS: dict[str, FactSpec] = {
    "params": FactSpec(("model",), "int"),
    "world_size": FactSpec(("hardware", "gpus_per_node", "num_nodes", "cpu_processes"), "int"),
    "gpu_model_memory_gb": FactSpec(
        ("gpu_model",),
        "number",
        unknown="is not a GPU model the wizard knows (or names a memory size that model does not come in)",
    ),
    # How the named card's GPUs are linked: nvlink (an SXM board), pcie (a card without NVLink),
    # unknown (a name that covers both boards, or no known card).
    "gpu_link_default": FactSpec(("hardware",), "text"),
    "gpu_bf16": FactSpec(("hardware", "gpu_model"), "bool"),
    "mixed_precision": FactSpec(("hardware", "gpu_model", "deepspeed_config"), "text"),
    "gradient_checkpointing_default": FactSpec(("model", "sequence_length"), "bool"),
    "lora_fits_single_gpu": FactSpec(_MEMORY_NEEDS, "bool"),
    "host_memory_known": FactSpec(("cpu_memory_gb",), "bool"),
    # Whether DeepSpeed's pinned NVMe swap buffers fit in the usable host RAM: NVMe offload still
    # needs them, so it is no way out of a host-RAM shortage when they do not.
    "nvme_buffers_fit_host": FactSpec((*_MEMORY_NEEDS, "cpu_memory_gb"), "bool"),
    # ... and whether they exceed it outright (a run that asks for NVMe would not start), and their size.
    "nvme_buffers_exceed_host": FactSpec((*_MEMORY_NEEDS, "cpu_memory_gb"), "bool"),
    "nvme_pinned_gib": FactSpec((*_MEMORY_NEEDS, "cpu_memory_gb"), "number"),
    # For the add-ons: FP8 tensor cores, a replicated (DDP) estimate close to the limit, and
    # torch.compile's default (torchao's FP8 is only fast when compiled).
    "gpu_fp8": FactSpec(("hardware", "gpu_model"), "bool"),
    "ddp_memory_tight": FactSpec(_MEMORY_NEEDS, "bool"),
    "torch_compile_default": FactSpec(("fp8",), "bool"),
    "ds_stage": FactSpec(("deepspeed_config",), "int"),
    # The JSON brought is the one the wizard suggested for another (its file name says so).
    "ds_suggested": FactSpec(("deepspeed_config",), "bool"),
    "ds_offload_optimizer": FactSpec(("deepspeed_config",), "text"),
    "ds_offload_param": FactSpec(("deepspeed_config",), "text"),
    "ds_strategy": FactSpec(("deepspeed_config",), "text"),
    # The brought JSON's overlap_comm, and its two bucket sizes of stages 1 and 2 added up (elements).
    "ds_overlap_comm": FactSpec(("deepspeed_config",), "bool"),
    "ds_bucket_elements": FactSpec(("deepspeed_config",), "number"),
    "ds_reduce_bucket": FactSpec(("deepspeed_config",), "number"),
    "ds_buckets_default": FactSpec(("deepspeed_config",), "bool"),
    "micro_batch_default": FactSpec(("deepspeed_config",), "int"),
    # Whether that default is the brought JSON's own train_micro_batch_size_per_gpu.
    "micro_batch_from_json": FactSpec(("deepspeed_config",), "bool"),
    # Sequences per optimizer step when global_batch_size is not given: micro-batch x today's
    # accumulation x data-parallel GPUs (the layout's sizes, where answered, divide the world).
    "global_batch_default": FactSpec(
        ("hardware", "gpus_per_node", "num_nodes", "cpu_processes", "target", "deepspeed_config", "micro_batch_size"),
        "int",
        basis="micro-batch x accumulation x GPUs",
    ),
    "moe": FactSpec(("model",), "bool"),
    "moe_experts": FactSpec(("model",), "int"),
    "moe_block_class": FactSpec(("model",), "text"),
    "expert_parallel_supported": FactSpec(("model",), "bool"),
    "fits_without_offload": FactSpec(_MEMORY_NEEDS, "bool"),
    # FSDP2 fits only past the usable line at its loss peak (tight) or as a close call, where ZeRO-3, sharding the
    # same way, peaks within the line: the tie-break between the two then goes to the one with room.
    "zero3_roomier_than_fsdp2": FactSpec(_MEMORY_NEEDS, "bool"),
    # The first of Accelerate's DeepSpeed CPU offloads that fits GPU and host RAM with room at the loss
    # peak (not a close call), or "none": a lighter offload that is a close call gives way to it.
    "deepspeed_offload_room": FactSpec(_MEMORY_NEEDS, "text"),
    # fits_ddp under the name the layer-offloading question reads: on several GPUs Axolotl's layer
    # offloading runs beside DDP, whose full copy must fit; its own text says so when it does not.
    "ddp_copy_fits": FactSpec(_MEMORY_NEEDS, "bool"),
    # Axolotl's layer offloading on several GPUs where the rules do not offer it: per GPU, and host RAM per machine.
    "layer_offload_gib": FactSpec(_MEMORY_NEEDS, "number"),
    "layer_offload_host_gib": FactSpec(_MEMORY_NEEDS, "number"),
    "layer_offload_fits": FactSpec(_MEMORY_NEEDS, "bool"),
    "layer_offload_short": FactSpec(_MEMORY_NEEDS, "text"),
    # Its step-time band ("30-70 s"), and what each GPU streams over PCIe per optimizer step, in GiB.
    "layer_offload_step": FactSpec(_MEMORY_NEEDS, "text"),
    # A full copy that does not fit, but would with a loss computed in chunks (its logits never built):
    # that copy's GiB per GPU; 0 where it fits already, would not then, or the loss is chunked already.
    "ddp_chunked_gib": FactSpec(_MEMORY_NEEDS, "number"),
    "layer_offload_pcie_gib": FactSpec(_MEMORY_NEEDS, "number"),
    # Its step where the board splits the PCIe lanes x8/x8 (`layer_offload_step_x8`).
    "layer_offload_x8_step": FactSpec(_MEMORY_NEEDS, "text"),
    "fsdp2_x8_step": FactSpec(_MEMORY_NEEDS, "text"),
    # Axolotl's layer offloading beside DDP where a whole LoRA copy does not fit several GPUs but
    # the copy without its frozen layers does, at a step about as long as FSDP2's (`layer_offload_beside_ddp`).
    "layer_offload_beside_ddp": FactSpec((*_MEMORY_NEEDS, "target", "offload"), "bool", basis=MEMORY_BASIS),
    # Axolotl's layer offloading by default: one GPU, LoRA/QLoRA, offload auto, and only the
    # layer-offload estimate fits (`layer_offloading_default`).
    "layer_offloading_default": FactSpec((*_MEMORY_NEEDS, "target", "offload"), "bool", basis=MEMORY_BASIS),
    "context_parallel_default": FactSpec((*_MEMORY_NEEDS, "target", "deepspeed_config"), "int", basis=MEMORY_BASIS),
    "tensor_parallel_default": FactSpec(("hardware", "gpus_per_node", "megatron"), "int"),
    "pipeline_parallel_default": FactSpec(
        (*_MEMORY_NEEDS, "megatron", "tensor_parallel_size"), "int", basis=MEMORY_BASIS
    ),
    "expert_parallel_default": FactSpec(
        (*_MEMORY_NEEDS, "target", "context_parallel_size", "tensor_parallel_size"), "int", basis=MEMORY_BASIS
    ),
    # Whether plain FSDP2 offload, one copy spread over every machine, has a shorter step than HSDP's
    # offload, a full copy per machine, at both ends of the step-time band: with everything
    # offloaded the CPU's Adam update bounds the step, and HSDP runs it over twice the share.
    "hsdp_offload_slower": FactSpec(
        (*_MEMORY_NEEDS, "gpu_model", "gpu_link", "network_gbps", "global_batch_size"), "bool"
    ),
    **_fit_facts(),
    **_layout_facts(),
}


@dataclass
class FactSet:
    """The facts known for a set of answers, plus the objects behind the numbers."""

    values: dict[str, Any] = field(default_factory=dict)
    shape: ModelShape | None = None
    # What the model is and where its numbers came from (the summary says it).
    origin: ModelOrigin | None = None
    workload: Workload | None = None
    estimates: dict[str, Estimate] = field(default_factory=dict)
    # A rough time per optimizer step for each estimated layout, on a card with a throughput
    # figure (wizard.engine.speed); empty on a Mac, an unknown card or without an estimate.
    speeds: dict[str, StepTime] = field(default_factory=dict)
    links: Links | None = None
    accumulation_key: str = ""  # where this run sets gradient accumulation, for the speed advice
    # Micro-batches of the answered size per optimizer step, as the step-time model counts them.
    accumulation: int = 1
    # The batch plan: global batch = micro-batch x accumulation x data-parallel GPUs, as written.
    batch: BatchPlan | None = None
    # Whether the user gave global_batch_size (the answers alone cannot say: a default is written
    # in too). Set by the layer that knows where each answer came from; a lever keeps such a batch,
    # even one equal to the split the files would have made anyway.
    global_batch_given: bool = False

    def get(self, name: str, default: Any = None) -> Any:
        """A fact's value, or `default` when it is not known."""
        return self.values.get(name, default)

    @property
    def keeps_global_batch(self) -> bool:
        """Whether a lever must keep the global batch: the user gave it, or it differs from the default split."""
        return self.global_batch_given or (self.batch is not None and self.batch.custom)


def model_shape(answers: Mapping[str, Any], inputs: Inputs) -> ModelShape | None:
    """The model's shape, from its config.json when given, else from its size."""
    if inputs.model_config is not None:
        exact = inputs.model_origin.params if inputs.model_origin is not None else None
        return shape_from_config(inputs.model_config, exact)
    if "model" not in answers:
        return None
    shape = shape_for_model(answers["model"])
    # A size with a base_model the catalogue knows ("7B", mistralai/Mistral-7B-v0.1): that model's
    # layers, not the closest reference's, when its own count is that size (within BASE_MODEL_SHARE).
    base = answers.get("base_model")
    name = catalog_model(base.rstrip("/").split("/")[-1]) if isinstance(base, str) else None
    if name is not None and shape.reference is not None and active_size(answers["model"]) is None:
        own = shape_for_catalog(name)
        if own.experts == 1 and abs(own.params - shape.params) <= BASE_MODEL_SHARE * shape.params:
            # The model the run loads is known: its own count, not the rounded size beside it.
            return shape_for_size_of(own.params, name)
    return shape


def size_origin(model: object) -> ModelOrigin | None:
    """Where a model answer that names no file gets its numbers: the catalogue, or the size itself."""
    if model is None:
        return None
    name = catalog_model(model)
    if name is not None:
        return ModelOrigin(name=name, source="catalog")
    alias = alias_model(model)
    if alias is not None and active_size(str(model)) is None:  # "8x7B": the catalogue model's own count
        return ModelOrigin(name=alias, source="catalog")
    return ModelOrigin(name=str(model), source="size")


# The facts of the answer sets seen last, newest last: an interactive run, a lever list or the
# pruning of answers derives the facts of one set many times over, each time the same.
_DERIVED: OrderedDict[tuple[int, frozenset[tuple[str, type, Any]]], tuple[Inputs, FactSet]] = OrderedDict()
# Enough for the answer sets of many interactive walks at once (a few KiB each): the review screen re-derives every
# earlier prefix of the answers after each change.
_DERIVED_KEEP = 16384
_NO_INPUTS = Inputs()


def derive_facts(answers: Mapping[str, Any], inputs: Inputs) -> FactSet:
    """Compute every fact whose inputs are present in `answers`.

    The result is shared by every call with equal answers and the same `inputs` object: read it,
    never change it (dataclasses.replace makes a changed copy). Only a plain dict of hashable
    answers is looked up; a mapping that watches its reads (evaluate's fact view) is always derived.
    """
    key = None
    # Inputs with no file read are all alike, whatever object holds them: every session starts with its own, and
    # sessions that share answers (the same first questions) then share their facts too. Others by identity.
    empty = inputs == _NO_INPUTS
    if type(answers) is dict:
        try:
            # The type too: True and 1 are equal keys, and two answers of the same key must not meet.
            key = (0 if empty else id(inputs), frozenset((name, type(value), value) for name, value in answers.items()))
        except TypeError:  # an unhashable value (a list): derived each time
            key = None
    if key is not None:
        kept = _DERIVED.get(key)
        # The same object, not another that reused its id; or, read from no file, equal ones.
        if kept is not None and (kept[0] is inputs or (empty and kept[0] == _NO_INPUTS)):
            _DERIVED.move_to_end(key)
            return kept[1]
    facts = _derive_facts(answers, inputs)
    if key is not None:
        _DERIVED[key] = (inputs, facts)
        if len(_DERIVED) > _DERIVED_KEEP:
            _DERIVED.popitem(last=False)
    return facts


def _derive_facts(answers: Mapping[str, Any], inputs: Inputs) -> FactSet:
    """Every fact whose inputs are present in `answers`, worked out afresh."""
    facts = FactSet()
    values = facts.values
    hardware = answers.get("hardware")
    gpu = lookup_gpu(answers.get("gpu_model"))
    if gpu is not None:
        values["gpu_model_memory_gb"] = gpu.memory_gib  # as the driver reports it, in GiB
    if hardware is not None:
        values["gpu_link_default"] = _link_of(gpu)
    if hardware is not None:
        values["gpu_bf16"] = hardware in BF16_HARDWARE or (hardware in GPU_HARDWARE and (gpu.bf16 if gpu else True))
        values["mixed_precision"] = _mixed_precision(hardware, values["gpu_bf16"], inputs.deepspeed)
        # Only a known NVIDIA card: an unknown GPU may be an A100, which has no FP8 tensor cores.
        values["gpu_fp8"] = hardware == "nvidia" and gpu is not None and gpu.fp8
        world = _world_size(answers)
        if world is not None:
            values["world_size"] = world
    shape = model_shape(answers, inputs)
    if shape is not None:
        facts.shape = shape
        facts.origin = inputs.model_origin or size_origin(answers.get("model"))
        values["params"] = shape.params
        values["moe"] = shape.is_moe
        if shape.is_moe:
            values["moe_experts"] = shape.experts
            values["expert_parallel_supported"] = expert_parallel_supported(shape)
            block = _moe_block_class(answers, inputs, shape)
            if block is not None:
                values["moe_block_class"] = block
        if "sequence_length" in answers:
            values["gradient_checkpointing_default"] = (
                shape.params >= 1_000_000_000 or answers["sequence_length"] >= 8192
            )
    if "cpu_memory_gb" in answers:
        values["host_memory_known"] = True
    values["torch_compile_default"] = answers.get("fp8") == "ao"
    # A brought JSON with a number for the micro-batch decides it; otherwise one sample per GPU.
    micro = json_micro_batch(inputs)
    values["micro_batch_default"] = micro or 1
    if micro:
        values["micro_batch_from_json"] = True
    _batch_facts(facts, answers, inputs)
    if inputs.deepspeed is not None:
        values["ds_stage"] = inputs.deepspeed.stage
        values["ds_suggested"] = Path(str(answers.get("deepspeed_config", ""))).name == SUGGESTED_JSON
        values["ds_offload_optimizer"] = inputs.deepspeed.offload_optimizer
        values["ds_offload_param"] = inputs.deepspeed.offload_param
        values["ds_strategy"] = _ds_strategy(inputs.deepspeed)
        values["ds_overlap_comm"] = inputs.deepspeed.overlap_comm
        buckets = (inputs.deepspeed.reduce_bucket, inputs.deepspeed.allgather_bucket)
        if None not in buckets:
            values["ds_bucket_elements"] = sum(b for b in buckets if b is not None)
            values["ds_reduce_bucket"] = inputs.deepspeed.reduce_bucket
            values["ds_buckets_default"] = inputs.deepspeed.buckets_default
    _memory_facts(facts, answers, inputs)
    return facts


def _chunked_copy_gib(facts: FactSet) -> float:
    """A full copy's GiB per GPU with a chunked loss, where only that makes it fit; else 0 (`ddp_chunked_gib`)."""
    copy, work = facts.estimates.get("ddp"), facts.workload
    if copy is None or work is None or copy.fits or work.chunked_loss:
        return 0
    chunked = replace(copy, activations=max(copy.activations - layout_logits_bytes(work, "ddp"), 0), transient=0)
    return to_gib(chunked.total) if chunked.fits else 0


def chunked_loss_answered(answers: Mapping[str, Any]) -> bool:
    """Whether an answer before the decision says the loss is computed in chunks, so the estimate counts no logits.

    Axolotl's Cut Cross Entropy plugin (cut_cross_entropy), or an Accelerate script's own chunked
    loss (chunked_loss). Liger's fused loss, an option asked after the decision, is not among them.
    """
    if answers.get("target") == "axolotl":
        return answers.get("cut_cross_entropy") is True
    return answers.get("chunked_loss") is True


def _memory_facts(facts: FactSet, answers: Mapping[str, Any], inputs: Inputs) -> None:
    needed = ("gpu_memory_gb", "method", "sequence_length", "micro_batch_size", "gradient_checkpointing")
    if facts.shape is None or "world_size" not in facts.values or any(k not in answers for k in needed):
        return
    if answers.get("hardware") not in ESTIMATED_HARDWARE:
        return
    workload = Workload(
        shape=facts.shape,
        method=answers["method"],
        world_size=facts.values["world_size"],
        num_nodes=answers.get("num_nodes", 1),
        sequence_length=answers["sequence_length"],
        micro_batch_size=answers["micro_batch_size"],
        gradient_checkpointing=answers["gradient_checkpointing"],
        # A Mac trains without autocast; a LoRA base loaded in bf16 (base_dtype) holds 16-bit weights
        # and activations all the same, as mixed precision does on a GPU.
        half_precision=facts.values.get("mixed_precision") != "no" or mac_bf16_base(answers),
        device=device_of(answers.get("hardware")),
        optimizer=answers.get("optimizer", "adamw"),
        pairs=answers.get("objective") == "dpo",
        reference=dpo_reference(answers),
        reference_fp32=answers.get("target") == "accelerate",
        chunked_loss=chunked_loss_answered(answers),
        lora_rank=lora_rank_of(answers),
    )
    host = answers.get("cpu_memory_gb")
    if workload.optimizer == AUTO_OPTIMIZER:  # resolved before any figure is worked out from it
        workload = replace(workload, optimizer=auto_optimizer(workload, answers["gpu_memory_gb"], host))
    layout = layout_from_answers(answers, workload.world_size, deepspeed_json="deepspeed_config" in answers)
    _parallel_defaults(facts, answers, workload, host)
    workload = _with_layout(workload, layout)
    _layout_values(facts, layout)
    facts.workload = workload
    facts.estimates = estimate_all(workload, answers["gpu_memory_gb"], host)
    if answers.get("hardware") not in GPU_HARDWARE:
        # Apple MPS, Gaudi, XPU, NPU, MLU and MUSA run no DeepSpeed or FSDP here: one process per
        # device with a full copy is the only strategy, so it is the only one estimated and shown.
        facts.estimates = {"ddp": facts.estimates["ddp"]}
    facts.accumulation_key = (
        "gradient_accumulation_steps: {n} in axolotl.yaml"
        if answers.get("target") == "axolotl"
        else "megatron_lm_num_micro_batches: {n} in accelerate_config.yaml"
        if layout.megatron
        else "DPOConfig(gradient_accumulation_steps={n}) in the training script"
        if workload.pairs
        else "Accelerator(gradient_accumulation_steps={n}) in the training script"
    )
    _speed_facts(facts, answers, inputs, workload)
    if "ddp_layer_offload" in facts.estimates and (narrow := layer_offload_step_x8(facts)) is not None:
        facts.values["layer_offload_x8_step"] = band_text(narrow)
        if (sharded_x8 := step_on_x8(facts, "fsdp2")) is not None:
            facts.values["fsdp2_x8_step"] = band_text(sharded_x8)
    facts.values["layer_offload_beside_ddp"] = layer_offload_beside_ddp(answers, facts, workload.world_size)
    if answers.get("target") != "axolotl" or (workload.world_size > 1 and answers.get("layer_offloading") is not True):
        # Layer offloading is Axolotl's own (layer_offloading); Accelerate has no such switch. On
        # several GPUs the rules choose it only when its question was answered yes, so a row that no
        # rule can choose would only read as a contradiction ("DDP + layer offload: yes", "DDP does not fit").
        layer = facts.estimates.pop("ddp_layer_offload", None)
        timed = facts.speeds.pop("ddp_layer_offload", None)
        if layer is not None and answers.get("target") == "axolotl":
            # Its figures stay for the sentence that weighs it against the chosen layout.
            facts.values["layer_offload_gib"] = to_gib(layer.total)
            facts.values["layer_offload_host_gib"] = to_gib(layer.host_per_node)
            facts.values["layer_offload_fits"] = layer.fits and layer.host_fits is not False
            # Which limit it misses, for the sentence that says so: the GPU's, else host RAM's.
            facts.values["layer_offload_short"] = (
                "gpu" if not layer.fits else "host" if layer.host_fits is False else None
            )
            if timed is not None:
                facts.values["layer_offload_step"] = band_text(timed)
                # Both directions, as every other PCIe figure is given: in and back out, half each way.
                facts.values["layer_offload_pcie_gib"] = to_gib(timed.host_bytes)
    for strategy, est in facts.estimates.items():
        facts.values[f"fits_{strategy}"] = est.fits
        # Unknown host RAM does not block offload; the summary warns instead.
        facts.values[f"host_fits_{strategy}"] = est.host_fits is not False
    facts.values["fits_without_offload"] = fits_without_offload(facts.estimates, workload.world_size)
    fsdp2, zero3 = facts.estimates.get("fsdp2"), facts.estimates.get("zero3")
    facts.values["zero3_roomier_than_fsdp2"] = bool(
        fsdp2 is not None
        and zero3 is not None
        and fsdp2.fits
        and (fsdp2.tight or fsdp2.close_call)
        and zero3.fits
        and not (zero3.tight or zero3.close_call)
    )
    roomy = [
        name
        for name in DEEPSPEED_CPU_OFFLOADS
        if name in facts.estimates
        and facts.estimates[name].fits
        and facts.estimates[name].host_fits is not False
        and not facts.estimates[name].close_call
    ]
    # Among them, one whose peak stays within the room the wizard keeps (TIGHT_SHARE of the usable memory) first:
    # a lighter-traffic offload near the usable line is no better a plan than a leaner one with room to spare.
    with_room = [name for name in roomy if has_room(facts.estimates[name])]
    roomy = with_room + [name for name in roomy if name not in with_room]
    facts.values["deepspeed_offload_room"] = roomy[0] if roomy else "none"
    facts.values["ddp_copy_fits"] = facts.values.get("fits_ddp", False)
    facts.values["hsdp_offload_slower"] = hsdp_offload_slower(facts.estimates, facts.speeds)
    facts.values["ddp_chunked_gib"] = _chunked_copy_gib(facts)
    facts.values["layer_offloading_default"] = layer_offloading_default(
        answers, facts.estimates, workload.world_size
    ) or bool(facts.values.get("layer_offload_beside_ddp"))
    if isinstance(host, (int, float)) and not isinstance(host, bool):
        per_node = int(answers.get("gpus_per_node", 1))
        swap = nvme_swap(facts.shape, workload.world_size, per_node, float(host), 2 if workload.half_precision else 4)
        # With room to spare (90% of the usable part), as the NVMe warning calls closer than that a risk.
        usable = FIT_MARGIN * host * 2**30
        pinned = swap.pinned_bytes_per_process * per_node
        facts.values["nvme_buffers_fit_host"] = pinned <= 0.9 * usable
        facts.values["nvme_buffers_exceed_host"] = pinned > usable
        facts.values["nvme_pinned_gib"] = to_gib(pinned)
    ddp = facts.estimates.get("ddp")
    if ddp is not None:
        facts.values["ddp_memory_tight"] = ddp.total > TIGHT_SHARE * ddp.budget
    if workload.method == "full":
        lora = replace(workload, method="lora", world_size=1)
        single = estimate_all(lora, answers["gpu_memory_gb"], host)["ddp"]
        facts.values["lora_fits_single_gpu"] = single.fits


def _link_of(gpu: GpuInfo | None) -> str:
    """The gpu_link answer a known card implies: its board's links, or unknown where it has two boards."""
    if gpu is None or gpu.gpu_link_varies:
        return "unknown"
    return "pcie" if gpu.gpu_link_gbs is None else "nvlink"


def _batch_facts(facts: FactSet, answers: Mapping[str, Any], inputs: Inputs) -> None:
    """The default global batch and the plan of the answered one, once the GPUs and micro-batch are known."""
    world = facts.values.get("world_size")
    if world is None or "micro_batch_size" not in answers or "target" not in answers:
        return
    layout = layout_from_answers(answers, int(world), deepspeed_json="deepspeed_config" in answers)
    facts.values["global_batch_default"] = default_global_batch(answers, inputs.deepspeed, layout)
    plan = plan_batch(answers, inputs.deepspeed, layout)
    facts.batch = plan
    # The step-time model runs micro-batches of the answered size (Axolotl's CP writes 1 per GPU
    # and accumulates that many more): the same sequences per step either way.
    per_pass = int(answers["micro_batch_size"]) * plan.data_parallel
    facts.accumulation = max(plan.global_batch // per_pass, 1)


def world_size(answers: Mapping[str, Any]) -> int | None:
    """The number of training processes the answers describe, or None before they are known."""
    return _world_size(answers) if "hardware" in answers else None


def _speed_facts(facts: FactSet, answers: Mapping[str, Any], inputs: Inputs, workload: Workload) -> None:
    """Each estimated layout's rough step time, on a card the catalogue has a throughput figure for."""
    link, network = answers.get("gpu_link"), answers.get("network_gbps")
    links = (
        links_for(lookup_gpu(answers.get("gpu_model")), link, network)
        if answers.get("hardware") in GPU_HARDWARE
        else None
    )
    if links is None:
        return
    facts.links = links
    for strategy in facts.estimates:
        timed = step_time(workload, strategy, links, facts.accumulation)
        if timed is not None and strategy == "zero3_offload_all" and answers.get("offload") == "nvme":
            timed = with_nvme(timed, workload)  # the drive's reads and writes on top
        if timed is not None:
            facts.speeds[strategy] = timed


def _with_layout(workload: Workload, layout: Layout) -> Workload:
    return replace(
        workload,
        tensor_parallel=layout.tp,
        context_parallel=layout.cp,
        sequence_parallel=layout.sp,
        expert_parallel=layout.ep,
        pipeline_parallel=layout.pp,
        megatron=layout.megatron,
    )


def _layout_values(facts: FactSet, layout: Layout) -> None:
    """The sizes the rules write: FSDP2's N-D mesh (nd_*) and Megatron-LM's TP x PP (mp_*)."""
    values = facts.values
    values["nd_parallel"] = layout.nd
    values["nd_tp"] = 1 if layout.megatron else layout.tp
    values["nd_cp"], values["nd_sp"], values["nd_ep"] = layout.cp, layout.sp, layout.ep
    values["nd_dp_shard"] = layout.dp_shard
    values["mp_tp"] = layout.tp if layout.megatron else 1
    values["mp_pp"] = layout.pp
    values["mp_dp"] = layout.dp_shard if layout.megatron else 1  # Megatron's data-parallel replicas


def _parallel_defaults(facts: FactSet, answers: Mapping[str, Any], base: Workload, host: float | None) -> None:
    """Defaults of the size questions: the smallest CP/SP, the fewest pipeline stages, the EP that fits."""
    values, memory = facts.values, answers["gpu_memory_gb"]
    world, per_node = base.world_size, int(answers.get("gpus_per_node", 1))
    layout = layout_from_answers(answers, world, deepspeed_json="deepspeed_config" in answers)

    def fits(workload: Workload, strategy: str) -> bool:
        return estimate(workload, strategy, memory, host).fits

    json_strategy = values.get("ds_strategy") if "deepspeed_config" in answers else None

    def fits_with_split(size: int) -> bool:
        if json_strategy is not None:  # DeepSpeed sequence parallelism under the user's ZeRO stage
            return fits(replace(base, sequence_parallel=size), str(json_strategy))
        if size == 1:
            return fits(base, "fsdp2")
        return fits(replace(base, context_parallel=size), "fsdp2_nd")

    values["context_parallel_default"] = context_parallel_default(world, per_node, fits_with_split)
    values["tensor_parallel_default"] = per_node if answers.get("megatron") is True else 1
    room = max(world // max(layout.tp, 1), 1)
    megatron = replace(base, tensor_parallel=layout.tp, megatron=True)
    values["pipeline_parallel_default"] = pipeline_parallel_default(
        room,
        int(answers.get("num_nodes", 1)),
        lambda p: fits(replace(megatron, pipeline_parallel=p), "megatron"),
    )
    shape = base.shape
    ep = 1
    # Expert parallel only when plain FSDP2 does not fit: it adds an all-to-all of every token in
    # every MoE layer and a plugin with its own requirements, so it is never the default when
    # sharding alone is enough, nor for a model whose expert layout the plugin does not support.
    if (
        answers.get("target") == "axolotl"
        and shape.is_moe
        and expert_parallel_supported(shape)
        and not fits(base, "fsdp2")
    ):
        mesh = replace(base, tensor_parallel=layout.tp, context_parallel=layout.cp)
        ep = expert_parallel_default(
            max(world // (layout.tp * layout.cp), 1),
            per_node,
            shape.experts,
            lambda size: fits(replace(mesh, expert_parallel=size), "fsdp2_nd"),
        )
    values["expert_parallel_default"] = ep


def hsdp_offload_slower(estimates: Mapping[str, Estimate], speeds: Mapping[str, StepTime]) -> bool:
    """Whether plain FSDP2 offload fits (GPU and host RAM) and beats HSDP's offload at both ends of the band."""
    plain, hybrid = estimates.get("fsdp2_offload"), estimates.get("hsdp_offload")
    fast, slow = speeds.get("fsdp2_offload"), speeds.get("hsdp_offload")
    if plain is None or hybrid is None or fast is None or slow is None:
        return False
    return plain.fits and plain.host_fits is not False and fast.low < slow.low and fast.high < slow.high


def fits_without_offload(estimates: Mapping[str, Estimate], world_size: int) -> bool:
    """Whether a strategy the tree recommends without offload fits.

    On one GPU that is the one-GPU figure (a full copy, no gather buffers); on several it is also
    the sharded ones (FSDP2 over every GPU, or HSDP over one machine's GPUs). Offload is chosen on
    its own only when this is false.
    """
    names = ("ddp",) if world_size <= 1 else ("ddp", "fsdp2", "hsdp")
    return any(estimates[name].fits for name in names if name in estimates)


def layer_offloading_default(answers: Mapping[str, Any], estimates: Mapping[str, Estimate], world_size: int) -> bool:
    """The default of the layer_offloading question: on only where it is what makes the run fit.

    Axolotl, LoRA or QLoRA (frozen decoder layers to offload), an NVIDIA or AMD GPU (the hooks use
    the torch.cuda API, which ROCm builds share), one GPU, offload left to the wizard (auto: never
    under offload none, and offload cpu keeps FSDP2's offload), the one-GPU estimate does not fit
    and the layer-offload one does, in GPU memory and in host RAM (unknown host RAM counts as
    fitting, as for the other offload layouts; the summary then warns).
    """
    return answers.get("method") in ("lora", "qlora") and world_size == 1 and _layer_offload_needed(answers, estimates)


def _layer_offload_needed(answers: Mapping[str, Any], estimates: Mapping[str, Estimate]) -> bool:
    """What both of layer offloading's defaults, on one GPU and beside DDP, require first.

    Axolotl on GPUs with offload auto, where the full copy does not fit and the layer-offload
    layout fits in GPU memory and host RAM (unknown host RAM counts as fitting).
    """
    plain, layer = estimates.get("ddp"), estimates.get("ddp_layer_offload")
    return (
        answers.get("target") == "axolotl"
        and answers.get("hardware") in GPU_HARDWARE
        and answers.get("offload") == "auto"
        and plain is not None
        and not plain.fits
        and layer is not None
        and layer.fits
        and layer.host_fits is not False
    )


def layer_offload_beside_ddp(answers: Mapping[str, Any], facts: FactSet, world_size: int) -> bool:
    """Whether layer offloading beside DDP is the lever that makes a several-GPU LoRA run fit.

    Axolotl's guide orders its memory levers from least to most invasive, layer offloading for
    LoRA/QLoRA before moving to FSDP2 or DeepSpeed, where the CPU transfer cost is acceptable: here,
    where a whole LoRA copy does not fit each GPU, the copy without its frozen layers does (in GPU
    memory and in host RAM, one copy per GPU process), and the step-time model puts its step within
    `LAYER_OFFLOAD_STEP_SLACK` of FSDP2's with both on x8 PCIe lanes (`step_on_x8`). QLoRA on several
    GPUs keeps FSDP2 (FSDP+QLoRA, as the guide pairs them); unknown step times keep it too, with no
    cost to weigh.
    """
    if answers.get("method") != "lora" or world_size <= 1 or not _layer_offload_needed(answers, facts.estimates):
        return False
    sharded, narrow = step_on_x8(facts, "fsdp2"), layer_offload_step_x8(facts)
    return narrow is not None and sharded is not None and narrow.middle <= LAYER_OFFLOAD_STEP_SLACK * sharded.middle


# "About as long" as FSDP2's step: within this factor, the same tolerance the why-not texts use
# for "about the same step". The band is a rough model, not a measurement; a difference inside it
# is not one to shard for when layer offloading leaves more of each GPU free.
LAYER_OFFLOAD_STEP_SLACK = 1.1


def step_on_x8(facts: FactSet, strategy: str) -> StepTime | None:
    """A layout's step where the board splits its PCIe lanes x8/x8.

    Half the host link, and half the link between GPUs where that is PCIe too (cards without
    NVLink; without peer-to-peer it passes through host RAM). Two-card desktops often run so; the
    catalogue knows the card's PCIe generation, not the board's lanes, so a choice between layer
    offloading and FSDP2 is also checked on the narrower links.
    """
    if facts.links is None or facts.workload is None or strategy not in facts.estimates:
        return None
    links = facts.links
    pcie_between = links.gpu_link_words.startswith("PCIe")
    narrow = replace(
        links,
        host_link=links.host_link / 2,
        gpu_link=(links.gpu_link[0] / 2, links.gpu_link[1] / 2) if pcie_between else links.gpu_link,
    )
    return step_time(facts.workload, strategy, narrow, facts.accumulation)


def layer_offload_step_x8(facts: FactSet) -> StepTime | None:
    """Layer offloading's step on x8 lanes (`step_on_x8`)."""
    return step_on_x8(facts, "ddp_layer_offload")


def layer_offloading_note(facts: FactSet) -> str | None:
    """At the layer-offloading question: the run's own figures with and without it, which its default follows."""
    plain, layer = facts.estimates.get("ddp"), facts.estimates.get("ddp_layer_offload")
    sharded, gib = facts.estimates.get("fsdp2"), facts.values.get("layer_offload_gib")
    if plain is not None and layer is None and gib is not None and sharded is not None:
        # Several GPUs, before the answer: its figures were kept aside (the row is shown once chosen),
        # and the alternative is sharding, so the note weighs the two.
        step, fsdp2_step = facts.values.get("layer_offload_step"), facts.speeds.get("fsdp2")
        timed = bool(step and fsdp2_step)
        # Said in words where the term first appears: the question comes before any summary defines it.
        # The allowance multiplies the moment's peak, not the total beside it: that figure is named.
        close = (
            f", a close call: {sum_gib(sharded.total, sharded.transient)} GiB for a moment as the backward pass"
            f" starts, and {sharded.close_call_words} there"
            if sharded.close_call
            else ""
        )
        # FSDP2's step band where both steps are known, its close call inside the same brackets.
        fsdp2 = f" ({band_text(fsdp2_step)}{close})" if fsdp2_step and timed else close
        return (
            f"Your run by the memory estimate{_at_micro(facts)}, of {to_gib(plain.budget)} GiB usable per GPU: a full"
            f" copy needs about {to_gib(plain.total)} GiB ({'fits' if plain.fits else 'past the usable line'});"
            f" with layer offloading beside DDP about {gib} GiB and {facts.values.get('layer_offload_host_gib')} GiB of"
            f" host RAM per machine{f' (a step of about {step})' if timed else ''}; sharded with FSDP2 instead about"
            f" {to_gib(sharded.total)} GiB{fsdp2}."
        )
    if plain is None or layer is None:
        return None
    host = f" and {to_gib(layer.host_per_node)} GiB of host RAM" if layer.host_per_node else ""
    return (
        f"Your run by the memory estimate{_at_micro(facts)}: without layer offloading about {to_gib(plain.total)} GiB"
        f" per GPU ({'fits' if plain.fits else 'past the usable line'}), with it about {to_gib(layer.total)} GiB{host}"
        f" ({'fits' if layer.fits and layer.host_fits is not False else 'does not fit'}), of"
        f" {to_gib(plain.budget)} GiB usable."
    )


def _at_micro(facts: FactSet) -> str:
    """The micro-batch a question's figures are at: the summary's may be at a larger one, picked for the batch."""
    work = facts.workload
    return "" if work is None else f", at micro_batch_size {work.micro_batch_size}"


def base_dtype_note(facts: FactSet) -> str | None:
    """At the Mac's base-precision question: the run's figure with each answer, side by side."""
    plain, work = facts.estimates.get("ddp"), facts.workload
    if plain is None or work is None:
        return None
    memory = plain.gpu_memory / 2**30
    fp32 = estimate(replace(work, half_precision=False), "ddp", memory, None)
    bf16 = estimate(replace(work, half_precision=True), "ddp", memory, None)

    def said(est: Estimate) -> str:
        verdict = "fits" if est.fits else "does not fit"
        moment = f", {to_gib(est.peak)} GiB for a moment" if est.transient else ""
        return f"about {to_gib(est.total)} GiB{moment} ({verdict})"

    # "For a moment" is said in words where the question comes before any summary defines it.
    moment = (
        " The moment: as the backward pass starts, the loss's fp32 temporaries live at once for an instant."
        if bf16.transient or fp32.transient
        else ""
    )
    return (
        f"Your run by the memory estimate, at micro_batch_size {work.micro_batch_size}: with a bf16 base {said(bf16)},"
        f" with an fp32 base {said(fp32)}, of {to_gib(plain.budget)} GiB usable on the Mac.{moment}"
    )


def chunked_loss_note(facts: FactSet) -> str | None:
    """At the chunked-loss question: what the answer changes for this run, a full copy on each GPU, both ways.

    The question comes before the decision, and for a long context on a small card it is the answer that decides
    whether the run fits: said with its figures and verdicts (the summary's words), so the answer is not a guess.
    """
    plain, work = facts.estimates.get("ddp"), facts.workload
    if plain is None or work is None or work.chunked_loss or plain.transient < plain.budget // 20:
        return None  # no moment worth naming: the answer changes little
    chunked = estimate(replace(work, chunked_loss=True), "ddp", plain.gpu_memory / 2**30, None)
    if not plain.fits and not chunked.fits:
        return None  # a full copy fits neither way: the run is sharded or offloaded, and these figures would mislead

    def verdict(est: Estimate) -> str:
        if not est.fits:
            return "does not fit"
        if est.close_call:
            # The allowance that makes it one, with its figure: 21.7 GiB alone reads as within a 23.99 GiB card.
            return f"a close call: {est.close_call_words} at that moment"
        return "fits, past the usable line for that moment" if est.tight else "fits"

    copy = "a full copy on each GPU" if int(facts.values.get("world_size") or 1) > 1 else "on the one GPU"
    return (
        f"Your run by the memory estimate{_at_micro(facts)}, {copy}, of {to_gib(plain.budget)} GiB usable: with the"
        f" ordinary loss about {to_gib(plain.total)} GiB and {sum_gib(plain.total, plain.transient)} GiB for a moment"
        f" as the backward pass starts ({verdict(plain)}); with a loss in chunks about {to_gib(chunked.total)} GiB,"
        f" no such moment ({verdict(chunked)})."
    )


# What a question shows beside its prompt, worked out from the run's facts: question id -> note.
QUESTION_NOTES: dict[str, Callable[[FactSet], str | None]] = {
    "layer_offloading": layer_offloading_note,
    "base_dtype": base_dtype_note,
    "chunked_loss": chunked_loss_note,
}


def expert_parallel_supported(shape: ModelShape) -> bool:
    """Whether Axolotl's expert-parallel plugin supports this model's expert layout.

    The plugin needs the experts in Transformers' fused experts layout; its README lists the
    Mixtral layout as unsupported ("Limitations" in
    https://github.com/axolotl-ai-cloud/axolotl/blob/main/src/axolotl/integrations/expert_parallel/README.md).
    The catalogue's `expert_parallel_unsupported` names those decoder-layer classes.
    """
    catalog = models_catalog()
    layer = shape.layer_class
    if layer is None and shape.reference is not None:
        layer = catalog["models"].get(shape.reference, {}).get("layer_class")
    return layer not in set(catalog.get("expert_parallel_unsupported") or ())


def _moe_block_class(answers: Mapping[str, Any], inputs: Inputs, shape: ModelShape) -> str | None:
    """The sparse MoE block class (DeepSpeed's MoE layer class) of the model, where it is known.

    From a config.json's architecture (wizard/data/architectures.yaml, or the catalogue's map of
    `architectures` entries for a config.json without model_type), or from the catalogue model a
    size alias names ("8x7B" is Mixtral-8x7B); a plain size says nothing about the model's code.
    """
    if shape.moe_block_class is not None:
        return shape.moe_block_class
    if inputs.model_config is not None:
        archs = inputs.model_config.get("architectures") or []
        arch = archs[0] if isinstance(archs, list) and archs and isinstance(archs[0], str) else None
        block = models_catalog().get("moe_block_classes", {}).get(arch) if arch else None
    else:
        name = alias_model(answers.get("model"))
        block = models_catalog()["models"][name].get("moe_block_class") if name else None
    return block if isinstance(block, str) else None


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
        return None  # not asked yet, or a TPU without torch_xla (refused whatever its size)
    # GPUs and other accelerators: devices per machine times machines (a TPU VM is one machine).
    return int(answers["gpus_per_node"]) * int(answers.get("num_nodes", 1))


def _mixed_precision(hardware: str, bf16: bool, deepspeed: DeepSpeedSummary | None) -> str:
    if hardware in BF16_HARDWARE:
        return "bf16"  # TPUs and Gaudi compute bf16 natively (guidelines H1, H3)
    if hardware not in GPU_HARDWARE:
        # fp16 needs CUDA; bf16 works only on some CPU/XPU paths and the tree's guidelines
        # promise it for none of CPU, MPS, NPU, MLU or MUSA (H4, H5, H6): full precision is safe.
        return "no"
    if deepspeed is not None:
        # What the brought JSON trains in once the launcher passes this precision (launch.sh's
        # --mixed_precision, Axolotl's bf16/fp16 keys): its "auto" switches are filled from it.
        return launched_precision(deepspeed, gpu_bf16=bf16)
    return "bf16" if bf16 else "fp16"


# optimizer: auto, the user's leave to use 8-bit AdamW where it spares offload or sharding.
AUTO_OPTIMIZER = "auto"


def dpo_reference(answers: Mapping[str, Any]) -> str:
    """How DPO's reference model scores the pairs (memory.REFERENCES); "" for supervised training.

    LoRA and QLoRA score with the base model, adapters off; a full fine-tune keeps a frozen copy,
    unless an Accelerate script precomputes the log-probs (Axolotl loads the copy either way).
    """
    if answers.get("objective") != "dpo":
        return ""
    if answers.get("reference_log_probs") == "precomputed":
        return "precomputed"
    return "copy" if answers.get("method") == "full" else "base"


def auto_optimizer(workload: Workload, gpu_memory_gib: float, host_gib: float | None) -> str:
    """The optimizer `optimizer: auto` runs: 8-bit AdamW only where it lets a full copy fit.

    A full copy is one GPU's, or DDP's copy on every GPU; it must fit with 8-bit AdamW and not
    with AdamW, else AdamW runs.

    The 8-bit state is a lever before offload and sharding, not a default: bitsandbytes' blockwise
    quantized moments train close to AdamW ("8-bit optimizers via block-wise quantization", Dettmers
    et al., 2022, https://arxiv.org/abs/2110.02861) but are not the same optimizer, so AdamW is kept
    wherever it fits, and where a full copy does not fit either way the layouts that follow
    (sharded or offloaded) run AdamW in any case (memory.run_optimizer).
    """
    if estimate(replace(workload, optimizer="adamw"), "ddp", gpu_memory_gib, host_gib).fits:
        return "adamw"
    eight = estimate(replace(workload, optimizer="adamw_8bit"), "ddp", gpu_memory_gib, host_gib)
    return "adamw_8bit" if eight.fits else "adamw"


_SHARE_WORDS = {round(2 / 3, 4): "two thirds", round(3 / 4, 4): "three quarters"}


def estimate_context(facts: FactSet) -> dict[str, Any]:
    """Numbers for explanation texts: GiB per strategy and the usable budget."""
    est = {
        s: {
            "total_gib": to_gib(e.total),
            "states_gib": to_gib(e.model_states),
            # The states without DPO's reference copy (the weights, gradients and optimizer state the
            # texts name), and the copy's share on each GPU (0 without one).
            "weights_gib": to_gib(e.model_states - reference_gpu_bytes(facts.workload, s)) if facts.workload else 0.0,
            "reference_gib": to_gib(reference_gpu_bytes(facts.workload, s)) if facts.workload else 0.0,
            "activations_gib": to_gib(e.activations),
            "host_gib": to_gib(e.host_per_node),
            # A sharded layout's states: its share of the whole, plus the largest layer gathered.
            "share_gib": to_gib(e.model_states - e.gathered),
            "gathered_gib": to_gib(e.gathered),
        }
        for s, e in facts.estimates.items()
    }
    first = next(iter(facts.estimates.values()), None) if facts.estimates else None
    budget = first.budget if first is not None else 0
    # "two thirds" where the share is a Mac's working set, as people say it; "80%" otherwise.
    share = first.share if first is not None else FIT_MARGIN
    spoken = _SHARE_WORDS.get(round(share, 4), f"{share:.0%}")
    return {"est": est, "budget_gib": to_gib(budget), "usable_share": spoken}
