"""Checks of an Axolotl YAML's deepspeed setting and the DeepSpeed config it names.

``deepspeed`` with FSDP or the parallel sizes Axolotl's schema refuses beside it, the offload
warning (only for a cpu/nvme offload device, not for any "offload" text in the path), the
referenced or inline config checked as DeepSpeed JSON, and the Transformers Trainer's rule that
numbers in the JSON must match Axolotl's (``HfTrainerDeepSpeedConfig`` in
transformers/integrations/deepspeed.py).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from wizard.checks._report import Report, as_int, mapping, show, truthy
from wizard.checks.deepspeed import check_deepspeed, offload_devices, zero_stage
from wizard.checks.referenced import load_referenced


def axis(data: Mapping[Any, Any], key: str) -> int:
    """A parallel size as Axolotl defaults it: missing, non-numeric or below 1 count as 1."""
    number = as_int(data.get(key))
    return number if number is not None and number >= 1 else 1


def check_deepspeed_setting(
    data: Mapping[Any, Any], report: Report, world_size: int | None, load_json: Callable[[str], object] | None
) -> None:
    """Check ``deepspeed`` (path or mapping), its combination with FSDP, and the config it names."""
    ds = data.get("deepspeed")
    if not truthy(ds):
        return
    if truthy(data.get("fsdp_config")):
        report.add(
            "ax-deepspeed-and-fsdp",
            "deepspeed",
            "deepspeed and fsdp_config are both set; Axolotl refuses two sharding stacks.",
            "keep one: make a DeepSpeed-only and an FSDP2-only config and compare them",
        )
    if truthy(data.get("fsdp")):
        report.add(
            "ax-deepspeed-and-legacy-fsdp",
            "deepspeed",
            "deepspeed and the legacy fsdp list are both set.",
            "remove the fsdp list (or use FSDP2 through fsdp_config instead of deepspeed)",
        )
    cp, tp = axis(data, "context_parallel_size"), axis(data, "tensor_parallel_size")
    dp_world = world_size // (cp * tp) if world_size and world_size % (cp * tp) == 0 else None
    if isinstance(ds, str):
        loaded = load_referenced(ds, report, at="deepspeed", load_json=load_json)
        if load_json is None:
            report.add(
                "ax-deepspeed-not-checked",
                "deepspeed",
                f"the DeepSpeed JSON {show(ds)} was not read, so it is not checked here.",
                "check that JSON on its own as well",
            )
        if loaded is None:
            return
        ds_data, child = loaded
        zero = mapping(ds_data.get("zero_optimization"))
        if zero is not None and "stage" not in zero:
            child.add(
                "ax-ds-no-stage",
                "zero_optimization",
                "the DeepSpeed JSON has no zero_optimization.stage, so it runs ZeRO stage 0.",
                'set "stage" to 1, 2 or 3',
            )
        named = re.search(r"zero([123])", ds.replace("\\", "/").rsplit("/", 1)[-1].lower())
        stage = zero_stage(ds_data)
        if named and stage is not None and stage != int(named.group(1)):
            report.add(
                "ax-ds-stage-filename",
                "deepspeed",
                f"the file name {show(ds)} says ZeRO-{named.group(1)} but its stage is {stage}.",
                "rename the file or fix zero_optimization.stage, whichever is wrong",
            )
        _batch_match(data, ds_data, child)
    elif isinstance(ds, Mapping):
        ds_data = ds
        child = report.child(ds, at="deepspeed", prefix="deepspeed", separator=".")
        if "stage" not in (mapping(ds.get("zero_optimization")) or {}):
            report.add(
                "ax-inline-ds-no-stage",
                "deepspeed",
                "the inline deepspeed mapping has no zero_optimization.stage.",
                "add zero_optimization: {stage: 2}, or point deepspeed at a reviewed JSON file",
            )
    else:
        report.add(
            "ax-deepspeed-type",
            "deepspeed",
            f"deepspeed is {show(ds)}; it must be a path to a JSON file or a mapping.",
            "write deepspeed: deepspeed_configs/zero2.json",
        )
        return
    check_deepspeed(_as_the_trainer_fills(data, ds_data), child, dp_world=dp_world, consumer="axolotl")
    for section, device in offload_devices(ds_data).items():
        if device in ("cpu", "nvme"):
            child.add(
                "ax-ds-offload",
                f"zero_optimization.{section}.device",
                f"DeepSpeed {section} to {device} is on; training gets slower.",
                "check host RAM (or NVMe space) and use offload only when the model does not fit otherwise",
            )


def _as_the_trainer_fills(data: Mapping[Any, Any], ds_data: Mapping[Any, Any]) -> dict[Any, Any]:
    """The JSON's batch keys as the HF Trainer under Axolotl fills them, for DeepSpeed's batch arithmetic.

    The Trainer's HfTrainerDeepSpeedConfig fills the micro batch and the accumulation with Axolotl's
    micro_batch_size and gradient_accumulation_steps ("auto", or a number that must match: see
    `_batch_match`), so train_batch_size is checked against Axolotl's own numbers, never against an
    accumulation of 1 (transformers' integrations/deepspeed.py, trainer_config_process).
    """
    filled = dict(ds_data)
    micro = as_int(data.get("micro_batch_size", 1))
    if micro is not None and micro >= 1:
        filled["train_micro_batch_size_per_gpu"] = micro
    accumulation = as_int(data.get("gradient_accumulation_steps", 1))
    if "batch_size" not in data and accumulation is not None and accumulation >= 1:
        filled["gradient_accumulation_steps"] = accumulation
    return filled


def _batch_match(data: Mapping[Any, Any], ds_data: Mapping[Any, Any], child: Report) -> None:
    """The HF Trainer raises when a number in the JSON differs from Axolotl's own value."""
    pairs = [("train_micro_batch_size_per_gpu", "micro_batch_size")]
    if "batch_size" not in data:
        pairs.append(("gradient_accumulation_steps", "gradient_accumulation_steps"))
    for ds_key, ax_key in pairs:
        ds_value = ds_data.get(ds_key)
        number = as_int(ds_value) if not isinstance(ds_value, str) else None
        ours = as_int(data.get(ax_key, 1))
        if number is not None and ours is not None and number != ours:
            child.add(
                "ax-ds-batch-mismatch",
                ds_key,
                f"{ds_key} is {number} in the JSON but {ax_key} is {ours}; the HF Trainer raises on the mismatch.",
                f'set {ds_key} to "auto" so it follows {ax_key}',
            )
