"""Split an Axolotl config that names two sharding stacks into one candidate per stack.

Axolotl refuses a YAML with both ``deepspeed`` and ``fsdp_config`` (or the legacy ``fsdp``
list), and nothing in the file says which stack was meant, so the wizard writes two candidate
configs, one per stack, rather than guess. Pure: data in, data out.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from wizard.checks._report import truthy

# Keys that only mean something for one stack; each candidate drops the other stack's keys.
FSDP_ONLY = ("fsdp_config", "fsdp_version", "fsdp", "fsdp_final_state_dict_type", "fp32_norms", "fp32_norm_classes")
FSDP_ONLY_FP8 = ("fp8_enable_fsdp_float8_all_gather",)
DEEPSPEED_ONLY = ("deepspeed", "deepcompile")


def needs_split(data: object) -> bool:
    """Whether an Axolotl config names both DeepSpeed and FSDP."""
    if not isinstance(data, Mapping):
        return False
    return truthy(data.get("deepspeed")) and (truthy(data.get("fsdp_config")) or truthy(data.get("fsdp")))


def plain(value: Any) -> Any:
    """Plain dicts and lists (a parsed file carries line numbers in dict/list subclasses)."""
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return value


def split_stacks(data: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The DeepSpeed-only and the FSDP2-only candidates of a config that has both.

    The FSDP2 candidate keeps the user's ``fsdp_config`` (FSDP2 is Axolotl's only FSDP since
    0.20) and says ``fsdp_version: 2``; the DeepSpeed candidate keeps the JSON path.
    """
    data = plain(data)
    deepspeed = {k: v for k, v in data.items() if k not in (*FSDP_ONLY, *FSDP_ONLY_FP8)}
    fsdp2 = {k: v for k, v in data.items() if k not in DEEPSPEED_ONLY and k != "fsdp"}
    fsdp_config = data.get("fsdp_config")
    fsdp2["fsdp_version"] = 2
    if not isinstance(fsdp_config, Mapping) or not fsdp_config:
        # Only the legacy list was given: start from the FSDP2 shape the wizard writes.
        fsdp2["fsdp_config"] = {
            "auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
            "state_dict_type": "SHARDED_STATE_DICT",
            "reshard_after_forward": True,
        }
    return {"deepspeed": deepspeed, "fsdp2": fsdp2}
