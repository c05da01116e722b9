"""Whether a brought DeepSpeed JSON fits, and the zero_optimization block that would.

A DeepSpeed JSON the user brings runs as written (the tree's rule for it does not look at
memory), so the estimate of its stage and offload is checked here and, when it does not fit,
the warning names the cheapest ZeRO setting that does, as the exact JSON to put in the file.
The keys are DeepSpeed's own ("ZeRO optimizations" in https://www.deepspeed.ai/docs/config-json/).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from typing import Any

from wizard.engine.deepspeed_json import SUGGESTED_JSON as SUGGESTED_JSON  # re-exported: the files name it
from wizard.engine.facts import LITTLE_TO_SPARE, TIGHT_SHARE, has_room
from wizard.engine.memory import STRATEGY_TITLES, Estimate, sum_gib, to_gib

_CPU = {"device": "cpu", "pin_memory": True}
# The ZeRO-3 key that makes saving gather one whole 16-bit model (DeepSpeed's "ZeRO optimizations" config keys).
GATHER_ON_SAVE = "stage3_gather_16bit_weights_on_model_save"

# The ZeRO settings to try, cheapest in speed first: more sharding before any offload, then the
# optimizer on the CPU, then the weights too.
LEVERS: dict[str, dict[str, Any]] = {
    "zero1": {"stage": 1},
    "zero2": {"stage": 2},
    "zero3": {"stage": 3},
    "zero2_offload_optimizer": {"stage": 2, "offload_optimizer": _CPU},
    "zero3_offload_optimizer": {"stage": 3, "offload_optimizer": _CPU},
    "zero3_offload_all": {"stage": 3, "offload_optimizer": _CPU, "offload_param": _CPU},
}


def _brought_stage(strategy: str) -> int | None:
    """The ZeRO stage of a brought JSON's layout ("zero2_offload_optimizer" -> 2), or None."""
    return int(strategy[4]) if strategy.startswith("zero") and strategy[4:5].isdigit() else None


def _keys(block: Mapping[str, Any]) -> str:
    """The keys of a zero_optimization block as JSON members: '"stage": 2, "offload_optimizer": {...}'."""
    return ", ".join(f"{json.dumps(key)}: {json.dumps(value)}" for key, value in block.items())


def _runs(lever: str, strategy: str, estimates: Mapping[str, Estimate]) -> bool:
    """Whether `lever` is another setting than the JSON's own `strategy` that fits the GPU and the host RAM."""
    est = estimates.get(lever)
    return lever != strategy and est is not None and est.fits and est.host_fits is not False


def suggested_lever(strategy: str, estimates: Mapping[str, Estimate]) -> str | None:
    """The ZeRO setting the fit warning proposes for a brought JSON that does not fit, or None.

    The first of `LEVERS` that fits the GPU and the host RAM with its peak within `TIGHT_SHARE` of the
    usable memory (the room the wizard's own offload pick keeps), else the first that fits; where none
    does and the GPU would hold an offload layout (host RAM is the limit), the one that needs the least
    host RAM.
    """
    current = estimates.get(strategy)
    if current is None or (current.fits and current.host_fits is not False):
        return None
    runs = [lever for lever in LEVERS if _runs(lever, strategy, estimates)]
    # The first with room to spare (its peak within the share the wizard keeps, as its own offload pick does),
    # else the first that fits: a lighter setting near the usable line is no better an edit than a leaner one.
    roomy = [lever for lever in runs if has_room(estimates[lever])]
    if roomy or runs:
        return (roomy or runs)[0]
    if current.fits:
        return None
    offloads = [(lever, est) for lever in LEVERS if (est := estimates.get(lever)) is not None and est.fits]
    # LEVERS lists the lighter traffic first: min keeps the first of equal host RAM.
    return min(offloads, key=lambda item: item[1].host_per_node)[0] if offloads else None


def suggested_json(brought: Mapping[str, Any], lever: str, bucket: int | None = None) -> dict[str, Any]:
    """The brought JSON with the proposed zero_optimization keys set, its other keys as they are.

    A ZeRO-3 edit also sets `GATHER_ON_SAVE` where the JSON leaves it out, so that saving writes a whole model.

    `bucket`: the size to set reduce_bucket_size and allgather_bucket_size to (ZeRO-1/2 with
    overlap_comm, where the warning says so), written whether the JSON had them or left them at
    DeepSpeed's default; or None to leave them.
    """
    data = copy.deepcopy(dict(brought))
    zero = dict(data.get("zero_optimization") or {})
    zero.update(copy.deepcopy(LEVERS[lever]))
    if LEVERS[lever]["stage"] == 3:
        # Under ZeRO-3 each GPU holds a shard: without this key, saving writes no whole model. Added only where the
        # JSON does not say (DeepSpeed's default is false), as the wizard's own ZeRO-3 JSON sets it.
        zero.setdefault(GATHER_ON_SAVE, True)
    if bucket is not None and LEVERS[lever]["stage"] < 3:
        for key in ("reduce_bucket_size", "allgather_bucket_size"):
            zero[key] = bucket
    data["zero_optimization"] = zero
    return data


def buckets_json(brought: Mapping[str, Any], bucket: int) -> dict[str, Any]:
    """The brought JSON with reduce_bucket_size and allgather_bucket_size set to `bucket`, its other keys as they are.

    For a JSON that fits by the estimate but whose overlap_comm buffers, at its own bucket sizes, take it past the
    usable line: the fit warning's edit is then the buckets alone.
    """
    data = copy.deepcopy(dict(brought))
    zero = dict(data.get("zero_optimization") or {})
    for key in ("reduce_bucket_size", "allgather_bucket_size"):
        zero[key] = bucket
    data["zero_optimization"] = zero
    return data


def short_by_allowance(est: Estimate, cpu_memory_gb: Any) -> bool:
    """Short of host RAM only by DeepSpeed's 1.5x allowance: what it stores fits 80% of cpu_memory_gb."""
    return isinstance(cpu_memory_gb, (int, float)) and est.host_stored <= 0.8 * cpu_memory_gb * 2**30


def _close_text(est: Estimate, cpu_memory_gb: Any, where: str = "") -> str:
    """The "; short only by ..." clause where `est` is short of host RAM only by DeepSpeed's allowance, else ""."""
    if not short_by_allowance(est, cpu_memory_gb):
        return ""
    return (
        f"; short only by DeepSpeed's 1.5x allowance for pinned buffers and copies: without it the"
        f" {to_gib(est.host_stored)} GiB offloaded would fit the {round(0.8 * cpu_memory_gb, 1)} GiB usable,"
        f" so {where}the first steps show whether host RAM holds (watch free -g)"
    )


def _host_figures(est: Estimate, cpu_memory_gb: float) -> str:
    """Host-RAM figures short only by DeepSpeed's allowance: with it past the usable part, without it within."""
    return (
        f"{to_gib(est.host_per_node)} GiB with it, {to_gib(est.host_stored)} GiB without it,"
        f" against {round(0.8 * cpu_memory_gb, 1)} GiB usable"
    )


def allowance_try(strategy: str, estimates: Mapping[str, Estimate], cpu_memory_gb: Any = None) -> str | None:
    """The layout the brought JSON's verdict calls worth a try with host RAM short only by DeepSpeed's allowance.

    The JSON as written, or the suggested one, where it fits the GPU and what it offloads fits the usable host RAM
    without the 1.5x allowance; the title of that layout ("ZeRO-2 + optim->CPU"), else None. The run decided
    without the JSON counts the allowance in full and refuses such a layout, so its line says this.
    """
    current = estimates.get(strategy)
    if current is None or (current.fits and current.host_fits is not False):
        return None
    lever = suggested_lever(strategy, estimates)
    name, est = (strategy, current) if lever is None else (lever, estimates[lever])
    if est.fits and est.host_fits is False and short_by_allowance(est, cpu_memory_gb):
        return STRATEGY_TITLES.get(name, name)
    return None


def past_line_with_buffers(est: Estimate, buffers: int) -> bool:
    """Whether a layout that fits by the estimate passes the usable line at its peak with a JSON's buffers.

    Fits: the GPU and host RAM; `buffers`: a brought JSON's overlap_comm buffers, which the estimate leaves out.
    """
    return est.fits and est.host_fits is not False and buffers > 0 and est.high + buffers > est.budget


def json_verdict(
    strategy: str, estimates: Mapping[str, Estimate], cpu_memory_gb: Any = None, buffers: int = 0
) -> str | None:
    """Keep the brought JSON or change it, in one line (the fit warning gives the figures and the keys).

    `buffers`: what the JSON's overlap_comm buffers take beside the estimate (Transformers' guide), which
    decides whether "keep it" comes with little to spare. None where the JSON's layout has no estimate.
    """
    current = estimates.get(strategy)
    if current is None:
        return None
    if current.fits and current.host_fits is not False:
        high = current.high + buffers  # the near-limit note's figure, and its buffers
        if past_line_with_buffers(current, buffers):
            # The buffers take it past the usable line: keeping it as written is not the advice.
            return (
                f"keep its layout, lower its buckets: it fits by this estimate, but with overlap_comm's buffers it"
                f" comes to {high / current.budget:.0%} of the usable memory ('Before the first launch' says how)"
            )
        if high >= LITTLE_TO_SPARE * current.budget:
            # The near-limit note below gives the share; "keep it" alone read as more certain than that.
            return (
                f"keep it: it fits as written, by this estimate, with little to spare ({high / current.budget:.0%} of"
                " the usable memory: see 'Before the first launch')"
            )
        return "keep it: it fits as written, by this estimate"
    where = "the host RAM" if current.fits else "the GPU"
    lever = suggested_lever(strategy, estimates)
    if lever is None and current.fits and short_by_allowance(current, cpu_memory_gb):
        return (
            "try it as written: it fits the GPU, and host RAM is short only by DeepSpeed's 1.5x allowance"
            f" ({_host_figures(current, cpu_memory_gb)}): worth a try, its first steps show whether it holds"
            " (watch free -g)"
        )
    if lever is None:
        return (
            f"as written it does not fit {where}, and no other ZeRO setting does here: 'Before the first launch'"
            " says what would"
        )
    title, est = STRATEGY_TITLES[lever], estimates[lever]
    if est.host_fits is not False:
        return f"change it: as written it does not fit {where}; {SUGGESTED_JSON} ({title}) fits, by this estimate"
    if short_by_allowance(est, cpu_memory_gb):
        return (
            f"change it: as written it does not fit {where}; {SUGGESTED_JSON} ({title}) fits the GPU, and host RAM"
            f" is short only by DeepSpeed's 1.5x allowance ({_host_figures(est, cpu_memory_gb)}): worth a try, its"
            " first steps show whether it holds (watch free -g)"
        )
    return (
        f"change it: as written it does not fit {where}; {SUGGESTED_JSON} ({title}) fits the GPU but not the"
        " host RAM: 'Before the first launch' says what would"
    )


def _other_setting(
    lever: str,
    strategy: str,
    estimates: Mapping[str, Estimate],
    buffers: Mapping[str, int] | None = None,
    bucket_words: str = "your JSON's bucket sizes",
    lowered: tuple[str, int] | None = None,
) -> str:
    """The setting the proposed edit `lever` was weighed against, named with its figure and keys, or "".

    Where a lighter setting fits too but past the room the wizard keeps, that one is named with its share
    (the edit was taken for its room). Where the edit itself has no room and a later one fits with less GPU
    memory, that one is named, with the keys that set it: the proposal reads as a choice, not as the only way.
    """
    order = list(LEVERS)
    mine = estimates[lever]
    earlier = next((key for key in order[: order.index(lever)] if _runs(key, strategy, estimates)), None)
    if earlier is not None:
        # Taken for its room over a lighter setting that fits near the usable line: that one named, with its share.
        near = estimates[earlier]
        keeps = " (it keeps your stage)" if LEVERS[earlier].get("stage") == _brought_stage(strategy) else ""
        extra = (buffers or {}).get(earlier, 0)
        # The JSON's own overlap_comm buckets stay with the edit: their buffers counted on the figure the verdict on
        # a JSON brought with that setting counts them on (Estimate.high), said in GiB so the base is plain.
        share = (near.high + extra) / near.budget
        peak = f"at its peak it comes to {near.peak / near.budget:.0%} of the usable memory"
        # The buffers are weighed on the figure the verdict counts them on (Estimate.high): through the step where
        # the loss's moment is too small to name. Said, so the two shares beside each other read on their bases.
        basis = " through the step" if near.high == near.total and near.transient else ""
        keys = _keys(LEVERS[earlier])
        if extra and share > 1:
            # Past the usable line with the buffers: one verdict, "does not", not "fits too ... past the line".
            # The buckets are what stands between it and a fit: the way to lower them said here, with its figure.
            smaller = ""
            if lowered is not None:
                size, low = lowered
                low_share = (near.high + low) / near.budget
                verdict = "still past the usable line" if low_share > 1 else "within the usable line"
                if basis and (at_peak := (near.peak + low) / near.budget) > 1 >= low_share:
                    # Weighed through the step, as the verdict is; the moment with the buffers said beside it.
                    verdict += f", though {at_peak:.0%} at its peak, past it for that moment"
                smaller = (
                    f", with both overlap_comm buckets (reduce_bucket_size, allgather_bucket_size) at {size}, the"
                    f" size the wizard writes in a JSON of its own: its buffers then come to about {to_gib(low)} GiB,"
                    f" {low_share:.0%} of the usable memory{basis} with them, {verdict}"
                )
            return (
                f" This edit leaves room to spare. {STRATEGY_TITLES[earlier]}{keeps}, the lighter change, does not:"
                f" {peak} by the estimate, and with overlap_comm's buffers at {bucket_words}, about"
                f" {sum_gib(near.high, extra)} GiB per GPU{basis}, {share:.0%} of it, past the usable line. To take"
                f" it all the same, put {keys}{smaller}."
            )
        with_buffers = (
            f", {share:.0%}{basis} with overlap_comm's buffers at {bucket_words} (about {sum_gib(near.high, extra)}"
            " GiB per GPU)"
            if extra
            else ""
        )
        return (
            f" This edit leaves room to spare. {STRATEGY_TITLES[earlier]}{keeps}, the lighter change, fits but without"
            f" that room: {peak}{with_buffers}, above the {TIGHT_SHARE:.0%} the wizard plans up to (room for the"
            f" estimate's own error and for what it leaves out). To take it instead, put {keys}."
        )
    if has_room(mine):
        return ""  # the edit has room already: a leaner one would only free memory the run does not need
    for later in order[order.index(lever) + 1 :]:
        if not _runs(later, strategy, estimates) or (est := estimates[later]).total >= mine.total:
            continue
        if later.startswith("zero3") and not lever.startswith("zero3"):
            cost = "gathers every layer's weights from the other GPUs in each forward and backward pass"
        elif "offload_all" in later and "offload_all" not in lever:
            cost = "moves the weights between host RAM and the GPU in each pass too"
        else:
            return ""
        # Why this one comes first, said as the rule it is; the other named with its own figure, to choose from.
        kept = LEVERS[lever].get("stage") == _brought_stage(strategy)
        why = (
            "It keeps your stage, the smaller change."
            if kept
            else "It comes first in the order the wizard tries: more sharding before any offload."
        )
        return (
            f" {why} {STRATEGY_TITLES[later]} needs less GPU memory (about {to_gib(est.total)} GiB per GPU), room for"
            f" a larger micro-batch, but {cost}; to take it instead, put {_keys(LEVERS[later])}."
        )
    return ""


def json_fit_warning(
    strategy: str,
    estimates: Mapping[str, Estimate],
    gpu_memory_gb: Any,
    cpu_memory_gb: Any = None,
    buffers: Mapping[str, int] | None = None,
    bucket_words: str = "your JSON's bucket sizes",
    lowered: tuple[str, int] | None = None,
) -> str | None:
    """A warning when the brought JSON's `strategy` does not fit the GPU or the host RAM; None when it runs.

    `buffers`: for each ZeRO-1/2 setting, the bytes of overlap_comm's buffers the JSON's own buckets would add there;
    `bucket_words` names those buckets (the JSON's, or DeepSpeed's defaults where it sets none); `lowered`: the
    bucket size the wizard's own JSON lowers them to, as the JSON writes it, and the buffers' bytes at that size.
    """
    current = estimates.get(strategy)
    if current is None or (current.fits and current.host_fits is not False):
        return None
    if current.fits:
        head = (
            f"by the wizard's estimate your DeepSpeed JSON ({STRATEGY_TITLES[strategy]}) fits the GPU but not the "
            f"host RAM: what it offloads needs about {to_gib(current.host_per_node)} GiB per machine, more than 80% "
            f"of the {cpu_memory_gb} GiB there"
        )
        nvme = (
            ', or offload to a local NVMe drive instead ("device": "nvme" with an "nvme_path" in offload_optimizer '
            "and offload_param, ZeRO-3)"
        )
    elif current.peak_short:
        head = (
            f"by the wizard's estimate your DeepSpeed JSON ({STRATEGY_TITLES[strategy]}) does not fit: it needs "
            f"about {to_gib(current.total)} GiB per GPU through a step, within the {to_gib(current.budget)} GiB "
            f"usable, but at the start of the backward pass the loss's fp32 temporaries take it to about"
            f" {sum_gib(current.total, current.transient)} GiB for a moment, more than the GPU's {gpu_memory_gb} GiB"
        )
        nvme = ""
    else:
        head = (
            f"by the wizard's estimate your DeepSpeed JSON ({STRATEGY_TITLES[strategy]}) does not fit: it needs "
            f"about {to_gib(current.total)} GiB per GPU, more than the {to_gib(current.budget)} GiB usable of "
            f"{gpu_memory_gb} GiB"
        )
        nvme = ""
    lever = suggested_lever(strategy, estimates)
    if lever is not None and (est := estimates[lever]).host_fits is not False:
        host = f", about {to_gib(est.host_per_node)} GiB of host RAM per machine" if est.host_per_node else ""
        if est.host_per_node and est.host_fits is None:
            host += ", which cpu_memory_gb was not given to check"
        # A stage the JSON has already is said as kept, so that the edit reads as what it changes.
        stage = LEVERS[lever].get("stage")
        same_stage = stage is not None and stage == _brought_stage(strategy)
        edit = {k: v for k, v in LEVERS[lever].items() if not (same_stage and k == "stage")}
        what = f'keep "stage": {stage} and put {_keys(edit)}' if same_stage and edit else f"put {_keys(LEVERS[lever])}"
        return (
            f"{head}. To make it fit, {what} in the JSON's zero_optimization block (its other"
            f" keys stay as they are; {STRATEGY_TITLES[lever]}: about {to_gib(est.total)} GiB"
            f" per GPU{host}){nvme}.{_other_setting(lever, strategy, estimates, buffers, bucket_words, lowered)}"
        )
    if current.fits:
        close = _close_text(current, cpu_memory_gb)
        return f"{head}{close}. Add host RAM{nvme}, or train fewer parameters (LoRA or QLoRA)."
    full = estimates.get("zero3_offload_all")
    if lever is not None:  # the GPU would hold an offload layout: the host RAM is the limit
        lean = estimates[lever]
        installed = round(lean.host_per_node / 0.8 / 2**30, 1)
        close = _close_text(lean, cpu_memory_gb, "with that offload in the JSON ")
        return (
            f"{head}. Every layout that fits the GPU offloads, and none fits this host RAM by the estimate (with"
            " DeepSpeed's 1.5x allowance for pinned buffers). The one that needs the"
            f" least host RAM, and of those the least traffic, is {STRATEGY_TITLES[lever]} ({_keys(LEVERS[lever])} in"
            f" the JSON's zero_optimization block, its other keys as they are): it needs about {to_gib(lean.total)}"
            f" GiB per GPU and {to_gib(lean.host_per_node)} GiB of host RAM per machine, so a machine with about"
            f" {installed} GiB of RAM installed (free -g's total; the wizard counts 80% of it as usable){close}. Or"
            " offload to a local NVMe drive instead"
            ' ("device": "nvme" with an "nvme_path" in offload_optimizer and offload_param, ZeRO-3), add GPUs,'
            " or train fewer parameters (LoRA or QLoRA)."
        )
    # Activations are the only part a shorter sequence shrinks: name it only when they matter.
    shorter = ", or shorten sequence_length" if full is not None and full.activations > full.budget // 2 else ""
    if current.peak_short:  # only the loss peak is short: the levers that shrink it first
        return (
            f"{head}, and no ZeRO stage or CPU offload fits either: compute the loss in chunks in your training "
            "script (Liger Kernel's LigerFusedLinearCrossEntropyLoss builds no fp32 logits), shorten "
            "sequence_length, or split each sequence over GPUs (DeepSpeed sequence parallelism)."
        )
    return (
        f"{head}, and no ZeRO stage or CPU offload fits either: add GPUs or train fewer parameters "
        f"(LoRA or QLoRA){shorter}."
    )
