"""The decision in a few plain sentences, printed above the summary's panel.

The panel's lines carry every figure with its conditions; a newcomer asked first for what they
could repeat to a colleague: what to use, what the run needs against what the wizard lets it
use, what follows from that, and the one thing to do before launching. Every figure here is one
the panel or the memory table prints, so the short answer and the long one agree.
"""

from __future__ import annotations

import re

from wizard.app import Result
from wizard.engine.advice import chunked_loss_run, overlap_buffer_bytes
from wizard.engine.deepspeed_json import SUGGESTED_JSON
from wizard.engine.device import MAC_DEVICE, words_for
from wizard.engine.evaluate import Recommendation, at_micro_one, chosen_estimate, nvme_drive_bytes, offloads_to_nvme
from wizard.engine.facts import LITTLE_TO_SPARE, near_line_share
from wizard.engine.json_fit import past_line_with_buffers, suggested_lever
from wizard.engine.memory import GIB, OFFLOAD_STRATEGIES, Estimate, memory_gib, sum_gib, to_gib
from wizard.engine.tree import Tree
from wizard.engine.what_if import CHUNKED_CHANGES, MICRO_AT

# Each layout's name in plain words, and what it does where the memory sentence after it does not say it.
_PLAIN = {
    "ddp": ("DDP", "each GPU trains a full copy of the run on its own slice of the data"),
    "ddp_layer_offload": ("DDP with layer offloading", ""),
    "zero1": ("DeepSpeed ZeRO-1", "the GPUs share the optimizer state"),
    "zero2": ("DeepSpeed ZeRO-2", "the GPUs share the optimizer state and the gradients"),
    # DeepSpeed's offload_optimizer keeps the gradients in host RAM beside the optimizer state.
    "zero2_offload_optimizer": ("DeepSpeed ZeRO-2 with the optimizer state and gradients in host RAM", ""),
    "zero3": ("DeepSpeed ZeRO-3", "the GPUs share the whole training state"),
    "zero3_offload_optimizer": ("DeepSpeed ZeRO-3 with the optimizer state and gradients in host RAM", ""),
    "zero3_offload_all": ("DeepSpeed ZeRO-3 with the weights, gradients and optimizer state in host RAM", ""),
    "fsdp2": ("FSDP2", "the GPUs share the whole training state"),
    "fsdp2_offload": ("FSDP2 with its CPU offload", ""),
    "fsdp2_nd": ("FSDP2 with tensor or context parallelism", "the GPUs share the training state and each layer's work"),
    "hsdp": ("HSDP", "each machine's GPUs share the training state, and each machine holds a copy of it"),
    "hsdp_offload": ("HSDP with its CPU offload", ""),
    "megatron": ("Megatron-LM", "the model itself is split over the GPUs by tensor and pipeline parallelism"),
}
_ONE_GPU = {"ddp": "one GPU with no distributed backend", "ddp_layer_offload": "one GPU with layer offloading"}


def in_short(tree: Tree, result: Result) -> list[str]:
    """Two to four short sentences: the decision, the memory behind it, and a risk or a fix where there is one.

    Empty where the run has no memory estimate (CPU and TPU runs): the panel's Why is short there.
    """
    rec = result.recommendation
    if rec.refused:
        return _refusal(result)
    est = chosen_estimate(rec)
    strategy = str(rec.settings.get("strategy"))
    if est is None:
        return []
    processes = int(rec.settings.get("num_processes") or 1)
    machines = int(rec.settings.get("num_machines") or 1)
    brought = result.session.answers.get("deepspeed_config") is not None
    said = [_use(tree, result, est, strategy, processes, machines, brought=brought)]
    said += _memory(
        rec,
        est,
        strategy,
        processes,
        machines,
        brought=brought,
        asked=_asked(result, strategy),
        drive=to_gib(nvme_drive_bytes(rec)) if offloads_to_nvme(rec) else None,
    )
    said += _risk(result, est, processes, brought=brought)
    return said


def _use(
    tree: Tree, result: Result, est: Estimate, strategy: str, processes: int, machines: int, *, brought: bool
) -> str:
    """What to use, in plain words, on how many GPUs and machines, and what it does."""
    rec = result.recommendation
    if est.device == MAC_DEVICE:
        return "Use the Mac's own chip through PyTorch's MPS, with no distributed backend: a Mac has one device."
    where = "" if processes == 1 else f" on {processes} GPUs" + (f" in {machines} machines" if machines > 1 else "")
    if rec.hardware_id not in ("nvidia", "amd") or strategy not in _PLAIN:
        # Other accelerators run one layout each, which their backend's own title names.
        title = tree.backends[str(rec.backend)].title_on(rec.hardware_id)
        name, does = f"{title[:1].lower()}{title[1:]}", ""
    else:
        name, does = _PLAIN[strategy]
    if strategy == "fsdp2_nd" and est.title and (split := _nd_words(est.title)):
        name, does = "FSDP2", f"the GPUs share the training state, with {split}"
    if processes == 1 and strategy in _PLAIN and rec.hardware_id in ("nvidia", "amd"):
        name, does = _ONE_GPU.get(strategy, f"{name} on the one GPU"), ""
    if offloads_to_nvme(rec):
        name = name.replace("in host RAM", "on an NVMe drive")
    if " on " in name and where:
        where = f",{where}"  # "on an NVMe drive, on 2 GPUs"
    if not est.fits and not brought:
        return f"Nothing fits by the estimate; the closest is {name}{where}."
    # The wizard's own suggested edit, brought back, is not the user's JSON (the panel's "This JSON" line).
    whose = "this" if rec.facts.get("ds_suggested") else "your"
    if brought and est.fits and past_line_with_buffers(est, overlap_buffer_bytes(strategy, rec.facts, brought=True)):
        return f"Keep {whose} DeepSpeed JSON's layout: {name}{where}."
    if brought and est.fits and est.host_fits is False:
        return f"Try {whose} DeepSpeed JSON as written, watching the host RAM: {name}{where}."
    if brought:
        return (
            f"Keep {whose} DeepSpeed JSON: {name}{where}."
            if est.fits
            else f"{whose.capitalize()} DeepSpeed JSON sets up {name}{where}."
        )
    if est.close_call_likely:
        # The plan is kept with a fix to make first: the lead says so, or "Use" reads as "run it as it is".
        if (fix := _close_call_fix(result)) is not None:
            # The fix named where the lead says there is one; how to make it is the paragraph's last sentence.
            return f"Use {name}{where} after one fix, {_change(fix)}: as configured, it would likely run out of memory."
        return f"Use {name}{where}, but not as configured: as it is, it would likely run out of memory (see Risk)."
    return f"Use {name}{where}" + (f": {does}." if does else ".")


# The parallel sizes an FSDP2 row's title names ("FSDP2 + CP 4"), in words.
_ND = {
    "TP": "each layer's weights split over {n} of them (tensor parallelism)",
    "CP": "each sequence split over {n} of them (context parallelism)",
    "EP": "the experts split over {n} of them (expert parallelism)",
}


def _nd_words(title: str) -> str:
    """What "FSDP2 + CP 4" splits: "each sequence split over 4 of them (context parallelism)"; "" if nothing."""
    parts = [
        _ND[kind].format(n=size)
        for kind, size in (part.split() for part in title.split(" + ")[1:] if len(part.split()) == 2)
        if kind in _ND
    ]
    return " and ".join(parts)


def _asked(result: Result, strategy: str) -> str | None:
    """The answer that asked for this layout's offload ("offload: cpu"), where one did; else None."""
    answers, given = result.session.answers, result.session.given
    if strategy == "ddp_layer_offload" and answers.get("layer_offloading") is True and "layer_offloading" in given:
        return "layer_offloading: yes"
    if strategy in OFFLOAD_STRATEGIES and answers.get("offload") in ("cpu", "nvme") and "offload" in given:
        return f"offload: {answers['offload']}"
    return None


def _limit(est: Estimate) -> str:
    """The usable line and where it comes from, in a few words."""
    usable, whole = to_gib(est.budget), memory_gib(est.gpu_memory)
    if est.device == MAC_DEVICE:
        return f"the {usable} GiB the wizard plans with, the share of the Mac's {whole} GiB macOS recommends for Metal"
    return f"the {usable} GiB the wizard plans with ({est.share:.0%} of the GPU's {whole} GiB; it keeps the rest spare)"


def _per(est: Estimate, processes: int) -> str:
    """After a figure: "per GPU" for several GPUs, "on the GPU" for one, "on the Mac"."""
    return "on the GPU" if processes == 1 and est.device != MAC_DEVICE else words_for(est.device).per


def _whole(processes: int) -> str:
    """How the run would hold the memory without sharding or offload, before its figure."""
    if processes == 1:
        return "With everything on the GPU, it would need"
    return "With a whole copy of the model and its training state on each GPU, it would need"


def _memory(
    rec: Recommendation,
    est: Estimate,
    strategy: str,
    processes: int,
    machines: int,
    *,
    brought: bool,
    asked: str | None,
    drive: float | None,
) -> list[str]:
    """What the run needs against the usable line, and what that leads to."""
    estimates = rec.facts.estimates
    per = _per(est, processes)
    total = to_gib(est.total)
    if not est.fits:
        beyond = (
            f"more than the GPU's {memory_gib(est.gpu_memory)} GiB itself"
            if est.past_device
            else f"more than {_limit(est)}"
        )
        return [f"It needs about {total} GiB {per}, {beyond}."]
    host = f"{to_gib(est.host_per_node)} GiB of host RAM" + (" per machine" if machines > 1 else "")
    if drive is not None:
        host = f"{drive} GiB on the NVMe drive" + (" per machine" if machines > 1 else "")
    if asked is not None:
        # The offload was asked for, not needed: said as the answer that chose it.
        return [f"This run asks for it ({asked}): it needs about {total} GiB {per} and {host}."]
    one = at_micro_one(rec.facts)
    full = one.get("ddp", estimates.get("ddp"))
    if brought or strategy == "ddp" or full is None or full.fits:
        # Nothing was moved or split for memory (or a brought JSON chose it): the need and the line say it; the
        # moment as the backward pass starts too, where it is worth naming and stays within the line.
        if est.transient >= est.budget // 20 and est.peak <= est.budget:
            peak = sum_gib(est.total, est.transient)
            return [
                f"It needs about {total} GiB {per}, {peak} GiB for a moment as the backward pass starts, within"
                f" {_limit(est)}."
            ]
        # Past the line for that moment: the sentence after this one gives it (a tight plan, or a close call).
        through = " through the step" if est.peak > est.budget else ""
        return [f"It needs about {total} GiB {per}{through}, within {_limit(est)}."]
    at = " at one sequence per micro-batch" if one else ""
    # At a larger micro-batch, what the chosen layout holds is at that size: said, since the reason was at 1.
    room = f", at micro-batches of {rec.facts.workload.micro_batch_size}" if one and rec.facts.workload else ""
    copy = _whole(processes)
    if strategy == "ddp_layer_offload":
        return [
            f"{copy} about {to_gib(full.total)} GiB {per}{at}, more than {_limit(est)}.",
            f"So the frozen layers wait in host RAM and come to the GPU layer by layer, which leaves about {total} GiB"
            f" {per}, with {host}{room}.",
        ]
    if strategy not in OFFLOAD_STRATEGIES:
        split = "each machine's GPUs" if strategy.startswith("hsdp") else f"the {processes} GPUs"
        return [
            f"{copy} about {to_gib(full.total)} GiB {per}{at}, more than {_limit(est)}.",
            f"Split over {split}, it needs about {total} GiB each{room}.",
        ]
    sharded = [e for key, e in (one or estimates).items() if key in ("fsdp2", "zero3")]
    best = min(sharded, key=lambda e: e.total, default=None)
    if processes > 1 and best is not None and best.total > est.budget:
        need = f"Even split over the {processes} GPUs it would need about {to_gib(best.total)} GiB {per}{at}"
    else:
        need = f"{copy} about {to_gib(full.total)} GiB {per}{at}"
    waits = "on the NVMe drive" if drive is not None else "in host RAM"
    return [
        f"{need}, more than {_limit(est)}.",
        f"So part of it waits {waits}, which leaves about {total} GiB {per}, with {host}{room}.",
    ]


def _close_call_fix(result: Result) -> str | None:
    """A close call's first way out that In short names: a loss in chunks where one is a change, else None."""
    return next((x.change for x in result.levers if x.change.startswith(CHUNKED_CHANGES)), None)


def _risk(result: Result, est: Estimate, processes: int, *, brought: bool) -> list[str]:
    """The one thing to know before launching: a risk and its fix, or a file to use instead; else nothing."""
    rec = result.recommendation
    card = memory_gib(est.gpu_memory)
    peak = sum_gib(est.total, est.transient)
    moment = f"For a moment as the backward pass starts it needs {peak} GiB"
    if brought and not est.fits:
        suggested = suggested_lever(est.strategy, rec.facts.estimates)
        if suggested is None or not any(f.name == SUGGESTED_JSON for f in result.files):
            return ["It may not run as written."]
        layout = _PLAIN[suggested][0] if suggested in _PLAIN else suggested
        return [
            f"Change it: {SUGGESTED_JSON} sets up {layout}, which fits by the estimate:"
            f" about {to_gib(rec.facts.estimates[suggested].total)} GiB per GPU."
        ]
    if est.close_call:
        work = rec.facts.workload
        tokens = f"at {work.sequence_length:,} tokens" if work is not None else "at this long context"
        fix = _close_call_fix(result)
        # The lead named the fix where the run would likely run out of memory; here, when (and how) to make it.
        then = (
            " Make it before the first launch."
            if fix and est.close_call_likely
            else f" The fix, before the first launch: switch to {_change(fix)}."
            if fix
            else ""
        )
        if fix is not None and fix.startswith("the loss computed in chunks"):
            # Code of the user's, not a setting: the answer only tells the estimate about it.
            then = (
                f" {'How' if est.close_call_likely else 'The fix'}, before the first launch: compute the loss in chunks"
                " in your training script (Liger Kernel's fused loss, say), then answer chunked_loss: yes."
            )
        # Past the card even at the calibration's kinder end: said as likely, not only possible.
        verdict = "the real peak would likely pass" if est.close_call_likely else "the real peak may pass"
        return [f"{moment}, and {tokens} {verdict} the GPU's {card} GiB.{then}"]
    if est.tight:
        return [f"{moment}: into the spare, still within {words_for(est.device).owner} {card} GiB."]
    if not est.fits:
        return _nearest(result)
    if est.host_fits is False:
        return ["But by the estimate the host RAM is short: see the Memory line."]
    near = _near_line(result, est, brought=brought)
    if near:
        return near
    offload = est.strategy in OFFLOAD_STRATEGIES
    lever = next((x for x in result.levers if x.change.startswith(CHUNKED_CHANGES)), None)
    if offload and lever is not None and lever.gib_per_gpu is not None and lever.host_gib_per_machine is None:
        change = _change(lever.change)
        # Near the usable line, said as the Memory line of that run would say it (its share is that run's to give).
        close = float(lever.gib_per_gpu) >= LITTLE_TO_SPARE * to_gib(est.budget)
        spare = ", close to the usable line: little to spare" if close else ""
        # Which of the two to take, said once and as the Why's "over a chunked loss" says it.
        axolotl = result.session.answers.get("target") == "axolotl"
        if close:
            # Faster, but at the usable line: the offload's room is the safer default, said as that.
            name = "Cut Cross Entropy" if axolotl else "a chunked loss"
            # Said as what the answer does: with it on, the wizard plans that layout (no offload) itself.
            pick = f"The offload is there only because {name} is off."
        elif axolotl:
            pick = (
                "The wizard keeps the offload only because Cut Cross Entropy is a plugin to install; where it installs"
                " on the machine that trains, prefer it."
            )
        else:
            pick = "The wizard keeps the offload until your script computes the loss in chunks; then prefer that."
        return [
            f"Or, with {change}, it fits with no offload: about {lever.gib_per_gpu} GiB {_per(est, processes)}{spare}.",
            pick,
        ]
    return []


def _near_line(result: Result, est: Estimate, *, brought: bool) -> list[str]:
    """Near the usable line: the Memory line's share (with a ZeRO-1/2 JSON's overlap_comm buffers), else nothing."""
    rec = result.recommendation
    buffers = overlap_buffer_bytes(est.strategy, rec.facts, brought=brought)
    chunked = chunked_loss_run(result.session.answers, rec.facts, est)
    if chunked is not None and chunked[1] >= GIB // 4:
        # As the Memory line weighs it: without the logits a loss in chunks never builds, and without the buffers.
        est, buffers = chunked[0], 0
    if (near := near_line_share(est, buffers)) is None:
        return []
    share = f"{near:.0%}"
    if buffers and near > 1:
        fix = f", as {SUGGESTED_JSON} does" if any(f.name == SUGGESTED_JSON for f in result.files) else ""
        return [
            f"With its overlap_comm buffers it comes to {share} of those {to_gib(est.budget)} GiB: lower its two"
            f" buckets{fix}."
        ]
    with_buffers = " with overlap_comm's buffers" if buffers else ""
    # The share is of the peak where the loss's moment is worth naming (Estimate.high), not of the figure before it.
    lead = (
        f"At its peak as the backward pass starts, {sum_gib(est.total, est.transient)} GiB, that is"
        if est.high != est.total
        else "That is"
    )
    return [f"{lead} {share} of it{with_buffers}: little to spare, as 'Before the first launch' says."]


def _refusal(result: Result) -> list[str]:
    """A refusal with a change that fits: that change, in one sentence; else nothing (the panel says the rest)."""
    nearest = _nearest(result)
    return ["Nothing fits these answers as they are.", *nearest] if nearest else []


def _change(change: str) -> str:
    """A lever's change in a few words: without the micro-batch it leads to and any long aside in brackets."""
    # "192 GiB of host RAM per machine instead of 64 (the first common size that is enough, ...)": the
    # levers table beside it gives the aside; a short answer key in brackets ("(chunked_loss: yes)") stays.
    return re.sub(r" \([^()]{40,}\)", "", change.split(MICRO_AT)[0])


def _how_much(change: str) -> int:
    """How much a lever's change alters the job: 0 a setting of the run, 1 the script, 2 the hardware, 3 the method.

    Anything else (a shorter sequence, a smaller model) comes last.
    """
    if change.startswith(("CPU offload allowed", "gradient checkpointing on", "NVMe")):
        return 0
    if change.startswith(CHUNKED_CHANGES):
        return 1
    if " instead of " in change and any(word in change for word in ("machine", "GPU", "GiB")):
        return 2
    return 3 if change.startswith(("LoRA instead", "QLoRA instead")) else 4


def _nearest(result: Result) -> list[str]:
    """The first change that fits (the summary's levers list them all), in one sentence; else nothing."""
    fitting = [x for x in result.levers if x.gib_per_gpu is not None]
    # The change that alters the job least first (a setting, then the script, the hardware, the method); the levers
    # table under the panel lists them all in its own order.
    lever = min(fitting, key=lambda x: _how_much(x.change), default=None)
    if lever is None:
        return []
    at = f" at micro-batches of {lever.micro_batch}" if lever.micro_batch is not None and lever.micro_batch > 1 else ""
    change, figure = _change(lever.change), f"about {lever.gib_per_gpu} GiB {lever.per}{at}"
    if lever.host_gib_per_machine is not None:  # an offload is only half told without the RAM it takes
        figure += f" and {lever.host_gib_per_machine} GiB of host RAM per machine"
    if ", the same layout as now" in lever.title:
        return [f"It would fit with {change}, in the same layout: {figure}."]
    title = _change(lever.title)
    title = title[:1].lower() + title[1:] if title.startswith("One ") else title  # mid-sentence: "one GPU, ..."
    return [f"It would fit with {change}: {title}, {figure}."]
