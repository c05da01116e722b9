"""The chunked-loss question shows what its answer changes for this run, with the figures the plan then gives.

The invariant, over the Accelerate GPU paths of the walk: where the ordinary loss has a moment worth naming
(5% of the usable memory or more), the question's note gives the full copy's figures with the ordinary loss and
with a loss in chunks, each exactly as the same answers decide it with chunked_loss no and yes, and each with
the verdict those runs give it (fits, tight, a close call with its strength, or does not fit); elsewhere no
note. And at the prompt itself, as a newcomer meets it, the note is there.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from test_prompts import Recorder

from helpers import decide, decided_paths, tree
from wizard.engine.facts import GPU_HARDWARE, chunked_loss_note
from wizard.engine.memory import Estimate, memory_gib, sum_gib, to_gib
from wizard.session import Sources, collect

NOTE = re.compile(
    r"Your run by the memory estimate, at micro_batch_size \d+, (?:on the one GPU|a full copy on each GPU), of"
    r" ([\d.]+) GiB usable: with the ordinary loss about ([\d.]+) GiB and ([\d.]+) GiB for a moment as the backward"
    r" pass starts \((.+?)\); with a loss in chunks about ([\d.]+) GiB, no such moment \((.+?)\)\.$"
)


def _verdict(est: Estimate) -> str:
    if not est.fits:
        return "does not fit"
    if est.close_call:
        peak = float(sum_gib(est.total, est.transient))
        # The kinder end (the estimate at 76% of the real peak) where even it passes: "would likely"; else "may".
        more, percent = (
            (round(peak / 0.76, 1), "even 32% more (the kinder end of the 32%-39% allowance),")
            if est.close_call_likely
            else (round(peak * 1.39, 1), "39% more,")
        )
        verdict = "would likely" if est.close_call_likely else "may"
        return (
            f"a close call: at this long context {percent} about {more} GiB, would pass the GPU's"
            f" {memory_gib(est.gpu_memory)} GiB, so it {verdict} run out of memory at that moment"
        )
    return "fits, past the usable line for that moment" if est.tight else "fits"


def test_the_note_gives_both_answers_figures_as_the_plan_would(tmp_path: Path) -> None:
    paths = decided_paths(tmp_path, lambda a: a["target"] == "accelerate" and a["hardware"] in GPU_HARDWARE)
    shown = hidden = 0
    kinds: set[str] = set()
    for number, (answers, result) in enumerate(paths[::2]):
        if answers.get("chunked_loss") or answers.get("deepspeed_config"):
            continue
        note = chunked_loss_note(result.recommendation.facts)
        plain = result.recommendation.facts.estimates.get("ddp")
        if plain is None or plain.transient < plain.budget // 20:
            assert note is None, (answers, note)
            hidden += 1
            continue
        chunked = decide({**answers, "chunked_loss": True}, tmp_path / f"c{number}").recommendation.facts
        with_chunks = chunked.estimates["ddp"]
        if not plain.fits and not with_chunks.fits:
            # A full copy fits neither way: its figures say nothing about the plan, which shards or offloads.
            assert note is None, (answers, note)
            hidden += 1
            continue
        found = NOTE.match(note or "")
        assert found is not None, (answers, note)
        assert float(found.group(1)) == to_gib(plain.budget)
        assert float(found.group(2)) == to_gib(plain.total) and float(found.group(3)) == sum_gib(
            plain.total, plain.transient
        )
        assert found.group(4) == _verdict(plain), (answers, note)
        assert float(found.group(5)) == to_gib(with_chunks.total) and with_chunks.transient == 0, (answers, note)
        assert found.group(6) == _verdict(with_chunks), (answers, note)
        kinds.add(found.group(4).split(":")[0])
        shown += 1
    assert shown >= 5 and hidden >= 1, (shown, hidden)
    assert {"fits", "does not fit", "fits, past the usable line for that moment"} <= kinds, kinds


def test_the_note_is_at_the_prompt_for_a_long_context_on_a_small_card() -> None:
    """QLoRA of an 8B model at 8,192 tokens on a 24 GB card: the answer decides whether the run survives."""
    answers: dict[str, Any] = {
        "target": "accelerate", "hardware": "nvidia", "gpu_model": "RTX 4090", "gpus_per_node": 1, "num_nodes": 1,
        "cpu_memory_gb": 64, "model": "llama-3.1-8b", "method": "qlora", "sequence_length": 8192, "tune": False,
        "offload": "auto", "objective": "sft", "optimizer": "adamw", "micro_batch_size": 1,
        "gradient_checkpointing": True, "gpu_memory_gb": 23.99, "global_batch_size": 1, "lora_rank": 16,
        "chunked_loss": False,
    }  # fmt: skip
    recorder = Recorder(dict(answers))
    collect(tree(), Sources(prompter=recorder))
    step = next(s for s in recorder.steps if s.question.id == "chunked_loss")
    found = NOTE.match(step.note)
    assert found is not None, step.note
    assert found.group(4).startswith("a close call: at this long context even 32% more (the kinder end of the")
    assert found.group(4).endswith(
        "would pass the GPU's 23.99 GiB, so it would likely run out of memory at that moment"
    )
    assert found.group(6) == "fits", step.note
