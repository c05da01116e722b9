"""Checks of an Accelerate config YAML (1.15.0): the top level, nested keys, multi-node keys.

What accelerate's config loader and launcher accept (``commands/config/config_args.py``,
``commands/launch.py``): the distributed type, process and machine counts, mixed precision, the
keys it reads and the ones it silently ignores; plus the wizard-level rules ("DeepSpeed and FSDP
both configured" is an error here). deepspeed_config is checked in
``accelerate_deepspeed``, fsdp_config in ``accelerate_blocks``, the parallelism, fp8 and
quantization blocks in ``accelerate_parallel``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from wizard.checks import accelerate_blocks as blocks
from wizard.checks import accelerate_parallel as parallel
from wizard.checks._report import Report, as_int, flag, show, text, truthy
from wizard.checks.keys import accelerate_accepts, did_you_mean, known_keys, suggest, suggest_nested
from wizard.engine.names import ACCELERATE_TYPES

DISTRIBUTED_TYPES = ACCELERATE_TYPES
# The types accelerate launches as --multi_gpu (the gpu_ids rule applies to them).
MULTI_DEVICE = frozenset(t for t in DISTRIBUTED_TYPES if t.startswith("MULTI_") and t != "MULTI_CPU")
MIXED_PRECISION = ("no", "fp16", "bf16", "fp8")
DYNAMO_BACKENDS = frozenset(
    {
        "NO",
        "EAGER",
        "AOT_EAGER",
        "INDUCTOR",
        "AOT_TS_NVFUSER",
        "NVPRIMS_NVFUSER",
        "CUDAGRAPHS",
        "OFI",
        "FX2TRT",
        "ONNXRT",
        "TENSORRT",
        "AOT_TORCHXLA_TRACE_ONCE",
        "TORCHXLA_TRACE_ONCE",
        "TVM",
        "HPU_BACKEND",
        "NEURON",
    }
)
SECTIONS = tuple(known_keys().accelerate_nested)


def check_accelerate(
    data: Mapping[Any, Any],
    report: Report,
    *,
    world_size: int | None,
    load_json: Callable[[str], object] | None,
    launch_mixed_precision: str | None = None,
) -> None:
    """Check an Accelerate config mapping (see ``wizard.checks.check_config``)."""
    env = data.get("compute_environment")
    if env is not None and env not in ("LOCAL_MACHINE", "AMAZON_SAGEMAKER"):
        report.add(
            "acc-compute-environment",
            "compute_environment",
            f"compute_environment is {show(env)}; accelerate allows LOCAL_MACHINE or AMAZON_SAGEMAKER.",
            "write compute_environment: LOCAL_MACHINE",
        )
    if env == "AMAZON_SAGEMAKER":
        report.add(
            "acc-sagemaker",
            "compute_environment",
            "SageMaker configs use another key set; only the file's shape was checked.",
            "check it with accelerate's own loader",
        )
        return
    _unknown_keys(data, report)
    ctx = blocks.AccelerateFacts(
        distributed_type=_distributed_type(data, report),
        mixed_precision=_mixed_precision(data, report),
        num_processes=_num_processes(data, report),
        num_machines=as_int(data.get("num_machines", 1)),
        fsdp_version=blocks.fsdp_version(data),
        ds_stage=None,
    )
    if world_size is not None and ctx.num_processes is not None and ctx.num_processes != world_size:
        # accelerate launch starts num_processes processes (all machines together), whatever the
        # cluster holds: a config written for another GPU count under- or over-subscribes it.
        report.add(
            "acc-world-size-mismatch",
            "num_processes",
            f"num_processes is {ctx.num_processes}, so accelerate launch starts {ctx.num_processes} processes on all"
            f" machines together, not the {world_size} of --world-size.",
            f"write num_processes: {world_size} (or pass --num_processes {world_size} to accelerate launch)",
        )
    sections = {name: _section(data, name, report) for name in SECTIONS}
    _backend_sections(data, ctx, sections, report)
    _machines(data, ctx, report)
    _dynamo(data, sections["dynamo_config"], report)
    # A block the distributed type does not use is never read by the launcher: the unused
    # warning above is all there is to say about it (what is inside cannot break the run).
    ds_stage = None
    if _uses(ctx.distributed_type, "DEEPSPEED"):
        from wizard.checks.accelerate_deepspeed import check_deepspeed_block  # only beside DeepSpeed

        ds_stage = check_deepspeed_block(
            data, ctx, sections["deepspeed_config"], report, world_size, load_json, launch_mixed_precision
        )
    ctx = dataclasses.replace(ctx, ds_stage=ds_stage)
    if _uses(ctx.distributed_type, "FSDP"):
        blocks.check_fsdp(sections["fsdp_config"], ctx, report)
    parallel.check_parallelism(sections["parallelism_config"], ctx, report)
    parallel.check_fp8(sections["fp8_config"], ctx, report)
    for name in ("quantization_config", "bnb_quantization_config"):
        parallel.check_quantization(data.get(name), name, report)


def _unknown_keys(data: Mapping[Any, Any], report: Report) -> None:
    keys = known_keys()
    for key in data:
        if key in keys.accelerate_top:
            continue
        if key == "deepseed_config":
            report.add(
                "acc-deepseed-typo",
                "deepseed_config",
                "deepseed_config is misspelled; accelerate rejects the unknown key.",
                "did you mean 'deepspeed_config'? Rename it",
            )
            continue
        home = [name for name in SECTIONS if accelerate_accepts(name, key)]
        fallback = f"move it under {home[0]}" if home else f"remove '{key}' (accelerate 1.15 has no such key)"
        report.add(
            "acc-unknown-key",
            str(key),
            f"'{key}' is not an accelerate config key; the loader rejects the file (ValueError).",
            did_you_mean(suggest(key, keys.accelerate_top), fallback),
        )


def _section(data: Mapping[Any, Any], name: str, report: Report) -> Mapping[Any, Any]:
    """A nested dict (empty when absent), after the not-a-mapping and unknown-key checks."""
    value = data.get(name)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        report.add(
            "section-not-mapping", name, f"{name} is {show(value)}, not a mapping.", f"write {name} as a mapping"
        )
        return {}
    for key in value:
        if accelerate_accepts(name, key):
            continue
        if name == "deepspeed_config" and key in known_keys().deepspeed_top:
            fix = "move it into a DeepSpeed JSON and reference it with deepspeed_config_file"
            message = f"{name}.{key} is a DeepSpeed JSON key; accelerate silently ignores it here."
        else:
            fix = did_you_mean(suggest_nested(name, key), f"remove '{key}'")
            message = f"{name}.{key} is not a key accelerate reads; it is silently ignored."
        report.add("acc-unknown-nested-key", f"{name}.{key}", message, fix)
    return value


def _distributed_type(data: Mapping[Any, Any], report: Report) -> str | None:
    if "distributed_type" not in data:
        report.add(
            "acc-distributed-type-missing",
            "distributed_type",
            "distributed_type is missing; accelerate refuses the file.",
            "add distributed_type (NO, MULTI_GPU, DEEPSPEED, FSDP, ...)",
        )
        return None
    value = data["distributed_type"]
    if value is False:
        report.add(
            "acc-unquoted-no-type",
            "distributed_type",
            "distributed_type is false: YAML read an unquoted NO as a boolean, which only works by accident.",
            "quote it: distributed_type: 'NO'",
        )
        return "NO"
    if isinstance(value, str) and value in DISTRIBUTED_TYPES:
        return value
    if isinstance(value, str) and value.strip().upper() in DISTRIBUTED_TYPES:
        report.add(
            "acc-distributed-type-case",
            "distributed_type",
            f"distributed_type is {show(value)}; accelerate's loader is case-sensitive and rejects it.",
            f"write distributed_type: {value.strip().upper()}",
        )
        return value.strip().upper()
    report.add(
        "acc-distributed-type",
        "distributed_type",
        f"distributed_type is {show(value)}, not a known type.",
        "use one of " + ", ".join(sorted(DISTRIBUTED_TYPES)),
    )
    return None


def _mixed_precision(data: Mapping[Any, Any], report: Report) -> str | None:
    value = data.get("mixed_precision")
    if value is False:
        report.add(
            "acc-unquoted-no-precision",
            "mixed_precision",
            "mixed_precision is false: YAML read an unquoted no as a boolean, and the launch crashes on it.",
            "quote it: mixed_precision: 'no'",
        )
        return "no"
    if value is None:
        return None
    if not isinstance(value, str) or value.lower() not in MIXED_PRECISION:
        report.add(
            "acc-mixed-precision",
            "mixed_precision",
            f"mixed_precision is {show(value)}; accelerate allows no, fp16, bf16 or fp8.",
            "write 'no', fp16, bf16 or fp8",
        )
        return None
    mp = value.lower()
    if mp == "bf16" and flag(data.get("fp16")) is True:
        report.add(
            "acc-fp16-bf16",
            "fp16",
            "the legacy fp16: true asks for fp16 while mixed_precision is bf16; accelerate silently drops one.",
            "remove the legacy fp16 key and keep mixed_precision",
        )
    return mp


def _num_processes(data: Mapping[Any, Any], report: Report) -> int | None:
    value = data.get("num_processes")
    if value is None:
        dtype = data.get("distributed_type")
        if dtype not in ("NO", False, None):
            report.add(
                "acc-num-processes-missing",
                "num_processes",
                f"num_processes is missing for distributed_type {show(dtype)}; the launch stops and asks for it.",
                "add num_processes: the total number of processes on all machines",
            )
        return None
    number = as_int(value)
    if number is None or number < 1:
        report.add(
            "acc-num-processes",
            "num_processes",
            f"num_processes is {show(value)}; it must be an integer of at least 1.",
            "write the total number of processes on all machines, e.g. num_processes: 8",
        )
        return None
    return number


def _backend_sections(
    data: Mapping[Any, Any], ctx: blocks.AccelerateFacts, sections: Mapping[str, Mapping[Any, Any]], report: Report
) -> None:
    dtype, ds, fsdp = ctx.distributed_type, sections["deepspeed_config"], sections["fsdp_config"]
    if dtype == "DEEPSPEED" and "deepspeed_config" not in data:
        report.add(
            "acc-deepspeed-without-config",
            "distributed_type",
            "distributed_type is DEEPSPEED but there is no deepspeed_config.",
            "add deepspeed_config with deepspeed_config_file (or zero_stage and offload keys)",
        )
    if dtype == "FSDP" and not fsdp:
        report.add(
            "acc-fsdp-without-config",
            "distributed_type",
            "distributed_type is FSDP but there is no fsdp_config, so every FSDP setting is a default (FSDP1).",
            "add fsdp_config with fsdp_version: 2",
        )
    if ds and dtype is not None and dtype != "DEEPSPEED":
        report.add(
            "acc-deepspeed-config-unused",
            "deepspeed_config",
            f"deepspeed_config is set but distributed_type is {dtype}, so it is not used.",
            "remove deepspeed_config, or set distributed_type: DEEPSPEED",
        )
    if fsdp and dtype is not None and dtype != "FSDP":
        report.add(
            "acc-fsdp-config-unused",
            "fsdp_config",
            f"fsdp_config is set but distributed_type is {dtype}, so it is not used.",
            "remove fsdp_config, or set distributed_type: FSDP",
        )
    if ds and fsdp and _uses(dtype, "DEEPSPEED") and _uses(dtype, "FSDP"):
        report.add(
            "acc-deepspeed-and-fsdp",
            "fsdp_config",
            "deepspeed_config and fsdp_config are both configured; only one sharding backend can run.",
            "keep the one distributed_type names and remove the other (or make two config files)",
        )
    if truthy(data.get("tpu_use_cluster")) and dtype != "XLA":
        report.add(
            "acc-tpu-cluster",
            "tpu_use_cluster",
            f"tpu_use_cluster is on but distributed_type is {show(data.get('distributed_type'))}, not XLA.",
            "remove tpu_use_cluster, or set distributed_type: XLA",
        )


def _uses(distributed_type: str | None, backend: str) -> bool:
    """Whether a run of this distributed type reads the backend's block (unknown: assume it does).

    DEEPSPEED reads deepspeed_config and FSDP reads fsdp_config; under any other type (NO,
    MULTI_GPU, ...) neither block reaches a plugin, as accelerate's launch_command picks the
    launcher from the type alone.
    """
    return distributed_type is None or distributed_type == backend


def _machines(data: Mapping[Any, Any], ctx: blocks.AccelerateFacts, report: Report) -> None:
    gpu_ids = data.get("gpu_ids")
    if gpu_ids is not None and not isinstance(gpu_ids, str):
        report.add(
            "acc-gpu-ids-type",
            "gpu_ids",
            f"gpu_ids is {show(gpu_ids)}, not a string; the launch crashes ('int' has no split).",
            f"quote it: gpu_ids: '{gpu_ids}' (or all)",
        )
    machines = ctx.num_machines
    ids = text(gpu_ids)
    single_machine = ctx.distributed_type in MULTI_DEVICE and (machines or 1) <= 1
    if (
        single_machine
        and ids is not None
        and ids.strip() != "all"
        and len([p for p in ids.split(",") if p.strip()]) < 2
    ):
        report.add(
            "acc-gpu-ids-count",
            "gpu_ids",
            f"gpu_ids is {show(ids)}: fewer than two GPUs for a single-machine {ctx.distributed_type} run.",
            "list at least two ids ('0,1') or write gpu_ids: all",
        )
    rank = as_int(data.get("machine_rank"))
    if machines is not None and machines >= 1 and rank is not None and not 0 <= rank < machines:
        report.add(
            "acc-machine-rank",
            "machine_rank",
            f"machine_rank is {rank} but num_machines is {machines}; ranks are 0 to {machines - 1}.",
            f"use a machine_rank from 0 to {machines - 1}, unique per machine",
        )
    if machines is None or machines <= 1:
        return
    if ctx.num_processes is not None and ctx.num_processes % machines:
        report.add(
            "acc-processes-per-machine",
            "num_processes",
            f"num_processes {ctx.num_processes} does not divide evenly over {machines} machines.",
            "num_processes is the total over all machines: use a multiple of num_machines",
        )
    if data.get("main_process_ip") in (None, ""):
        report.add(
            "acc-multinode-no-ip",
            "num_machines",
            f"num_machines is {machines} but main_process_ip is not set, so the file alone cannot launch.",
            "add main_process_ip (the first machine's address) or pass --main_process_ip at launch",
        )


def _dynamo(data: Mapping[Any, Any], dynamo: Mapping[Any, Any], report: Report) -> None:
    candidates = [("dynamo_backend", data.get("dynamo_backend"))]
    candidates += [(f"dynamo_config.{k}", dynamo.get(k)) for k in ("dynamo_backend", "backend")]
    for path, value in candidates:
        if value is not None and (not isinstance(value, str) or value.upper() not in DYNAMO_BACKENDS):
            report.add(
                "acc-dynamo-backend",
                path,
                f"the dynamo backend {show(value)} is unknown; the launch fails.",
                "use INDUCTOR (or another torch.compile backend accelerate lists), or NO",
            )
