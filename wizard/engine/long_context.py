"""What a training script must do for context or sequence parallelism to take effect.

The config files only size the process mesh; splitting the sequence happens in Python:

* Accelerate's torch context parallel (FSDP2, ``parallelism_config_cp_size``): the
  ``Accelerator.maybe_context_parallel(buffers, buffer_seq_dims, no_restore_buffers)`` context
  manager must wrap every training step, recreated each step; outside it nothing is split (its
  docstring in accelerate/accelerator.py, Accelerate 1.15). It swaps torch's SDPA for ring
  attention, so the model must use SDPA with no mask or a causal one ("Context Parallel" guide,
  https://huggingface.co/docs/accelerate/concept_guides/context_parallelism). Labels must be
  shifted before the split (the model cannot shift a shard), position ids travel with the tokens
  (the guide's ``nd_parallel.py`` example passes input_ids, shift_labels, labels and
  position_ids), and torch's head-tail load balancer cuts each sequence into 2 x cp_size chunks,
  so its length must divide by that (torch/distributed/tensor/experimental/_context_parallel/
  _load_balancer.py).
* DeepSpeed sequence parallelism through Accelerate (``parallelism_config_sp_size``): Accelerate
  wraps the DataLoader prepared with the model in DeepSpeed's ``UlyssesSPDataLoaderAdapter``,
  which shards each batch and adds ``shift_labels``; the loss must be computed from them and
  averaged over the SP group (the same guide's DeepSpeed section).
* Axolotl (``context_parallel_size`` with FSDP2): Axolotl 0.21 runs it through its built-in
  ringmaster plugin (axolotl/integrations/context_parallel/README.md), which needs the
  ``ringmaster`` package and rejects eager attention; Ring/USP splits train only with a Flash
  Attention kernel, SDPA only with the pure Ulysses split, which needs the size to divide the
  KV heads and fit in one machine.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from wizard.engine.model_size import ModelShape
from wizard.engine.traits import BackendTraits

RINGMASTER_INSTALL = 'pip install "axolotl[ringmaster]"'
CP_STEP = (
    "with accelerator.maybe_context_parallel(buffers=[input_ids, shift_labels, position_ids], "
    "buffer_seq_dims=[1, 1, 1], no_restore_buffers=set(buffers))"
)


def cp_multiple(cp_size: int) -> int:
    """The multiple every context-parallel batch length must be: 2 chunks per GPU."""
    return 2 * cp_size


def padded_length(length: int, cp_size: int) -> int:
    """`length` rounded up to the context-parallel multiple (itself when it already is one)."""
    multiple = cp_multiple(cp_size)
    return -(-length // multiple) * multiple


def long_context_notes(
    answers: Mapping[str, Any],
    settings: Mapping[str, Any],
    traits: BackendTraits,
    shape: ModelShape | None,
    attention: str | None = None,
) -> list[str]:
    """What the user's script (or Axolotl install) needs for the decided CP or SP size.

    Args:
        answers: The answers (target, sequence_length, gpus_per_node).
        settings: The decided settings (cp_size, sp_size, parallel attention).
        traits: The decided backend's traits: which of them hosts context or sequence parallel.
        shape: The model's shape, for its KV-head count (Axolotl's SDPA split), when known.
        attention: Axolotl's attn_implementation, for the Axolotl path.
    """
    cp = int(settings.get("cp_size") or 1)
    sp = int(settings.get("sp_size") or 1)
    length = int(answers.get("sequence_length") or 0)
    notes: list[str] = []
    if answers.get("target") == "accelerate" and traits.device_mesh and cp > 1:
        notes.append(accelerate_cp_note(cp, length))
    elif answers.get("target") == "axolotl" and traits.device_mesh and cp > 1:
        notes.append(axolotl_cp_note(cp, attention, shape, int(answers.get("gpus_per_node") or 1)))
    if answers.get("target") == "accelerate" and traits.sequence_parallel and sp > 1:
        notes.append(
            f"DeepSpeed sequence parallelism {sp} needs your script's help: prepare the DataLoader in the "
            "same accelerator.prepare call as the model (Accelerate then wraps it in DeepSpeed's "
            'UlyssesSPDataLoaderAdapter, which shards each batch and adds batch["shift_labels"]), compute '
            "the loss from shift_labels, and average it over the SP group with a differentiable all_gather "
            "weighted by each rank's non-ignored tokens, as Accelerate's context-parallelism guide shows; "
            "SDPA attention is only correct for unpacked samples."
        )
    return notes


def accelerate_cp_note(cp: int, length: int) -> str:
    """The requirement of Accelerate's torch context parallel, with the padding multiple."""
    multiple = cp_multiple(cp)
    if length and length % multiple:
        fits = f"sequence_length {length} is not: pad it to {padded_length(length, cp)}."
    else:
        fits = f"sequence_length {length} already is." if length else "check that yours is."
    split = f"each GPU processes all {length} tokens" if length else "each GPU processes every token"
    # Short sentences, one requirement each: as one long sentence the list read as unfinished.
    return " ".join(
        (
            f"Context parallel {cp} (parallelism_config_cp_size) only takes effect inside "
            "accelerator.maybe_context_parallel.",
            f"Run each training step (forward, backward, optimizer step) in a new `{CP_STEP}` block.",
            "Pass shift_labels= (the labels shifted by one before the split, since a GPU only sees its part "
            "of the sequence) beside labels=, and position_ids = arange(length).",
            'Load the model with attn_implementation="sdpa" (no other attention is split) and no attention '
            "mask but the causal one.",
            f"Pad every batch to a multiple of {multiple} tokens (2 x cp_size): {fits}",
            f"Without all this, {split} and the memory estimate does not hold.",
            "train_snippet.py shows the step.",
        )
    )


def axolotl_cp_note(cp: int, attention: str | None, shape: ModelShape | None, gpus_per_node: int) -> str:
    """The requirement of Axolotl's ringmaster context parallel, and when SDPA cannot train."""
    note = (
        f"context_parallel_size {cp} runs through Axolotl's ringmaster context-parallel plugin: install it "
        f"with {RINGMASTER_INSTALL} (torch >= 2.13); attention must not be eager"
    )
    if attention == "flash_attention_2":
        return note + " (flash_attention_2 serves every split)."
    kv_heads = shape.kv_heads if shape is not None else None
    ulysses = (kv_heads is None or kv_heads % cp == 0) and cp <= gpus_per_node
    note += (
        f", and with {attention or 'SDPA'} only the pure Ulysses split trains (Ring and USP need a Flash "
        f"Attention kernel), which needs context_parallel_size to divide the model's KV heads and fit in "
        f"one machine"
    )
    if not ulysses:
        heads = f"{kv_heads} KV heads" if kv_heads is not None else "its KV heads"
        return note + f": {cp} does not ({heads}, {gpus_per_node} GPUs per machine), so choose another size."
    return note + "."
