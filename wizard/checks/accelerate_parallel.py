"""Checks of an Accelerate YAML's parallelism_config, fp8_config and bitsandbytes block.

What accelerate 1.15.0 accepts here (``ParallelismConfig`` in ``parallelism_config.py``, the FP8
recipe kwargs and ``BnbQuantizationConfig`` in ``utils/dataclasses.py``): the parallel sizes need
FSDP2, a MULTI_<device> type or DeepSpeed, and DeepSpeed with the sequence-parallel (sp) size above
1, alone or beside data-parallel sizes, need not multiply to num_processes (Accelerate passes the
sp_* keys to DeepSpeed); the FP8 backend and recipe names; bitsandbytes' quantization types.
Plus the wizard-level error "parallel product != num_processes".
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from wizard.checks._report import Report, as_int, flag, mapping, show, text
from wizard.checks.accelerate_blocks import AccelerateFacts, item

PARALLEL_DIMS = ("dp_replicate", "dp_shard", "tp", "cp", "sp")
SP_ATTN = ("flash_attention_2", "flash_attention_3", "sdpa")
FP8_BACKENDS = ("te", "transformer_engine", "ao", "torchao", "msamp")
# accelerate config (the questionnaire) writes these names, which nothing reads: the FP8 recipe
# kwargs in accelerate's utils/dataclasses.py are amax_history_len, amax_compute_algo, opt_level.
FP8_MISSPELLED = {
    "amax_history_length": "amax_history_len",
    "amax_compute_algorithm": "amax_compute_algo",
    "optimization_level": "opt_level",
}
QUANT_DTYPES = ("fp32", "float32", "fp16", "float16", "bf16", "bfloat16")


def check_parallelism(par: Mapping[Any, Any], ctx: AccelerateFacts, report: Report) -> None:
    """parallelism_config: sizes, their product against num_processes, and the FSDP2 rule."""
    if not par:
        return
    sizes: dict[str, int] = {}
    for dim in PARALLEL_DIMS:
        found = item(par, f"{dim}_size", "parallelism_config_")
        if found is None:
            sizes[dim] = 1
            continue
        number = as_int(found[1])
        if number is None or number < 1:
            report.add(
                "acc-parallel-size",
                f"parallelism_config.{found[0]}",
                f"{found[0]} is {show(found[1])}; it must be an integer of at least 1.",
                "write a whole number such as 1, 2, 4 or 8",
            )
            number = 1
        sizes[dim] = number
    product = math.prod(sizes.values())
    # DeepSpeed's sequence parallel (ALST/Ulysses) with data-parallel sizes beside it: Accelerate
    # 1.15 skips its product check for sp under DeepSpeed (ParallelismConfig._validate_accelerator)
    # and DeepSpeed shards the data-parallel ranks itself (TRL's alst_ulysses config: sp 2 x dp_shard 2).
    deepspeed_sp = ctx.distributed_type == "DEEPSPEED" and sizes["sp"] > 1 and sizes["tp"] == sizes["cp"] == 1
    where = "parallelism_config"
    if product > 1 and ctx.distributed_type == "NO":
        # Like the unused deepspeed_config and fsdp_config blocks: the warning only.
        report.add(
            "acc-parallel-unused",
            where,
            f"parallelism_config (product {product}) is set but distributed_type is NO: accelerate launch does not"
            " pass it on, so the run has one process and no parallelism.",
            "remove parallelism_config, or set the distributed type it is for (FSDP with fsdp_version 2)",
        )
        return
    if product > 1 and ctx.num_processes is None:
        report.add(
            "acc-parallel-product-info",
            where,
            f"the parallel sizes multiply to {product}; compare that with the number of processes you launch.",
            "set num_processes to the product of the parallel sizes",
        )
    elif product > 1 and product != ctx.num_processes and not (sizes["sp"] > 1 and ctx.distributed_type == "DEEPSPEED"):
        report.add(
            "acc-parallel-product",
            where,
            f"the parallel sizes multiply to {product} but num_processes is {ctx.num_processes}.",
            f"make dp_replicate x dp_shard x tp x cp x sp equal num_processes ({ctx.num_processes})",
        )
    if deepspeed_sp and product > 1:
        report.add(
            "acc-parallel-ds-sp",
            where,
            "DeepSpeed sequence parallelism (sp_size above 1, with data-parallel sizes or without): DeepSpeed"
            " makes the sequence- and data-parallel groups itself, so the sizes need not multiply to num_processes.",
            "nothing to change",
        )
    if product > 1 and not _takes_parallelism(ctx):
        version = f" with fsdp_version {ctx.fsdp_version}" if ctx.distributed_type == "FSDP" else ""
        report.add(
            "acc-parallel-needs-fsdp2",
            where,
            f"parallelism_config (product {product}) works with FSDP2, a MULTI_<device> type or DEEPSPEED, but this"
            f" is {ctx.distributed_type}{version}; the Accelerator raises.",
            "set distributed_type: FSDP with fsdp_config.fsdp_version: 2 (or MULTI_GPU, DEEPSPEED)",
        )
    _parallel_values(par, sizes, ctx, report)


def _takes_parallelism(ctx: AccelerateFacts) -> bool:
    """Whether accelerate 1.15 takes a parallelism_config with this distributed type.

    ``ParallelismConfig._validate_accelerator`` (src/accelerate/parallelism_config.py,
    https://github.com/huggingface/accelerate/blob/main/src/accelerate/parallelism_config.py) accepts
    FSDP2, a multi-device type (MULTI_GPU, MULTI_XPU, ...; not MULTI_CPU) or DEEPSPEED; an unknown
    type is left alone.
    """
    dtype = ctx.distributed_type
    if dtype is None or dtype == "DEEPSPEED" or (dtype == "FSDP" and ctx.fsdp_version == 2):
        return True
    return dtype.startswith("MULTI_") and dtype != "MULTI_CPU"


def _parallel_values(par: Mapping[Any, Any], sizes: Mapping[str, int], ctx: AccelerateFacts, report: Report) -> None:
    pre = "parallelism_config_"
    strategy = item(par, "cp_comm_strategy", pre)
    if strategy is not None and strategy[1] not in ("allgather", "alltoall"):
        report.add(
            "acc-cp-comm-strategy",
            f"parallelism_config.{strategy[0]}",
            f"{strategy[0]} is {show(strategy[1])}; allowed: allgather, alltoall.",
            "write allgather (or alltoall)",
        )
    attn = item(par, "sp_attn_implementation", pre)
    if attn is not None:
        value = text(attn[1]) or ""
        hub_kernel = "/" in value and "flash-attn" in value
        if value not in SP_ATTN and not hub_kernel:
            report.add(
                "acc-sp-attn",
                f"parallelism_config.{attn[0]}",
                f"{attn[0]} is {show(attn[1])}; sequence parallelism supports flash_attention_2/3, sdpa or a"
                " hub flash-attn kernel (never eager or flex_attention).",
                "write flash_attention_2 or sdpa",
            )
    variable = item(par, "sp_seq_length_is_variable", pre)
    if variable is not None and flag(variable[1]) is False and item(par, "sp_seq_length", pre) is None:
        report.add(
            "acc-sp-seq-length",
            f"parallelism_config.{variable[0]}",
            f"{variable[0]} is false but sp_seq_length is not set.",
            "add parallelism_config_sp_seq_length (the fixed length), or set the flag to true",
        )
    if sizes["cp"] > 1 and sizes["sp"] > 1:
        report.add(
            "acc-cp-and-sp",
            "parallelism_config",
            f"cp_size {sizes['cp']} and sp_size {sizes['sp']} are both above 1; accelerate allows one of them.",
            "keep context parallel (FSDP2) or sequence parallel (DeepSpeed), not both",
        )
    if (sizes["tp"] > 1 or sizes["cp"] > 1) and sizes["dp_replicate"] > 1 and sizes["dp_shard"] == 1:
        report.add(
            "acc-replicate-with-tp-cp",
            "parallelism_config",
            "TP/CP above 1 with dp_replicate above 1 and dp_shard 1 (DDP with TP/CP); accelerate rejects it.",
            "use dp_shard_size > 1 (FSDP + TP/CP), or drop dp_replicate",
        )
    if ctx.distributed_type == "FSDP" and ctx.fsdp_version == 2 and sizes["dp_shard"] == 1 and sizes["cp"] == 1:
        report.add(
            "acc-fsdp2-parallel-no-shard",
            "parallelism_config",
            "with FSDP2, parallelism_config needs dp_shard_size or cp_size above 1; the Accelerator raises otherwise.",
            "set parallelism_config_dp_shard_size (the FSDP shard group) above 1",
        )
    machines, processes = ctx.num_machines, ctx.num_processes
    if sizes["tp"] > 1 and machines is not None and machines > 1 and processes is not None and processes >= machines:
        per_machine = processes // machines
        if sizes["tp"] > per_machine:
            report.add(
                "acc-tp-cross-node",
                "parallelism_config",
                f"tp_size {sizes['tp']} exceeds the {per_machine} processes of one machine, so TP crosses nodes.",
                f"keep tensor parallel within a machine (tp_size <= {per_machine})",
            )


def check_fp8(fp8: Mapping[Any, Any], ctx: AccelerateFacts, report: Report) -> None:
    """fp8_config and mixed_precision: fp8."""
    if fp8 and ctx.mixed_precision != "fp8":
        report.add(
            "acc-fp8-config-unused",
            "fp8_config",
            f"fp8_config is set but mixed_precision is {ctx.mixed_precision or 'not set'}, not fp8.",
            "set mixed_precision: fp8, or remove fp8_config",
        )
    if ctx.mixed_precision == "fp8" and not fp8:
        report.add(
            "acc-fp8-no-config",
            "mixed_precision",
            "mixed_precision is fp8 without fp8_config; the defaults depend on the installed FP8 library.",
            "add fp8_config with backend: TE (or AO, MSAMP)",
        )
    if not fp8:
        return
    backend = item(fp8, "backend", "fp8_")
    if backend is not None:
        value = text(backend[1])
        if value is None or value.lower() not in FP8_BACKENDS:
            report.add(
                "acc-fp8-backend",
                f"fp8_config.{backend[0]}",
                f"{backend[0]} is {show(backend[1])}; use te, ao or msamp.",
                "write backend: TE (or AO, MSAMP)",
            )
        elif value not in ("AO", "TE", "MSAMP"):
            upper = {"transformer_engine": "TE", "torchao": "AO"}.get(value.lower(), value.upper())
            report.add(
                "acc-fp8-backend-case",
                f"fp8_config.{backend[0]}",
                f"{backend[0]} is {show(value)}; accelerate 1.15 compares with AO, TE or MSAMP exactly and raises.",
                f"write backend: {upper}",
            )
    checks = (
        ("format", "acc-fp8-format", ("HYBRID", "E4M3", "E5M2"), str.upper),
        ("amax_compute_algo", "acc-fp8-amax-algo", ("max", "most_recent"), str),
        ("opt_level", "acc-fp8-opt-level", ("O1", "O2"), str.upper),
    )
    for name, check, allowed, norm in checks:
        found = item(fp8, name, "fp8_")
        if found is not None and (not isinstance(found[1], str) or norm(found[1]) not in allowed):
            report.add(
                check,
                f"fp8_config.{found[0]}",
                f"{found[0]} is {show(found[1])}; allowed: " + ", ".join(allowed) + ".",
                f"write {allowed[0]}" if check != "acc-fp8-amax-algo" else "write most_recent (or max)",
            )
    for wrong, right in FP8_MISSPELLED.items():
        found = item(fp8, wrong, "fp8_")
        if found is not None:
            report.add(
                "acc-fp8-key-spelling",
                f"fp8_config.{found[0]}",
                f"{found[0]} is the name accelerate config writes, but nothing reads it, so the default applies.",
                f"rename it to {right}",
            )
    is_msamp = backend is not None and str(backend[1]).lower() == "msamp"
    if is_msamp and ctx.distributed_type == "DEEPSPEED" and ctx.ds_stage == 3:
        report.add(
            "acc-msamp-zero3",
            f"fp8_config.{backend[0] if backend else 'backend'}",
            "FP8 through MS-AMP with DeepSpeed ZeRO-3; MS-AMP only works with ZeRO stages 0-2.",
            "use backend TE or AO, or ZeRO stage 2 or lower",
        )
    gather = item(fp8, "enable_fsdp_float8_all_gather", "fp8_")
    if (
        gather is not None
        and flag(gather[1]) is True
        and not (ctx.distributed_type == "FSDP" and ctx.fsdp_version == 2)
    ):
        report.add(
            "acc-fp8-all-gather-fsdp2",
            f"fp8_config.{gather[0]}",
            "the torchao FP8 all-gather only works with FSDP2.",
            "use distributed_type: FSDP with fsdp_version: 2, or set it to false",
        )


def check_quantization(block: object, name: str, report: Report) -> None:
    """A bitsandbytes quantization block (an Accelerate config may carry one too)."""
    quant = mapping(block)
    if quant is None:
        if block is not None:
            report.add(
                "section-not-mapping", name, f"{name} is {show(block)}, not a mapping.", f"write {name} as a mapping"
            )
        return
    if flag(quant.get("load_in_8bit")) is True and flag(quant.get("load_in_4bit")) is True:
        report.add(
            "acc-quant-8bit-and-4bit",
            f"{name}.load_in_4bit",
            "load_in_8bit and load_in_4bit are both true.",
            "keep one: load_in_4bit for QLoRA-style training",
        )
    if "bnb_4bit_quant_type" in quant and quant["bnb_4bit_quant_type"] not in ("fp4", "nf4"):
        report.add(
            "acc-quant-type",
            f"{name}.bnb_4bit_quant_type",
            f"bnb_4bit_quant_type is {show(quant['bnb_4bit_quant_type'])}; allowed: fp4, nf4.",
            "write nf4",
        )
    dtype = quant.get("bnb_4bit_compute_dtype")
    if dtype is not None and (not isinstance(dtype, str) or dtype.removeprefix("torch.") not in QUANT_DTYPES):
        report.add(
            "acc-quant-compute-dtype",
            f"{name}.bnb_4bit_compute_dtype",
            f"bnb_4bit_compute_dtype is {show(dtype)}, not a float dtype bitsandbytes computes in.",
            "write bf16 (or fp16 on GPUs without bf16)",
        )
