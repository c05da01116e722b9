"""Checks of a DeepSpeed JSON (0.19.8): a standalone file, one a YAML references, or an inline block.

What DeepSpeed itself rejects while parsing (``deepspeed/runtime/config.py`` and the pydantic
models of ``deepspeed/runtime/zero/config.py``; https://www.deepspeed.ai/docs/config-json/): a ZeRO
stage outside 0-3 (a stage of "auto" is only a warning: Accelerate fills it), offload devices,
unknown keys in its strict sub-blocks, removed features, both spellings of a stage3_ alias, the
legacy compile block, fp16 with bf16, bad batch numbers.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from wizard.checks._report import Report, as_int, flag, mapping, show, truthy
from wizard.checks.keys import did_you_mean, known_keys, suggest

OFFLOAD_DEVICES = ("none", "cpu", "nvme")
BATCH_KEYS = ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps")
GATHER_KEYS = (
    "stage3_gather_16bit_weights_on_model_save",
    "gather_16bit_weights_on_model_save",
    "stage3_gather_fp16_weights_on_model_save",
)
# DeepSpeed still reads the old block name bfloat16 as bf16.
PRECISION_BLOCKS = (("bf16", "bf16"), ("bfloat16", "bf16"), ("fp16", "fp16"))


def zero_stage(data: Mapping[Any, Any]) -> int | None:
    """The ZeRO stage a DeepSpeed dict sets: 0 when zero_optimization has no stage, None if unclear."""
    zero = mapping(data.get("zero_optimization"))
    if zero is None:
        return None
    stage = as_int(zero.get("stage", 0))
    return stage if stage in (0, 1, 2, 3) else None


def offload_devices(data: Mapping[Any, Any]) -> dict[str, str]:
    """The offload device of each zero_optimization offload block that names one."""
    zero = mapping(data.get("zero_optimization")) or {}
    devices = {}
    for section in ("offload_optimizer", "offload_param"):
        block = mapping(zero.get(section))
        if block is not None and isinstance(block.get("device"), str):
            devices[section] = block["device"]
    return devices


def check_deepspeed(
    data: Mapping[Any, Any],
    report: Report,
    *,
    dp_world: int | None,
    inline: bool = False,
    consumer: str | None = None,
) -> None:
    """Check a DeepSpeed config dict.

    Args:
        data: The parsed JSON (or the inline mapping).
        report: Where findings go; paths are relative to ``data``.
        dp_world: The data-parallel world size, when known (for the batch identity).
        inline: True for a JSON-style block inside accelerate's deepspeed_config, whose other
            keys are accelerate's own: no top-level key or batch checks then.
        consumer: Who hands the JSON to DeepSpeed: "accelerate" or "axolotl" (a YAML of theirs
            references it), or None for a JSON checked on its own, which plain
            ``deepspeed.initialize`` may read too. Accelerate (under Axolotl as well, through the
            HF Trainer) refuses a JSON without zero_optimization and writes a missing
            gradient_accumulation_steps as 1; plain DeepSpeed does neither.
    """
    keys = known_keys()
    if not inline:
        _top_level_keys(data, report)
    zero = data.get("zero_optimization")
    if zero is None and consumer is None:
        report.add(
            "ds-zero-missing-plain",
            "zero_optimization",
            "zero_optimization is missing: plain DeepSpeed runs without ZeRO (stage 0), but Accelerate, the HF"
            " Trainer and Axolotl refuse the file ('Please specify the ZeRO optimization config').",
            'add "zero_optimization": {"stage": 0} (or the stage you want) if Accelerate, the HF Trainer or'
            " Axolotl will read it",
        )
    elif zero is None:
        report.add(
            "ds-zero-missing",
            "zero_optimization",
            f"zero_optimization is missing; {str(consumer).capitalize()} refuses a DeepSpeed config without it"
            " (Accelerate's DeepSpeedPlugin: 'Please specify the ZeRO optimization config').",
            'add "zero_optimization": {"stage": 2} (or the stage you want)',
        )
    elif not isinstance(zero, Mapping):
        report.add(
            "section-not-mapping",
            "zero_optimization",
            f"zero_optimization is {show(zero)}, not an object.",
            'write it as an object: "zero_optimization": {"stage": 1}',
        )
    else:
        _strict_keys(zero, "zero_optimization", keys.deepspeed_sections["zero_optimization"], report)
        _bounds(zero, "zero_optimization", report)
        _zero(data, zero, report)
    for block_name, key_set in PRECISION_BLOCKS:
        block = data.get(block_name)
        if isinstance(block, Mapping):
            _strict_keys(block, block_name, keys.deepspeed_sections[key_set], report)
        elif block is not None:
            report.add(
                "section-not-mapping",
                block_name,
                f"{block_name} is {show(block)}, not an object.",
                f'write "{block_name}": {{"enabled": true}}',
            )
    _precision(data, report)
    _compile(data, report)
    if not inline:
        _batch(data, report, dp_world, consumer)


def _top_level_keys(data: Mapping[Any, Any], report: Report) -> None:
    keys = known_keys()
    for key in data:
        if key in keys.deepspeed_removed_top:
            report.add(
                "ds-removed-feature",
                str(key),
                f"'{key}' is a feature DeepSpeed 0.19.8 removed; it rejects the config (DeepSpeedConfigError).",
                f"remove '{key}' (see deepspeedai/DeepSpeed#8489)",
            )
        elif key not in keys.deepspeed_top:
            hint = suggest(key, keys.deepspeed_top)
            report.add(
                "ds-unknown-top-key",
                str(key),
                f"'{key}' is not a DeepSpeed key; DeepSpeed silently ignores unknown top-level keys.",
                did_you_mean(hint, f"remove '{key}' or check its spelling"),
            )


_BOUND_TEXT = {"gt": "above", "ge": "at least", "lt": "below", "le": "at most"}


def _bounds(block: Mapping[Any, Any], path: str, report: Report) -> None:
    """Numbers outside the bounds DeepSpeed's pydantic fields declare (deepspeed/runtime/zero/config.py)."""
    for key, limits in known_keys().deepspeed_bounds.get(path, {}).items():
        value = block.get(key)
        if isinstance(value, bool) or not isinstance(value, int | float):
            continue  # "auto" is filled by the launcher; other types are DeepSpeed's own type error
        broken = [
            f"{_BOUND_TEXT[op]} {limit:g}"
            for op, limit in limits.items()
            if not {"gt": value > limit, "ge": value >= limit, "lt": value < limit, "le": value <= limit}[op]
        ]
        if broken:
            report.add(
                "ds-value-range",
                f"{path}.{key}",
                f"{path}.{key} is {show(value)}; DeepSpeed 0.19.8 needs it {' and '.join(broken)} (validation error).",
                f"write a value {' and '.join(f'{_BOUND_TEXT[op]} {limit:g}' for op, limit in limits.items())}"
                + ' (or "auto" under the HF Trainer)' * (key == "reduce_bucket_size"),
            )


def _strict_keys(block: Mapping[Any, Any], path: str, known: frozenset[str], report: Report) -> None:
    """Sub-blocks DeepSpeed validates with extra="forbid": an unknown key is a parse error."""
    removed = known_keys().deepspeed_removed_zero if path == "zero_optimization" else frozenset()
    for key in block:
        if key in known:
            continue
        if key in removed:
            report.add(
                "ds-removed-feature",
                f"{path}.{key}",
                f"{path}.{key} is a feature DeepSpeed 0.19.8 removed; it rejects the config.",
                f"remove {path}.{key} (see deepspeedai/DeepSpeed#8489)",
            )
            continue
        hint = suggest(key, known)
        report.add(
            "ds-unknown-key",
            f"{path}.{key}",
            f"'{key}' is not a key of {path}; DeepSpeed rejects unknown keys there (extra_forbidden).",
            did_you_mean(hint, f"remove '{key}' from {path}"),
        )


def _zero(data: Mapping[Any, Any], zero: Mapping[Any, Any], report: Report) -> None:
    keys = known_keys()
    for field, alias in keys.deepspeed_zero_aliases.items():
        if field in zero and alias in zero:
            report.add(
                "ds-alias-duplicate",
                f"zero_optimization.{alias}",
                f"zero_optimization has both {field} and {alias}, two spellings of one setting (rejected).",
                f"keep only {alias}",
            )
    for old, new in keys.deepspeed_zero_deprecated.items():
        if old not in zero:
            continue
        spellings = [new, keys.deepspeed_zero_aliases.get(new, "")] if new else []
        present = [name for name in spellings if name and name in zero]
        if present:
            report.add(
                "ds-deprecated-and-new",
                f"zero_optimization.{old}",
                f"zero_optimization has both the deprecated {old} and {present[0]}; DeepSpeed rejects the pair.",
                f"remove {old}",
            )
            continue
        report.add(
            "ds-deprecated-key",
            f"zero_optimization.{old}",
            f"zero_optimization.{old} is deprecated; DeepSpeed 0.19.8 still reads it, with a warning"
            + (f", as {new}." if new else "."),
            f"write {keys.deepspeed_zero_aliases.get(new, new)} instead" if new else f"remove {old}",
        )
    stage: int | None = 0
    if "stage" in zero:
        raw = zero["stage"]
        stage = as_int(raw)
        if raw == "auto":
            report.add(
                "ds-stage-auto",
                "zero_optimization.stage",
                'zero_optimization.stage is "auto"; only Accelerate fills it, and only from its own zero_stage.',
                "write the stage you want as a number (0, 1, 2 or 3)",
            )
        elif stage not in (0, 1, 2, 3):
            report.add(
                "ds-stage",
                "zero_optimization.stage",
                f"zero_optimization.stage is {show(raw)}; DeepSpeed allows 0, 1, 2 or 3.",
                "write 0, 1, 2 or 3",
            )
        if stage not in (0, 1, 2, 3):
            stage = None
    devices = {section: _offload_block(zero, section, report) for section in ("offload_optimizer", "offload_param")}
    if stage in (0, 1) and devices["offload_optimizer"] in ("cpu", "nvme"):
        report.add(
            "ds-offload-optimizer-stage",
            "zero_optimization.offload_optimizer.device",
            f"optimizer offload to {devices['offload_optimizer']} at ZeRO stage {stage}; it belongs to stage 2 or 3.",
            "raise zero_optimization.stage to 2 (or 3), or remove offload_optimizer",
        )
    if stage is not None and stage != 3 and devices["offload_param"] in ("cpu", "nvme"):
        report.add(
            "ds-offload-param-stage",
            "zero_optimization.offload_param.device",
            f"parameter offload to {devices['offload_param']} at ZeRO stage {stage}; it only works with stage 3.",
            "raise zero_optimization.stage to 3, or remove offload_param (keep offload_optimizer on stage 2)",
        )
    if stage is not None and stage != 3:
        for key in GATHER_KEYS:
            if key in zero:
                report.add(
                    "ds-gather-16bit-stage",
                    f"zero_optimization.{key}",
                    f"zero_optimization.{key} is set at ZeRO stage {stage}; it only applies to stage 3.",
                    f"remove {key}, or use stage 3",
                )
    msamp = mapping(data.get("msamp"))
    if stage == 3 and msamp is not None and truthy(msamp.get("enabled")):
        report.add(
            "ds-msamp-zero3",
            "msamp.enabled",
            "msamp.enabled is on with ZeRO stage 3; MS-AMP is not supported with ZeRO-3.",
            "use ZeRO stage 0-2 with MS-AMP, or another FP8 backend (te, ao)",
        )


def _offload_block(zero: Mapping[Any, Any], section: str, report: Report) -> str | None:
    """Check one offload block; return its device when it is a valid one."""
    block = zero.get(section)
    path = f"zero_optimization.{section}"
    if block is None:
        return None
    if not isinstance(block, Mapping):
        report.add(
            "section-not-mapping",
            path,
            f"{path} is {show(block)}, not an object.",
            f'write "{section}": {{"device": "cpu"}}',
        )
        return None
    _strict_keys(block, path, known_keys().deepspeed_sections[path], report)
    _bounds(block, path, report)
    device = block.get("device", "none")
    if device not in OFFLOAD_DEVICES:
        report.add(
            "ds-offload-device",
            f"{path}.device",
            f"{path}.device is {show(device)}; DeepSpeed allows none, cpu or nvme.",
            'write "none", "cpu" or "nvme" (lower case)',
        )
        return None
    has_path = "nvme_path" in block and block["nvme_path"] not in (None, "")
    if device == "nvme" and not has_path:
        report.add(
            "ds-nvme-without-path",
            f"{path}.device",
            f"{path}.device is nvme but nvme_path is missing; DeepSpeed accepts it and fails when training starts.",
            f'add "nvme_path": "/local_nvme" (a fast local NVMe mount) to {path}',
        )
    if device != "nvme" and has_path:
        report.add(
            "ds-nvme-path-unused",
            f"{path}.nvme_path",
            f"{path}.nvme_path is set but the device is {device}, so the path is ignored.",
            f'set {path}.device to "nvme", or remove nvme_path',
        )
    return str(device)


def _precision(data: Mapping[Any, Any], report: Report) -> None:
    enabled = []
    for block_name, _ in PRECISION_BLOCKS:
        block = mapping(data.get(block_name))
        if block is not None and flag(block.get("enabled")) is True:
            enabled.append(block_name)
    if len(enabled) > 1 and "fp16" in enabled:
        report.add(
            "ds-fp16-bf16",
            "fp16.enabled",
            f"{enabled[0]}.enabled and fp16.enabled are both true; DeepSpeed allows one precision.",
            "keep bf16 on Ampere or newer GPUs, fp16 on V100/T4 and older; disable the other",
        )


def _compile(data: Mapping[Any, Any], report: Report) -> None:
    block = data.get("compile")
    if block is None:
        return
    if not isinstance(block, Mapping):
        report.add("section-not-mapping", "compile", f"compile is {show(block)}, not an object.", "remove it")
        return
    for key in ("disable", "backend"):
        if key in block:
            report.add(
                "ds-legacy-compile",
                f"compile.{key}",
                f"compile.{key} is the old torch.compile block; DeepSpeed 0.19.8 rejects it.",
                "remove the compile block (call model.compile() in code), or keep only DeepCompile keys",
            )
    _strict_keys(block, "compile", known_keys().deepspeed_sections["compile"], report)


def _batch(data: Mapping[Any, Any], report: Report, dp_world: int | None, consumer: str | None) -> None:
    # A missing key is fine on its own: DeepSpeed derives it from the other two
    # (DeepSpeedConfig._set_batch_related_parameters in deepspeed/runtime/config.py), and Accelerate
    # first writes gradient_accumulation_steps 1 into a JSON that lacks it (DeepSpeedPlugin.__post_init__).
    # Only when both batch sizes are absent does DeepSpeed stop at start-up ("Either
    # train_batch_size or train_micro_batch_size_per_gpu needs to be provided"): a missing key
    # stays missing under Accelerate and the HF Trainer, which fill "auto" values only.
    if "train_batch_size" not in data and "train_micro_batch_size_per_gpu" not in data:
        auto = "" if consumer is None else f' or "auto" ({consumer.capitalize()} fills it from the data loader)'
        report.add(
            "ds-batch-missing",
            "train_micro_batch_size_per_gpu",
            "train_batch_size and train_micro_batch_size_per_gpu are both missing; DeepSpeed needs one of them"
            " and stops at start-up without.",
            f'add "train_micro_batch_size_per_gpu": 1{auto}'
            + (
                ' (plain deepspeed.initialize needs a number; under Accelerate, the HF Trainer or Axolotl "auto"'
                " is filled from the data loader)"
                if consumer is None
                else ""
            ),
        )
    numbers: dict[str, int] = {}
    auto_keys = []  # the keys "auto" (or an invalid value) leaves open: no arithmetic then
    for key in BATCH_KEYS:
        if key not in data:
            continue
        value = data[key]
        number = as_int(value) if not isinstance(value, str) else None
        if value == "auto":
            auto_keys.append(key)
            continue
        if number is None or number < 1:
            report.add(
                "ds-batch-value",
                key,
                f'{key} is {show(value)}; DeepSpeed needs a positive integer (or "auto" filled by the launcher).',
                f"write a positive integer for {key}",
            )
            auto_keys.append(key)  # nothing to compute with it either
            continue
        numbers[key] = number
    if consumer is not None and "gradient_accumulation_steps" not in data:
        numbers["gradient_accumulation_steps"] = 1  # what Accelerate writes for the missing key
    if auto_keys or dp_world is None or dp_world < 1 or not numbers:
        return  # "auto" is filled by the launcher from its own numbers; without a world size, nothing to compute
    _batch_arithmetic(numbers, report, dp_world, consumer)


def _batch_arithmetic(numbers: Mapping[str, int], report: Report, world: int, consumer: str | None) -> None:
    """DeepSpeed's own derivation of the missing batch key, then its assertions, for ``world`` ranks."""
    tbs, mbs, gas = (numbers.get(k) for k in BATCH_KEYS)
    derived = ""
    if tbs is not None and mbs is not None and gas is None:
        gas, derived = tbs // mbs // world, "gradient_accumulation_steps"
    elif tbs is not None and gas is not None and mbs is None:
        mbs, derived = tbs // world // gas, "train_micro_batch_size_per_gpu"
    elif tbs is None and mbs is not None:
        tbs = mbs * (gas or 1) * world
    elif tbs is not None and mbs is None and gas is None:
        mbs, gas, derived = tbs // world, 1, "train_micro_batch_size_per_gpu"
    if tbs is None or mbs is None or gas is None:
        return
    if derived and (mbs < 1 or gas < 1):
        step = numbers.get("train_micro_batch_size_per_gpu", 1) * numbers.get("gradient_accumulation_steps", 1) * world
        report.add(
            "ds-batch-zero",
            "train_batch_size",
            f"with {world} data-parallel ranks DeepSpeed derives {derived} = 0 from "
            + ", ".join(f"{key} {value}" for key, value in numbers.items())
            + "; it asserts that it is above 0.",
            f"raise train_batch_size to a multiple of {step} (micro batch x accumulation x ranks),"
            " or write all three batch keys",
        )
        return
    if tbs != mbs * gas * world:
        fix = f"set train_batch_size to {mbs * gas * world}"
        plain = ' (plain DeepSpeed does not fill "auto")'
        fix += ', or write "auto" for it (the launcher fills it)' if consumer else plain
        report.add(
            "ds-batch-identity",
            "train_batch_size",
            f"train_batch_size {tbs} != micro batch {mbs} x accumulation {gas} x {world} data-parallel ranks"
            f" ({mbs * gas * world}); DeepSpeed asserts this.",
            fix,
        )
