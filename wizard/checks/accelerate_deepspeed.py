"""Checks of an Accelerate YAML's deepspeed_config, and of the DeepSpeed JSON it references.

What accelerate 1.15.0's DeepSpeedPlugin (``utils/dataclasses.py``) and launcher
(``commands/launch.py``) do with it: the ZeRO stage, offload devices and NVMe paths, and for a
deepspeed_config_file the keys that make the plugin raise beside it and the NVMe paths the
launcher does not pass on.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from wizard.checks._report import Report, as_int, flag, show
from wizard.checks.accelerate_blocks import AccelerateFacts, parallel_value
from wizard.checks.deepspeed import check_deepspeed, zero_stage
from wizard.checks.referenced import load_referenced

OFFLOAD_DEVICES = ("none", "cpu", "nvme")
# Accelerate's DeepSpeedPlugin raises if any of these sits beside a deepspeed_config_file.
FILE_CONFLICTS = (
    "gradient_accumulation_steps",
    "gradient_clipping",
    "zero_stage",
    "offload_optimizer_device",
    "offload_param_device",
    "offload_param_nvme_path",
    "offload_optimizer_nvme_path",
    "zero3_save_16bit_model",
)


def check_deepspeed_block(
    data: Mapping[Any, Any],
    ctx: AccelerateFacts,
    ds: Mapping[Any, Any],
    report: Report,
    world_size: int | None,
    load_json: Callable[[str], object] | None,
    launch_mixed_precision: str | None = None,
) -> int | None:
    """Check deepspeed_config and a referenced JSON; return the effective ZeRO stage if known.

    ``launch_mixed_precision`` is the ``--mixed_precision`` the launch command passes, when known:
    it fills the JSON's "auto" precision switches.
    """
    here = "deepspeed_config"
    json_stage: int | None = None
    if "deepspeed_config_file" in ds:
        ref = ds["deepspeed_config_file"]
        for key in FILE_CONFLICTS:
            if key in ds:
                report.add(
                    "acc-ds-file-conflict",
                    f"{here}.{key}",
                    f"{here}.{key} sits beside deepspeed_config_file; Accelerate raises (it would be ignored).",
                    f"remove {key} here and set it in the JSON",
                )
        if "mixed_precision" in data and data["mixed_precision"] is not None:
            report.add(
                "acc-ds-file-conflict",
                "mixed_precision",
                "mixed_precision (even 'no') beside a deepspeed_config_file makes Accelerate raise.",
                'remove mixed_precision; enable "bf16" or "fp16" in the JSON instead',
            )
        if isinstance(ref, str) and ref and not ref.startswith(("/", "~")):
            report.add(
                "acc-ds-file-relative",
                f"{here}.deepspeed_config_file",
                f"deepspeed_config_file {show(ref)} is relative: accelerate resolves it from the launch directory.",
                "launch from the folder it is relative to, or write an absolute path",
            )
        world = ctx.num_processes if ctx.num_processes is not None else world_size
        sp = as_int(parallel_value(data, "sp")) or 1
        loaded = load_referenced(ref, report, at=f"{here}.deepspeed_config_file", load_json=load_json)
        if loaded is None and load_json is None:
            report.add(
                "acc-ds-file-info",
                f"{here}.deepspeed_config_file",
                f"the DeepSpeed JSON {show(ref)} was not read, so it is not checked here.",
                "check that JSON on its own as well",
            )
        if loaded is not None:
            json_data, child = loaded
            dp_world = world // sp if world is not None and sp >= 1 and world % sp == 0 else None
            check_deepspeed(json_data, child, dp_world=dp_world, consumer="accelerate")
            json_stage = zero_stage(json_data)
            mixed_precision_set = data.get("mixed_precision") is not None  # an error of its own above
            if launch_mixed_precision is None and not mixed_precision_set and ctx.distributed_type == "DEEPSPEED":
                _unfilled_precision(json_data, child)
    if "zero_optimization" in ds:
        report.add(
            "acc-inline-zero-optimization",
            f"{here}.zero_optimization",
            "deepspeed_config holds a JSON-style zero_optimization block; it is checked as DeepSpeed JSON.",
            "put the DeepSpeed JSON in its own file and reference it with deepspeed_config_file",
        )
        check_deepspeed(ds, report.child(ds, at=here, prefix=here, separator="."), dp_world=None, inline=True)
    stage: int | None
    if "zero_stage" in ds:
        stage = as_int(ds["zero_stage"])
        if stage not in (0, 1, 2, 3):
            report.add(
                "acc-zero-stage",
                f"{here}.zero_stage",
                f"zero_stage is {show(ds['zero_stage'])}; allowed: 0, 1, 2, 3.",
                "write 0, 1, 2 or 3",
            )
            stage = None
    elif "deepspeed_config_file" in ds:
        stage = json_stage
    else:
        stage = 2  # DeepSpeedPlugin's default
    check_deepspeed_launch_keys(ds, stage, report)
    return stage


def _unfilled_precision(json_data: Mapping[Any, Any], report: Report) -> None:
    """A bf16/fp16 "enabled": "auto" in a deepspeed_config_file, with no mixed precision to fill it.

    Accelerate fills "auto" from its own mixed precision (``DeepSpeedPlugin.set_mixed_precision``
    in accelerate/utils/dataclasses.py,
    https://github.com/huggingface/accelerate/blob/main/src/accelerate/utils/dataclasses.py),
    which the YAML cannot set beside the file and which defaults to "no": DeepSpeed then trains
    in fp32 without a word.
    """
    for name in ("bf16", "bfloat16", "fp16"):
        block = json_data.get(name)
        if not isinstance(block, Mapping) or block.get("enabled") != "auto":
            continue
        precision = "fp16" if name == "fp16" else "bf16"
        rename = ' (rename the block to "bf16": Accelerate never fills the old name)' if name == "bfloat16" else ""
        report.add(
            "acc-ds-precision-auto",
            f"{name}.enabled",
            f'{name}.enabled is "auto" and nothing fills it: Accelerate takes it from its mixed_precision, '
            "which cannot sit beside a deepspeed_config_file and defaults to no, so DeepSpeed trains in fp32.",
            f"pass --mixed_precision {precision} to accelerate launch (a launch.sh from backend-wizard does)"
            f'{rename}, or write "enabled": true in the JSON\'s {name} block',
        )


def check_deepspeed_launch_keys(ds: Mapping[Any, Any], stage: int | None, report: Report) -> None:
    """deepspeed_config's own keys: offload devices and paths against the effective stage."""
    devices: dict[str, str] = {}
    for kind in ("optimizer", "param"):
        key = f"offload_{kind}_device"
        if key not in ds:
            continue
        value = ds[key]
        if not isinstance(value, str) or value.lower() not in OFFLOAD_DEVICES:
            report.add(
                "acc-offload-device",
                f"deepspeed_config.{key}",
                f"{key} is {show(value)}; allowed: none, cpu, nvme.",
                "write none, cpu or nvme",
            )
            continue
        devices[kind] = value.lower()
    stage_text = "not set (the plugin uses 2)" if "zero_stage" not in ds else str(stage)
    if devices.get("optimizer") in ("cpu", "nvme") and stage in (0, 1):
        report.add(
            "acc-offload-optimizer-stage",
            "deepspeed_config.offload_optimizer_device",
            f"optimizer offload to {devices['optimizer']} with zero_stage {stage}; it belongs to ZeRO-2/3.",
            "set zero_stage: 2 (or 3), or offload_optimizer_device: none",
        )
    if devices.get("param") in ("cpu", "nvme") and stage is not None and stage != 3:
        report.add(
            "acc-offload-param-stage",
            "deepspeed_config.offload_param_device",
            f"parameter offload to {devices['param']} with zero_stage {stage_text}; it requires zero_stage: 3.",
            "set zero_stage: 3, or offload_param_device: none (keep optimizer offload on ZeRO-2)",
        )
    for key, check in (("zero3_init_flag", "acc-zero3-init-stage"), ("zero3_save_16bit_model", "acc-zero3-save-stage")):
        if flag(ds.get(key)) is True and stage is not None and stage != 3:
            report.add(
                check,
                f"deepspeed_config.{key}",
                f"{key} is on with ZeRO stage {stage}; it only makes sense with ZeRO-3.",
                f"remove {key}, or use zero_stage: 3",
            )
    if "deepspeed_config_file" in ds:
        return  # the paths beside a file are already errors (acc-ds-file-conflict)
    for kind in ("optimizer", "param"):
        path_key = f"offload_{kind}_nvme_path"
        has_path = ds.get(path_key) not in (None, "")
        if devices.get(kind) == "nvme" and not has_path:
            report.add(
                "acc-nvme-without-path",
                f"deepspeed_config.offload_{kind}_device",
                f"offload_{kind}_device is nvme but {path_key} is missing.",
                "put NVMe offload in a DeepSpeed JSON with device nvme and nvme_path, via deepspeed_config_file",
            )
        elif devices.get(kind) == "nvme":
            report.add(
                "acc-nvme-path-not-passed",
                f"deepspeed_config.{path_key}",
                f"{path_key} is in the YAML, but accelerate 1.15 does not pass it on (DeepSpeed gets 'none').",
                "put NVMe offload in a DeepSpeed JSON (device nvme + nvme_path) and use deepspeed_config_file",
            )
        elif has_path:
            report.add(
                "acc-nvme-path-unused",
                f"deepspeed_config.{path_key}",
                f"{path_key} is set but offload_{kind}_device is {devices.get(kind, 'not set')}, so it is ignored.",
                f"set offload_{kind}_device: nvme, or remove {path_key}",
            )
