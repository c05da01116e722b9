"""What Axolotl 0.21.0's schema (src/axolotl/utils/schemas/) rejects or silently drops.

Unknown top-level keys are dropped without a word (so ``deepspeed_config:`` means no DeepSpeed),
``fsdp_config`` keys are un-prefixed and FSDP2-only, and the model validators reject a set of
distributed combinations. Plus the wizard's own rule that bf16 and fp16 are never both on.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from wizard.checks._report import Report, as_int, flag, mapping, show, text, truthy
from wizard.checks.keys import did_you_mean, known_keys, suggest

FSDP1_REJECTED = {"sharding_strategy": "use reshard_after_forward: true/false", "forward_prefetch": "remove it"}
FSDP1_IGNORED = (
    "sync_module_states",
    "backward_prefetch",
    "backward_prefetch_policy",
    "limit_all_gathers",
    "use_orig_params",
)
FSDP_BOOLS = (
    "activation_checkpointing",
    "offload_params",
    "cpu_ram_efficient_loading",
    "cpu_offload_pin_memory",
    "reshard_after_forward",
)
STATE_DICT_TYPES = ("FULL_STATE_DICT", "LOCAL_STATE_DICT", "SHARDED_STATE_DICT")
WRAP_POLICIES = ("TRANSFORMER_BASED_WRAP", "SIZE_BASED_WRAP")
BNB_8BIT_ADAMW = ("adamw_8bit", "adamw_bnb_8bit")
NOT_WITH_DEEPSPEED = ("muon", "muon_8bit", "q_galore_adamw8bit", "polora")


def fsdp_values(fsdp: Mapping[Any, Any]) -> dict[str, Any]:
    """fsdp_config with the deprecated fsdp_ prefix stripped, the way Axolotl reads it."""
    return {_strip(key): value for key, value in fsdp.items()}


def _strip(key: object) -> str:
    name = str(key)
    return name[5:] if name.startswith("fsdp_") and name != "fsdp_version" else name


def check_schema(data: Mapping[Any, Any], report: Report) -> None:
    """Axolotl 0.21.0's key set and its validators that concern the distributed setup."""
    _top_level_keys(data, report)
    _value_kinds(data, report)
    _removed_and_companions(data, report)
    fsdp = data.get("fsdp_config")
    if fsdp is not None and not isinstance(fsdp, Mapping):
        report.add(
            "section-not-mapping",
            "fsdp_config",
            f"fsdp_config is {show(fsdp)}, not a mapping.",
            "write it as a mapping",
        )
    _fsdp_config(data, mapping(fsdp) or {}, report)
    _precision_and_quantization(data, report)
    _stack_combinations(data, report)
    _batch_and_memory(data, report)


def _top_level_keys(data: Mapping[Any, Any], report: Report) -> None:
    keys = known_keys()
    plugins = data.get("plugins")
    listed = [p for p in plugins if isinstance(p, str)] if isinstance(plugins, list) else []
    every_plugin_key = frozenset().union(*keys.axolotl_plugin_fields.values())
    for key in data:
        if key in keys.axolotl_top:
            continue
        if key == "deepspeed_config":
            report.add(
                "ax-deepspeed-config-typo",
                "deepspeed_config",
                "deepspeed_config is not an Axolotl key; it is silently dropped, so this run has no DeepSpeed.",
                "rename it to deepspeed: (a JSON path or an inline mapping)",
            )
            continue
        owners = [plugin for plugin, fields in keys.axolotl_plugin_fields.items() if key in fields]
        if owners:
            module = owners[0].rsplit(".", 1)[0]
            if not any(module in entry for entry in listed):
                report.add(
                    "ax-plugin-key-without-plugin",
                    str(key),
                    f"'{key}' belongs to the plugin {owners[0]}, which is not in plugins, so it is dropped.",
                    f"add {owners[0]} to plugins",
                )
            continue
        hint = suggest(key, keys.axolotl_top | every_plugin_key)
        report.add(
            "ax-unknown-key",
            str(key),
            f"'{key}' is not an Axolotl 0.21 key; Axolotl silently drops unknown keys.",
            did_you_mean(hint, f"remove '{key}' (or list the plugin that defines it)"),
        )


def _value_kinds(data: Mapping[Any, Any], report: Report) -> None:
    """A value of a kind its field's annotation does not take: pydantic refuses it even in lax mode.

    The kinds come from AxolotlInputConfig's annotations (``field_types`` in check_keys.yaml).
    Only what lax validation never converts is reported: null for a field that is not Optional, a
    list or a mapping where the field takes neither, a number with a fraction for an int field.
    """
    table = known_keys().axolotl_field_types
    for key, value in data.items():
        kinds = table.get(key)
        if kinds is None:
            continue
        wrong = (
            (value is None and "null" not in kinds)
            or (isinstance(value, list) and "list" not in kinds)
            or (isinstance(value, Mapping) and "dict" not in kinds)
            or (isinstance(value, float) and not value.is_integer() and "int" in kinds and not kinds & {"float", "str"})
        )
        if wrong:
            takes = " or ".join(sorted(k if k != "dict" else "mapping" for k in kinds))
            report.add(
                "ax-value-type",
                str(key),
                f"{key} is {show(value)}, but Axolotl 0.21's schema takes {takes} there; validate_config fails.",
                f"write {key} as {takes.replace(' or null', '')}" + (", or remove it" if "null" in kinds else ""),
            )


def _removed_and_companions(data: Mapping[Any, Any], report: Report) -> None:
    """Removed keys (DeprecatedParameters' validators raise) and keys that need another one."""
    for key, when in known_keys().axolotl_removed.items():
        value = data.get(key)
        if (when == "set" and value is not None) or (when == "true" and truthy(value)):
            report.add(
                "ax-removed-key",
                key,
                f"{key} is no longer supported by Axolotl 0.21; validate_config raises DeprecationWarning.",
                f"remove {key}" + (" (rope scaling goes under model_config)" if key == "rope_scaling" else ""),
            )
    # check_early_stopping in src/axolotl/utils/schemas/validation.py.
    patience = data.get("early_stopping_patience")
    save, every = as_int(data.get("save_steps")), as_int(data.get("eval_steps"))
    if truthy(patience) and (not save or not every or save % every):
        report.add(
            "ax-early-stopping",
            "early_stopping_patience",
            "early_stopping_patience needs save_steps and eval_steps, with eval_steps dividing save_steps"
            f" (they are {show(data.get('save_steps'))} and {show(data.get('eval_steps'))}).",
            "set save_steps and eval_steps (e.g. 100 and 50), or remove early_stopping_patience",
        )
    # check_save_strategy_best_requires_metric in src/axolotl/utils/schemas/config.py.
    if data.get("save_strategy") == "best" and not truthy(data.get("metric_for_best_model")):
        report.add(
            "ax-save-best-metric",
            "save_strategy",
            "save_strategy: best needs metric_for_best_model; Axolotl 0.21 refuses it without.",
            "add metric_for_best_model: eval_loss (or the metric you mean)",
        )
    # check_ebft_torch_compile in src/axolotl/utils/schemas/validation.py.
    ebft = mapping(data.get("ebft")) or {}
    strided = data.get("rl") == "ebft" and ebft.get("mode") == "strided" and data.get("torch_compile") is True
    if strided and truthy(data.get("gradient_checkpointing")):
        report.add(
            "ax-ebft-compile",
            "torch_compile",
            "EBFT strided mode with torch_compile: true and gradient checkpointing; Axolotl 0.21 refuses it"
            " (a CheckpointError during recomputation).",
            "remove torch_compile: the flex_attention kernel compiles itself",
        )
    # validate_expert_parallel_topology in src/axolotl/integrations/expert_parallel/args.py.
    ep = as_int(data.get("expert_parallel_size"))
    if ep is None or ep <= 1:
        return
    fsdp = mapping(data.get("fsdp_config"))
    if not fsdp:
        report.add(
            "ax-ep-needs-fsdp2",
            "expert_parallel_size",
            f"expert_parallel_size {ep} needs FSDP2 (an fsdp_config block); Axolotl 0.21 refuses it without.",
            "add fsdp_version: 2 and fsdp_config with state_dict_type: FULL_STATE_DICT",
        )
        return
    values = fsdp_values(fsdp)
    for name in ("state_dict_type", "final_state_dict_type"):
        value = values.get(name)
        if (name == "state_dict_type" and value is None) or (value is not None and value != "FULL_STATE_DICT"):
            report.add(
                "ax-ep-state-dict",
                f"fsdp_config.{name}" if value is not None else "fsdp_config",
                f"expert_parallel_size {ep} needs fsdp_config.{name}: FULL_STATE_DICT (it is {show(value)}):"
                " a sharded checkpoint keeps only the first expert group's experts.",
                f"set fsdp_config.{name}: FULL_STATE_DICT",
            )


def _fsdp_config(data: Mapping[Any, Any], fsdp: Mapping[Any, Any], report: Report) -> None:
    known = known_keys().axolotl_fsdp
    for key in fsdp:
        name, path = _strip(key), f"fsdp_config.{key}"
        if name != key:
            report.add(
                "ax-fsdp-prefixed-key",
                path,
                f"fsdp_config.{key} uses the deprecated fsdp_ prefix; Axolotl's keys are un-prefixed.",
                f"rename it to {name}",
            )
        if name in FSDP1_REJECTED:
            report.add(
                "ax-fsdp1-rejected-key",
                path,
                f"fsdp_config.{key} is an FSDP1-only option; Axolotl 0.20+ removed FSDP1 and rejects it.",
                FSDP1_REJECTED[name],
            )
        elif name in FSDP1_IGNORED:
            report.add(
                "ax-fsdp1-ignored-key",
                path,
                f"fsdp_config.{key} is an FSDP1-only option; Axolotl 0.20+ drops it.",
                f"remove {key}",
            )
        elif name not in known:
            report.add(
                "ax-fsdp-unknown-key",
                path,
                f"fsdp_config.{key} is not an Axolotl fsdp_config key; it is silently dropped.",
                did_you_mean(suggest(name, known), f"remove {key}"),
            )
    for path, value in (
        ("fsdp_version", data.get("fsdp_version")),
        ("fsdp_config.fsdp_version", fsdp.get("fsdp_version")),
        ("fsdp_config.version", fsdp.get("version")),
    ):
        if value is not None and str(value) != "2":
            report.add(
                "ax-fsdp-version",
                path,
                f"{path} is {show(value)}; Axolotl 0.20+ removed FSDP1 and accepts only 2.",
                f"write {path.rsplit('.', 1)[-1]}: 2",
            )
    values = {_strip(key): (f"fsdp_config.{key}", value) for key, value in fsdp.items()}
    _fsdp_values(values, report)


def _fsdp_values(values: Mapping[str, tuple[str, Any]], report: Report) -> None:
    def get(name: str) -> Any:
        return values[name][1] if name in values else None

    if flag(get("cpu_offload_pin_memory")) is False and not truthy(get("offload_params")):
        report.add(
            "ax-pin-without-offload",
            values["cpu_offload_pin_memory"][0],
            "cpu_offload_pin_memory is false without offload_params; Axolotl rejects it.",
            "set offload_params: true, or remove cpu_offload_pin_memory",
        )
    policy = get("auto_wrap_policy")
    if policy is not None and policy not in WRAP_POLICIES:
        report.add(
            "ax-fsdp-wrap-policy",
            values["auto_wrap_policy"][0],
            f"auto_wrap_policy is {show(policy)}; Axolotl accepts TRANSFORMER_BASED_WRAP or SIZE_BASED_WRAP.",
            "write TRANSFORMER_BASED_WRAP",
        )
    min_params = as_int(get("min_num_params"))
    if (policy == "SIZE_BASED_WRAP" and min_params is None) or (min_params is not None and min_params < 1):
        report.add(
            "ax-fsdp-min-num-params",
            values.get("min_num_params", values.get("auto_wrap_policy", ("fsdp_config", None)))[0],
            f"SIZE_BASED_WRAP needs min_num_params of at least 1 (it is {show(get('min_num_params'))}).",
            "add min_num_params: 100000000 (or use TRANSFORMER_BASED_WRAP)",
        )
    for name in ("state_dict_type", "final_state_dict_type"):
        value = get(name)
        if value is not None and value not in STATE_DICT_TYPES:
            report.add(
                "ax-fsdp-state-dict-type",
                values[name][0],
                f"{name} is {show(value)}; allowed: " + ", ".join(STATE_DICT_TYPES) + ".",
                "write SHARDED_STATE_DICT (or FULL_STATE_DICT)",
            )
    if get("state_dict_type") == "LOCAL_STATE_DICT":
        report.add(
            "ax-fsdp-local-state-dict",
            values["state_dict_type"][0],
            "state_dict_type is LOCAL_STATE_DICT, which accelerate's FSDP2 rejects.",
            "write SHARDED_STATE_DICT or FULL_STATE_DICT",
        )
    wrap_class = get("transformer_layer_cls_to_wrap")
    if wrap_class is not None and not isinstance(wrap_class, str):
        report.add(
            "ax-fsdp-wrap-class-type",
            values["transformer_layer_cls_to_wrap"][0],
            f"transformer_layer_cls_to_wrap is {show(wrap_class)}; Axolotl takes one class name as a string.",
            "write one class name, e.g. LlamaDecoderLayer",
        )
    for name in FSDP_BOOLS:
        value = get(name)
        if value is not None and flag(value) is None:
            report.add(
                "ax-fsdp-bool",
                values[name][0],
                f"{name} is {show(value)}, not true or false.",
                f"write {name}: true or false",
            )


def _precision_and_quantization(data: Mapping[Any, Any], report: Report) -> None:
    if flag(data.get("bf16")) is True and flag(data.get("fp16")) is True:
        report.add(
            "ax-fp16-bf16",
            "fp16",
            "bf16 and fp16 are both true; no Axolotl validator catches it.",
            "keep bf16 on Ampere or newer GPUs, fp16 on V100/T4; set the other to false",
        )
    eight, four, adapter = truthy(data.get("load_in_8bit")), truthy(data.get("load_in_4bit")), data.get("adapter")
    if (eight or four) and not truthy(adapter) and not truthy(data.get("inference")):
        report.add(
            "ax-quant-without-adapter",
            "load_in_4bit" if four else "load_in_8bit",
            "4/8-bit loading without an adapter; Axolotl cannot train quantized weights directly.",
            "add adapter: qlora (4-bit) or lora (8-bit), or turn off the quantized loading for a full fine-tune",
        )
    if adapter == "qlora" and not truthy(data.get("merge_lora")) and (eight or not four):
        report.add(
            "ax-qlora-needs-4bit",
            "adapter",
            "adapter qlora needs load_in_4bit: true and no load_in_8bit.",
            "set load_in_4bit: true (and remove load_in_8bit)",
        )
    if flag(data.get("load_in_8bit")) is True and flag(data.get("load_in_4bit")) is True:
        report.add(
            "ax-8bit-and-4bit",
            "load_in_4bit",
            "load_in_8bit and load_in_4bit are both true.",
            "keep one of them",
        )
    if data.get("fp8_config") is not None and not truthy(data.get("fp8")):
        report.add(
            "ax-fp8-config-without-fp8",
            "fp8_config",
            "fp8_config requires fp8: true.",
            "set fp8: true or remove fp8_config",
        )
    if truthy(data.get("fp8_enable_fsdp_float8_all_gather")) and not truthy(data.get("fsdp_config")):
        report.add(
            "ax-fp8-all-gather-without-fsdp",
            "fp8_enable_fsdp_float8_all_gather",
            "fp8_enable_fsdp_float8_all_gather requires FSDP2 (fsdp_config).",
            "add fsdp_version: 2 and fsdp_config, or remove it",
        )


def _stack_combinations(data: Mapping[Any, Any], report: Report) -> None:
    has_fsdp, has_ds = truthy(data.get("fsdp_config")), truthy(data.get("deepspeed"))
    optimizer = text(data.get("optimizer")) or ""
    quantized = truthy(data.get("load_in_8bit")) or truthy(data.get("load_in_4bit"))
    if has_fsdp and data.get("rl") in ("dpo", "kto", "orpo", "ipo") and quantized:
        report.add(
            "ax-fsdp-quant-rl",
            "rl",
            f"FSDP2 does not support 4/8-bit loading with rl: {data.get('rl')}.",
            "use DeepSpeed for this run",
        )
    if has_fsdp and optimizer in BNB_8BIT_ADAMW:
        report.add(
            "ax-fsdp-8bit-optimizer",
            "optimizer",
            f"optimizer {optimizer} does not work with FSDP2.",
            "use optimizer: adamw_torch_8bit",
        )
    base = text(data.get("base_model")) or ""
    if has_fsdp and "falcon" in base.lower():
        report.add(
            "ax-falcon-fsdp", "base_model", "FSDP is not supported for Falcon models.", "use DeepSpeed for Falcon"
        )
    tp, ep = as_int(data.get("tensor_parallel_size")) or 1, as_int(data.get("expert_parallel_size")) or 1
    cp = as_int(data.get("context_parallel_size")) or as_int(data.get("sequence_parallel_degree")) or 1
    if tp > 1 and optimizer in ("paged_adamw_8bit", *BNB_8BIT_ADAMW):
        report.add(
            "ax-tp-8bit-optimizer",
            "optimizer",
            f"tensor_parallel_size {tp} does not work with optimizer {optimizer}.",
            "use adamw_torch (or adamw_torch_fused)",
        )
    if tp > 1 and ep > 1:
        report.add(
            "ax-tp-with-ep",
            "tensor_parallel_size",
            "tensor_parallel_size and expert_parallel_size are both above 1; Axolotl refuses that.",
            "shard the experts with expert_parallel_size and the rest with dp_shard_size",
        )
    if cp > 1 and data.get("attn_implementation") == "eager":
        report.add(
            "ax-cp-eager",
            "attn_implementation",
            "context parallel needs a kernel-backed attention; eager is not supported.",
            "use attn_implementation: flash_attention_2 (or sdpa)",
        )
    block = mapping(data.get("context_parallel")) or {}
    size = as_int(block.get("size"))
    if cp > 1 and size is not None and size != cp:
        report.add(
            "ax-cp-size-conflict",
            "context_parallel.size",
            f"context_parallel.size {size} conflicts with context_parallel_size {cp}.",
            "set only one of them",
        )
    if has_ds and (optimizer in NOT_WITH_DEEPSPEED or optimizer.startswith("flash_")):
        report.add(
            "ax-optimizer-deepspeed",
            "optimizer",
            f"optimizer {optimizer} does not work with DeepSpeed.",
            "use DDP or FSDP2 for this optimizer, or another optimizer",
        )
    for key in ("relora", "ple_cpu_offload"):
        if truthy(data.get(key)) and (has_fsdp or has_ds):
            report.add(
                "ax-feature-vs-sharding",
                key,
                f"{key} is not supported with {'FSDP' if has_fsdp else 'DeepSpeed'}.",
                f"remove {key}, or train without FSDP/DeepSpeed",
            )
    if truthy(data.get("activation_offloading")) and not truthy(data.get("gradient_checkpointing")):
        report.add(
            "ax-activation-offloading",
            "activation_offloading",
            "activation_offloading requires gradient_checkpointing; Axolotl 0.21 rejects it.",
            "set gradient_checkpointing: true",
        )
    if truthy(data.get("deepcompile")) and not has_ds:
        report.add(
            "ax-deepcompile-without-deepspeed",
            "deepcompile",
            "deepcompile is only supported with DeepSpeed.",
            "add deepspeed: <json>, or remove deepcompile",
        )


def _batch_and_memory(data: Mapping[Any, Any], report: Report) -> None:
    gas, batch = data.get("gradient_accumulation_steps"), data.get("batch_size")
    if truthy(gas) and truthy(batch):
        report.add(
            "ax-gas-and-batch-size",
            "batch_size",
            "gradient_accumulation_steps and batch_size are both set.",
            "set micro_batch_size and gradient_accumulation_steps, without batch_size",
        )
    if truthy(batch) and not truthy(gas) and not truthy(data.get("micro_batch_size")):
        report.add(
            "ax-batch-size-alone",
            "batch_size",
            "batch_size alone: Axolotl needs two of micro_batch_size, gradient_accumulation_steps, batch_size.",
            "add micro_batch_size",
        )
    if data.get("max_memory") is not None and data.get("gpu_memory_limit") is not None:
        report.add(
            "ax-max-memory-and-limit",
            "gpu_memory_limit",
            "max_memory and gpu_memory_limit are mutually exclusive.",
            "keep one of them",
        )
