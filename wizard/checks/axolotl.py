"""Checks of an Axolotl training YAML: its distributed settings (sharding stack, parallel sizes).

A setting Axolotl refuses is an error, one it accepts but that slows or surprises is a warning;
Axolotl 0.21.0 itself is stricter than older releases (the legacy ``fsdp``
list and ``activation_offloading`` without gradient checkpointing are schema errors, see
``axolotl_schema``). The referenced or inline DeepSpeed config is checked as DeepSpeed JSON too.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from wizard.checks import axolotl_schema as schema
from wizard.checks._report import Report, as_int, mapping, show, truthy
from wizard.checks.axolotl_deepspeed import axis, check_deepspeed_setting
from wizard.checks.keys import known_keys
from wizard.engine.parallel import divisors, spread

# Legacy boolean flag -> attn_implementation, in Axolotl's priority order.
LEGACY_ATTN = {
    "xformers_attention": "xformers",
    "sage_attention": "sage",
    "flex_attention": "flex_attention",
    "flash_attention": "flash_attention_2",
    "sdp_attention": "sdpa",
    "eager_attention": "eager",
}
# The script's set plus the names Axolotl 0.21.0 added (flash_attention_4/_torch, varlen).
ATTN_IMPLEMENTATIONS = frozenset(
    {
        "eager",
        "sdpa",
        "flash_attention_2",
        "flash_attention_3",
        "flash_attention_4",
        "flash_attention_torch",
        "flex_attention",
        "varlen",
        "xformers",
        "sage",
        "fp8",
    }
)


def check_axolotl(
    data: Mapping[Any, Any], report: Report, *, world_size: int | None, load_json: Callable[[str], object] | None
) -> None:
    """Check an Axolotl config mapping (see ``wizard.checks.check_config``)."""
    schema.check_schema(data, report)
    check_deepspeed_setting(data, report, world_size, load_json)
    _fsdp(data, report)
    _attention(data, report)
    _parallel(data, report, world_size)
    _runtime(data, report, world_size)


def _fsdp(data: Mapping[Any, Any], report: Report) -> None:
    fsdp = data.get("fsdp_config")
    has_fsdp = truthy(fsdp)
    inner = schema.fsdp_values(mapping(fsdp) or {})
    versions = [data.get("fsdp_version"), inner.get("fsdp_version"), inner.get("version")]
    version = next((as_int(v) for v in versions if v is not None), None)
    if truthy(data.get("fsdp")):
        report.add(
            "ax-legacy-fsdp",
            "fsdp",
            f"the top-level fsdp list {show(data.get('fsdp'))} configured FSDP1; Axolotl 0.20+ rejects it.",
            "remove it and use fsdp_version: 2 with fsdp_config (reshard_after_forward, offload_params, ...)",
        )
    if data.get("fsdp_version") is not None and not has_fsdp:
        report.add(
            "ax-fsdp-version-without-config",
            "fsdp_version",
            "fsdp_version is set without fsdp_config; fsdp_config is what turns FSDP on.",
            "add fsdp_config (auto_wrap_policy, state_dict_type, reshard_after_forward, ...) or remove fsdp_version",
        )
    if has_fsdp and all(v is None for v in versions):
        report.add(
            "ax-fsdp-config-without-version",
            "fsdp_config",
            "fsdp_config has no fsdp_version: Axolotl 0.21 fills in 2 itself; Axolotl before 0.20 read it as FSDP1.",
            "nothing for Axolotl 0.20 and later; add fsdp_version: 2 if older versions read this file",
        )
    if truthy(data.get("fp32_norms")):
        if not has_fsdp:
            report.add(
                "ax-fp32-norms-no-fsdp",
                "fp32_norms",
                "fp32_norms needs fsdp_config.",
                "use FSDP2 (fsdp_version: 2 + fsdp_config) or remove fp32_norms",
            )
        if version != 2:
            report.add(
                "ax-fp32-norms-fsdp-version",
                "fp32_norms",
                f"fp32_norms needs fsdp_version 2 (it is {show(version)}).",
                "set fsdp_version: 2, or remove fp32_norms",
            )
    if data.get("adapter") == "qlora" and data.get("fsdp_version") is not None and not has_fsdp:
        report.add(
            "ax-qlora-fsdp-no-config",
            "adapter",
            "QLoRA with fsdp_version but no fsdp_config: FSDP+QLoRA needs a real fsdp_config.",
            "add fsdp_config (offload_params, auto_wrap_policy, state_dict_type, ...)",
        )
    pin = inner.get("cpu_offload_pin_memory")
    if truthy(inner.get("offload_params")) and pin is not None and not truthy(pin):
        report.add(
            "ax-offload-no-pin",
            "fsdp_config.cpu_offload_pin_memory",
            "offload_params with cpu_offload_pin_memory false may use swap and be very slow.",
            "keep pinned memory if the host has the RAM; unpin only as a last resort",
        )


def _attention(data: Mapping[Any, Any], report: Report) -> None:
    legacy = [key for key in LEGACY_ATTN if truthy(data.get(key))]
    attn = data.get("attn_implementation")
    effective = None
    for key in legacy:
        if attn is not None:
            report.add(
                "ax-attn-legacy-combined",
                key,
                f"{key} is a legacy flag beside attn_implementation {show(attn)}; Axolotl refuses both.",
                f"remove {key} and keep attn_implementation",
            )
        else:
            report.add(
                "ax-attn-legacy",
                key,
                f"{key} is a deprecated attention flag.",
                f"replace it with attn_implementation: {LEGACY_ATTN[key]}",
            )
    if attn is None and legacy:
        effective = LEGACY_ATTN[legacy[0]]
    elif attn is not None and not isinstance(attn, str):
        report.add(
            "ax-attn-type",
            "attn_implementation",
            f"attn_implementation is {show(attn)}, not a string.",
            "write a name such as flash_attention_2 or sdpa",
        )
    elif isinstance(attn, str):
        effective = attn
        if attn not in ATTN_IMPLEMENTATIONS and "/" not in attn:
            report.add(
                "ax-attn-value",
                "attn_implementation",
                f"attn_implementation {show(attn)} is not an attention backend Axolotl knows.",
                "use flash_attention_2, sdpa, flex_attention, xformers, sage, eager or a hub kernel path",
            )
    # Axolotl 0.21 warns (check_sample_packing_without_attention) unless the backend isolates packed
    # samples: the varlen ones, and sdpa and eager through the block-diagonal mask.
    base = effective.split(":", 1)[0].split("@", 1)[0].strip() if effective else None
    isolates = base in known_keys().axolotl_attn_packing or effective in ("sdpa", "eager")
    if truthy(data.get("sample_packing")) and not isolates:
        what = f"attention {show(effective)}" if effective else "no attention backend set"
        report.add(
            "ax-packing-attn",
            "sample_packing",
            f"sample_packing with {what}: Axolotl 0.21 warns that packed samples then see each other"
            " (no cross-sample decontamination).",
            "use attn_implementation: flash_attention_2 (or flex_attention, sdpa, eager)",
        )
    # Axolotl 0.21's context parallel wraps a kernel-backed attention, sdpa, flash or flex
    # (check_context_parallel_size in src/axolotl/utils/schemas/validation.py); eager is an error there.
    kernel_backed = effective is not None and (
        effective in ("sdpa", "flex_attention", "varlen") or effective.startswith("flash_attention") or "/" in effective
    )
    if axis(data, "context_parallel_size") > 1 and not kernel_backed and effective != "eager":
        report.add(
            "ax-cp-attn",
            "context_parallel_size",
            f"context parallel with attention {show(effective)}; Axolotl 0.21's CP path wraps sdpa, flash or flex"
            " attention.",
            "use attn_implementation: flash_attention_2 (or sdpa, flex_attention)",
        )


def _parallel(data: Mapping[Any, Any], report: Report, world_size: int | None) -> None:
    cp, tp, ep = (axis(data, k) for k in ("context_parallel_size", "tensor_parallel_size", "expert_parallel_size"))
    shard, replicate = axis(data, "dp_shard_size"), axis(data, "dp_replicate_size")
    has_ds, has_fsdp = truthy(data.get("deepspeed")), truthy(data.get("fsdp_config"))
    if data.get("sequence_parallel_degree") is not None:
        report.add(
            "ax-sequence-parallel-degree",
            "sequence_parallel_degree",
            "sequence_parallel_degree is deprecated.",
            "rename it to context_parallel_size",
        )
    # Context parallel under DeepSpeed is DeepSpeed Ulysses in Axolotl 0.21
    # (check_context_parallel_deepspeed in src/axolotl/utils/schemas/validation.py), for SFT only.
    if has_ds and max(ep, shard, replicate) > 1:
        report.add(
            "ax-deepspeed-mesh",
            "deepspeed",
            "DeepSpeed with expert/dp_shard/dp_replicate above 1; it composes only with tensor and context parallel.",
            "use FSDP2 (fsdp_version: 2 + fsdp_config) for DP/EP meshes",
        )
    if has_ds and cp > 1 and truthy(data.get("rl")):
        report.add(
            "ax-cp-deepspeed-rl",
            "rl",
            f"rl: {data.get('rl')} with context_parallel_size {cp} under DeepSpeed; Axolotl 0.21 refuses it (only"
            " the SFT trainer weights each Ulysses rank's loss).",
            "use FSDP2 for RL with context parallel, or context_parallel_size: 1",
        )
    if (tp > 1 or cp > 1) and replicate > 1 and shard <= 1:
        report.add(
            "ax-replicate-with-tp-cp",
            "dp_replicate_size",
            "dp_replicate_size above 1 with TP/CP and no dp_shard: DDP-style replication with TP/CP is unsupported.",
            "use dp_shard_size > 1 with fsdp_config, or drop TP/CP",
        )
    if shard > 1 and not has_fsdp and not has_ds:
        report.add(
            "ax-shard-no-stack",
            "dp_shard_size",
            f"dp_shard_size is {shard} but there is no fsdp_config or deepspeed to shard with.",
            "add fsdp_version: 2 and fsdp_config",
        )
    plugins = data.get("plugins")
    named = [p for p in plugins if isinstance(p, str)] if isinstance(plugins, list) else []
    if ep > 1 and not any("expert_parallel" in p for p in named):
        report.add(
            "ax-ep-no-plugin",
            "expert_parallel_size",
            "expert_parallel_size above 1 with no expert_parallel plugin in plugins: Axolotl 0.21 has it built in;"
            " before 0.21 the key is dropped without it.",
            "nothing for Axolotl 0.21; on older versions add axolotl.integrations.expert_parallel.ExpertParallelPlugin",
        )
    if ep > 1 and truthy(data.get("use_sonicmoe")):
        report.add(
            "ax-ep-sonicmoe",
            "use_sonicmoe",
            "expert parallel with use_sonicmoe is unsupported.",
            "use ScatterMoE, or disable expert parallel",
        )
    if world_size is None:
        return
    if world_size < 1:
        report.add("world-size", "", f"the world size {world_size} is below 1.", "give the number of GPU processes")
        return
    if cp > 1 and world_size % cp:
        fits = [d for d in divisors(world_size) if d > 1]
        sizes = f"{spread(fits)} (they divide {world_size})" if fits else "1"
        report.add(
            "ax-cp-world",
            "context_parallel_size",
            f"context_parallel_size {cp} does not divide the world size {world_size}.",
            f"use context_parallel_size {sizes}, or {-(-world_size // cp) * cp} GPUs",
        )
    if tp > 1 and world_size % tp:
        report.add(
            "ax-tp-world",
            "tensor_parallel_size",
            f"tensor_parallel_size {tp} does not divide the world size {world_size}.",
            f"use a tensor_parallel_size that divides {world_size}",
        )
    if ep > 1 and ep * shard * tp * cp != world_size:
        report.add(
            "ax-ep-product",
            "expert_parallel_size",
            f"expert x dp_shard x tensor x context parallel = {ep * shard * tp * cp}, not the world size {world_size}.",
            f"make the product {world_size}",
        )
    product = shard * replicate * tp * cp
    if ep <= 1 and has_fsdp and not has_ds and product > 1 and product != world_size:
        report.add(
            "ax-mesh-product",
            "dp_shard_size",
            f"dp_shard x dp_replicate x tensor x context parallel = {product}, not the world size {world_size}.",
            f"make the product {world_size}",
        )


def _runtime(data: Mapping[Any, Any], report: Report, world_size: int | None) -> None:
    if axis(data, "context_parallel_size") > 1 and axis(data, "micro_batch_size") > 1:
        report.add(
            "ax-cp-micro-batch",
            "micro_batch_size",
            f"micro_batch_size {axis(data, 'micro_batch_size')} with context parallel; the CP examples use 1.",
            "use micro_batch_size: 1 unless a larger one is proven to fit",
        )
    workers = data.get("ray_num_workers")
    if truthy(data.get("use_ray")) and workers is None:
        report.add(
            "ax-ray-no-workers", "use_ray", "use_ray without ray_num_workers.", "set ray_num_workers to the GPU count"
        )
    if workers is not None:
        number = as_int(workers)
        if number is None or number < 1 or (world_size is not None and world_size >= 1 and number != world_size):
            expected = f" (the world size is {world_size})" if world_size else ""
            report.add(
                "ax-ray-workers",
                "ray_num_workers",
                f"ray_num_workers is {show(workers)}{expected}; it should be the number of GPU workers.",
                "set ray_num_workers to the number of GPUs Ray may use",
            )
    versions = (
        data.get("fsdp_version"),
        schema.fsdp_values(mapping(data.get("fsdp_config")) or {}).get("fsdp_version"),
    )
    fsdp2 = 2 in (as_int(v) for v in versions)
    if truthy(data.get("fp8")) and fsdp2 and data.get("fp8_enable_fsdp_float8_all_gather") is None:
        report.add(
            "ax-fp8-all-gather-missing",
            "fp8",
            "fp8 with FSDP2 and no fp8_enable_fsdp_float8_all_gather setting.",
            "benchmark fp8_enable_fsdp_float8_all_gather: true and false",
        )
    steps = as_int(data.get("profiler_steps"))
    if steps is not None and steps > 100:
        report.add(
            "ax-profiler-steps", "profiler_steps", f"profiler_steps is {steps}; profiles get huge.", "use 100 or fewer"
        )
    if axis(data, "tensor_parallel_size") > 1:
        for key, check in (
            ("liger_rms_norm", "ax-liger-rms-tp"),
            ("liger_fused_linear_cross_entropy", "ax-liger-flce-tp"),
        ):
            if truthy(data.get(key)):
                report.add(
                    check,
                    key,
                    f"{key} with tensor parallel has known caveats.",
                    f"consider disabling {key} for TP runs",
                )
