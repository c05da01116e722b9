"""Static checks of existing config files: an Accelerate YAML, a DeepSpeed JSON or an Axolotl YAML.

The engine of ``backend-wizard check FILE...``. Pure: it takes parsed data (and, for a
referenced DeepSpeed JSON, a ``load_json`` callback the caller supplies), never prints, never
opens files, and never imports accelerate, deepspeed or axolotl: the tools' key sets are data in
``wizard/data/check_keys.yaml``.

What it checks (``CHECKS`` lists every check with its id, severity, format, summary and source;
``checks_table()`` renders it as the README's Markdown table):

* Accelerate YAML: what accelerate 1.15's config loader, launcher and plugins accept, reject or
  silently ignore (``commands/config/config_args.py``, ``commands/launch.py``,
  ``utils/dataclasses.py``, ``parallelism_config.py``): the distributed type and its blocks,
  process and machine counts, FSDP, DeepSpeed, parallelism, FP8 and bitsandbytes settings;
  unknown keys at any depth with a did-you-mean, keys beside a ``deepspeed_config_file``, a
  missing ``fsdp_version``, unquoted ``no``/``NO``, ``gpu_ids`` not a string, FSDP2 with
  LOCAL_STATE_DICT, FP8 key spellings. DeepSpeed with only ``parallelism_config_sp_*`` sizes is
  valid (Accelerate hands them to DeepSpeed), and a JSON ``stage: "auto"`` is only a warning.
  Plus the wizard's own errors: DeepSpeed and FSDP both configured, a parallel product other
  than the number of processes, fp16 with bf16.
* DeepSpeed JSON (standalone, referenced, or inline): what DeepSpeed 0.19.8 rejects while parsing
  (``deepspeed/runtime/config.py``, https://www.deepspeed.ai/docs/config-json/): unknown keys in
  its strict blocks, removed features, duplicate stage3_ aliases, the legacy compile block, a
  ZeRO stage outside 0-3, offload devices, NVMe without a path, fp16 with bf16, the batch
  identity.
* Axolotl YAML: the distributed settings Axolotl 0.21.0 refuses or warns about (its config
  schema in ``src/axolotl/utils/schemas/``, https://docs.axolotl.ai/docs/config-reference.html)
  and what the schema silently drops: unknown keys (``deepspeed_config:``), FSDP1 keys,
  ``fsdp_version`` other than 2, prefixed ``fsdp_config`` keys, parallel sizes that do not divide
  the world size, and more.

Findings come errors first, then warnings, then info, each group in file order.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from wizard.checks._report import Report, show
from wizard.checks._types import ACCELERATE, AXOLOTL, DEEPSPEED, FORMATS, NOT_A_CONFIG, CheckInfo, Finding
from wizard.checks.accelerate import check_accelerate
from wizard.checks.catalog import BY_ID, CHECKS, SOURCES
from wizard.checks.keys import known_keys

__all__ = [
    "AXOLOTL",
    "BY_ID",
    "CHECKS",
    "FORMATS",
    "NOT_A_CONFIG",
    "CheckInfo",
    "Finding",
    "check_config",
    "checks_table",
    "detect_format",
]

_ACCELERATE_MARKERS = ("distributed_type", "compute_environment")
# Keys only an Axolotl training config has. Keys that other trainers' configs share
# (learning_rate, attn_implementation, load_in_4bit: TRL's CLI config has them too) do not count.
_AXOLOTL_MARKERS = (
    "base_model",
    "base_model_config",
    "datasets",
    "pretraining_dataset",
    "test_datasets",
    "adapter",
    "micro_batch_size",
    "deepspeed",
    "fsdp_version",
    "sequence_len",
    "num_epochs",
    "lora_r",
    "sample_packing",
    "plugins",
)
_ACCELERATE_SECTIONS = ("deepspeed_config", "fsdp_config", "parallelism_config", "fp8_config")


def detect_format(data: object, suffix: str = "") -> str:
    """Guess which tool a parsed config file is for, from its keys and its file name suffix.

    Keys that only one tool reads decide, most specific first: a top-level
    ``zero_optimization`` means DeepSpeed; ``distributed_type`` or ``compute_environment`` means
    Accelerate. A ``.json`` file is then DeepSpeed if any of its keys is one DeepSpeed reads, and
    none of the formats otherwise. A YAML file is Axolotl when it has a key only Axolotl has
    (``base_model``, ``datasets``, ``adapter``, ``micro_batch_size``, ...) and Axolotl knows at
    least half of its keys (a TRL or cloud-launcher config shares a few names, not most);
    Accelerate when it has ``deepspeed_config``/``fsdp_config``/``parallelism_config``/
    ``fp8_config`` or an ``fsdp_``/``parallelism_config_`` key; DeepSpeed when every key is a
    DeepSpeed key. Anything else, an empty mapping included, is none of them (``NOT_A_CONFIG``);
    a file whose top level is not a mapping is left to the format its suffix names.

    Args:
        data: The parsed file.
        suffix: The file name's suffix (".json", ".yaml"), when known.

    Returns:
        "accelerate", "deepspeed", "axolotl" or "none".
    """
    is_json = suffix.lower() == ".json"
    if not isinstance(data, Mapping):
        return DEEPSPEED if is_json else ACCELERATE
    keys = known_keys()
    if "zero_optimization" in data:
        return DEEPSPEED
    if any(key in data for key in _ACCELERATE_MARKERS):
        return ACCELERATE
    if is_json:
        deepspeed = keys.deepspeed_top | keys.deepspeed_removed_top
        return DEEPSPEED if any(key in deepspeed for key in data) else NOT_A_CONFIG
    axolotl = keys.axolotl_top | frozenset().union(*keys.axolotl_plugin_fields.values())
    if any(key in data for key in _AXOLOTL_MARKERS) and 2 * sum(key in axolotl for key in data) >= len(data):
        return AXOLOTL
    if any(key in data for key in _ACCELERATE_SECTIONS):
        return ACCELERATE
    if any(isinstance(key, str) and key.startswith(("fsdp_", "parallelism_config_")) for key in data):
        return ACCELERATE
    if data and all(key in keys.deepspeed_top for key in data):
        return DEEPSPEED
    return NOT_A_CONFIG


def check_config(
    data: object,
    fmt: str,
    *,
    world_size: int | None = None,
    load_json: Callable[[str], object] | None = None,
    launch_mixed_precision: str | None = None,
    duplicate_keys: Sequence[tuple[str, int]] = (),
) -> list[Finding]:
    """Check one parsed config file.

    Args:
        data: The parsed YAML or JSON (any value: wrong types are findings, never exceptions).
        fmt: "accelerate", "deepspeed" or "axolotl", or "none" (see `detect_format`): a file
            that is none of them gets one info finding saying so, and nothing else.
        world_size: The number of processes the run will have, when known (Axolotl's
            ``--world-size`` checks; the batch identity of a DeepSpeed JSON). An Accelerate
            config's own ``num_processes`` takes precedence.
        load_json: Reads the DeepSpeed JSON an Accelerate ``deepspeed_config_file`` or an
            Axolotl ``deepspeed:`` path names, given that path as written. It may raise
            ``FileNotFoundError`` or ``ValueError`` (or ``OSError``), which become error findings.
            Without it, the referenced JSON is not checked (an info finding says so).
        launch_mixed_precision: The ``--mixed_precision`` that ``accelerate launch`` is given for
            an Accelerate config, when known (the wizard's launch.sh passes one beside a DeepSpeed
            JSON): it fills the JSON's "auto" bf16/fp16 switches, which are flagged without it.
        duplicate_keys: The keys a YAML file writes twice, as (dotted key path, line of the
            repeat); the parsed ``data`` holds the later value, as the tools' YAML loader does.

    Returns:
        The findings: errors, then warnings, then info, each group in file order. Paths inside
        a referenced JSON start with the path as written and a colon.

    Raises:
        ValueError: ``fmt`` is not one of the three formats.
    """
    if fmt not in (*FORMATS, NOT_A_CONFIG):
        raise ValueError(f"unknown format {fmt!r}; expected one of {', '.join(FORMATS)}")
    report = Report(data)
    for path, line in duplicate_keys:
        kept = _value_at(data, path)
        value = f", {show(kept)}," if kept is not _ABSENT else ""
        report.add(
            "duplicate-key",
            path,
            f"{path} is written twice (again on line {line}); the YAML loader keeps the later value{value} silently.",
            "keep one of the two, the value you mean",
        )
    if fmt == NOT_A_CONFIG:
        keys = ", ".join(show(key) for key in list(data)[:3]) if isinstance(data, Mapping) and data else "no keys"
        report.add(
            "not-a-config",
            "",
            f"this is not a config this tool checks (its keys: {keys}): none of an Accelerate YAML,"
            " a DeepSpeed JSON or an Axolotl YAML, so nothing in it was checked.",
            "nothing, if it is another tool's file; if it is one of the three, say which with --format",
        )
        return report.findings()
    if not isinstance(data, Mapping):
        report.add(
            "top-not-mapping",
            "",
            f"the file's top level is {show(data)}, not a mapping of keys.",
            f"write the {fmt} config as key: value pairs",
        )
        return report.findings()
    if world_size is not None and world_size < 1 and fmt != AXOLOTL:
        report.add("world-size", "", f"the world size {world_size} is below 1.", "give the number of processes")
        world_size = None
    if fmt == ACCELERATE:
        check_accelerate(
            data, report, world_size=world_size, load_json=load_json, launch_mixed_precision=launch_mixed_precision
        )
    elif fmt == DEEPSPEED:
        from wizard.checks.deepspeed import check_deepspeed  # each format's checks load when a file needs them

        check_deepspeed(data, report, dp_world=world_size)
    else:
        from wizard.checks.axolotl import check_axolotl

        check_axolotl(data, report, world_size=world_size, load_json=load_json)
    return report.findings()


def checks_table(checks: tuple[CheckInfo, ...] = CHECKS) -> str:
    """The catalogue as a Markdown table (id, severity, format, what it flags, source)."""
    rows = ["| id | severity | format | flags | source |", "| --- | --- | --- | --- | --- |"]
    rows += [f"| `{c.id}` | {c.severity} | {c.tool} | {c.summary} | {c.tag} |" for c in checks]
    legend = [f"- `{key}`: {text}" for key, text in SOURCES.items()]
    return "\n".join([*rows, "", "Sources:", "", *legend])


_ABSENT = object()


def _value_at(data: object, path: str) -> object:
    """The value at a dotted key path of the parsed file (the later of a key written twice), or _ABSENT."""
    node = data
    for part in path.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return _ABSENT
        node = node[part]
    return node
