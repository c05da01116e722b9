"""The rough step-time table: how long one optimizer step takes in each layout that fits."""

from __future__ import annotations

from rich.console import Group

from wizard.engine.batch import FSDP2_ACCUMULATION
from wizard.engine.device import GPU_DEVICE
from wizard.engine.evaluate import Recommendation, offloads_to_nvme, run_layout_label
from wizard.engine.facts import FactSet
from wizard.engine.json_fit import SUGGESTED_JSON, suggested_lever
from wizard.engine.speed import (
    OFFLOADED_FROM,
    UTILISATION,
    assumptions_text,
    band_text,
    bottleneck_note,
    bound_text,
    cpu_adam_kind,
    largest_micro_batch,
    network_note,
    offload_cost_note,
    rate_text,
    ratio_text,
)
from wizard.ui.estimate_view import FigureRow, FigureTable
from wizard.ui.memory_chart import fits_mark
from wizard.ui.text_wrap import Wrapped, join_units

NOT_COUNTED = "not counted: data loading, evaluation, logging and saving checkpoints"


def speed_table(rec: Recommendation) -> Group | None:
    """The step-time band of every layout that fits, beside the chosen one; None without a band.

    A refusal has no chosen layout to compare with, and a card without a throughput figure (a
    Mac, a GPU named only by its memory) has no band.
    """
    facts = rec.facts
    chosen_name = rec.settings.get("strategy")
    if rec.refused or facts.links is None or facts.workload is None or chosen_name not in facts.speeds:
        return None
    chosen = facts.speeds[str(chosen_name)]
    # A brought JSON that does not fit: its step is one the run may never take, so the times are held
    # against the layout the suggested JSON runs (the one the summary proposes), where there is one.
    suggested = suggested_lever(str(chosen_name), facts.estimates)
    base_name = suggested if suggested is not None and suggested in facts.speeds else str(chosen_name)
    against = facts.speeds[base_name]
    rows = []
    kinds = {
        kind
        for s in facts.speeds
        if (kind := cpu_adam_kind(s)) is not None and shown_in_step_table(facts, s, chosen_name)
    }
    for strategy, step in facts.speeds.items():
        if not shown_in_step_table(facts, strategy, chosen_name):
            continue
        rows.append(
            FigureRow(
                run_layout_label(rec, strategy),
                (band_text(step).removesuffix(" s"), rate_text(step), ratio_text(step, against)),
                bound_text(step),
                style="bold" if strategy == chosen_name else "dim",
            )
        )
    label = run_layout_label(rec, str(chosen_name))
    fast_share, slow_share = UTILISATION.get(facts.workload.method, UTILISATION["full"])
    offloads = any(facts.speeds[s].host_bytes for s in facts.speeds if shown_in_step_table(facts, s, chosen_name))
    source = _accumulation_key(rec).format(n=chosen.accumulation) if chosen.accumulation > 1 else ""
    caption = (
        f"Assumed: {assumptions_text(chosen, facts.links, facts.workload, source, kinds, offloads)}; {NOT_COUNTED}."
        f" The band's fast end hides the traffic between GPUs and over PCIe behind compute at {fast_share:.0%} of"
        " peak, then adds what waits for the backward pass to finish (the optimizer step on the CPU, an NVMe"
        f" drive's reads and writes); its slow end adds every cost one after the other at {slow_share:.0%}."
        " tokens/s: for the whole run (all GPUs); "
        + (
            f"x chosen: the time against the chosen layout's, {label}, halfway between each band's ends"
            " (its row is bold in a terminal)"
            if base_name == chosen_name
            else f"x suggested: the time against the layout of {SUGGESTED_JSON},"
            f" {run_layout_label(rec, base_name)}, halfway between each band's ends ({label}, your JSON's, is bold"
            " in a terminal)"
        )
        + "; bound by: what takes the longest (two where that differs between"
        " the band's ends, the slow end's first). "
        + (
            "Rows are the layouts that fit."
            if facts.estimates[str(chosen_name)].fits and facts.estimates[str(chosen_name)].host_fits is not False
            else "Rows are the layouts that fit the GPU"
            + (
                " (a row the memory table marks 'host' also needs more host RAM than this run has)"
                if any(fits_mark(e) == "host" for e in facts.estimates.values())
                else ""
            )
            + f", and {label}, your JSON's layout, which does not fit"
            + (" the host RAM" if facts.estimates[str(chosen_name)].fits else "")
            + (
                " by the estimate: more than the GPU itself, it cannot run as written."
                if facts.estimates[str(chosen_name)].past_device
                else " by the estimate: the launch runs it as written, and it may run out of memory."
            )
        )
    )
    table = FigureTable(
        title="Time per optimizer step, roughly (a band from the step's arithmetic, not a measurement)",
        headers=("seconds", "tokens/s", "x chosen" if base_name == chosen_name else "x suggested"),
        rows=rows,
        caption=join_units(caption),
        fits_header="bound by",
    )
    base = facts.speeds.get(OFFLOADED_FROM.get(str(chosen_name), ""))
    notes = [
        note
        for note in (
            offload_cost_note(chosen, base, base_fits=_base_fits(rec), one_gpu=_one_gpu(rec)),
            bottleneck_note(
                facts.workload,
                chosen,
                facts.links,
                _accumulation_key(rec),
                largest_micro_batch(
                    facts.workload, facts.estimates[str(chosen_name)], check_host=not offloads_to_nvme(rec)
                ),
                keep_global=_given_batch(rec),
            ),
            network_note(chosen, facts.links.network),
        )
        if note is not None
    ]
    return Group(table, *(Wrapped(join_units(note)) for note in notes))


def speed_lever(rec: Recommendation) -> str | None:
    """The step-time table's note on what bounds the chosen step and what would shorten it, alone.

    The short summary leaves the table to --explain but keeps this note: it is the one that
    changes what to do (a larger micro-batch that fits, more gradient accumulation).
    """
    facts = rec.facts
    strategy = str(rec.settings.get("strategy"))
    chosen = facts.speeds.get(strategy)
    if rec.refused or chosen is None or facts.links is None or facts.workload is None:
        return None
    lever = bottleneck_note(
        facts.workload,
        chosen,
        facts.links,
        _accumulation_key(rec),
        largest_micro_batch(facts.workload, facts.estimates[strategy], check_host=not offloads_to_nvme(rec)),
        keep_global=_given_batch(rec),
        brief=True,
    )
    # An offloading run's first question: how much slower than without offload. Said before the lever.
    cost = offload_cost_note(
        chosen,
        facts.speeds.get(OFFLOADED_FROM.get(strategy, "")),
        brief=True,
        base_fits=_base_fits(rec),
        one_gpu=_one_gpu(rec),
    )
    notes = [note for note in (cost, lever) if note is not None]
    return " ".join(notes) if notes else None


def _base_fits(rec: Recommendation) -> bool:
    """Whether the layout the chosen one offloads from fits these GPUs too (an offload asked for)."""
    base = rec.facts.estimates.get(OFFLOADED_FROM.get(str(rec.settings.get("strategy")), ""))
    return base is not None and base.fits


def _one_gpu(rec: Recommendation) -> bool:
    """Whether the run has one GPU in all (the notes then say "this GPU")."""
    return int(rec.facts.get("world_size", 1) or 1) == 1


def _accumulation_key(rec: Recommendation) -> str:
    """Where this run sets its gradient accumulation: an FSDP2 script's plugin syncs each micro-batch.

    The same call the batch instructions name (wizard.engine.batch.SYNC_EACH_BATCH).
    """
    key = rec.facts.accumulation_key
    if rec.settings.get("backend") == "fsdp2" and key.startswith("Accelerator(gradient_accumulation_steps"):
        return f"{FSDP2_ACCUMULATION} in the training script"
    return key


def _given_batch(rec: Recommendation) -> bool:
    """Whether the run's global batch is the user's own (a lever must then keep it)."""
    return rec.facts.keeps_global_batch


def speed_words(rec: Recommendation) -> str:
    """The words the step-time table prints, for finding the glossary terms an explanation uses.

    Its title, headers, bound-by column, caption and notes; "" where there is no table.
    """
    group = speed_table(rec)
    if group is None:
        return ""
    table, *notes = group.renderables
    assert isinstance(table, FigureTable)
    words = [table.title, *table.headers, table.fits_header, table.caption or ""]
    words += [row.mark for row in table.rows]
    words += [str(note.text) for note in notes if isinstance(note, Wrapped)]
    return " ".join(words)


def shown_in_step_table(facts: FactSet, strategy: str, chosen: object) -> bool:
    """Whether the table shows a layout: the chosen one, and every other that fits GPU and host RAM.

    Where the chosen one does not fit (a brought JSON run as written), also those that fit the GPU
    but not the host RAM: with more RAM they are the runs to compare, and nothing else fits.
    """
    estimate = facts.estimates[strategy]
    mine = facts.estimates[str(chosen)]
    whole = mine.fits and mine.host_fits is not False
    return strategy == chosen or (estimate.fits and (estimate.host_fits is not False or not whole))


def no_band_line(rec: Recommendation) -> str | None:
    """Why a decided run has no step-time table, so that its absence does not read as an omission."""
    facts = rec.facts
    if rec.refused or facts.links is not None or not facts.estimates or facts.workload is None:
        return None
    if facts.workload.device != GPU_DEVICE:
        return (
            "Time per step: no band on Apple silicon: the throughput differs from chip to chip and is not in the"
            " wizard's catalogue, so it does not guess one."
        )
    return (
        "Time per step: no band, since the GPU is known only by its memory: name the card in gpu_model (such as"
        " A100 SXM4 or RTX 4090) for one."
    )
