"""What an Accelerate training script must do itself for the estimate to hold.

Accelerate's config file launches and wraps the script; it does not switch on gradient
checkpointing (except FSDP's activation checkpointing, which the written config sets) and it
does not add LoRA adapters. The memory estimate assumes both where the answers say so, so the
summary and the file headers say what the script must call.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from wizard.engine.facts import mac_bf16_base
from wizard.engine.memory import lora_rank_of
from wizard.engine.note import Note
from wizard.engine.traits import BackendTraits


def script_notes(
    answers: Mapping[str, Any], settings: Mapping[str, Any], traits: BackendTraits, *, snippet_adapters: bool
) -> list[str]:
    """The calls an Accelerate script needs for the estimate to hold; none for Axolotl (its YAML sets both).

    Args:
        answers: The answers (target, method, gradient_checkpointing).
        settings: The decided settings (backend).
        traits: The decided backend's traits: whether its config turns checkpointing on (FSDP's
            fsdp_activation_checkpointing, Megatron-LM's recompute flag) or the script must.
        snippet_adapters: Whether the written train_snippet.py already loads the quantized model with
            its adapters (and its checkpointing), which covers both calls.
    """
    if answers.get("target") != "accelerate" or settings.get("backend") is None:
        return []
    needs: list[str] = []
    # By the index of the need they shorten: what to call and its key figure, for the summary's first screen.
    briefs: dict[int, str] = {}
    if answers.get("chunked_loss") is True:
        # Answered yes, the estimate counts no logits: the script is what makes that true (the
        # written snippet, even where it loads the model, leaves the loss to the script).
        needs.append(_chunked_loss_need(answers.get("objective") == "dpo"))
    if snippet_adapters:
        return [f"Your training script must {need}." for need in needs]  # the chunked loss: no short form
    dpo = answers.get("objective") == "dpo"  # TRL's DPOTrainer: its DPOConfig sets what a plain loop calls
    if answers.get("gradient_checkpointing") and traits.checkpointing == "script" and dpo:
        briefs[len(needs)] = "turn on gradient checkpointing with DPOConfig(gradient_checkpointing=True)"
        needs.append(
            "turn on gradient checkpointing with DPOConfig(gradient_checkpointing=True), which the Accelerate"
            " config cannot switch on (to leave it off, answer gradient_checkpointing: no and the estimate counts"
            " every layer's activations)"
        )
    elif answers.get("gradient_checkpointing") and traits.checkpointing == "script":
        lora = answers.get("method") in ("lora", "qlora")
        briefs[len(needs)] = "turn on gradient checkpointing with model.gradient_checkpointing_enable()" + (
            ", before get_peft_model" if lora else ""
        )
        needs.append(
            "turn on gradient checkpointing (model.gradient_checkpointing_enable() for a Transformers model), which"
            " the Accelerate config cannot switch on (to leave it off, answer gradient_checkpointing: no and the"
            " estimate counts every layer's activations)"
            # PEFT's PeftModel makes a checkpointed base's inputs require grad only when checkpointing is
            # already on as it wraps the model; otherwise reentrant checkpointing over frozen layers ends the
            # backward pass with "element 0 of tensors does not require grad".
            + (
                "; with LoRA on a frozen base, call it before get_peft_model, or pass"
                " gradient_checkpointing_kwargs={'use_reentrant': False}, or the backward pass fails with"
                " 'element 0 of tensors does not require grad'"
                if lora
                else ""
            )
        )
    rank = lora_rank_of(answers)
    if answers.get("method") in ("lora", "qlora") and dpo:
        needs.append(
            "pass the LoRA adapters to DPOTrainer as"
            f" peft_config=LoraConfig(r={rank}, lora_alpha={2 * rank}, target_modules='all-linear') (the estimate"
            f" assumes rank {rank} on every linear layer), with no ref_model"
        )
    elif answers.get("method") in ("lora", "qlora"):
        briefs[len(needs)] = (
            f"wrap the model in LoRA adapters (PEFT's get_peft_model, rank {rank}, target_modules='all-linear')"
            " before accelerator.prepare"
        )
        needs.append(
            f"wrap the model in LoRA adapters with PEFT (get_peft_model with a LoraConfig; the estimate assumes rank "
            f"{rank} on every linear layer, target_modules='all-linear') before accelerator.prepare"
        )
    if mac_bf16_base(answers):
        # base_dtype: bf16 is what the estimate counts; Transformers 4 would load fp32 unless told.
        briefs[len(needs)] = (
            "load the model in bf16, the 2 bytes per weight the estimate counts: from_pretrained(...,"
            " dtype=torch.bfloat16)"
        )
        needs.append(
            "load the model in bf16 for this estimate to hold (from_pretrained(..., dtype=torch.bfloat16);"
            " torch_dtype= before Transformers 4.56), the 2 bytes per weight it counts (base_dtype: bf16), on a Mac"
            " that runs bf16 (the Precision paragraph, in --explain and at the head of the config, says how to test;"
            " where it does not, answer base_dtype: fp32)"
        )
    elif answers.get("hardware") == "mps" and settings.get("mixed_precision") in (None, "no"):
        # The Mac trains in fp32 (mixed_precision: no); Transformers 5 loads a bf16 checkpoint in bf16
        # unless told, which the estimate's 4 bytes per weight would not describe.
        briefs[len(needs)] = (
            "load the model in fp32, the 4 bytes per weight the estimate counts: from_pretrained(...,"
            " dtype=torch.float32)"
        )
        needs.append(
            "load the model in fp32 for this estimate to hold (from_pretrained(..., dtype=torch.float32);"
            " torch_dtype= before Transformers 4.56), the 4 bytes per weight it counts: Transformers 5 loads a"
            " bf16 checkpoint in bf16 unless told. Loading in bf16 instead, where your Mac runs it (the"
            " Precision paragraph, in --explain and at the head of the config, says how to test), halves the weights'"
            " memory"
            + (
                ": answer base_dtype: bf16 and the estimate counts it"
                if answers.get("method") == "lora"
                else ": a choice of yours that this estimate does not count"
            )
        )
    micro, tokens = answers.get("micro_batch_size"), answers.get("sequence_length")
    if isinstance(micro, int) and isinstance(tokens, int) and dpo:
        needs.append(
            f"train {_each_device(answers.get('hardware'))} on micro-batches of {micro} pair{'s' if micro > 1 else ''}"
            f" of at most {tokens:,} tokens each"
            f" (DPOConfig(per_device_train_batch_size={micro}, max_length={tokens})), the sizes the estimate assumes;"
            " longer or larger ones need more activation memory"
        )
    elif isinstance(micro, int) and isinstance(tokens, int):
        # The Accelerate config carries no batch: the script's DataLoader and tokenizer set what the
        # activation estimate assumed.
        briefs[len(needs)] = (
            f"feed {_each_device(answers.get('hardware'))} micro-batches of {micro} sequence{'s' if micro > 1 else ''}"
            f" of at most {tokens:,} tokens: DataLoader(batch_size={micro}), the tokenizer's max_length={tokens}"
        )
        needs.append(
            f"feed {_each_device(answers.get('hardware'))} micro-batches of {micro} sequence{'s' if micro > 1 else ''}"
            f" of at most {tokens:,} tokens"
            f" (DataLoader(batch_size={micro}), and the tokenizer's max_length={tokens} with truncation=True), the"
            " sizes the estimate assumes; longer or larger ones need more activation memory"
        )
    # One note per call, so that each reads as a step of its own (a list item on screen, a
    # "Warning:" line in the header) rather than one sentence of three clauses joined by "and".
    notes: list[str] = [
        Note(f"Your training script must {need}.", f"Your training script must {briefs.get(i, need)}.")
        for i, need in enumerate(needs)
    ]
    if answers.get("gradient_checkpointing") and traits.checkpointing == "fsdp":
        # transformers' Trainer warns the same: under FSDP the model's own checkpointing adds a
        # redundant all-gather in the backward pass; FSDP's activation checkpointing replaces it.
        notes.append(
            Note(
                "Your training script must not also call model.gradient_checkpointing_enable(): the Accelerate"
                " config turns on FSDP's own activation checkpointing (fsdp_activation_checkpointing: true), and"
                " checkpointing twice gathers every layer's weights once more in the backward pass.",
                "Your training script must not also call model.gradient_checkpointing_enable(): the Accelerate"
                " config turns on FSDP's own.",
            )
        )
    return notes


def _chunked_loss_need(dpo: bool) -> str:
    """What the script calls for the chunked loss answered (chunked_loss: yes)."""
    return (
        (
            "compute DPO's log-probabilities in chunks, as answered (chunked_loss: yes), with"
            " DPOConfig(use_liger_kernel=True) (pip install liger-kernel)"
            if dpo
            else "compute the loss in chunks, as answered (chunked_loss: yes): for example Liger Kernel's"
            " apply_liger_kernel_to_llama(), or its sibling for your model, called before the model is loaded"
            " (pip install liger-kernel)"
        )
        + ". The estimate counts no output logits; a script that builds them whole needs that much more"
        " (to have it counted, answer chunked_loss: no)"
    )


def _each_device(hardware: object) -> str:
    """Who receives the micro-batches, in the words of the hardware (a Mac has one device, not GPUs)."""
    return {"mps": "the Mac", "cpu": "each process", "nvidia": "each GPU", "amd": "each GPU"}.get(
        str(hardware), "each device"
    )
