"""The known key sets of the real tools (wizard/data/check_keys.yaml) and did-you-mean hints."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

import yaml

from wizard.engine.catalog import data_text, parse_data

# Accelerate adds these prefixes to nested keys written without them (launch.py copies
# fsdp_config.x to --fsdp_x), so both spellings reach the launcher. Other sections take keys as
# written: an un-prefixed parallelism size is silently left at 1.
ACCELERATE_PREFIXES: Mapping[str, tuple[str, str]] = {
    "fsdp_config": ("fsdp", "fsdp_"),
    "fp8_config": ("fp8", "fp8_"),
    "dynamo_config": ("dynamo_", "dynamo_"),
}


@dataclass(frozen=True)
class KnownKeys:
    """The key sets of accelerate 1.15.0, deepspeed 0.19.8 and axolotl 0.21.0."""

    accelerate_top: frozenset[str]
    accelerate_nested: Mapping[str, frozenset[str]]
    deepspeed_top: frozenset[str]
    deepspeed_removed_top: frozenset[str]
    deepspeed_removed_zero: frozenset[str]
    deepspeed_sections: Mapping[str, frozenset[str]]
    deepspeed_zero_aliases: Mapping[str, str]
    deepspeed_zero_deprecated: Mapping[str, str]
    deepspeed_bounds: Mapping[str, Mapping[str, Mapping[str, float]]]
    axolotl_top: frozenset[str]
    axolotl_plugin_fields: Mapping[str, frozenset[str]]
    axolotl_fsdp: frozenset[str]
    axolotl_attn_packing: frozenset[str]
    axolotl_field_types: Mapping[str, frozenset[str]]
    axolotl_removed: Mapping[str, str]


def _strings(values: object) -> frozenset[str]:
    return frozenset(v for v in values if isinstance(v, str)) if isinstance(values, list) else frozenset()


@cache
def known_keys() -> KnownKeys:
    """Load the data file once (its parse kept by the store of parsed data files, where one is set)."""
    text = data_text("check_keys.yaml")
    # The C loader parses the ~900-line file ten times faster; the pure-Python one is the fallback.
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    # Only plain lists, dicts and strings go through the store, so a changed KnownKeys never
    # meets an object built by another version of this module.
    raw: dict[str, Any] = parse_data("check_keys.yaml", text, lambda: yaml.load(text, Loader=loader))  # safe loader
    acc, ds, ax = raw["accelerate"], raw["deepspeed"], raw["axolotl"]
    return KnownKeys(
        accelerate_top=_strings(acc["top_level"]) | _strings(acc["legacy_top_level"]),
        accelerate_nested={name: _strings(keys) for name, keys in acc["nested"].items()},
        deepspeed_top=_strings(ds["top_level"]) | _strings(ds["extra_top_level"]),
        deepspeed_removed_top=_strings(ds["removed_top_level"]),
        deepspeed_removed_zero=_strings(ds["removed_zero_optimization"]),
        deepspeed_sections={name: _strings(keys) for name, keys in ds["sections"].items()},
        deepspeed_zero_aliases=dict(ds["zero_optimization_aliases"]),
        deepspeed_zero_deprecated=dict(ds["zero_optimization_deprecated"]),
        deepspeed_bounds=ds["bounds"],
        axolotl_top=_strings(ax["top_level"]) | _strings(ax["builtin_plugin_fields"]),
        axolotl_plugin_fields={name: _strings(keys) for name, keys in ax["plugin_fields"].items()},
        axolotl_fsdp=_strings(ax["fsdp_config"]),
        axolotl_attn_packing=_strings(ax["attn_supporting_packing"]),
        axolotl_field_types={name: _strings(kinds) for name, kinds in ax["field_types"].items()},
        axolotl_removed=dict(ax["removed_top_level"]),
    )


def accelerate_accepts(section: str, key: object) -> bool:
    """Whether accelerate's launcher reads ``key`` written inside the nested dict ``section``."""
    if not isinstance(key, str):
        return False
    known = known_keys().accelerate_nested.get(section, frozenset())
    if key in known:
        return True
    rule = ACCELERATE_PREFIXES.get(section)
    return rule is not None and not key.startswith(rule[0]) and rule[1] + key in known


def suggest(key: object, candidates: Iterable[str]) -> str | None:
    """The closest known key to a misspelled one, if any is close enough."""
    if not isinstance(key, str):
        return None
    pool = sorted(candidates)
    lowered = {c.lower(): c for c in pool}
    if key.lower() in lowered:  # only the case differs
        return lowered[key.lower()]
    import difflib  # only for an unknown key: a clean file never needs it

    close = difflib.get_close_matches(key, pool, n=1, cutoff=0.75)
    return close[0] if close else None


def suggest_nested(section: str, key: object) -> str | None:
    """Did-you-mean for a key inside an accelerate nested dict: a missing prefix, else the closest key."""
    known = known_keys().accelerate_nested.get(section, frozenset())
    if isinstance(key, str):
        for prefix in ("parallelism_config_", "megatron_lm_", "mpirun_"):
            if prefix + key in known:
                return prefix + key
    return suggest(key, known)


def did_you_mean(suggestion: str | None, fallback: str) -> str:
    """The fix text for an unknown key: the suggestion, else ``fallback``."""
    return f"did you mean '{suggestion}'? Rename it" if suggestion else fallback
