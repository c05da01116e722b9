"""Accelerate facts the block checks share, and the checks of an Accelerate fsdp_config.

The rules of accelerate 1.15.0's FullyShardedDataParallelPlugin (``utils/dataclasses.py``; the
FSDP2 and FSDP1 rules run only when fsdp_version says which), layer classes to wrap given as class
names, not module paths, and: a missing fsdp_version means FSDP1, FSDP2 rejects LOCAL_STATE_DICT, FSDP1
ignores a strategy in reshard_after_forward, RAM-efficient loading needs sync_module_states.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from wizard.checks._report import Report, as_int, flag, get_any, mapping, show, text

STATE_DICT_TYPES = ("FULL_STATE_DICT", "LOCAL_STATE_DICT", "SHARDED_STATE_DICT")
WRAP_POLICIES = ("TRANSFORMER_BASED_WRAP", "SIZE_BASED_WRAP", "NO_WRAP")
WRAP_CLASS_KEYS = ("transformer_layer_cls_to_wrap", "transformer_cls_names_to_wrap")


@dataclass(frozen=True)
class AccelerateFacts:
    """What the top level of an Accelerate YAML says, as the block checks need it."""

    distributed_type: str | None
    mixed_precision: str | None
    num_processes: int | None
    num_machines: int | None
    fsdp_version: int | None
    ds_stage: int | None  # effective ZeRO stage: zero_stage, else the JSON's, else the plugin's 2


def item(section: Mapping[Any, Any], name: str, prefix: str) -> tuple[str, Any] | None:
    """A key written with or without its prefix (fsdp_version or version), as (key, value)."""
    return get_any(section, prefix + name, name)


def fsdp_version(data: Mapping[Any, Any]) -> int | None:
    """The fsdp_config's fsdp_version (or version), when it is an integer."""
    fsdp = mapping(data.get("fsdp_config")) or {}
    found = item(fsdp, "version", "fsdp_")
    return as_int(found[1]) if found else None


def parallel_value(data: Mapping[Any, Any], dim: str) -> object:
    """A parallelism_config size as written (prefixed spelling first), or None."""
    par = mapping(data.get("parallelism_config")) or {}
    found = item(par, f"{dim}_size", "parallelism_config_")
    return found[1] if found else None


def check_fsdp(fsdp: Mapping[Any, Any], ctx: AccelerateFacts, report: Report) -> None:
    """fsdp_config: version, enums, FSDP1/FSDP2 key rules, wrapping."""
    if not fsdp:
        return
    version_item = item(fsdp, "version", "fsdp_")
    version = ctx.fsdp_version
    if version_item is None:
        report.add(
            "acc-fsdp-version-missing",
            "fsdp_config",
            "fsdp_config has no fsdp_version, which means FSDP1 under accelerate launch.",
            "write fsdp_version: 2 (or 1 if you really want FSDP1)",
        )
    elif version not in (1, 2):
        report.add(
            "acc-fsdp-version",
            f"fsdp_config.{version_item[0]}",
            f"fsdp_version is {show(version_item[1])}; allowed: 1 or 2.",
            "write fsdp_version: 2",
        )
        version = None
    _fsdp_enums(fsdp, version, report)
    reshard = item(fsdp, "reshard_after_forward", "fsdp_")
    if version == 2:
        _fsdp2_keys(fsdp, reshard, report)
    if version == 1 and reshard is not None and isinstance(reshard[1], bool):
        report.add(
            "acc-fsdp1-reshard-bool",
            f"fsdp_config.{reshard[0]}",
            f"{reshard[0]} is {show(reshard[1])}, but FSDP1 expects a sharding strategy name there.",
            "use fsdp_sharding_strategy: FULL_SHARD (or SHARD_GRAD_OP), or switch to fsdp_version: 2",
        )
    # FSDP1 is an explicit version 1 or a missing version (the launcher's default).
    if reshard is not None and (version == 1 or version_item is None):
        strategy = reshard[1]
        if isinstance(strategy, str) and flag(strategy) is None and item(fsdp, "sharding_strategy", "fsdp_") is None:
            report.add(
                "acc-fsdp1-strategy-ignored",
                f"fsdp_config.{reshard[0]}",
                f"FSDP1 takes its strategy from fsdp_sharding_strategy; {show(strategy)} here is ignored (FULL_SHARD).",
                f"write fsdp_sharding_strategy: {strategy}",
            )
    _fsdp_wrapping(fsdp, report)
    sync = item(fsdp, "sync_module_states", "fsdp_")
    loading = item(fsdp, "cpu_ram_efficient_loading", "fsdp_")
    if sync is not None and flag(sync[1]) is False and (loading is None or flag(loading[1]) is not False):
        report.add(
            "acc-fsdp-ram-loading-sync",
            f"fsdp_config.{sync[0]}",
            f"{sync[0]} is false while cpu_ram_efficient_loading is on (its default); the launch refuses this.",
            f"remove {sync[0]}, or set fsdp_cpu_ram_efficient_loading: false",
        )
    ac_offload = item(fsdp, "activation_checkpointing_offload", "fsdp_")
    if ac_offload is not None and flag(ac_offload[1]) is True:
        ac = item(fsdp, "activation_checkpointing", "fsdp_")
        if version != 2 or ac is None or flag(ac[1]) is not True:
            report.add(
                "acc-fsdp-ac-offload",
                f"fsdp_config.{ac_offload[0]}",
                f"{ac_offload[0]} needs FSDP2 with fsdp_activation_checkpointing: true; the plugin raises otherwise.",
                "set fsdp_version: 2 and fsdp_activation_checkpointing: true, or remove it",
            )


def _fsdp_enums(fsdp: Mapping[Any, Any], version: int | None, report: Report) -> None:
    state = item(fsdp, "state_dict_type", "fsdp_")
    if state is not None:
        value = text(state[1])
        if value is None or value.upper() not in STATE_DICT_TYPES:
            report.add(
                "acc-fsdp-state-dict-type",
                f"fsdp_config.{state[0]}",
                f"{state[0]} is {show(state[1])}; allowed: " + ", ".join(STATE_DICT_TYPES) + ".",
                "write SHARDED_STATE_DICT (or FULL_STATE_DICT)",
            )
        elif version == 2 and value.upper() == "LOCAL_STATE_DICT":
            report.add(
                "acc-fsdp2-local-state-dict",
                f"fsdp_config.{state[0]}",
                "FSDP2 does not support LOCAL_STATE_DICT; the plugin raises.",
                "write SHARDED_STATE_DICT or FULL_STATE_DICT",
            )
    policy = item(fsdp, "auto_wrap_policy", "fsdp_")
    if policy is not None and (text(policy[1]) is None or str(policy[1]).upper() not in WRAP_POLICIES):
        report.add(
            "acc-fsdp-wrap-policy",
            f"fsdp_config.{policy[0]}",
            f"{policy[0]} is {show(policy[1])}; allowed: " + ", ".join(WRAP_POLICIES) + ".",
            "write TRANSFORMER_BASED_WRAP",
        )


def _fsdp2_keys(fsdp: Mapping[Any, Any], reshard: tuple[str, Any] | None, report: Report) -> None:
    if reshard is not None and flag(reshard[1]) is None:
        report.add(
            "acc-fsdp2-reshard-not-bool",
            f"fsdp_config.{reshard[0]}",
            f"{reshard[0]} is {show(reshard[1])}; FSDP2 needs true or false ('invalid truth value').",
            "write true (like ZeRO-3) or false (like ZeRO-2)",
        )
    strategy = item(fsdp, "sharding_strategy", "fsdp_")
    if strategy is not None:
        report.add(
            "acc-fsdp2-sharding-strategy",
            f"fsdp_config.{strategy[0]}",
            f"{strategy[0]} is an FSDP1 key; FSDP2 does not read it.",
            "remove it and use fsdp_reshard_after_forward: true/false",
        )
    for name in ("backward_prefetch", "backward_prefetch_policy"):
        found = item(fsdp, name, "fsdp_")
        if found is not None and found[1] is not None:
            report.add(
                "acc-fsdp2-backward-prefetch",
                f"fsdp_config.{found[0]}",
                f"{found[0]} is {show(found[1])}, but FSDP2 has no backward prefetch setting; it is dropped.",
                f"remove {found[0]}",
            )
    for name in ("forward_prefetch", "use_orig_params", "sync_module_states"):
        found = item(fsdp, name, "fsdp_")
        if found is not None:
            report.add(
                "acc-fsdp2-obsolete-key",
                f"fsdp_config.{found[0]}",
                f"{found[0]} is an FSDP1 setting that FSDP2 does not use.",
                f"remove {found[0]}",
            )


def _fsdp_wrapping(fsdp: Mapping[Any, Any], report: Report) -> None:
    policy = item(fsdp, "auto_wrap_policy", "fsdp_")
    classes = [found for name in WRAP_CLASS_KEYS if (found := item(fsdp, name, "fsdp_")) is not None]
    if policy is not None and str(policy[1]).upper() == "TRANSFORMER_BASED_WRAP" and not classes:
        report.add(
            "acc-fsdp-wrap-no-classes",
            f"fsdp_config.{policy[0]}",
            # The message is all a run shows, so it carries the action too.
            "TRANSFORMER_BASED_WRAP with no fsdp_transformer_layer_cls_to_wrap wraps the layer classes the model"
            " names in _no_split_modules: right for a Transformers model, which names them. A model class of your"
            " own may name none: then set fsdp_transformer_layer_cls_to_wrap to its layer class.",
            "nothing for a Transformers model; for your own model class, name its layer class,"
            " e.g. fsdp_transformer_layer_cls_to_wrap: LlamaDecoderLayer",
        )
    for key, value in classes:
        names = value if isinstance(value, list) else str(value).split(",")
        dotted = [str(n).strip() for n in names if "." in str(n)]
        if dotted:
            report.add(
                "acc-fsdp-wrap-module-path",
                f"fsdp_config.{key}",
                f"{key} names {show(dotted[0])}, a module path; accelerate matches class names only.",
                f"write the class name alone, e.g. {dotted[0].rsplit('.', 1)[-1]}",
            )
