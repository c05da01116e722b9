"""Warnings that come with a decision.

Inputs the estimate had to assume, numbers close to a limit, a brought DeepSpeed JSON that does
not fit, and settings a mixture of experts needs.

Pure: they read the answers, the facts and the decided settings, and return sentences.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from wizard.engine.catalog import lookup_gpu, models_catalog
from wizard.engine.device import GPU_DEVICE, MAC_DEVICE, words_for
from wizard.engine.facts import GPU_HARDWARE, LITTLE_TO_SPARE, TIGHT_SHARE, FactSet, mac_bf16_base
from wizard.engine.json_fit import (
    GATHER_ON_SAVE,
    LEVERS,
    SUGGESTED_JSON,
    json_fit_warning,
    past_line_with_buffers,
    suggested_lever,
)
from wizard.engine.memory import (
    CPU_STEP_STRATEGIES,
    ESTIMATE_SHARE_WORDS,
    FIT_MARGIN,
    FSDP2_OFFLOADS,
    GIB,
    OFFLOAD_STRATEGIES,
    OPTIMIZER_WORDS,
    PCIE_BYTES_PER_SECOND,
    STRATEGY_TITLES,
    UNDERSHOOT,
    UNDERSHOOT_PERCENT,
    UNDERSHOOT_SUM,
    Estimate,
    Workload,
    estimate,
    frozen_decoder_bytes,
    layout_logits_bytes,
    layout_tokens,
    logits_bytes,
    lora_rank_of,
    loss_extra_bytes,
    memory_gib,
    moment_bytes,
    optimizer_of,
    pcie_bytes_per_step,
    reference_bytes,
    reference_gpu_bytes,
    reference_shards,
    run_optimizer,
    score_matrix_bytes,
    sequences_per_micro_batch,
    spare_gib,
    sum_gib,
    to_gib,
    trainable_params,
    weight_bytes,
)
from wizard.engine.model_origin import ModelOrigin
from wizard.engine.model_size import ModelShape, catalog_hub_id, catalog_model, shape_for_catalog
from wizard.engine.note import Note
from wizard.engine.sentences import sentences
from wizard.engine.speed import band_text, rate_text, step_time
from wizard.engine.traits import BackendTraits


def recommendation_warnings(
    answers: Mapping[str, Any], facts: FactSet, settings: Mapping[str, Any], traits: BackendTraits
) -> list[str]:
    """What the user should know about a decision: unknown inputs, near limits, and missing settings.

    `traits` are the decided backend's (NO_BACKEND for a refusal).
    """
    warnings: list[str] = []
    strategy = settings.get("strategy")
    if strategy in OFFLOAD_STRATEGIES and facts.estimates:
        est = facts.estimates[str(strategy)]
        if est.host_fits is None:
            # The installed figure is the one to compare with the machine: only part of RAM is usable.
            installed = round(est.host_per_node / FIT_MARGIN / GIB, 1)
            warnings.append(
                Note(
                    f"cpu_memory_gb was not given: offloading needs about {to_gib(est.host_per_node)} GiB of host"
                    f" RAM per machine, so about {installed} GiB of RAM installed (free -g's total; the wizard counts"
                    f" {FIT_MARGIN:.0%} of it as usable); check the machine has it before launching, or give"
                    " cpu_memory_gb to have it checked.",
                    f"Host RAM not checked (cpu_memory_gb not given): the offload needs about {installed} GiB of RAM"
                    " installed per machine (free -g's total). Check it, or give cpu_memory_gb.",
                )
            )
    tight = _host_tight_warning(rec_strategy=strategy, facts=facts, answers=answers)
    if tight is not None:
        warnings.append(tight)
    final = final_save_warning(strategy, facts, answers)
    if final is not None:
        warnings.append(final)
    if answers.get("deepspeed_config") is not None and traits.deepspeed_json and strategy:
        buffers = brought_buffers(facts)
        brought = json_fit_warning(
            str(strategy),
            facts.estimates,
            answers.get("gpu_memory_gb"),
            answers.get("cpu_memory_gb"),
            buffers,
            "DeepSpeed's default bucket sizes" if facts.get("ds_buckets_default") else "your JSON's bucket sizes",
            (_elements(BUCKET_HINT), _overlap_guide_bytes(2 * BUCKET_HINT, facts.workload))
            if facts.workload is not None and buffers
            else None,
        )
        if brought is not None:
            # The buckets to lower go with an edit that keeps ZeRO-1/2; ZeRO-3 has no allgather bucket.
            lever = suggested_lever(str(strategy), facts.estimates)
            to_stage3 = lever is not None and LEVERS[lever]["stage"] == 3
            lowered = "" if to_stage3 or lever is None else _bucket_edit(facts, lever)
            # The edit made for the user: the file the renderer writes beside ds_config.json.
            made = (
                f" {SUGGESTED_JSON}, written beside the other files, is your JSON with"
                f" {'both changes' if lowered else 'that change'}"
                + (
                    # ZeRO-3 shards the weights: saving needs them gathered, which DeepSpeed does not do by default.
                    f" (and, for ZeRO-3, {GATHER_ON_SAVE}: true where your JSON leaves it out, so that saving writes"
                    " one whole 16-bit model, gathered in machine 0's host RAM)"
                    if to_stage3
                    else ""
                )
                + ": give it as deepspeed_config and run the wizard again to check it."
                if lever is not None
                else ""
            )
            warnings.append(brought + lowered + made)
    if traits.deepspeed_json and strategy:
        buckets = bucket_warning(str(strategy), facts, brought=answers.get("deepspeed_config") is not None)
        if buckets is not None:
            warnings.append(buckets)
    if answers.get("hardware") in GPU_HARDWARE and answers.get("gpu_model") is None:
        warnings.append(
            f"gpu_model was not given: assuming the GPUs support bf16 (mixed precision "
            f"{facts.get('mixed_precision')}); set gpu_model for V100/T4-class cards."
        )
    more = memory_beyond_the_card(answers)
    if more is not None:
        warnings.append(more)
    if facts.links is not None and facts.links.no_nvlink:
        # An answer the card cannot have: said where the reader looks, not only in explain's assumptions.
        warnings.append(
            f"gpu_link: nvlink was answered, but the {facts.links.gpu} has no NVLink: the step time counts the"
            f" link it has instead, {facts.links.gpu_link_words} (nvidia-smi topo -m shows NV# only where NVLink"
            " joins two GPUs)."
        )
    named = base_model_size_warning(answers, facts)
    if named is not None:
        warnings.append(named)
    chunked = chunked_loss_note(answers, facts, settings)
    if chunked is not None:
        warnings.append(chunked)
    # The loss's temporaries, when they outgrow the margin, say more than "close to the limit" would.
    loss = loss_peak_warning(answers, facts, settings, traits)
    near = loss or near_limit_warning(answers, facts, settings, traits)
    if near is not None:
        warnings.append(near)
    layer = layer_offloading_warning(answers, facts, settings, traits)
    if layer is not None:
        warnings.append(layer)
    dropped = optimizer_dropped_warning(answers, facts, settings)
    if dropped is not None:
        warnings.append(dropped)
    single = facts.get("world_size") == 1
    if answers.get("method") == "full" and single and facts.get("lora_fits_single_gpu") and not facts.get("fits_ddp"):
        mac = answers.get("hardware") == "mps"
        # The guidance's own rule: a LoRA run that fits says nothing of a full fine-tune. Said as
        # why this run offloads, not as advice against the method chosen.
        warnings.append(
            "a full fine-tune keeps gradients and optimizer state for every parameter, which is why this run"
            + (" does not fit this Mac" if mac else " cannot fit one GPU without offload")
            + f"; LoRA (only small adapters trained) would fit {'on it' if mac else 'on one GPU as it is'}"
            " (method: lora), if that suits the job."
        )
    moe = _moe_zero3_warning(answers, facts, settings, traits)
    if moe is not None:
        warnings.append(moe)
    gated = gated_model_note(answers, facts)
    if gated is not None:
        warnings.append(gated)
    return warnings


def optimizer_dropped_warning(answers: Mapping[str, Any], facts: FactSet, settings: Mapping[str, Any]) -> str | None:
    """The optimizer answered is not the one the decided layout runs (`run_optimizer`): say which and why."""
    asked = str(answers.get("optimizer") or "adamw")
    strategy = settings.get("strategy")
    # optimizer: auto leaves the choice to the wizard: whatever it runs was allowed.
    if asked in ("adamw", "auto") or not strategy or not facts.estimates:
        return None
    runs = run_optimizer(asked, str(strategy))
    if runs == asked:
        return None
    label = facts.estimates[str(strategy)].label if str(strategy) in facts.estimates else str(strategy)
    why = (
        "its optimizer step runs on the CPU ("
        + ("DeepSpeed's CPU Adam" if str(strategy).startswith("zero") else "PyTorch's AdamW on FSDP2's CPU shards")
        + "), where bitsandbytes' GPU kernels do not run"
        if strategy in CPU_STEP_STRATEGIES
        else "it shards the parameters (FSDP2's DTensor shards, or DeepSpeed's flattened partitions), which"
        " bitsandbytes' 8-bit optimizers do not handle"
    )
    fits = facts.estimates.get("ddp")
    whole = (
        f" A full copy with {OPTIMIZER_TITLES[asked]} would need about {to_gib(fits.total)} GiB per GPU, more than"
        f" the {to_gib(fits.budget)} GiB usable, so the wizard could not keep it."
        if fits is not None and not fits.fits
        else ""
    )
    return (
        f"optimizer: {OPTIMIZER_TITLES[asked]} was asked, but the chosen layout ({label}) runs AdamW: {why}. The"
        f" files use AdamW, and the estimate counts its 16 bytes per trained parameter.{whole}"
    )


# Hub organisations whose models are gated behind a licence to accept (Llama, Gemma, most of
# Mistral's and Cohere's): a first download without access fails with a 401/403 ("Access to
# model ... is restricted"), on every machine of the run.
GATED_PREFIXES = ("meta-llama/", "google/gemma", "mistralai/", "CohereLabs/", "CohereForAI/")
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def gated_model_note(answers: Mapping[str, Any], facts: FactSet) -> str | None:
    """For a model the training downloads from a gated Hub organisation: how to get access first."""
    names = [facts.origin.hub_id] if facts.origin is not None and facts.origin.hub_id else []
    base = answers.get("base_model")
    if isinstance(base, str) and _HUB_ID.match(base):
        names.append(base)
    elif answers.get("target") == "axolotl" and not base and (hub_id := catalog_hub_id(answers.get("model"))):
        names.append(hub_id)  # axolotl.yaml loads a catalogue model's repository where base_model is not given
    for name in names:
        if name.startswith(GATED_PREFIXES):
            return (
                f"{name} is most likely gated on the Hugging Face Hub (Llama, Gemma, Mistral and Cohere models"
                " usually are): before training downloads it, accept its licence"
                f" on https://huggingface.co/{name} and log in on every machine (hf auth login, or set HF_TOKEN);"
                " without access the download stops with a 401 or 403 error."
            )
    return None


# Host RAM an offload may take of the usable part before the wizard says it is tight.
HOST_TIGHT_SHARE = 0.9


def _host_tight_warning(rec_strategy: Any, facts: FactSet, answers: Mapping[str, Any]) -> str | None:
    """A CPU offload that fits the host RAM given, but with little of the usable part left."""
    if rec_strategy not in OFFLOAD_STRATEGIES or not facts.estimates or answers.get("offload") == "nvme":
        return None
    est = facts.estimates.get(str(rec_strategy))
    if est is None or est.host_memory is None or not est.host_fits or not est.host_per_node:
        return None
    usable = FIT_MARGIN * est.host_memory
    if est.host_per_node <= HOST_TIGHT_SHARE * usable:
        return None
    return (
        f"host RAM is nearly full: the offload takes about {to_gib(est.host_per_node)} GiB per machine,"
        f" {est.host_per_node / usable:.0%} of the {to_gib(int(usable))} GiB usable ({FIT_MARGIN:.0%} of the"
        f" {memory_gib(est.host_memory)} GiB given as cpu_memory_gb"
        + (
            f"; the figure counts the {to_gib(est.host_stored)} GiB offloaded 1.5 times, an allowance for pinned"
            + (
                " buffers and copies from DeepSpeed's estimator"
                if est.strategy.startswith("zero")
                else " host copies taken from DeepSpeed's estimator (FSDP2's offload pins its host copies too)"
            )
            + f", so the state itself is {est.host_stored / est.host_memory:.0%}"
            f" of the RAM, and the plan stops fitting below about {to_gib(int(est.host_per_node / FIT_MARGIN))} GiB"
            " of cpu_memory_gb"
            if est.host_stored and est.host_stored < est.host_per_node
            else ""
        )
        + "), and that usable part must also hold the data"
        " loader's workers and, while from_pretrained loads the checkpoint, the weights it reads in (the page"
        " cache of the files is freed as needed, the loaded copy is not until it moves to the GPU): watch"
        " free -g during the first steps: pinned memory cannot be swapped out, so when RAM runs short the"
        " pinned allocation fails or the kernel's out-of-memory killer stops a process; then add RAM or machines."
    )


def final_save_bytes(facts: FactSet) -> int:
    """What Axolotl's last save gathers into machine 0's host RAM: a full fine-tune's fp32 weights."""
    workload = facts.workload
    return 4 * workload.shape.params if workload is not None and workload.method == "full" else 0


def final_save_short(strategy: Any, facts: FactSet, answers: Mapping[str, Any]) -> bool:
    """Whether an Axolotl FSDP2 offload's final full state dict would not fit beside the offload in host RAM.

    A final_state_dict_type: FULL_STATE_DICT gathers the whole model on machine 0's CPU at the end
    of training, while the offloaded state still fills host RAM: for a full fine-tune the fp32
    weights, 4 bytes per parameter (Axolotl's FSDP docs: https://docs.axolotl.ai/docs/multi-gpu.html).
    axolotl.yaml then saves the final model sharded instead.
    """
    if answers.get("target") != "axolotl" or strategy not in FSDP2_OFFLOADS:
        return False
    est = facts.estimates.get(str(strategy))
    saved = final_save_bytes(facts)
    if est is None or est.host_memory is None or not est.host_fits or not saved:
        return False
    return est.host_per_node + saved > FIT_MARGIN * est.host_memory


def final_save_warning(strategy: Any, facts: FactSet, answers: Mapping[str, Any]) -> str | None:
    """What axolotl.yaml's final save does where a full copy would not fit in host RAM (None elsewhere).

    Where the host RAM is not given, the whole save is kept, and the warning names the RAM it needs.
    """
    est_unknown = facts.estimates.get(str(strategy)) if facts.estimates else None
    saved = final_save_bytes(facts)
    if (
        answers.get("target") == "axolotl"
        and strategy in FSDP2_OFFLOADS
        and est_unknown is not None
        and est_unknown.host_memory is None
        and saved
    ):
        need = (est_unknown.host_per_node + saved) / FIT_MARGIN
        return (
            f"cpu_memory_gb was not given, so axolotl.yaml keeps the final save whole (final_state_dict_type:"
            f" FULL_STATE_DICT): at the end of training it gathers about {to_gib(saved)} GiB of fp32 weights into"
            f" machine 0's host RAM beside the offload's {to_gib(est_unknown.host_per_node)} GiB, which needs about"
            f" {to_gib(int(need))} GiB of RAM installed (free -g's total; {FIT_MARGIN:.0%} of it usable). With less,"
            " set final_state_dict_type: SHARDED_STATE_DICT and merge the shards afterwards with axolotl"
            " merge-sharded-fsdp-weights axolotl.yaml (or give cpu_memory_gb and the wizard decides)."
        )
    if not final_save_short(strategy, facts, answers):
        return None
    est = facts.estimates[str(strategy)]
    usable = FIT_MARGIN * (est.host_memory or 0)
    return (
        f"axolotl.yaml saves the final model in shards (final_state_dict_type: SHARDED_STATE_DICT): a full copy,"
        f" about {to_gib(final_save_bytes(facts))} GiB of fp32 weights gathered into machine 0's host RAM at the"
        f" end of training beside the offload's {to_gib(est.host_per_node)} GiB, would pass the"
        f" {to_gib(int(usable))} GiB usable. Merge the shards into one checkpoint afterwards with axolotl"
        " merge-sharded-fsdp-weights axolotl.yaml."
    )


def near_limit(est: Estimate) -> bool:
    """Whether an estimate that fits uses more than `TIGHT_SHARE` of the usable memory per GPU.

    One threshold for every layout: an estimate is an estimate, and the margin left matters the
    same whether the run is replicated, sharded or split by sequence.
    """
    return est.fits and est.total > TIGHT_SHARE * est.budget


def near_limit_warning(
    answers: Mapping[str, Any], facts: FactSet, settings: Mapping[str, Any], traits: BackendTraits
) -> str | None:
    """The chosen layout's estimate close to the usable memory: say so, with the first lever to pull."""
    est = facts.estimates.get(str(settings.get("strategy"))) if facts.estimates else None
    if (chunked := chunked_loss_run(answers, facts, est)) is not None:
        # The chunked loss builds neither the logits nor their moment (chunked_loss_note): the run
        # is judged by what it holds without them, as that note says.
        est = chunked[0]
    if est is None or not near_limit_at_peak(est) or est.host_fits is False:
        # Short of host RAM (a brought JSON run as written), "it fits" would contradict its warning.
        return None
    lever = _memory_lever(answers, facts, settings, traits, est) + _chunked_loss_lever(answers, facts)
    words = words_for(est.device)  # "per GPU" and "the GPU's", or the Mac's words on Apple silicon
    # On a Mac the usable share is the working set macOS recommends for Metal; the rest is macOS's.
    counted = (
        f"the working set macOS recommends for Metal, {est.share:.0%} of {words.owner}"
        f" {memory_gib(est.gpu_memory)} GiB; the rest is headroom for macOS and the programs open beside training"
        if est.device != GPU_DEVICE
        else f"the wizard counts {FIT_MARGIN:.0%} of {words.owner} {memory_gib(est.gpu_memory)} GiB as usable and"
        " leaves the rest for what the estimate does not count: fragmentation, communication buffers, temporary"
        " tensors"
    )
    # The loss peak, when worth naming, is the higher figure: the share is said of it.
    moment = est.high != est.total  # the loss's moment, where it is worth naming (Estimate.high)
    high = est.high
    at_moment = (
        f", and {sum_gib(est.total, est.transient)} GiB for a moment as the backward pass starts"
        " (the loss's fp32 temporaries)"
        if moment
        else ""
    )
    # ZeRO-1/2 with overlap_comm keeps communication buffers the estimate does not count: where they are
    # known, the share is said with them too, so "most likely works" is not said of a run they take near the line.
    buffers = overlap_buffer_bytes(str(settings.get("strategy")), facts, brought=bool(answers.get("deepspeed_config")))
    with_buffers = (
        f" With overlap_comm's communication buffers, which the estimate does not count (about {to_gib(buffers)} GiB"
        f" by Transformers' DeepSpeed guide), it comes to about {sum_gib(high, buffers)} GiB,"
        f" {(high + buffers) / est.budget:.0%} of the usable."
        if buffers
        else ""
    )
    verdict = (
        # Past the usable line with the buffers: their note (lower the buckets) comes first, said so.
        "with the buffers it is past the usable line: lower the buckets first, as the note on overlap_comm says"
        if past_line_with_buffers(est, buffers)
        else "the run may work as it is, but with little to spare"
        if high + buffers >= LITTLE_TO_SPARE * est.budget
        else "the run most likely works as it is"
    )
    # The short form: the share and the verdict, and the lever's first sentence (what to set).
    first_lever = sentences(first_alternative(lever))[0].rstrip(".")
    brief = (
        f"it fits, close to the usable memory: {high / est.budget:.0%} of the {to_gib(est.budget)} GiB usable"
        + (" at its peak" if moment else "")
        + (f", {(high + buffers) / est.budget:.0%} with overlap_comm's buffers" if buffers else "")
        + f"; {verdict}. If it is short of memory, {first_lever}."
    )
    return Note(
        f"it fits, close to the usable memory: the estimate comes to {to_gib(est.total)} GiB {words.per} through a"
        f" step{at_moment}, {high / est.budget:.0%} of the {to_gib(est.budget)} GiB usable ({counted}).{with_buffers}"
        f" The wizard says so above {TIGHT_SHARE:.0%} of the usable memory, since an estimate can be off: "
        # Near the line itself, "most likely works" would promise too much.
        + verdict
        # A sentence of its own: the levers that follow carry their own figures and clauses.
        + f". If it is short of memory, {lever}.",
        brief,
    )


def near_limit_at_peak(est: Estimate) -> bool:
    """`near_limit`, or a run whose loss moment (still within the usable memory) passes the same share.

    A run past the usable memory at that moment (tight) gets the loss warning instead, which says more.
    """
    return near_limit(est) or (est.fits and not est.tight and est.peak > TIGHT_SHARE * est.budget)


def _memory_lever(
    answers: Mapping[str, Any], facts: FactSet, settings: Mapping[str, Any], traits: BackendTraits, est: Estimate
) -> str:
    """The first lever to pull when the chosen layout is short of memory, in words."""
    replicated_adapters = (
        answers.get("target") == "axolotl" and answers.get("method") in ("lora", "qlora") and traits.whole_copy
    )
    layer = _layer_offload_row(facts, est) if replicated_adapters else None
    if replicated_adapters and settings.get("strategy") == "ddp" and layer is not None and facts.workload is not None:
        # The chosen row keeps the frozen layers on the GPU; the table's layer-offload row is the lever.
        moved = pcie_bytes_per_step(facts.workload, layer.strategy)
        # Short sentences, the figures first and how to set it last: one run-on lever read as unreadable.
        lever = (
            f"set layer_offloading: true. The frozen decoder layers (about"
            f" {to_gib(frozen_decoder_bytes(facts.workload))} GiB) then wait in CPU RAM and stream to the GPU one at a"
            f" time as they compute: about {to_gib(layer.total)} GiB per GPU by the"
            + (f" {layer.label} row" if "ddp_layer_offload" in facts.estimates else " same estimate")
            # The figures are this micro-batch's: a run the wizard plans with the key set may pick a
            # larger one for the room it frees, as its own lever line says.
            + f" at this micro_batch_size {facts.workload.micro_batch_size}."
            + f" Each GPU moves about {to_gib(moved)} GiB over PCIe every micro-batch, half each way (each frozen"
            " layer in for the"
            " forward and the backward pass, and back out after each, as Axolotl 0.21 copies it although it did"
            " not change; the copies out travel the other way on the link), so at least"
            f" {moved / 2 / PCIE_BYTES_PER_SECOND:.1f} s per micro-batch on a PCIe 4.0 x16 link"
            + (", twice that where two GPUs share the lanes as x8/x8" if facts.workload.world_size > 1 else "")
            + _step_beside(facts, est, layer).replace("; a step", ", and a step", 1)
            + ". To keep this micro-batch and these figures, add the line layer_offloading: true to axolotl.yaml;"
            " --set layer_offloading=true plans the run again and may pick a larger micro-batch for the room it"
            " frees. Or use a shorter sequence_length" + (" or QLoRA" if answers.get("method") == "lora" else "")
        )
        sharded = _shard_on_these_gpus(facts, traits, est)
        if sharded is not None:
            lever += f". Or {sharded}"
    elif settings.get("strategy") == "hsdp" and (whole := _shard_everywhere(answers, facts)) is not None:
        lever = whole
    elif answers.get("hardware") == "mps":
        # One device, no sharding, offload or 4-bit there: only the workload itself can shrink.
        lever = "shorten sequence_length or train a smaller model (the Mac has no sharding, offload or QLoRA)"
        if answers.get("method") == "full":
            lever = (
                "train LoRA adapters instead (method: lora: a frozen base, no gradients or Adam state for it), " + lever
            )
        if answers.get("method") == "lora" and not mac_bf16_base(answers) and facts.workload is not None:
            # The frozen base is counted in fp32 on a Mac; loaded in bf16 it takes half.
            # The frozen base only: the adapters stay fp32 whatever the base is loaded in.
            frozen = weight_bytes(facts.workload) - trainable_params(facts.workload) * (
                2 if facts.workload.half_precision else 4
            )
            lever = (
                "load the frozen base model in bf16 (base_dtype: bf16; from_pretrained(..., dtype=torch.bfloat16);"
                " torch_dtype= before Transformers 4.56; where your PyTorch runs bf16 on"
                f" MPS), which halves its {to_gib(frozen)} GiB of weights, or " + lever
            )
        if answers.get("gradient_checkpointing") is False:
            lever = "turn on gradient_checkpointing (the activations shrink, for some recomputation), or " + lever
        elif int(answers.get("micro_batch_size") or 1) > 1:
            lever = "lower micro_batch_size (more gradient accumulation keeps the batch), or " + lever
    elif int(settings.get("cp_size") or 1) > 1:
        lever = _wider_context_parallel(facts, est, int(settings.get("cp_size") or 1))
    elif answers.get("gradient_checkpointing") is False:
        lever = "turn on gradient_checkpointing (the activations shrink, for some recomputation)"
    elif est.activations * 4 < est.total:
        # The activations are a small part: shrinking them would not help much; the states would.
        offload = _offload_lever(answers, facts, str(settings.get("strategy")))
        first = {"full": "train LoRA adapters instead of the whole model", "lora": "use QLoRA (4-bit base weights)"}
        lever = {
            method: f"{text}, add GPUs to shard over, or {offload}" if offload else f"{text}, or add GPUs to shard over"
            for method, text in first.items()
        }.get(
            str(answers.get("method")),
            "add GPUs to shard over, or "
            + (
                "allow CPU offload (offload: auto)"
                if answers.get("offload") == "none"
                else "offload to the CPU (offload: cpu)"
            ),
        )
        lever += " (the model states, not the activations, take most of the memory)"
        if str(settings.get("strategy")) in ("zero1", "zero2", "zero2_offload_optimizer"):
            # ZeRO-1 and 2 keep the weights whole on every GPU: more GPUs leave them as they are.
            # ZeRO-3 with the same offload as the JSON's (its optimizer offload stays where it is).
            zero3 = "ZeRO-3 + optim->CPU" if str(settings.get("strategy")) == "zero2_offload_optimizer" else "ZeRO-3"
            lever = lever.replace(
                "add GPUs to shard over",
                f'shard the weights too with {zero3} ("stage": 3 in the DeepSpeed JSON, its other keys as they are)',
            )
        sharded = _shard_on_these_gpus(facts, traits, est)
        if sharded is not None:
            for phrase in (", or add GPUs to shard over", ", add GPUs to shard over", "add GPUs to shard over, or "):
                lever = lever.replace(phrase, "")
            lever = f"{sharded}; or {lever}"
    elif int(answers.get("micro_batch_size") or 1) > 1:
        lever = "lower micro_batch_size (the activations shrink; more gradient accumulation keeps the batch)"
    else:
        lever = "shorten sequence_length (the activations shrink with it)"
    return lever


def _layer_offload_row(facts: FactSet, est: Estimate) -> Estimate | None:
    """Axolotl's layer-offload layout for this run, fitting: the table's row, or worked out for the lever.

    On several GPUs the table shows the row only when layer offloading was asked for (no rule picks
    it otherwise), but as a lever for a full copy near the limit it is still the cheap one.
    """
    layer = facts.estimates.get("ddp_layer_offload")
    if layer is None and facts.workload is not None and facts.workload.method in ("lora", "qlora"):
        host = est.host_memory / GIB if est.host_memory is not None else None
        layer = estimate(facts.workload, "ddp_layer_offload", est.gpu_memory / GIB, host)
    return layer if layer is not None and layer.fits and layer.host_fits is not False else None


def _step_beside(facts: FactSet, est: Estimate, other: Estimate) -> str:
    """The words ", a step of about A against B now" for a lever's layout, where the step model covers both."""
    if facts.workload is None or facts.links is None:
        return ""
    now = facts.speeds.get(est.strategy) or step_time(facts.workload, est.strategy, facts.links, facts.accumulation)
    then = facts.speeds.get(other.strategy) or step_time(
        facts.workload, other.strategy, facts.links, facts.accumulation
    )
    if now is None or then is None:
        return ""
    return f"; a step of about {band_text(then)} against {band_text(now)} now"


def _shard_on_these_gpus(facts: FactSet, traits: BackendTraits, est: Estimate) -> str | None:
    """A full copy on several GPUs near the limit: the sharded layout that fits on the same GPUs."""
    if not traits.whole_copy or int(facts.get("world_size") or 1) < 2:
        return None
    for strategy in ("fsdp2", "zero3", "zero2"):
        other = facts.estimates.get(strategy)
        if other is not None and other.fits and other.total < est.total:
            return (
                f"shard the states over the {facts.get('world_size')} GPUs you have ({other.label}: about"
                f" {to_gib(other.total)} GiB per GPU by the same estimate, for more traffic between them"
                + _step_beside(facts, est, other)
                + ")"
            )
    return None


@dataclass(frozen=True)
class LossPeak:
    """The loss's fp32 temporaries on top of the chosen layout's estimate, when they outgrow the usable line.

    The estimate counts the logits once; at the start of the backward pass Transformers' fp32 loss
    holds three tensors of that size (log-probabilities, their gradient, the logits' gradient).
    A layout whose peak with them is more than the device does not fit (`Estimate.fits`), so a
    chosen layout's peak is always within the device: it uses the margin above the usable line.
    """

    extra: int  # bytes above the estimate, per device
    peak: int  # the estimate plus `extra`
    margin: int  # what the wizard leaves above the usable line
    device_memory: int  # the whole device's memory
    per_tensor: int
    tokens: int
    vocab: int


def loss_peak(answers: Mapping[str, Any], facts: FactSet, settings: Mapping[str, Any]) -> LossPeak | None:
    """The chosen layout's loss peak when it goes past the usable line (None when within it or chunked).

    The temporaries are counted against the line, not the margin above it: a run whose estimate
    leaves room below the line takes them there.
    """
    est = facts.estimates.get(str(settings.get("strategy"))) if facts.estimates else None
    work = facts.workload
    if est is None or work is None or not est.fits or chunked_loss(answers) or not (est.tight or est.close_call):
        return None  # the brief peak stays under the usable line, and is no close call: nothing to say
    return LossPeak(
        extra=est.transient,
        peak=est.peak,
        margin=est.gpu_memory - est.budget,
        device_memory=est.gpu_memory,
        per_tensor=est.transient // 2,
        tokens=layout_tokens(work, est.strategy),
        vocab=work.shape.vocab_size,
    )


def loss_peak_line(answers: Mapping[str, Any], facts: FactSet, settings: Mapping[str, Any]) -> str | None:
    """One sentence beside the decision: the steady figure and the brief peak, so both are one answer."""
    peak = loss_peak(answers, facts, settings)
    est = facts.estimates.get(str(settings.get("strategy"))) if facts.estimates else None
    if peak is None or est is None:
        return None
    words = words_for(est.device)
    device = memory_gib(peak.device_memory)
    margin = round(float(device) - to_gib(est.budget), 1)
    if est.device == MAC_DEVICE:
        # Unified memory: what is left above the working set is macOS's and the programs', and the
        # Python process's own 2 GiB come out of it too (the Memory paragraph's figure is net of them).
        left = round(spare_gib(est) - MAC_PROCESS_GIB, 1)
        return (
            f"about {to_gib(est.total)} GiB {words.per} through a step; at the start of the backward pass the"
            f" loss's fp32 temporaries add {to_gib(peak.extra)} GiB for a moment, to about"
            f" {sum_gib(est.total, peak.extra)} GiB, past the {to_gib(est.budget)} GiB working set (PyTorch allows"
            f" it). Of the Mac's {device} GiB, {spare_gib(est)} GiB are then left: about {MAC_PROCESS_GIB} GiB for"
            f" the Python process itself and {left} GiB for macOS and your programs; if Memory Pressure turns red,"
            " the note below on the loss peak says what to lower."
        )
    return (
        f"about {to_gib(est.total)} GiB {words.per} through a step; at the start of the backward pass the"
        f" loss's fp32 temporaries add {to_gib(peak.extra)} GiB for a moment, to about"
        f" {sum_gib(est.total, peak.extra)} GiB. That is "
        + (f"past the usable {to_gib(est.budget)} GiB" if est.tight else f"within the usable {to_gib(est.budget)} GiB")
        + f" and leaves {spare_gib(est)} GiB of {words.owner} {device} GiB for what the estimate does not count"
        f" (fragmentation, buffers), where the usable line keeps {margin} GiB for them: "
        + (
            f"a close call, since {UNDERSHOOT_PERCENT} more than that peak would pass the whole memory (the Risk line"
            " and the note below on the loss peak say what to change)."
            if est.close_call
            else "it fits, tightly (the note below on the loss peak says what to do if it runs out of"
            " memory all the same)."
        )
    )


# Where the script feeds samples of mixed lengths one per row, the loss peak comes with the first full-length
# batch, not at the first step: said so that a run that starts well is not taken as proof.
FULL_LENGTH_FIRST = (
    " That moment comes with the first batch of full-length sequences, which with unpacked data of mixed lengths"
    " may be hours in: to meet it at once, make the first batch full length (pack or pad it to sequence_length)."
)


def _full_length_first(answers: Mapping[str, Any]) -> str:
    """FULL_LENGTH_FIRST for a script of the user's own (Accelerate); Axolotl packs its rows full by default."""
    return FULL_LENGTH_FIRST if answers.get("target") == "accelerate" else ""


# How the loss-peak warning counts the three tensors: the estimate's fp32 logits stand for one of them.
_ONE_COUNTED = (
    "Of the three, the estimate counts one already, as the {gib} GiB of fp32 logits; the other two add {extra} GiB"
    " for that moment"
)
# How the loss-peak warning opens: past the usable line, or (a close call) past the card by the calibration.
LOSS_PEAK_PAST = "the loss peak takes this run past the usable memory"
LOSS_PEAK_CLOSE = "the loss peak may take this run out of memory"
LOSS_PEAK_WARNINGS = (LOSS_PEAK_PAST, LOSS_PEAK_CLOSE)


def loss_peak_warning(
    answers: Mapping[str, Any], facts: FactSet, settings: Mapping[str, Any], traits: BackendTraits
) -> str | None:
    """The loss's fp32 temporaries, which the estimate leaves to the margin, when they outgrow it."""
    est = facts.estimates.get(str(settings.get("strategy"))) if facts.estimates else None
    peak = loss_peak(answers, facts, settings)
    if est is None or peak is None:
        return None
    words = words_for(est.device)
    lever = _loss_peak_lever(answers, facts, settings, traits, est)
    device = f"{words.owner} {memory_gib(peak.device_memory)} GiB"
    # A Mac shares its memory with macOS: past the working set it swaps and slows before it stops.
    trouble = (
        "if macOS starts swapping at the first backward pass (Memory Pressure turns red in Activity Monitor)"
        " or the run stops out of memory"
        if est.device == MAC_DEVICE
        else "if the run stops out of memory at the backward pass of its first full-length batch"
    )
    peak_gib = sum_gib(est.total, peak.extra)
    counted = _ONE_COUNTED.format(gib=to_gib(peak.per_tensor), extra=to_gib(peak.extra))
    # An offload moves the model states; this moment is activations: said, or offload reads as the remedy.
    offload = (
        " The offload this run uses moves training state to host RAM, not the activations or this moment:"
        " it shrinks the moment's peak only by the state it moves (the memory table's offload rows give each"
        " layout's total, to which the moment adds the same)."
        if settings.get("strategy") in OFFLOAD_STRATEGIES
        else ""
    )
    tensors = (
        "Transformers computes the loss in fp32, and when the backward pass starts the log-probabilities, their"
        f" gradient and the logits' gradient live at once, three fp32 tensors of {peak.tokens:,} tokens x"
        f" {peak.vocab:,} vocabulary entries, {to_gib(peak.per_tensor)} GiB each {words.per}. {counted},"
        f" from about {to_gib(est.total)} GiB to about {peak_gib} GiB, "
        + (f"past the usable {to_gib(est.budget)} GiB" if est.tight else f"within the usable {to_gib(est.budget)} GiB")
    )
    if est.close_call:
        # A close call: the calibration puts the real peak past the card, so the fix is for before the
        # first launch, said last as what to do, not as a remedy "if it runs out of memory".
        return (
            f"{LOSS_PEAK_CLOSE} at the backward pass of its first full-length batch: {tensors} and within"
            f" {device} by the estimate. This estimate came to only {ESTIMATE_SHARE_WORDS} of the real peak at the"
            " longest contexts Unsloth found to fit an 80 GB card with Hugging Face + FlashAttention 2 QLoRA, where"
            f" the real peak filled the card (https://unsloth.ai/blog/llama3-3); {UNDERSHOOT_PERCENT} more"
            f" ({UNDERSHOOT_SUM} is {UNDERSHOOT}, the cautious end) is about"
            f" {round(float(peak_gib) * UNDERSHOOT, 1)} GiB, more than the {memory_gib(peak.device_memory)} GiB"
            f" of the GPU. So before the first launch, {lever}.{offload}{_full_length_first(answers)}"
        )
    # Not a close call, so tight (loss_peak): `tensors` ends "past the usable ... GiB".
    # The short form: the moment's figure, and the first way out; the tensors and calibration are the long one's.
    short_lever = _loss_peak_lever(answers, facts, settings, traits, est, brief=True)
    first_way = first_alternative(short_lever)
    brief = (
        f"{LOSS_PEAK_PAST} for a moment as the backward pass starts (about {peak_gib} GiB, within {device}),"
        f" as the Memory line says; {trouble}, {first_way}"
        + ("; --explain gives the other ways." if first_way != short_lever else ".")
        + (_full_length_first(answers) if est.device == GPU_DEVICE else "")
    )
    return Note(
        f"{LOSS_PEAK_PAST}: {tensors}, within {device}, but {trouble}, {lever}."
        + (
            # The estimate's own calibration at long context: the measured limits sat above its figure.
            " Treat it as a try: at the longest contexts Unsloth found to fit an 80 GB card with Hugging Face +"
            " FlashAttention 2 QLoRA, where the real peak filled the card, this estimate with that moment came to"
            f" only {ESTIMATE_SHARE_WORDS} of it: it ran 24% to 28% low (https://unsloth.ai/blog/llama3-3)."
            f" So the real peak may be up to {UNDERSHOOT_PERCENT} above the {peak_gib} GiB here ({UNDERSHOOT_SUM} is"
            f" {UNDERSHOOT}, the cautious end): at {UNDERSHOOT_PERCENT} more, about"
            f" {round(float(peak_gib) * UNDERSHOOT, 1)} GiB, still within the"
            f" {memory_gib(peak.device_memory)} GiB of the GPU; watch the backward pass of the first full-length batch."
            if est.device == GPU_DEVICE and est.long_context
            # Below a long context that calibration does not hold (peaks measured at 2,048 and 4,096 tokens
            # came to 0.84x to 1.13x of the estimate): the margin is the usable line's.
            else " Watch the backward pass of the first full-length batch."
            if est.device == GPU_DEVICE
            else ""
        )
        + offload
        + (_full_length_first(answers) if est.device == GPU_DEVICE else ""),
        brief,
    )


def first_alternative(lever: str) -> str:
    """The first of a lever's ways out ("A; or B; or C" gives A), never cut inside brackets."""
    depth = 0
    for index, char in enumerate(lever):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth == 0 and lever.startswith("; or ", index):
            return lever[:index]
    return lever


def _loss_peak_lever(
    answers: Mapping[str, Any],
    facts: FactSet,
    settings: Mapping[str, Any],
    traits: BackendTraits,
    est: Estimate,
    *,
    brief: bool = False,
) -> str:
    """What takes the loss peak away: the loss in chunks where the run can have it, then the run's other lever.

    `brief` (the short summary, where the three tensors are not named) leaves out "which builds none of them".
    """
    # The clause on the tensors the long note names; the short one names none, so it leaves the clause out.
    builds, build, which = (
        ("", "", "")
        if brief
        else (
            " and builds none of them",
            " and build none of them",
            ", which builds none of them",
        )
    )
    if answers.get("target") == "axolotl":
        chunks = (
            "turn on Cut Cross Entropy (--set cut_cross_entropy=true), which computes the loss in chunks"
            f"{builds} (the estimate then counts it)"
        )
    elif est.device == GPU_DEVICE and answers.get("objective") == "dpo":
        # TRL computes DPO's log-probabilities itself; its Liger switch fuses them with the output head.
        chunks = (
            "turn on TRL's Liger kernels (DPOConfig(use_liger_kernel=True); use_liger_loss=True in older TRL),"
            f" which compute the log-probabilities in chunks{build}, and answer chunked_loss: yes so the estimate"
            " counts it"
        )
    elif est.device == GPU_DEVICE:
        chunks = (
            f"compute the loss in chunks in your training script ({CHUNKED_LOSS_CODE}; code of yours, since an"
            f" Accelerate config has no switch for it){which}, and answer chunked_loss: yes so the estimate counts it"
        )
    else:
        chunks = ""
    other = _memory_lever(answers, facts, settings, traits, est)
    if brief:
        # Its first sentence names the change; the levers table above gives its figures.
        other = re.split(r"\.\s+(?=[A-Z])", other, maxsplit=1)[0].rstrip(".")
    return f"{chunks}; or {other}" if chunks else other


def loss_peak_brief(
    answers: Mapping[str, Any], facts: FactSet, settings: Mapping[str, Any], traits: BackendTraits
) -> str | None:
    """A close call's loss-peak warning for the short summary, whose Risk line gives its figures: what to do.

    None where the run is no close call (the short summary then prints the warning whole).
    """
    est = facts.estimates.get(str(settings.get("strategy"))) if facts.estimates else None
    if est is None or loss_peak(answers, facts, settings) is None or not est.close_call:
        return None
    lever = _loss_peak_lever(answers, facts, settings, traits, est, brief=True)
    return (
        f"{LOSS_PEAK_CLOSE} at the backward pass of its first full-length batch, as the Risk line above says"
        " (--explain names the loss's fp32 tensors and where the calibration comes from). So before the first launch,"
        f" {lever}." + _full_length_first(answers)
    )


# What an Accelerate script calls for a chunked loss: Liger Kernel patches a Transformers model's loss
# (https://github.com/linkedin/Liger-Kernel); Apple's package is a function to call on the hidden
# states and the head's weight (https://github.com/apple/ml-cross-entropy).
CHUNKED_LOSS_CODE = (
    "Liger Kernel's apply_liger_kernel_to_llama() or its sibling for your model, called before the model is"
    " loaded; or Apple's cut-cross-entropy package"
)


def chunked_loss(answers: Mapping[str, Any]) -> bool:
    """Whether the run's loss never builds the whole logits.

    Axolotl's Cut Cross Entropy or Liger's fused linear cross entropy (off beside Cut Cross Entropy
    and under tensor parallelism), or an Accelerate script's own chunked loss (chunked_loss). Cut
    Cross Entropy and chunked_loss are asked before the decision, whose estimate then counts no
    logits (facts.chunked_loss_answered); Liger is an add-on asked after it.
    """
    if answers.get("target") != "axolotl":
        return answers.get("chunked_loss") is True
    liger_loss = answers.get("liger") is True and int(answers.get("tensor_parallel_size") or 1) == 1
    return answers.get("cut_cross_entropy") is True or liger_loss


def memory_beyond_the_card(answers: Mapping[str, Any]) -> str | None:
    """gpu_memory_gb answered larger than the named GPU model has: every fit above rests on memory it lacks.

    Less is allowed without a word (a card that also drives a display, memory kept for another
    process); more cannot be, and an answers file reused for another card carries it silently.
    """
    if answers.get("hardware") not in GPU_HARDWARE:
        return None
    gpu = lookup_gpu(answers.get("gpu_model"))
    given = answers.get("gpu_memory_gb")
    if gpu is None or not isinstance(given, (int, float)):
        return None
    card = gpu.memory_mib / 1024
    if given <= card * 1.02:  # the driver's figure, give or take a rounding
        return None
    source = "its datasheet gives" if gpu.memory_from == "datasheet" else f"{gpu.memory_from} reports it"
    return (
        f"gpu_memory_gb {given:g} is more than the {gpu.name} named by gpu_model has ({card:.2f} GiB as"
        f" {source}; the size on the box is in GB and larger): every figure and fit above uses {given:g} GiB,"
        " so a layout called fitting"
        " may not fit that card. Leave gpu_memory_gb out to use the card's own figure, or name the card you have"
        " as gpu_model."
    )


def chunked_loss_name(answers: Mapping[str, Any]) -> str:
    """The chunked loss a run has on, as its option is named: Cut Cross Entropy, else Liger's fused loss."""
    return "Cut Cross Entropy" if answers.get("cut_cross_entropy") is True else "Liger's fused linear cross entropy"


def chunked_loss_run(answers: Mapping[str, Any], facts: FactSet, est: Estimate | None) -> tuple[Estimate, int] | None:
    """With a chunked loss on: the estimate without the logits it never builds, and those logits' bytes.

    The loss's moment goes with the logits (transient 0). None without a chunked loss or an estimate.
    """
    if est is None or facts.workload is None or facts.workload.chunked_loss or not chunked_loss(answers):
        return None  # (an estimate with the chunked loss counted already has no logits to take out)
    logits = layout_logits_bytes(facts.workload, est.strategy)
    return replace(est, activations=max(est.activations - logits, 0), transient=0), logits


def chunked_loss_note(answers: Mapping[str, Any], facts: FactSet, settings: Mapping[str, Any]) -> str | None:
    """With Cut Cross Entropy (or Liger's fused loss) on: the figures above still count the logits it never builds.

    The loss options are asked after the decision, which does not depend on them, so the memory
    figures are those of the plain loss: an overstatement, said with its size.
    """
    est = facts.estimates.get(str(settings.get("strategy"))) if facts.estimates else None
    chunked = chunked_loss_run(answers, facts, est)
    if est is None or chunked is None or chunked[1] < GIB // 4:
        return None
    without, logits = chunked
    words = words_for(est.device)
    which = chunked_loss_name(answers)
    return (
        f"{which} is on, one of the options asked after the decision, so the memory figures above are those of the"
        f" ordinary loss: they count {to_gib(logits)} GiB of output logits (and {to_gib(est.transient)} GiB more for a"
        f" moment as the backward pass starts) that it never builds. With it the run needs about"
        f" {to_gib(without.total)} GiB {words.per} through a step, with no such moment; the backend was chosen on the"
        " larger figure." + _chunked_without_offload(answers, facts, est)
    )


# What the Python process itself holds outside Metal's working set on a Mac (the tree's Mac texts count
# the same 2 GiB: libraries, tokenizer, data).
MAC_PROCESS_GIB = 2.0

# Past the usable line by less than this, a layout is only just past it rather than a clear miss.
CLOSE_CALL_GIB = 0.5


def _chunked_without_offload(answers: Mapping[str, Any], facts: FactSet, est: Estimate) -> str:
    """For a run that offloads with a chunked loss on: whether the lightest layout without offload then fits.

    The question a reader asks of the note above: does the chunked loss make the offload unnecessary?
    """
    if est.strategy not in OFFLOAD_STRATEGIES:
        return ""
    if facts.get("fits_without_offload"):
        # A layout without offload fits with the ordinary loss already (layer offloading taken beside DDP
        # as the lighter lever): the chunked loss does not change whether offload is needed.
        return ""
    plain = [
        chunked[0]
        for strategy, other in facts.estimates.items()
        if strategy not in OFFLOAD_STRATEGIES and (chunked := chunked_loss_run(answers, facts, other)) is not None
    ]
    if not plain:
        return ""
    lightest = min(plain, key=lambda e: e.total)
    name = lightest.title or STRATEGY_TITLES.get(lightest.strategy, lightest.strategy)
    if lightest.total <= lightest.budget:
        # The decision comes before the loss options, so it cannot drop the offload itself.
        return (
            f" Without those logits, {name} would fit with no offload at all (about {to_gib(lightest.total)} GiB of"
            f" {to_gib(lightest.budget)} GiB usable), so with it the offload is not needed; the wizard decides"
            " before the loss options and keeps the offload, which still fits should the chunked loss be turned off."
        )
    over = to_gib(lightest.total) - to_gib(lightest.budget)
    if over < CLOSE_CALL_GIB:
        # Past the line by less than the margin's smallest slice: the reader's real question is whether to try.
        return (
            f" Without those logits, the lightest layout without offload ({name}) would need about"
            f" {to_gib(lightest.total)} GiB, only {over:.1f} GiB past the {to_gib(lightest.budget)} GiB usable:"
            " only just past it. The offload stays by the estimate, since a run without it would eat into the margin"
            " kept above the usable line for fragmentation and buffers"
            + (
                "; to try it anyway, set layer_offloading: false in axolotl.yaml and watch the GPU's memory in the"
                " first steps."
                if est.strategy == "ddp_layer_offload"
                # Turning another backend's offload off would not give that layout: it is another backend's.
                else "."
            )
        )
    return (
        f" Without those logits, the lightest layout without offload ({name}) would still need about"
        f" {to_gib(lightest.total)} GiB, more than the {to_gib(lightest.budget)} GiB usable: the offload stays."
    )


def _chunked_loss_lever(answers: Mapping[str, Any], facts: FactSet) -> str:
    """A chunked loss as a further lever, for a GPU run whose output logits are a large part."""
    work = facts.workload
    if chunked_loss(answers) or work is None or work.device != GPU_DEVICE:
        return ""
    logits = logits_bytes(work)
    if logits < GIB:
        return ""
    # Axolotl's Cut Cross Entropy plugin, or the script's own chunked loss, computes the loss without the logits.
    how = (
        "turn on Cut Cross Entropy (--set cut_cross_entropy=true), which computes the loss"
        if answers.get("target") == "axolotl"
        else f"compute the loss in chunks in your script ({CHUNKED_LOSS_CODE}) and answer chunked_loss: yes, which"
        " builds the loss"
    )
    return (
        f"; or {how} without building the {to_gib(logits)} GiB of output logits or the loss's fp32 temporaries"
        f" ({to_gib(loss_extra_bytes(work))} GiB more at the start of the backward pass)"
    )


# The layout each strategy turns into when its optimizer state (and, for FSDP2, its weights) go
# to host RAM: what "offload: cpu" gives the same backend.
_OFFLOADED = {
    "fsdp2": "fsdp2_offload",
    "hsdp": "hsdp_offload",
    "zero3": "zero3_offload_optimizer",
    "zero2": "zero2_offload_optimizer",
    "zero1": "zero2_offload_optimizer",
}


def _offload_lever(answers: Mapping[str, Any], facts: FactSet, strategy: str) -> str:
    """The chosen backend's offload layout as a lever, with its figures, where it fits; "" otherwise.

    Not where the run rules offload out (offload: none) or already offloads (offload: cpu).
    """
    layout = _OFFLOADED.get(strategy)
    est = facts.estimates.get(layout) if layout and facts.estimates else None
    if est is None or not est.fits or est.host_fits is False or answers.get("offload") in ("none", "cpu"):
        return ""
    host = f" and about {to_gib(est.host_per_node)} GiB of host RAM per machine" if est.host_per_node else ""
    if answers.get("deepspeed_config") is not None:
        # A brought JSON is run as written: the offload answer does not apply, the JSON's own block does.
        return (
            'offload the optimizer in your DeepSpeed JSON (zero_optimization.offload_optimizer: {"device": "cpu"}):'
            f" {est.label} needs about {to_gib(est.total)} GiB per GPU{host}, for a slower step"
        )
    return (
        f"offload to the CPU (offload: cpu): {est.label} needs about {to_gib(est.total)} GiB per GPU{host},"
        " for a slower step"
    )


def _shard_everywhere(answers: Mapping[str, Any], facts: FactSet) -> str | None:
    """HSDP's lever near the limit: shard over every GPU of every machine, where that leaves room.

    The table's FSDP2 row is that layout; it gathers every layer's weights across the network in
    each pass, so its step time is said beside HSDP's. None where it would be near the limit too.
    """
    whole, hybrid = facts.estimates.get("fsdp2"), facts.estimates.get("hsdp")
    if whole is None or hybrid is None or not whole.fits or near_limit(whole):
        return None
    world = int(facts.get("world_size", 1))
    keys = (
        ("dp_shard_size", "dp_replicate_size", "axolotl.yaml")
        if answers.get("target") == "axolotl"
        else ("parallelism_config_dp_shard_size", "parallelism_config_dp_replicate_size", "accelerate_config.yaml")
    )
    now, then = facts.speeds.get("hsdp"), facts.speeds.get("fsdp2")
    speed = (
        f"; a step of about {band_text(then)} against {band_text(now)} by the step-time table"
        if now is not None and then is not None
        else ""
    )
    return (
        f"shard over all {world} GPUs instead of each machine's (set {keys[0]}: {world} and {keys[1]}: 1 in"
        f" {keys[2]}): about {to_gib(whole.total)} GiB per GPU by the {whole.label} row,"
        f" {whole.total / whole.budget:.0%} of the usable memory, for every layer's weights gathered across the"
        f" network in each pass{speed}; or "
        + ("train LoRA adapters instead of the whole model" if answers.get("method") == "full" else "add GPUs")
    )


def _sequences(count: int) -> str:
    """The count with its noun: 1 sequence, 4 sequences."""
    return f"{count} sequence{'s' if count != 1 else ''}"


def _wider_context_parallel(facts: FactSet, est: Estimate, cp: int) -> str:
    """The context-parallel lever with its figure: twice the size, where the GPUs divide by it."""
    workload = facts.workload
    wider = cp * 2
    if workload is None or workload.world_size % wider:
        return "raise context_parallel_size (each GPU then holds a smaller slice of every sequence)"
    split = estimate(replace(workload, context_parallel=wider), est.strategy, est.gpu_memory / GIB, None)
    now = facts.speeds.get(est.strategy)
    then = (
        step_time(replace(workload, context_parallel=wider), est.strategy, facts.links, facts.accumulation)
        if facts.links is not None and now is not None
        else None
    )
    # The step covers fewer sequences with more GPUs per sequence: compare tokens per second.
    speed = ""
    if then is not None and now is not None:
        if rate_text(then) == rate_text(now):
            speed = (
                f"; about the same {rate_text(now)} tokens/s by the step-time model: the exchange of keys and"
                " values it adds stays small beside the attention's own computation"
            )
        else:
            speed = f"; about {rate_text(then)} tokens/s against {rate_text(now)} now, by the step-time model"
    # Each group of GPUs that splits a sequence trains micro_batch_size sequences at a time.
    then_seqs = workload.world_size // wider * workload.micro_batch_size
    now_seqs = workload.world_size // cp * workload.micro_batch_size
    return (
        f"set context_parallel_size: {wider} (about {to_gib(split.total)} GiB per GPU by the same estimate,"
        f" {split.total / split.budget:.0%} of the usable memory: each GPU then holds 1/{wider} of every sequence,"
        f" and the {workload.world_size} GPUs train {_sequences(then_seqs)} at a time instead of"
        f" {now_seqs}{speed})"
    )


def layer_offloading_warning(
    answers: Mapping[str, Any], facts: FactSet, settings: Mapping[str, Any], traits: BackendTraits
) -> str | None:
    """layer_offloading answered yes where the decision does not run it as the layer-offload row.

    Axolotl's layer offloading runs only beside a full copy of the weights on every GPU: FSDP2 and
    ZeRO-3 hold the weights as shards its hooks do not handle.
    """
    if answers.get("layer_offloading") is not True or settings.get("strategy") == "ddp_layer_offload":
        return None
    if not traits.whole_copy or settings.get("backend") is None:  # a refusal runs no full copy either
        return (
            "layer_offloading: true was asked for, but the chosen backend shards the weights, and Axolotl's layer"
            " offloading only runs beside full copies (one GPU or DDP), so axolotl.yaml does not set it."
        )
    if not layer_offload_host_short(answers, facts, settings):
        return None
    layer = facts.estimates["ddp_layer_offload"]
    usable = round(layer.host_memory / GIB * FIT_MARGIN, 1) if layer.host_memory else 0.0
    return (
        f"layer_offloading: true was asked for, but the frozen layers need about {to_gib(layer.host_per_node)} GiB"
        f" of host RAM per machine, more than the {usable} GiB usable of cpu_memory_gb, so axolotl.yaml does not set"
        " it: the run fits without it (the figures above). Where the machine has more RAM than cpu_memory_gb says,"
        " give its real size and the wizard plans layer offloading again."
    )


def layer_offload_host_short(answers: Mapping[str, Any], facts: FactSet, settings: Mapping[str, Any]) -> bool:
    """layer_offloading asked for beside a full copy, where host RAM is too short for the frozen layers.

    The files then leave it out (as the warning above says), so that the plan written is the one
    the estimate counts: the frozen layers on the GPU, where they fit.
    """
    if answers.get("layer_offloading") is not True or settings.get("strategy") == "ddp_layer_offload":
        return False
    layer = facts.estimates.get("ddp_layer_offload")
    return layer is not None and layer.host_fits is False


def zero3_moe_layer_classes(
    answers: Mapping[str, Any], facts: FactSet, settings: Mapping[str, Any], traits: BackendTraits
) -> str | None:
    """The deepspeed_moe_layer_cls_names the Accelerate YAML gets, or None.

    The moe_layer_cls_names answer where it was asked (a brought DeepSpeed JSON); for ZeRO-3 the
    wizard chose itself, the model's known sparse MoE block class. DeepSpeed ZeRO-3 needs it to
    treat each MoE block as one unit (Accelerate's ``DeepSpeedPlugin.set_moe_leaf_modules``).
    """
    answered = answers.get("moe_layer_cls_names")
    if answered or "deepspeed_config" in answers:
        return str(answered) if answered else None
    if not traits.zero_stages or settings.get("zero_stage") != 3 or facts.get("moe") is not True:
        return None
    block = facts.get("moe_block_class")
    return str(block) if block else None


def _moe_zero3_warning(
    answers: Mapping[str, Any], facts: FactSet, settings: Mapping[str, Any], traits: BackendTraits
) -> str | None:
    """An MoE model under Accelerate + DeepSpeed ZeRO-3 without its MoE layer class names: say how to add them."""
    if answers.get("target") != "accelerate" or not traits.zero_stages:
        return None
    if settings.get("zero_stage") != 3 or facts.get("moe") is not True:
        return None
    if zero3_moe_layer_classes(answers, facts, settings, traits):
        return None
    known = facts.get("moe_block_class")
    where = (
        "answer moe_layer_cls_names with it"
        if "deepspeed_config" in answers
        else "add it as deepspeed_moe_layer_cls_names under deepspeed_config in accelerate_config.yaml"
    )
    if known:
        what = f"the model's sparse MoE block class is {known}, but it is not set"
        find = f"{where} ({known})"
    else:
        what = "the wizard does not know the model's sparse MoE block class"
        find = (
            f"{where}: the class of one layer's router and experts in the model's Transformers code "
            "(modeling_<model>.py; printing the model shows it), such as MixtralSparseMoeBlock or "
            "Qwen3MoeSparseMoeBlock, or give the model's config.json as model so the wizard reads it"
        )
    return (
        f"mixture-of-experts model under DeepSpeed ZeRO-3 without deepspeed_moe_layer_cls_names: {what}. "
        f"ZeRO-3 needs it, or a step where some experts get no tokens can hang; {find}."
    )


# How the Assumed line names each optimizer.
OPTIMIZER_TITLES = {
    "adamw": "Adam",
    "adamw_8bit": "8-bit AdamW",
    "paged_adamw_8bit": "paged 8-bit AdamW",
    "adafactor": "Adafactor",
}


def _per_param_bytes(facts: FactSet, strategy: str) -> str:
    """The training state's bytes per trained parameter, as the estimate counts them ("16", "about 10.03")."""
    workload = facts.workload
    if workload is None or optimizer_of(workload, strategy) == "adamw":
        return "16"
    t = max(trainable_params(workload), 1)
    per = 8 + moment_bytes(workload, strategy) / t
    return f"about {per:.2f}"


# For a chosen layout that offloads (16-bit compute): how its bytes per trained parameter split
# between host RAM and the GPU, as the memory model's host and GPU figures count them.
_OFFLOADED_SPLITS = {
    "zero2_offload_optimizer": (
        "18",
        "16 of them in host RAM: the fp32 weights, fp32 gradients and Adam's two fp32 moments; 2 on each GPU:"
        " the 16-bit weights DeepSpeed computes with; 2 more than the 16 without offload, since the gradients go to"
        " host RAM in fp32 where a GPU keeps them in 16 bit; the host RAM figure is the 16 x 1.5 for the pinned"
        " buffers the offload allocates",
    ),
    "zero3_offload_optimizer": (
        "18",
        "16 of them in host RAM: the fp32 weights, fp32 gradients and Adam's two fp32 moments; 2 on the GPUs:"
        " the 16-bit weights DeepSpeed computes with, sharded; 2 more than the 16 without offload, since the"
        " gradients, sent over PCIe in 16 bit, are held in host RAM in fp32 where a GPU keeps them in 16 bit;"
        " the host RAM figure is the 16 x 1.5 for the pinned buffers the offload allocates",
    ),
    "zero3_offload_all": (
        "18",
        "all in host RAM, times 1.5 for the pinned buffers the offload allocates: the fp32 weights, fp32 gradients"
        " and Adam's two fp32 moments, and DeepSpeed's 16-bit weights",
    ),
    "fsdp2_offload": (
        "16",
        "all in host RAM, times 1.5 for the pinned buffers the offload allocates: the fp32 weights, fp32 gradients"
        " and Adam's two fp32 moments",
    ),
    "hsdp_offload": (
        "16",
        "all in host RAM, times 1.5 for the pinned buffers the offload allocates: the fp32 weights, fp32 gradients"
        " and Adam's two fp32 moments",
    ),
}


# The same splits in a few words, for the summary (the files and --explain give what each byte is).
_OFFLOADED_BRIEF = {
    # 18, not the 16 without offload: the gradients are kept in fp32 on the host, 4 bytes where a GPU keeps 2.
    "zero2_offload_optimizer": (
        "2 on each GPU: the 16-bit weights; 16 in host RAM: fp32 weights, gradients and Adam's two moments, which the"
        " host column counts 1.5 times, 24, for pinned buffers"
    ),
    "zero3_offload_optimizer": (
        "2 on the GPUs: the 16-bit weights, sharded; 16 in host RAM: fp32 weights, gradients and Adam's two moments,"
        " which the host column counts 1.5 times, 24, for pinned buffers"
    ),
    "zero3_offload_all": "all in host RAM, counted 1.5 times for pinned buffers",
    "fsdp2_offload": "all in host RAM, counted 1.5 times for pinned buffers",
    "hsdp_offload": "all in host RAM, counted 1.5 times for pinned buffers",
}


def _offloaded_split(layout: str) -> tuple[str, str] | None:
    """The bytes per trained parameter of an offloading layout and where they live; None for the others."""
    return _OFFLOADED_SPLITS.get(layout)


def dpo_assumption(workload: Workload | None, strategy: str) -> str:
    """What the estimate counts for DPO, as a clause of the Assumed line; "" for supervised training."""
    if workload is None or not workload.pairs:
        return ""
    pairs = (
        f"; DPO: each pair of the micro-batch ({workload.micro_batch_size}) is a chosen and a rejected answer, run as"
        f" two sequences (the activations of {sequences_per_micro_batch(workload)} sequences)"
    )
    reference = {
        "base": ", and the reference is the base model with the adapters switched off (no memory of its own; one"
        " more forward pass per step, which the step time counts)",
        "precomputed": ", and the reference log-probs are computed in one forward pass over the data before training"
        " (no reference held while training, and no reference pass in the step time)",
    }.get(workload.reference, "")
    if workload.reference == "copy":
        shards = reference_shards(workload, strategy)
        whole = to_gib(reference_bytes(workload, strategy))
        placed = (
            "whole on every GPU"
            if shards == 1
            else f"sharded as the weights are ({to_gib(reference_gpu_bytes(workload, strategy))} GiB per GPU)"
            if shards > 1
            else "offloaded with the weights to host RAM"
        )
        fp32 = reference_bytes(workload, strategy) > weight_bytes(workload)
        bits = "fp32 " if fp32 else "16-bit " if workload.half_precision else ""
        how = " (TRL's deep copy of the fp32 model this layout trains)" if fp32 else ""
        reference = f", and a frozen {bits}copy of the model as the reference{how} ({whole} GiB), {placed}"
    return pairs + reference


def model_assumption(
    answers: Mapping[str, Any], facts: FactSet, strategy: str | None = None, *, brief: bool = False
) -> str:
    """What the estimate assumed about the model, in one sentence.

    For a size, the size is the parameter count the estimate uses and the named reference model
    only lends its layer shape (layers, hidden size, vocabulary) to the activation estimate. For a
    config.json the shape is the model's own, counted from it; the optimizer, adapters and
    attention are assumed all the same, so they are said too. `strategy` is the chosen layout:
    where the reference model's own count differs from the size, its figure with that count is
    said too, so a verdict that depends on how the model was named shows both ways. `brief` (the
    summary) leaves out how the bytes per parameter split, which the files and `explain` keep.
    """
    shape = facts.shape
    if shape is None:
        return ""
    method = answers.get("method")
    layout = strategy or "ddp"
    optimizer = optimizer_of(facts.workload, layout) if facts.workload is not None else "adamw"
    per_param = _per_param_bytes(facts, layout)
    adapters = ""
    if method in ("lora", "qlora"):
        # The count the 16 bytes apply to, so that 1B x 16 bytes is not taken for the estimate.
        rank = lora_rank_of(answers)
        trained = shape.lora_params(rank)
        adapters = f"; LoRA adapters of rank {rank} on every linear layer, {trained / 1e6:,.1f}M trained parameters"
        theirs = "the 16 bytes" if per_param == "16" else "those bytes"
        # Said in the short form too: "16 bytes per trained parameter" beside a 3B model reads as 48 GB.
        adapters += (
            f" ({theirs} are theirs; a frozen weight counts only its own storage, with no gradient or optimizer state)"
        )
    base = ", the frozen base in 4-bit" if method == "qlora" else ""
    size = f"{round(shape.params / 1e9, 2):g}B"
    given = str(answers.get("model"))
    # "model 8x7B: 46.7B parameters", but not "model 7B: 7B parameters".
    said = "" if given.upper().rstrip("B") == size.rstrip("B") else f" for model {given}"
    flash = " or FlashAttention" if answers.get("hardware") == "nvidia" else ""
    # The same 16 bytes as the table's legend, split as this run's precision splits them.
    adam = (
        "4-byte weights and gradients and Adam's two 4-byte moments"
        if facts.get("mixed_precision") == "no"
        # The backends split the same 16 bytes two ways: DeepSpeed keeps 16-bit weights and gradients
        # beside its fp32 copy; FSDP2 and DDP keep the weights in fp32 and their gradients in fp32.
        # The chosen layout's split first; the other after it, since the memory table shows rows of both kinds.
        else "DeepSpeed's 16-bit weights and gradients, 4, beside its fp32 copy of the weights and Adam's two fp32"
        " moments, 12; the other rows keep fp32 weights and gradients, the same 16"
        if layout.startswith("zero")
        else "the fp32 weights, their fp32 gradients and Adam's two fp32 moments, 4 bytes each; DeepSpeed's rows split"
        " the same 16 as 16-bit weights and gradients beside an fp32 copy"
    )
    if optimizer != "adamw":
        # Another optimizer changes only its moments' bytes (memory.moment_bytes): say the run's own.
        weights = (
            "4-byte weights and gradients"
            if facts.get("mixed_precision") == "no"
            else "8 for the weights and gradients, fp32 ones or DeepSpeed's 16-bit ones beside an fp32 copy"
        )
        # The offload rows step on the CPU with AdamW (memory.run_optimizer): the table's host RAM is Adam's.
        state = (
            f"about {float(per_param.removeprefix('about ')) - 8:.2f} for " if per_param.startswith("about ") else ""
        )
        adam = (
            f"{weights}; {state}{OPTIMIZER_WORDS[optimizer]}; the rows that move the optimizer step to the CPU"
            " count AdamW's 16, since DeepSpeed's CPU Adam or a CPU AdamW runs it there"
        )
    offloaded = _offloaded_split(layout) if facts.get("mixed_precision") != "no" else None
    if offloaded is not None:
        # The chosen layout offloads: the same bytes split between host RAM and the GPU, as its rows count them.
        per_param, adam = offloaded
    # The short form keeps an offload's split: "18 bytes" alone would read as a slip beside the 16 of
    # the rows without offload.
    split = "" if brief and offloaded is None else f" ({_OFFLOADED_BRIEF[layout] if brief else adam})"
    if brief and offloaded is None and optimizer != "adamw" and per_param.startswith("about "):
        # A figure other than Adam's 16 says what it is made of even in the short form: the optimizer's
        # menu gave its state alone ("about 2 bytes"), this line the whole training state.
        moments = float(per_param.removeprefix("about ")) - 8
        split = f" (8 for the weights and gradients, about {moments:.2f} for its state)"
    rest = f"{OPTIMIZER_TITLES[optimizer]}, {per_param} bytes per trained parameter{split}{adapters}; " + (
        "attention that builds each layer's score matrix whole, as PyTorch's attention does on Apple's MPS"
        + (
            f" ({_mps_matrix(facts)} GiB per layer here)"
            if brief
            else f" (micro-batch x heads x sequence\u00b2 x"
            f" {2 if facts.workload and facts.workload.half_precision else 4}"
            f" bytes: {_mps_matrix(facts)} GiB per layer here; with"
            " gradient checkpointing the activations count two such matrices, the one layer being recomputed holds"
            " its scores and their gradient; without it, one matrix for every layer plus one gradient)"
        )
        if answers.get("hardware") == "mps"
        else f"attention that keeps no score matrix (SDPA{flash})"
    )
    rest += dpo_assumption(facts.workload, layout)
    if facts.workload is not None and facts.workload.chunked_loss:
        # Answered before the decision: every figure above counts it, so the reader learns it here.
        rest += (
            "; the loss computed in chunks"
            + (" (Cut Cross Entropy)" if answers.get("target") == "axolotl" else " by your script (chunked_loss: yes)")
            + ", so no output logits and no loss peak"
        )
    if shape.reference is None:
        origin = facts.origin or ModelOrigin(name=given, source="config")
        counted = origin.counted(shape.model_type)
        return (
            f"Assumed: {shape.params:,} parameters {counted}{base} ({shape.layers}"
            f" layers, hidden size {shape.hidden_size:,}, vocabulary {shape.vocab_size:,}); {rest}."
        )
    # The shape borrowed from the base_model the run loads, when the catalogue knows it.
    base_name = answers.get("base_model")
    yours = (
        f" (your base_model {base_name})"
        if isinstance(base_name, str) and catalog_model(base_name.rstrip("/").split("/")[-1]) == shape.reference
        else ""
    )
    own = _reference_count(shape, facts, strategy)
    if yours and shape.reference in models_catalog()["models"]:
        own_params = shape_for_catalog(shape.reference).params
        if own_params == shape.params:
            # The base model the run loads, known to the catalogue: its own count is the one used.
            return (
                f"Assumed{said}: {own_params:,} parameters, the count of {shape.reference}{yours}, which the run"
                f" loads{base}, with its layer shape for the activations ({shape.layers} layers, hidden size"
                f" {shape.hidden_size:,}, vocabulary {shape.vocab_size:,}); {rest}."
            )
        if not own:
            # Within 5% of the size given (`reference_estimate`).
            own = (
                f"; {shape.reference} itself has {own_params / 1e9:.2f}B parameters, within 5% of the"
                f" {shape.params / 1e9:g}B counted here"
            )
    return (
        f"Assumed{said}: {size} parameters (the count the estimate uses){base}, with the layer shape of"
        f" {shape.reference}{yours} for the activations ({shape.layers} layers, hidden size {shape.hidden_size:,},"
        f" vocabulary {shape.vocab_size:,}){own}; {rest}. Give the model's Hub id,"
        f" its name (such as {shape.reference}) or its config.json as model for its own count."
    )


def reference_estimate(facts: FactSet, strategy: str | None) -> tuple[str, int, Estimate | None] | None:
    """The reference model's name, own count and `strategy`'s estimate with that count; None where they agree.

    "1B" borrows Llama 3.2 1B's shape but counts 1.00B where that model has 1.24B: a run near a
    limit could read "fits" or "tight" depending on which the user typed, so the texts give the
    figure with the model's own count beside the one for the size (within 5% they agree).
    """
    shape = facts.shape
    name = shape.reference if shape is not None else None
    if shape is None or name is None or name not in models_catalog()["models"]:
        return None
    own_shape = shape_for_catalog(name)  # cached: text contexts ask for it many times
    if abs(own_shape.params - shape.params) <= 0.05 * own_shape.params:
        return None
    chosen = facts.estimates.get(strategy or "")
    if chosen is None or facts.workload is None:
        return name, own_shape.params, None
    mine = estimate(
        replace(facts.workload, shape=own_shape),
        chosen.strategy,
        to_gib(chosen.gpu_memory),
        to_gib(chosen.host_memory) if chosen.host_memory is not None else None,
    )
    return name, own_shape.params, mine


def _reference_count(shape: ModelShape, facts: FactSet, strategy: str | None) -> str:
    """The reference model's own count (and the chosen layout's figure with it) where it differs; "" otherwise."""
    found = reference_estimate(facts, strategy)
    if found is None:
        return ""
    name, own, mine = found
    than = "more" if own > shape.params else "fewer"
    said = f"; {name} itself has {own / 1e9:.2f}B parameters, {than} than the {shape.params / 1e9:g}B counted here"
    chosen = facts.estimates.get(strategy or "")
    if mine is None or chosen is None:
        return said
    verdict = ("it still fits" if chosen.fits else "it would fit") if mine.fits else "it would not fit"
    moment = sum_gib(mine.total, mine.transient)
    if mine.tight:  # the loss peak goes past the usable line, as the Peak line says of a tight run
        verdict += ", tightly: its loss peak goes past the usable line, within the whole memory"
    elif mine.fits and near_limit_at_peak(mine):  # the same test as the close-to-the-limit warning's
        # The share at the loss peak where there is one, the figure the memory left beside it is at.
        share = (moment if mine.transient else to_gib(mine.total)) / to_gib(mine.budget)
        verdict += f", close to the limit at {share:.0%} of it" + (" at the loss peak" if mine.transient else "")
    at_moment = f" through a step and about {moment} GiB at the loss peak" if mine.transient else ""
    left = ""
    if chosen.device != GPU_DEVICE:  # the Mac: what its own count leaves for macOS and programs
        # As the decision's own figure: at the loss peak, less the 2 GiB the Mac's tools keep.
        # From the shown figures, as the Mac's own paragraph subtracts them, so both say the same.
        spare = float(memory_gib(chosen.gpu_memory)) - to_gib(mine.total) - to_gib(mine.transient) - 2
        left = f", leaving about {spare:.1f} GiB for macOS and your programs at the loss peak"
    return (
        f"{said}: with its count, the chosen layout ({chosen.label}) needs about {to_gib(mine.total)} GiB"
        f" {words_for(chosen.device).per}{at_moment}, against {to_gib(mine.budget)} GiB usable ({verdict}){left};"
        f" to count it, give model: {name}"
    )


def _mps_matrix(facts: FactSet) -> float:
    """One layer's score matrix on the Mac in GiB (0.0 before the workload is known)."""
    return to_gib(score_matrix_bytes(facts.workload)) if facts.workload is not None else 0.0


# A size in a model id's last part: "Llama-3.1-8B" 8, "gemma-2-2b-it" 2, "Qwen3-30B-A3B" 30 (the
# first size, the total); "Mixtral-8x7B" names experts, not the total, and is left alone.
_NAMED_SIZE = re.compile(r"(?<![\d.x])(\d+(?:\.\d+)?)[bB](?![a-zA-Z0-9])")
_EXPERTS_IN_NAME = re.compile(r"\d+x\d", re.IGNORECASE)
# How far the size in the name may be from the counted parameters before the wizard says so: the
# names round ("7B" is 6.7B for Llama 2, 7.2B for Mistral 7B).
NAME_SIZE_TOLERANCE = 0.1


def base_model_size_warning(answers: Mapping[str, Any], facts: FactSet) -> str | None:
    """A base_model whose name says a size far from the one the estimate counts (model: 7B, base_model ...-8B)."""
    base, shape = answers.get("base_model"), facts.shape
    if not isinstance(base, str) or shape is None:
        return None
    name = base.rstrip("/").split("/")[-1]
    found = _NAMED_SIZE.search(name)
    if found is None or _EXPERTS_IN_NAME.search(name):
        return None
    named = float(found.group(1)) * 1e9
    if abs(shape.params - named) <= NAME_SIZE_TOLERANCE * named:
        return None
    article = "an" if found.group(1).startswith(("8", "11", "18")) else "a"  # as the number is said
    return (
        f"base_model {base} looks like {article} {found.group(1)}B model, but the estimate counts"
        f" {shape.params / 1e9:.1f}B (model: {answers.get('model')}): give model: {found.group(1)}B, or the"
        " model's config.json as model, so that the memory figures are this model's."
    )


# With overlap_comm (and contiguous_gradients, on by default), DeepSpeed's ZeRO-1/2 optimizer keeps two
# reduce buffers of reduce_bucket_size elements ("double buffers", runtime/zero/stage_1_and_2.py);
# Transformers' DeepSpeed guide warns of up to 4.5 times the two bucket sizes ("a 9GB footprint" at 5e8).
REDUCE_BUFFERS = 2
OVERLAP_BUFFER_FACTOR = 4.5
BUCKET_HINT = 2e8  # the size that guide suggests where memory is short
DEFAULT_BUCKETS = 1e9  # DeepSpeed's defaults, 5e8 each: what the wizard's JSON keeps where they leave room
ZERO_SHARED_GRADIENTS = ("zero1", "zero2", "zero2_offload_optimizer")  # the layouts with reduce buckets


def buckets_crowd(estimate: Estimate | None, elements: Any, workload: Workload | None) -> bool:
    """Whether overlap_comm's buffers, by Transformers' guide, take more than half of what a layout leaves.

    That is what the layout keeps of the GPU at its peak for everything the estimate does not count;
    one rule for the wizard's own JSON, a brought one, and the edit proposed for a brought one.
    """
    if estimate is None or workload is None or not estimate.fits or not isinstance(elements, (int, float)):
        return False
    return to_gib(_overlap_guide_bytes(elements, workload)) > spare_gib(estimate) / 2


def overlap_buffer_bytes(strategy: str, facts: FactSet, *, brought: bool) -> int:
    """overlap_comm's buffers by Transformers' DeepSpeed guide for a ZeRO-1/2 plan's JSON, or 0.

    The wizard's own JSON turns overlap_comm on with DeepSpeed's bucket sizes, or the guide's 2e8 where
    those crowd the GPU (`own_buckets`); a brought JSON counts only with overlap_comm on, at its own sizes.
    """
    if strategy not in ZERO_SHARED_GRADIENTS or facts.workload is None:
        return 0
    if brought:
        return _brought_bucket_bytes(facts) if facts.get("ds_stage") in (1, 2) else 0
    elements = 2 * BUCKET_HINT if own_buckets(strategy, facts) else DEFAULT_BUCKETS
    return _overlap_guide_bytes(elements, facts.workload)


def _brought_bucket_bytes(facts: FactSet) -> int:
    """overlap_comm's buffers at a brought JSON's own buckets, whatever its stage; 0 without overlap_comm."""
    elements = facts.get("ds_bucket_elements")
    if not facts.get("ds_overlap_comm") or not isinstance(elements, (int, float)) or facts.workload is None:
        return 0
    return _overlap_guide_bytes(elements, facts.workload)


def brought_buffers(facts: FactSet) -> dict[str, int]:
    """overlap_comm's buffers a brought JSON's own buckets would add at each ZeRO-1/2 setting an edit may give it.

    Whatever stage the JSON has: an edit keeps its other keys, overlap_comm and the buckets among them.
    """
    buffers = _brought_bucket_bytes(facts)
    return {key: buffers for key in ZERO_SHARED_GRADIENTS} if buffers else {}


def own_buckets(strategy: str, facts: FactSet) -> int | None:
    """The bucket size the wizard's own ZeRO-1/2 JSON writes, or None where DeepSpeed's defaults leave room."""
    if strategy not in ZERO_SHARED_GRADIENTS or facts.estimates is None:
        return None
    crowded = buckets_crowd(facts.estimates.get(strategy), DEFAULT_BUCKETS, facts.workload)
    return int(BUCKET_HINT) if crowded else None


def bucket_warning(strategy: str, facts: FactSet, *, brought: bool) -> str | None:
    """A ZeRO-1/2 plan with overlap_comm whose communication buffers may take most of the room left.

    The estimate does not count DeepSpeed's communication buffers: they come out of the margin
    above the usable line. DeepSpeed's code keeps two reduce buffers of reduce_bucket_size elements
    in 16 bit; Transformers' DeepSpeed guide puts the whole at up to 4.5 times the two bucket sizes.
    A bucket holds no more than the trained parameters' gradients, which caps both. Said where the
    guide's figure would take more than half of what the layout leaves of the GPU at its peak
    (`buckets_crowd`): the wizard's own JSON then writes the smaller buckets and says why; a
    brought one is told to lower them.
    """
    estimate = facts.estimates.get(strategy)
    if brought:
        overlap, stage, elements = facts.get("ds_overlap_comm"), facts.get("ds_stage"), facts.get("ds_bucket_elements")
        bucket = facts.get("ds_reduce_bucket")
    else:
        overlap, stage, elements = True, 2 if strategy.startswith("zero2") else 1, DEFAULT_BUCKETS
        bucket = DEFAULT_BUCKETS / 2
    if (
        facts.workload is None
        or not overlap
        or stage not in (1, 2)
        or strategy not in ZERO_SHARED_GRADIENTS
        or not isinstance(bucket, (int, float))
        or not buckets_crowd(estimate, elements, facts.workload)
    ):
        return None
    assert estimate is not None and isinstance(elements, (int, float))  # buckets_crowd holds only then
    reduce = int(REDUCE_BUFFERS * 2 * min(bucket, trainable_params(facts.workload)))
    guide, spare = _overlap_guide_bytes(elements, facts.workload), spare_gib(estimate)
    lowered = _overlap_guide_bytes(2 * BUCKET_HINT, facts.workload)
    figures = (
        f" The estimate's total leaves DeepSpeed's communication buffers out (they are weighed here, apart): its"
        f" code keeps two reduce buffers of"
        f" reduce_bucket_size elements, about {to_gib(reduce)} GiB in 16 bit, and Transformers' DeepSpeed guide"
        f" warns of up to 4.5 times the bucket sizes, about {to_gib(guide)} GiB here, against the {spare} GiB this"
        f" plan leaves of the GPU at its peak for everything the estimate does not count: {_left_at_peak(estimate)}."
    )
    sources = (
        " Sources: DeepSpeed's runtime/zero/stage_1_and_2.py, and Transformers' DeepSpeed guide,"
        " https://huggingface.co/docs/transformers/deepspeed"
    )
    if not brought:
        return (
            f"ds_config.json sets reduce_bucket_size and allgather_bucket_size to {_elements(BUCKET_HINT)}, not"
            f" DeepSpeed's default 5e8 each (overlap_comm: true, adding up to {_elements(elements)} elements).{figures}"
            f" At {_elements(BUCKET_HINT)} each the guide's figure is about {to_gib(lowered)} GiB; smaller buckets"
            f" overlap a little less of the gradient exchange with the backward pass.{sources}"
        )
    sizes = (
        f"leaves reduce_bucket_size and allgather_bucket_size at DeepSpeed's default 5e8 each (adding up to"
        f" {_elements(elements)} elements)"
        if facts.get("ds_buckets_default")
        else f"sets reduce_bucket_size and allgather_bucket_size adding up to {_elements(elements)} elements"
    )
    # The same rule as the wizard's own ds_config.json, which writes the smaller buckets here: a step
    # to take before the first launch, not a remedy after it fails.
    written = (
        f" {SUGGESTED_JSON}, written beside the other files, is your JSON with that change: give it as"
        " deepspeed_config and run the wizard again to check it."
        if buckets_only_edit(facts, strategy) is not None
        else ""
    )
    return (
        f"your DeepSpeed JSON sets overlap_comm: true and {sizes}.{figures} Before the first launch, set both to"
        f" {_elements(BUCKET_HINT)}, as the wizard's own ds_config.json does where the buffers crowd the GPU this way"
        f" (or turn overlap_comm off, at some speed).{written}{sources}"
    )


def _overlap_guide_bytes(elements: float, workload: Workload) -> int:
    """Transformers' DeepSpeed guide's figure for overlap_comm's buffers: 4.5 x the two buckets in 16 bit.

    A bucket holds no more than the trained parameters' gradients, so the two together are capped at twice them.
    """
    return int(OVERLAP_BUFFER_FACTOR * 2 * min(elements, 2 * trainable_params(workload)))


def buckets_only_edit(facts: FactSet, strategy: str) -> int | None:
    """The bucket size to lower a brought JSON to where that is the whole edit, or None.

    Its layout fits by the estimate, but its overlap_comm buffers at its own bucket sizes take its peak past the
    usable line (the "keep its layout, lower its buckets" verdict), and lowering them is the rule of the wizard's
    own JSON (`bucket_lowering`).
    """
    est = facts.estimates.get(strategy) if facts.estimates else None
    if est is None or not past_line_with_buffers(est, overlap_buffer_bytes(strategy, facts, brought=True)):
        return None
    return bucket_lowering(facts, strategy)


def bucket_lowering(facts: FactSet, lever: str) -> int | None:
    """The size to lower a brought JSON's two buckets to in the fit warning's edit to `lever`, or None.

    A brought ZeRO-1/2 JSON with overlap_comm and buckets larger than the guide's 2e8, edited to a
    ZeRO-1/2 layout whose room they crowd: the rule of the wizard's own JSON (`buckets_crowd`).
    """
    elements = facts.get("ds_bucket_elements")
    if (
        lever not in ZERO_SHARED_GRADIENTS
        or not facts.get("ds_overlap_comm")
        or facts.get("ds_stage") not in (1, 2)
        or not isinstance(elements, (int, float))
        or elements <= 2 * BUCKET_HINT
        or not buckets_crowd(facts.estimates.get(lever) if facts.estimates else None, elements, facts.workload)
    ):
        return None
    return int(BUCKET_HINT)


def _bucket_edit(facts: FactSet, lever: str) -> str:
    """With the JSON edit the fit warning proposes: the bucket sizes to lower in the same edit, if any.

    A brought ZeRO-1/2 JSON with overlap_comm and buckets larger than the guide's 2e8 keeps them
    through the edit ("its other keys as they are"); said here, not only once the edit is made.
    """
    elements = facts.get("ds_bucket_elements")
    if bucket_lowering(facts, lever) is None or facts.workload is None or not isinstance(elements, (int, float)):
        return ""
    guide = _overlap_guide_bytes(elements, facts.workload)
    # Short sentences: the edit first, then why, then what it saves.
    return (
        f" Also {'set' if facts.get('ds_buckets_default') else 'lower'} reduce_bucket_size and"
        f" allgather_bucket_size to {_elements(BUCKET_HINT)}"
        + (
            " (yours are at DeepSpeed's default 5e8 each)."
            if facts.get("ds_buckets_default")
            else f" (yours add up to {_elements(elements)} elements)."
        )
        + f" With overlap_comm on, they can take about {to_gib(guide)} GiB of GPU memory by Transformers' DeepSpeed"
        " guide, which the estimate does not count. That is more than half of the"
        f" {spare_gib(facts.estimates[lever])} GiB the GPU's whole memory has left at that layout's peak (buffers use"
        f" the margin above the usable line): {_left_at_peak(facts.estimates[lever])}."
        f" At {_elements(BUCKET_HINT)} each it is about"
        f" {to_gib(_overlap_guide_bytes(2 * BUCKET_HINT, facts.workload))} GiB; the ds_config.json the wizard"
        " writes when no JSON is brought lowers them by the same rule."
    )


def _left_at_peak(estimate: Estimate) -> str:
    """How the room left at the peak is worked out, in figures a reader can check ("40.0 GiB less the 27.1 GiB ...")."""
    peak = f"{memory_gib(estimate.gpu_memory)} GiB less the {sum_gib(estimate.total, estimate.transient)} GiB it"
    if not estimate.transient:
        return f"{peak} holds"
    # The loss's moment is what the room is left at: the figure the tables show (through the step) is smaller.
    return f"{peak} holds for a moment as the backward pass starts ({to_gib(estimate.total)} GiB through the step)"


def _elements(value: float) -> str:
    """An element count as DeepSpeed JSONs write it: 1e9, 2e8, 1.5e8."""
    mantissa, exponent = f"{value:.2e}".split("e")
    return f"{mantissa.rstrip('0').rstrip('.')}e{int(exponent)}"
