"""What would change the answer: the engine re-run with one lever moved at a time."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from wizard.engine.answers import disabled_reason
from wizard.engine.batch import GLOBAL_BATCH
from wizard.engine.batch_choice import settle_batch
from wizard.engine.device import GPU_WORDS, words_for
from wizard.engine.evaluate import (
    Recommendation,
    chosen_estimate,
    default_answers,
    make_lookup,
    nvme_drive_bytes,
    offloaded_host_bytes,
    offloads_to_nvme,
    recommend,
    refresh_defaults,
    run_layout_label,
    runs_past_fit,
)
from wizard.engine.facts import GPU_HARDWARE, Inputs
from wizard.engine.json_fit import allowance_try
from wizard.engine.memory import (
    ESTIMATE_SHARE_WORDS,
    OFFLOAD_STRATEGIES,
    UNDERSHOOT,
    UNDERSHOOT_PERCENT,
    Estimate,
    memory_gib,
    sum_gib,
    to_gib,
)
from wizard.engine.speed import larger_micro, largest_micro_batch, rate_text, with_nvme
from wizard.engine.tree import Tree
from wizard.errors import WizardError

# How the levers that compute the loss in chunks begin (their labels below): a close call's first fix, which the
# summary names.
CHUNKED_CHANGES = ("the loss computed in chunks", "Cut Cross Entropy")


@dataclass(frozen=True)
class WhatIf:
    """One lever and where it leads."""

    change: str
    backend: str | None
    title: str
    gib_per_gpu: float | None
    # Host RAM per machine the new layout needs when it offloads (None when nothing is offloaded),
    # and whether the run said how much it has (cpu_memory_gb): an offload lever is only half told
    # without the RAM it takes.
    host_gib_per_machine: float | None = None
    host_checked: bool = False
    per: str = GPU_WORDS.per  # "per GPU", or "on the Mac" on Apple silicon (wizard.engine.device)
    # The new layout's throughput and the current one's, tokens per second ("480-970"), where the
    # card has a band: a lever that saves memory may cost time (tokens per second, since a lever
    # may change the tokens in a step), and the reader should see both.
    step_band: str | None = None
    now_band: str | None = None
    # GiB on the NVMe drive per machine, for a layout that offloads there.
    drive_gib: float | None = None
    # A larger micro-batch that fits the new layout and its tokens per second, where that lever is
    # what the layout's speed turns on (an NVMe drive reads every weight once per micro-batch).
    wider: str | None = None
    # The moment's peak (GiB) where the layout fits only tightly: the loss's fp32 temporaries take
    # it past the usable line at the start of the backward pass (None where it does not).
    tight_peak: float | None = None
    # Tight, and the real peak may pass the card (Estimate.close_call); the card's memory then, in GiB.
    close_call: bool = False
    card_gib: str = ""
    # The micro-batch the wizard would pick there, where it is not the run's own (`change` says it too).
    micro_batch: int | None = None
    # The memory-table layout the lever leads to ("zero2_offload_optimizer"); None for a refusal.
    strategy: str | None = None
    # That layout's row name as the memory table gives it ("DDP + layer offload"); None for a refusal.
    layout: str | None = None

    @property
    def size(self) -> str:
        """The figures in words for the lever's line: " (about 8.9 GiB per GPU and ... host RAM ...)"."""
        if self.gib_per_gpu is None:
            return ""
        step = ""
        if self.step_band and self.step_band == self.now_band:
            # The same band: the lever buys memory, not speed (said, or the figures read as a typo).
            step = f"; about the same {self.step_band} tokens/s as now"
        elif self.step_band and self.now_band:
            step = f"; about {self.step_band} tokens/s against {self.now_band} now"
        elif self.step_band:
            step = f"; about {self.step_band} tokens/s"
        if step and self.wider:
            step += f", {self.wider}"
        drive = f", {self.drive_gib} GiB on the drive" if self.drive_gib else ""
        if self.tight_peak is not None and self.close_call:
            drive += (
                f"; a close call: about {self.tight_peak} GiB for a moment as the backward pass starts, and at this"
                f" long context the real peak may be up to {UNDERSHOOT_PERCENT} higher (the estimate came to"
                f" only {ESTIMATE_SHARE_WORDS} of the real peak there; x{UNDERSHOOT}), about"
                f" {round(self.tight_peak * UNDERSHOOT, 1)} GiB, more than the"
                f" {self.card_gib} GiB of the GPU"
            )
        elif self.tight_peak is not None:
            drive += (
                f"; tight: about {self.tight_peak} GiB for a moment as the backward pass starts, past the usable"
                " line but within the whole memory"
            )
        if self.host_gib_per_machine is None:
            return f" (about {self.gib_per_gpu} GiB {self.per}{drive}{step})"
        # Whether host RAM was checked is said once, under the list (`host_unchecked`), not after every lever.
        return (
            f" (about {self.gib_per_gpu} GiB {self.per} and {self.host_gib_per_machine} GiB of host RAM per machine"
            f"{drive}{step})"
        )

    @property
    def short_change(self) -> str:
        """`change` for a table's cell: without the long brackets that only explain it (the long form keeps them)."""
        return " ".join(_LONG_BRACKETS.sub("", self.change).split())

    @property
    def host_unchecked(self) -> bool:
        """Whether this lever offloads to host RAM that was not checked (cpu_memory_gb not given)."""
        return self.gib_per_gpu is not None and self.host_gib_per_machine is not None and not self.host_checked


# A bracket of more than a few words: an explanation of the change, not the key it sets ("(offload: auto)").
_LONG_BRACKETS = re.compile(r" \([^()]{48,}\)")

Lever = tuple[str, Callable[[Mapping[str, Any]], dict[str, Any] | None]]


def _plain_value(value: Any) -> str:
    """An answer as the user wrote it in a label: yes/no for a boolean."""
    return ("yes" if value else "no") if isinstance(value, bool) else str(value)


NVME = "offload: nvme (a directory on a local NVMe drive as nvme_path)"
NVME_STAND_IN = "/local_nvme"

LEVERS: tuple[Lever, ...] = (
    # Keep or switch: the wizard's own pick for the same run, where a brought JSON decided (rule B2).
    # None removes the answer (see what_if).
    (
        "your DeepSpeed JSON left out (no deepspeed_config)",
        lambda a: {"deepspeed_config": None} if a.get("deepspeed_config") is not None else None,
    ),
    # DPO's reference log-probs computed before training: the same loss without the frozen copy.
    # Accelerate only: Axolotl 0.21 loads the copy for a full fine-tune either way.
    (
        "DPO's reference log-probs precomputed (no reference copy while training)",
        lambda a: (
            {"reference_log_probs": "precomputed"}
            if a.get("objective") == "dpo"
            and a.get("method") == "full"
            and a.get("target", "accelerate") == "accelerate"
            and a.get("reference_log_probs", "live") == "live"
            else None
        ),
    ),
    ("LoRA instead of a full fine-tune", lambda a: {"method": "lora"} if a.get("method") == "full" else None),
    ("QLoRA instead of LoRA", lambda a: {"method": "qlora"} if a.get("method") == "lora" else None),
    # More GPUs where machines have room for them (8 is the most a GPU server commonly holds),
    # else one more machine of the same kind.
    (
        "twice as many GPUs per machine",
        lambda a: {"gpus_per_node": a["gpus_per_node"] * 2} if 0 < a.get("gpus_per_node", 0) <= 4 else None,
    ),
    (
        "one more machine",
        lambda a: (
            {"num_nodes": a.get("num_nodes", 1) + 1}
            if a.get("gpus_per_node", 0) >= 8 and a.get("hardware") in GPU_HARDWARE
            else None
        ),
    ),
    # bitsandbytes' 8-bit AdamW keeps Adam's two moments in a byte each: beside full copies (one
    # GPU, or DDP) it can let a full fine-tune fit without offload or sharding (sharded and
    # offloaded layouts run AdamW, memory.run_optimizer, where the lever then changes nothing).
    (
        "8-bit AdamW instead of AdamW",
        lambda a: {"optimizer": "adamw_8bit"} if a.get("optimizer", "adamw") == "adamw" else None,
    ),
    # A Mac's LoRA base loaded in bf16: half the weights' and activations' memory, where the Mac runs bf16.
    (
        "the base in bf16 (base_dtype: bf16)",
        lambda a: (
            {"base_dtype": "bf16"}
            if a.get("hardware") == "mps" and a.get("method") == "lora" and a.get("base_dtype", "fp32") == "fp32"
            else None
        ),
    ),
    # A chunked loss never builds the output logits nor the loss's fp32 temporaries: Axolotl's plugin,
    # or the script's own code under Accelerate (said where the answer is asked).
    (
        "Cut Cross Entropy (cut_cross_entropy: yes)",
        lambda a: (
            {"cut_cross_entropy": True}
            if a.get("target") == "axolotl"
            and a.get("hardware") in GPU_HARDWARE
            and a.get("cut_cross_entropy") is not True
            else None
        ),
    ),
    (
        "the loss computed in chunks by your script (chunked_loss: yes)",
        lambda a: (
            {"chunked_loss": True}
            if a.get("target", "accelerate") == "accelerate"
            and a.get("hardware") in GPU_HARDWARE
            and a.get("chunked_loss") is not True
            else None
        ),
    ),
    ("CPU offload allowed (offload: auto)", lambda a: {"offload": "auto"} if a.get("offload") == "none" else None),
    # Only for a refusal (see what_if): one GPU of an Axolotl LoRA/QLoRA run can keep its frozen
    # layers in host RAM once, where sharding over several GPUs offloads a copy per machine.
    (
        "one GPU",
        lambda a: (
            {"gpus_per_node": 1}
            if a.get("target") == "axolotl"
            and a.get("method") in ("lora", "qlora")
            and a.get("gpus_per_node", 1) > 1
            and a.get("num_nodes", 1) == 1
            else None
        ),
    ),
    # Only for a refusal (see what_if): where host RAM is what ran out, a local NVMe drive holds the
    # states instead. The directory is a stand-in; the lever's line says to give the real one.
    (
        NVME,
        lambda a: (
            {"offload": "nvme", "nvme_path": a.get("nvme_path") or NVME_STAND_IN}
            if a.get("offload", "auto") in ("auto", "cpu") and a.get("deepspeed_config") is None
            else None
        ),
    ),
    (
        "gradient checkpointing on",
        lambda a: {"gradient_checkpointing": True} if a.get("gradient_checkpointing") is False else None,
    ),
    # Axolotl's layer offloading moves only frozen layers; offload: none does not rule it out.
    (
        "layer_offloading: true",
        lambda a: (
            {"layer_offloading": True}
            if a.get("target") == "axolotl"
            and a.get("method") in ("lora", "qlora")
            and a.get("layer_offloading") is not True
            else None
        ),
    ),
    # Layer offloading asked for where a full copy fits: the plan without it, decided again (its
    # micro-batch re-picked), so the figures a user reads for "false" are the run they would get.
    (
        "layer_offloading: false",
        lambda a: {"layer_offloading": False} if a.get("layer_offloading") is True else None,
    ),
    # A micro-batch above 1 is the first memory lever: gradient accumulation keeps the batch.
    (
        "micro_batch_size 1",
        lambda a: {"micro_batch_size": 1} if int(a.get("micro_batch_size") or 1) > 1 else None,
    ),
    (
        "half the sequence length",
        lambda a: {"sequence_length": a["sequence_length"] // 2} if a.get("sequence_length", 0) >= 1024 else None,
    ),
)


def what_if(
    tree: Tree,
    answers: Mapping[str, Any],
    inputs: Inputs,
    current: Recommendation,
    given: frozenset[str] | None = None,
    set_aside: Mapping[str, Any] | None = None,
) -> list[WhatIf]:
    """Each lever that applies and changes the decision (backend or strategy), with its outcome.

    `given` names the answers the user gave (the rest are defaults); None means all of them.
    `set_aside`: answers the user gave that do not apply to the run as it is (a Mac's base_dtype
    beside a full fine-tune); a lever that makes one apply keeps it, as the user gave it.
    A default computed from the other answers is recomputed after the lever's change, so the
    lever's outcome is the one the wizard would give for the changed answers.
    """
    results = []
    keep = frozenset(answers) if given is None else given
    aside = {key: value for key, value in (set_aside or {}).items() if key not in answers}
    levers = LEVERS
    if (fewest := _fewest_gpus_without_offload(tree, answers, inputs, current, keep)) is not None:
        levers = (*levers, (FEWEST, lambda a: fewest))
    if (ram := _enough_host_ram(tree, answers, inputs, current, keep)) is not None:
        levers = (*levers, (MORE_RAM, lambda a: ram))
    chosen = chosen_estimate(current)
    current_close = chosen is not None and chosen.close_call
    if current_close and answers.get("offload", "auto") == "auto" and answers.get("deepspeed_config") is None:
        # A close call is kept without offload; offload asked for by name is the safe way out.
        levers = (*levers, (OFFLOAD_CPU, lambda a: {"offload": "cpu"}))
    for label, lever in levers:
        change = lever(answers)
        if change is None or (label == "one GPU" and not (current.refused or _host_of(current))):
            continue  # fewer GPUs: a lever only where the GPUs given lead nowhere or lean on host RAM
        if label == NVME and not current.refused:
            continue  # slower than the layout that fits; the lever for a run that cannot run at all
        # None in a change takes the answer out (the brought JSON): only that lever sets one.
        dropped = {key for key, value in change.items() if value is None}
        merged = {key: value for key, value in {**aside, **answers, **change}.items() if key not in dropped}
        lever_inputs = replace(inputs, deepspeed=None, deepspeed_data=None) if "deepspeed_config" in dropped else inputs
        if not dropped:
            # refresh_defaults keeps a set-aside answer only where the change makes its question apply.
            changed = refresh_defaults(tree, merged, inputs, keep | frozenset(change) | frozenset(aside))
        else:
            # Without the JSON, questions it had kept from being asked apply again (offload): the run
            # the user's own answers make, every other answer at its default, as an answers file gives.
            users = {k: v for k, v in merged.items() if k in keep or k in aside}
            changed = default_answers(tree, users, lever_inputs)[0]
        try:
            # The batch settles as the run's own does: a given global batch gets the largest
            # micro-batch that fits the lever's layout, not the default of one. (A default global
            # batch is one of the defaults refresh_defaults has just worked out again.)
            if GLOBAL_BATCH in keep:
                changed = settle_batch(tree, changed, lever_inputs, (keep | frozenset(change)) - dropped)
            rec = recommend(tree, changed, lever_inputs)
        except WizardError:
            continue
        if _refused_choice(tree, change, changed, rec):
            continue  # the wizard would not take this answer here (QLoRA on Apple silicon)
        same = (rec.backend, rec.settings.get("strategy")) == (current.backend, current.settings.get("strategy"))
        strategy = rec.settings.get("strategy")
        estimate = rec.facts.estimates.get(str(strategy)) if strategy else None
        held = current.facts.estimates.get(str(strategy)) if same and current.facts.estimates else None
        # A brought JSON run as written past the usable memory: a change that makes it fit is a lever.
        now_fits = same and held is not None and not held.fits and estimate is not None and estimate.fits
        # A close call the change takes away: the same layout, with the room the run lacked.
        now_safe = current_close and same and estimate is not None and estimate.fits and not estimate.close_call
        if same and not now_fits and not now_safe and not _buys_speed(change, rec, current):
            continue
        if label == NVME and estimate is not None and not estimate.fits:
            continue  # the drive holds the states, but the GPU would still not hold the rest: no way out
        if not rec.refused and estimate is not None and estimate.host_fits is False and not offloads_to_nvme(rec):
            continue  # a brought JSON run as written, still short of host RAM: no way out either
        title = "no backend fits" if rec.refused else tree.backends[str(rec.backend)].title_on(rec.hardware_id)
        if rec.refused and "deepspeed_config" in change:
            # The wizard's own answer is a refusal: its levers are in that run's output, not here.
            tried = allowance_try(
                str(current.settings.get("strategy")), current.facts.estimates, merged.get("cpu_memory_gb")
            )
            if tried is None:
                title += " either (run without deepspeed_config: the refusal lists what would make the run fit)"
            else:
                # The same offload the JSON line calls worth a try: the refusal counts the allowance in full.
                title += (
                    f" either, since it counts DeepSpeed's 1.5x allowance for pinned buffers in full: {tried} is"
                    " short of host RAM by that allowance alone, the same offload the Your JSON line calls worth a"
                    " try (the refusal, run without deepspeed_config, lists what else would make the run fit)"
                )
        # A lever that keeps the layout says so and why it is listed, or it reads as the answer it already is:
        # it fits then, it is no longer a close call, or (more GPUs) the layout stays and the throughput grows.
        kept = (
            ", the same layout as now, then within the usable memory"
            if now_fits
            else ", the same layout as now, no longer a close call"
            if now_safe
            else ", the same layout as now, faster"
            if same
            else ""
        )
        # The ZeRO stage, or the offload, is what tells two layouts of one backend apart in a title.
        if rec.traits.zero_stages and rec.settings.get("zero_stage") is not None:
            offload = rec.settings.get("offload_optimizer")
            where = {"cpu": ", CPU offload", "nvme": ", NVMe offload"}.get(str(offload), "")
            title += f" (ZeRO-{rec.settings['zero_stage']}{where}){kept}"
        elif rec.traits.offload == "fsdp" and rec.settings.get("offload_param") == "cpu":
            title += f" with CPU offload{kept}"
        elif str(strategy).startswith("hsdp"):
            title += f" as HSDP (sharded inside each machine, replicated across machines){kept}"
        elif kept:
            title += kept
        elif rec.backend == current.backend and "cpu" in (
            current.settings.get("offload_param"),
            current.settings.get("offload_optimizer"),
        ):
            title += " without offload"  # the same backend: what changes is the offload
        elif strategy == "ddp_layer_offload":
            # Named, or "one GPU" beside "2 GPUs" reads as the same layout on less hardware.
            title += ", with layer offloading (the frozen layers in CPU RAM"
            if change.get("gpus_per_node", 0) < answers["gpus_per_node"] and "gpus_per_node" in change:
                # Fewer GPUs fitting where more did not surprises: host RAM is what the GPUs share,
                # and every process of a data-parallel run keeps its own copy of the frozen layers.
                count = answers["gpus_per_node"]
                title += f"; on {count} GPUs each process would keep a copy of its own, {count} times the host RAM"
            title += ")"
        # An NVMe layout fills host RAM with its swap buffers only, not with the states on the drive.
        host_bytes = offloaded_host_bytes(rec) if estimate is not None else None
        host = to_gib(host_bytes) if host_bytes else None
        if label == "one GPU" and not current.refused and not (host is not None and host < _host_of(current)):
            continue  # slower on fewer GPUs; worth naming only for the host RAM it saves
        if "gpus_per_node" in change:  # the count, not "twice as many": the reader need not work it out
            count = change["gpus_per_node"]
            fewest_note = ""
            if label == FEWEST:
                fewest_note = ", the fewest that fit" if current.refused else ", the fewest that need no offload"
            label = (
                f"{count} GPU{'s' if count > 1 else ''} per machine instead of {answers['gpus_per_node']}{fewest_note}"
            )
        if "num_nodes" in change:
            label = f"{change['num_nodes']} machines instead of {answers.get('num_nodes', 1)}"
        if label == MORE_RAM:
            label = (
                f"{change['cpu_memory_gb']:,} GiB of host RAM per machine instead of {answers['cpu_memory_gb']:,}"
                " (the first common size that is enough, as free -g's total: a machine sold with that many GB shows"
                " a little less there)"
            )
        # An answer of the user's that did not apply to the run as it is, and applies after the change (a Mac's
        # base_dtype beside LoRA): the lever's figures rest on it, so it is named.
        revived = [f"{key}: {_plain_value(value)}" for key, value in aside.items() if changed.get(key) == value]
        if revived:
            label += f" (with your {', '.join(revived)})"
        micro_now, micro_then = answers.get("micro_batch_size"), changed.get("micro_batch_size")
        micro_moved = GLOBAL_BATCH in keep and not rec.refused and "micro_batch_size" not in change
        micro_moved = micro_moved and micro_then != micro_now
        if micro_moved:
            # The lever's figures are for the micro-batch the wizard would pick there: said, or they
            # read as the same run's and disagree with notes made at this run's micro-batch.
            label += (
                f"{MICRO_AT} {micro_then} (the largest that fits with room there)"
                if micro_then != 1
                else f"{MICRO_AT} 1 (the smallest; no larger one fits with room there)"
            )
        plan = rec.facts.batch
        if GLOBAL_BATCH in keep and plan is not None and plan.problem is not None:
            # The user's global batch does not divide over the lever's GPUs: the run refuses it
            # (exit 2), so the lever says what would have to change with it.
            label += f", with another global_batch_size ({plan.global_batch} cannot be split there: {plan.problem})"
        results.append(
            WhatIf(
                label,
                rec.backend,
                title,
                to_gib(estimate.total) if estimate else None,
                host,
                bool(rec.facts.get("host_memory_known", False)),
                words_for(estimate.device).per if estimate else GPU_WORDS.per,
                rate_text(step) if (step := rec.facts.speeds.get(str(strategy))) else None,
                # No "against ... now" where the current run does not fit (a brought JSON run as written).
                rate_text(now)
                if (now := current.facts.speeds.get(str(current.settings.get("strategy"))))
                and not runs_past_fit(current)
                else None,
                to_gib(nvme_drive_bytes(rec)) if estimate is not None and offloads_to_nvme(rec) else None,
                _wider_nvme(rec, estimate) if estimate is not None and offloads_to_nvme(rec) else None,
                sum_gib(estimate.total, estimate.transient)
                if estimate is not None and (estimate.tight or estimate.close_call)
                else None,
                estimate is not None and estimate.close_call,
                memory_gib(estimate.gpu_memory) if estimate is not None else "",
                int(micro_then) if micro_moved and isinstance(micro_then, int) else None,
                None if rec.refused or strategy is None else str(strategy),
                None if rec.refused or strategy is None else run_layout_label(rec, str(strategy)),
            )
        )
    return results


MORE_RAM = "more host RAM"
# How a lever's line names the micro-batch the wizard would pick there (`WhatIf.micro_batch`).
MICRO_AT = ", at micro_batch_size"
OFFLOAD_CPU = "CPU offload (offload: cpu)"


# Host RAM sizes machines are commonly built with (GB), desktops to servers, tried in order for the
# least that lets a refused run offload to the CPU: set beside the NVMe lever, the two speeds can be
# compared.
HOST_RAM_SIZES = (16, 32, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096)


def _enough_host_ram(
    tree: Tree, answers: Mapping[str, Any], inputs: Inputs, current: Recommendation, keep: frozenset[str]
) -> dict[str, Any] | None:
    """For a run refused for want of host RAM: the least common size that lets it run (None otherwise)."""
    have = answers.get("cpu_memory_gb")
    if not current.refused or not isinstance(have, (int, float)) or answers.get("offload", "auto") == "none":
        return None
    sizes = [size for size in HOST_RAM_SIZES if size > have]
    size = _first_value(tree, answers, inputs, keep, "cpu_memory_gb", sizes, lambda rec: not rec.refused)
    return None if size is None else {"cpu_memory_gb": size}


def _first_value(
    tree: Tree,
    answers: Mapping[str, Any],
    inputs: Inputs,
    keep: frozenset[str],
    key: str,
    values: Sequence[Any],
    accept: Callable[[Recommendation], bool],
) -> Any:
    """The first of `values` for answer `key` whose decision `accept` takes; None if none, or on an error."""
    for value in values:
        change = {key: value}
        changed = refresh_defaults(tree, {**answers, **change}, inputs, keep | frozenset(change))
        try:
            rec = recommend(tree, changed, inputs)
        except WizardError:
            return None
        if accept(rec):
            return value
    return None


def _wider_nvme(rec: Recommendation, estimate: Estimate) -> str | None:
    """The NVMe layout's own lever, a larger micro-batch where one fits, as "or about X with micro_batch_size N"."""
    workload, links = rec.facts.workload, rec.facts.links
    step = rec.facts.speeds.get(estimate.strategy)
    if workload is None or links is None or step is None:
        return None
    roomier = largest_micro_batch(workload, estimate, check_host=False)
    # A global batch the user gave stays: the larger micro-batch then takes fewer accumulation steps.
    keep = rec.facts.keeps_global_batch
    larger = larger_micro(workload, step, links, roomier, keep)
    if larger is None:
        return None
    bigger, wider, words = larger
    return f"or about {rate_text(with_nvme(wider, bigger))} with micro_batch_size {bigger.micro_batch_size}" + words


FEWEST = "the fewest GPUs without offload"
# GPU counts a machine commonly holds, tried in order for the fewest that needs no offload.
GPU_COUNTS = (2, 4, 8)


def _fewest_gpus_without_offload(
    tree: Tree, answers: Mapping[str, Any], inputs: Inputs, current: Recommendation, keep: frozenset[str]
) -> dict[str, Any] | None:
    """For a one-machine run that offloads or is refused: the fewest GPUs per machine that fit without offload.

    A one-GPU offload run's question is what more hardware buys; doubling the GPUs may still
    offload, so the count at which offload stops is worth its own line (for a refusal: the count
    at which the job runs at all, with offload if it must). None where offload was asked for
    (offload: cpu keeps it at any count), nothing up to 8 GPUs helps, or doubling already gets
    there (the "twice as many" lever says so).
    """
    offloads = current.settings.get("strategy") in OFFLOAD_STRATEGIES
    if not (offloads or current.refused) or answers.get("offload", "auto") == "cpu":
        return None
    if answers.get("layer_offloading") is True and not current.refused:
        return None  # layer offloading asked for stays at any GPU count: no count "needs no offload"
    if answers.get("num_nodes", 1) != 1 or answers.get("hardware") not in GPU_HARDWARE:
        return None
    now = answers.get("gpus_per_node")
    if not isinstance(now, int):
        return None
    counts = [count for count in GPU_COUNTS if count > now]
    count = _first_value(
        tree,
        answers,
        inputs,
        keep,
        "gpus_per_node",
        counts,
        lambda rec: not (rec.refused or (offloads and rec.settings.get("strategy") in OFFLOAD_STRATEGIES)),
    )
    return None if count is None or count == now * 2 else {"gpus_per_node": count}


def _buys_speed(change: Mapping[str, Any], rec: Recommendation, current: Recommendation) -> bool:
    """More GPUs that keep an offload layout but raise its tokens per second by half or more.

    The question a one-GPU offload run leaves open is what a second GPU buys: still offload, and
    how much faster. Only for GPU counts, and only where both runs have a step-time band.
    """
    if "gpus_per_node" not in change and "num_nodes" not in change:
        return False
    if current.settings.get("strategy") not in OFFLOAD_STRATEGIES:
        return False
    new, now = (
        rec.facts.speeds.get(str(rec.settings.get("strategy"))),
        current.facts.speeds.get(str(current.settings.get("strategy"))),
    )
    if new is None or now is None:
        return False
    return min(new.tokens_per_second) >= 1.5 * min(now.tokens_per_second)


def _host_of(rec: Recommendation) -> float:
    """Host RAM per machine (GiB) the decided layout offloads into; 0 when it offloads nothing."""
    held = offloaded_host_bytes(rec) if rec.facts.estimates else None
    return to_gib(held) if held else 0.0


def _refused_choice(tree: Tree, change: Mapping[str, Any], answers: Mapping[str, Any], rec: Recommendation) -> bool:
    """Whether a lever sets a choice that its question disables for these answers.

    A lever must be a change the user could make: an answer the prompt would refuse is no lever.
    """
    lookup = make_lookup(answers, rec.facts)
    for key, value in change.items():
        question = tree.question(key)
        if question is not None and question.type == "choice" and disabled_reason(question, str(value), lookup):
            return True
    return False
