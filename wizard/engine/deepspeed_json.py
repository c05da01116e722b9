"""Read a user's DeepSpeed JSON: what it decides, and what is wrong with it.

Pure: it takes the file's text. Parse errors carry line and column; duplicate keys are errors
(DeepSpeed itself rejects them). The summary drives the decision (stage, offload, precision);
the problems are reported with their fix, never passed on silently.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from wizard.engine.strict_json import JsonProblem, loads_strict
from wizard.errors import DeepSpeedConfigError

OFFLOAD_DEVICES = ("none", "cpu", "nvme")
BATCH_KEYS = ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps")
# The brought JSON with the proposed zero_optimization keys, written beside ds_config.json (json_fit makes it).
SUGGESTED_JSON = "ds_config.suggested.json"
MAX_JSON_BYTES = 1024 * 1024  # README "Input limits": 1 MiB, the same as the file reader's cap


@dataclass(frozen=True)
class DeepSpeedSummary:
    """What an existing DeepSpeed JSON decides."""

    stage: int
    offload_optimizer: str
    offload_param: str
    optimizer_nvme_path: str | None
    param_nvme_path: str | None
    precision: str | None  # bf16 | fp16 | None (not enabled, or "auto")
    precision_auto: bool
    auto_keys: tuple[str, ...]
    batch: Mapping[str, Any] = field(default_factory=dict)
    # bf16 / fp16 -> "true", "false", "auto" or "absent": each block's "enabled" switch as written.
    switches: Mapping[str, str] = field(default_factory=dict)
    # overlap_comm as written (DeepSpeed's default is off below stage 3), and the two communication
    # buckets of stages 1 and 2 in elements (DeepSpeed's default 5e8 each where absent; None for "auto").
    overlap_comm: bool = False
    reduce_bucket: float | None = None
    allgather_bucket: float | None = None
    # Whether neither bucket size is written (both at DeepSpeed's default).
    buckets_default: bool = False


def parse_deepspeed_text(text: str, source: str) -> dict[str, Any]:
    """Parse JSON text, rejecting duplicate keys; errors name line and column."""
    if len(text.encode("utf-8", "surrogatepass")) > MAX_JSON_BYTES:
        raise DeepSpeedConfigError(f"{source}: larger than {MAX_JSON_BYTES:,} bytes; is this a DeepSpeed config?")

    try:
        data = loads_strict(text)
    except JsonProblem as exc:
        extra = " (DeepSpeed rejects duplicates)" if str(exc).startswith("duplicate key") else ""
        raise DeepSpeedConfigError(f"{source}: {exc}{extra}") from None
    if not isinstance(data, dict):
        raise DeepSpeedConfigError(f"{source}: the top level must be a JSON object, not {type(data).__name__}")
    return data


def summarize(data: Mapping[str, Any], source: str) -> DeepSpeedSummary:
    """Extract the decision from a parsed DeepSpeed config, or raise with the fix."""
    zero = data.get("zero_optimization")
    if not isinstance(zero, Mapping):
        raise DeepSpeedConfigError(
            f"{source}: zero_optimization is missing; Accelerate and Axolotl need it",
            hint='add "zero_optimization": {"stage": 2} (or the stage you want)',
        )
    stage = zero.get("stage", 0)
    # 2.0 == 2 in Python, but the summary and --output json promise an integer stage.
    if isinstance(stage, bool) or not isinstance(stage, int) or stage not in (0, 1, 2, 3):
        raise DeepSpeedConfigError(
            f"{source}: zero_optimization.stage is {stage!r}; allowed: 0, 1, 2, 3",
            hint='write a concrete stage: "auto" is not resolved for the stage',
        )
    devices: dict[str, str] = {}
    paths: dict[str, str | None] = {}
    for section in ("offload_optimizer", "offload_param"):
        block = zero.get(section)
        block = {} if block is None else block  # DeepSpeed takes null as "no offload", but not 0, "" or []
        if not isinstance(block, Mapping):
            raise DeepSpeedConfigError(f"{source}: zero_optimization.{section} must be an object")
        device = block.get("device", "none")
        if not isinstance(device, str) or device not in OFFLOAD_DEVICES:  # DeepSpeed: exactly these, lower case
            raise DeepSpeedConfigError(
                f"{source}: zero_optimization.{section}.device is {device!r}; allowed: none, cpu, nvme"
            )
        path = block.get("nvme_path")
        if device == "nvme" and not (isinstance(path, str) and path):
            raise DeepSpeedConfigError(
                f"{source}: zero_optimization.{section}.device is nvme but nvme_path is missing",
                hint=f'add "nvme_path": "/local_nvme" to zero_optimization.{section}',
            )
        devices[section], paths[section] = device, (str(path) if path and device == "nvme" else None)
    if devices["offload_param"] != "none" and stage != 3:
        raise DeepSpeedConfigError(
            f"{source}: zero_optimization.offload_param.device is {devices['offload_param']} at stage {stage}; "
            "parameter offload only works with ZeRO stage 3",
            hint="raise zero_optimization.stage to 3, or remove offload_param (keep offload_optimizer on stage 2)",
        )
    msamp = data.get("msamp")
    if stage == 3 and isinstance(msamp, Mapping) and msamp.get("enabled") is True:
        # Refused when the file is given, not after every question: DeepSpeed does not run MS-AMP
        # with ZeRO-3, so no later answer could make this file work.
        raise DeepSpeedConfigError(
            f"{source}: msamp.enabled is true at ZeRO stage 3; MS-AMP (FP8) is not supported with ZeRO-3",
            hint=(
                "switch the FP8 backend to te or ao (remove the msamp block), "
                "or lower zero_optimization.stage to 2 or less"
            ),
        )
    precision, precision_auto = _precision(data, source)
    switches = precision_switches(data)
    if data.get("bf16") is None and switches["bf16"] == "auto":
        # Accelerate and Transformers fill "auto" under "bf16" only; at prepare() they raise on
        # the old name's "auto" ("`bfloat16.enabled` not found in kwargs").
        raise DeepSpeedConfigError(
            f'{source}: bfloat16.enabled is "auto" under the old block name bfloat16, which the launcher never fills',
            hint='rename the block "bfloat16" to "bf16"',
        )
    batch = {key: data[key] for key in BATCH_KEYS if key in data}
    autos = tuple(sorted(_auto_keys(data)))
    return DeepSpeedSummary(
        stage=stage,
        offload_optimizer=devices["offload_optimizer"],
        offload_param=devices["offload_param"],
        optimizer_nvme_path=paths["offload_optimizer"],
        param_nvme_path=paths["offload_param"],
        precision=precision,
        precision_auto=precision_auto,
        auto_keys=autos,
        batch=batch,
        switches=switches,
        overlap_comm=zero.get("overlap_comm") is True,
        reduce_bucket=_bucket(zero, "reduce_bucket_size"),
        allgather_bucket=_bucket(zero, "allgather_bucket_size"),
        buckets_default="reduce_bucket_size" not in zero and "allgather_bucket_size" not in zero,
    )


# DeepSpeed's default for both bucket sizes (zero_optimization in https://www.deepspeed.ai/docs/config-json/).
DEFAULT_BUCKET = 5e8


def _bucket(zero: Mapping[str, Any], key: str) -> float | None:
    """A bucket size in elements as DeepSpeed takes it: the number written, its default when absent, None for "auto"."""
    value = zero.get(key, DEFAULT_BUCKET)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def check_batch(summary: DeepSpeedSummary, world_size: int, micro_batch_size: int, source: str) -> None:
    """Check the batch identity train_batch = micro * accumulation * world when all are numbers."""
    batch = summary.batch
    values = {k: v for k, v in batch.items() if isinstance(v, int) and not isinstance(v, bool)}
    mbs = values.get("train_micro_batch_size_per_gpu")
    if mbs is not None and mbs != micro_batch_size:
        raise DeepSpeedConfigError(
            f"{source}: train_micro_batch_size_per_gpu is {mbs} but micro_batch_size is {micro_batch_size}",
            hint='set it to "auto" so Accelerate/Axolotl fill it, or change micro_batch_size to match',
        )
    if len(values) == len(BATCH_KEYS):
        tbs, gas = values["train_batch_size"], values["gradient_accumulation_steps"]
        product = values["train_micro_batch_size_per_gpu"] * gas * world_size
        if tbs != product:
            raise DeepSpeedConfigError(
                f"{source}: train_batch_size {tbs} != micro batch {values['train_micro_batch_size_per_gpu']}"
                f" x accumulation {gas} x {world_size} processes = {product}",
                hint=f'set train_batch_size to {product}, or set the batch keys to "auto" and let the launcher fill'
                " them",
            )


def _precision(data: Mapping[str, Any], source: str) -> tuple[str | None, bool]:
    switches = precision_switches(data)
    enabled = [name for name, switch in switches.items() if switch == "true"]
    auto = "auto" in switches.values()
    if len(enabled) == 2:
        raise DeepSpeedConfigError(
            f"{source}: both bf16.enabled and fp16.enabled are true; DeepSpeed allows one",
            hint="keep bf16 on Ampere or newer GPUs, fp16 on V100/T4 and older",
        )
    return (enabled[0] if enabled else None), auto


def batch_number(data: Mapping[str, Any], key: str) -> int | None:
    """A batch key of a DeepSpeed JSON when it is a positive integer (not "auto"), else None."""
    value = data.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def precision_switches(data: Mapping[str, Any]) -> dict[str, str]:
    """The "enabled" switch of the bf16 and fp16 blocks: "true", "false", "auto" or "absent".

    DeepSpeed reads the bf16 block under its old name ``bfloat16`` when ``bf16`` is missing; a
    block without "enabled" is off (DeepSpeed's default).
    """
    bf16 = data.get("bf16")
    blocks = {"bf16": bf16 if bf16 is not None else data.get("bfloat16"), "fp16": data.get("fp16")}
    switches = {}
    for name, block in blocks.items():
        if not isinstance(block, Mapping):
            switches[name] = "absent"
            continue
        flag = block.get("enabled", False)
        switches[name] = "auto" if flag == "auto" else ("true" if flag is True else "false")
    return switches


def launched_precision(summary: DeepSpeedSummary, *, gpu_bf16: bool) -> str:
    """The mixed precision a brought JSON trains in when the launcher passes that precision.

    Accelerate resolves the JSON's bf16/fp16 switches from its own mixed precision
    (``DeepSpeedPlugin.set_mixed_precision`` in accelerate/utils/dataclasses.py,
    https://github.com/huggingface/accelerate/blob/main/src/accelerate/utils/dataclasses.py):
    an "auto" switch takes it, a missing block of that precision is added as enabled, and a
    switch written true or false stays as written. Its mixed precision defaults to "no", which
    turns every "auto" off, so the launcher must pass the precision returned here
    (``--mixed_precision``; Axolotl's bf16/fp16 keys do the same through the Trainer).

    Returns:
        The precision a switch enables (written true), else this GPU's precision (bf16 where
        supported, else fp16) unless the JSON turns that one off, else the other one where it
        is "auto", else "no" (fp32).
    """
    if summary.precision is not None:
        return summary.precision
    switches = summary.switches
    preferred, other = ("bf16", "fp16") if gpu_bf16 else ("fp16", None)
    if switches.get(preferred, "absent") != "false":
        return preferred
    if other is not None and switches.get(other) == "auto":
        return other
    return "no"


def _auto_keys(data: Any, prefix: str = "") -> list[str]:
    found: list[str] = []
    if isinstance(data, Mapping):
        for key, value in data.items():
            path = f"{prefix}{key}"
            if value == "auto":
                found.append(path)
            else:
                found.extend(_auto_keys(value, path + "."))
    return found


def reconcile(
    summary: DeepSpeedSummary,
    *,
    source: str,
    gpu_bf16: bool,
    method: str,
    world_size: int,
    micro_batch_size: int,
) -> list[str]:
    """Check a DeepSpeed JSON against the other answers: raise on contradictions, return warnings."""
    if summary.precision == "bf16" and not gpu_bf16:
        raise DeepSpeedConfigError(
            f"{source}: bf16.enabled is true but this GPU has no bf16 support",
            hint='use "fp16": {"enabled": true} (or "auto") on V100/T4-class GPUs',
        )
    check_batch(summary, world_size, micro_batch_size, source)
    warnings = []
    if method == "qlora" and summary.stage == 3:
        warnings.append(
            f"{source}: QLoRA with ZeRO-3 is known to break on 4-bit weights; ZeRO-2 or FSDP2 is the usual fix."
        )
    # A CPU offload's host RAM and slower step are in the summary's own figures; a drive is not.
    if "nvme" in (summary.offload_optimizer, summary.offload_param):
        warnings.append(f"{source}: NVMe offload is on; the drive at its nvme_path must hold the offloaded states.")
    if launched_precision(summary, gpu_bf16=gpu_bf16) == "no":
        which = "bf16" if gpu_bf16 else "fp16"
        warnings.append(
            f"{source}: {which}.enabled is false and nothing else enables a precision these GPUs have, so "
            f'DeepSpeed trains in fp32 (more memory, slower steps); write "{which}": {{"enabled": "auto"}} for {which}.'
        )
    return warnings
