"""The tie-break between FSDP2 and ZeRO-3 gives way to room at the loss peak.

The invariant, over the Accelerate paths of the walk that shard (several GPUs, a full copy does not fit, FSDP2
does): the decision is DeepSpeed ZeRO-3 exactly where FSDP2 passes the usable line at its loss peak (tight, or a
close call) while ZeRO-3 fits within it, and FSDP2 otherwise; where ZeRO-3 is taken, its Why gives both peaks
against the usable line, as the memory table has them, and the files are DeepSpeed's (a ZeRO-3 ds_config.json).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from helpers import decide, decided_paths, file


def _sharded(answers: dict[str, Any]) -> bool:
    return answers["target"] == "accelerate" and not answers.get("deepspeed_config") and not answers.get("megatron")


def _room_for_zero3(estimates: dict[str, Any]) -> bool:
    fsdp2, zero3 = estimates.get("fsdp2"), estimates.get("zero3")
    return bool(
        fsdp2 is not None
        and zero3 is not None
        and fsdp2.fits
        and (fsdp2.tight or fsdp2.close_call)
        and zero3.fits
        and not (zero3.tight or zero3.close_call)
    )


def test_zero3_is_taken_exactly_where_only_it_has_room_at_the_peak(tmp_path: Path) -> None:
    taken = kept = 0
    for answers, result in decided_paths(tmp_path, _sharded):
        rec = result.recommendation
        est = rec.facts.estimates
        rules = [entry.rule_id for entry in rec.trace if entry.held]
        if not rules or rules[-1] not in ("sharded_fsdp2", "sharded_zero3_room"):
            continue
        if _room_for_zero3(est) and rec.facts.get("world_size", 1) > 1 and not est["ddp"].fits:
            assert rec.settings["strategy"] == "zero3" and rec.backend == "deepspeed", answers
            why = " ".join(rec.because.split())
            fsdp2, zero3 = est["fsdp2"], est["zero3"]
            assert f"FSDP2 needs about {round(fsdp2.total / 2**30, 1)} GiB per GPU" in why, why
            assert "within the line" in why and "GiB, within the line" in why, why
            assert zero3.peak <= zero3.budget < fsdp2.peak, answers
            taken += 1
        else:
            assert rec.settings["strategy"] != "zero3" or rules[-1] != "sharded_zero3_room", answers
            kept += 1
    assert taken >= 1 and kept >= 5, (taken, kept)


def test_eight_a10g_cards_for_a_30b_moe_lora_take_zero3_and_write_its_json(tmp_path: Path) -> None:
    """A 30B-A3B LoRA on 8 x 24 GB: FSDP2 peaks at 20.9 GiB past the 19.2 usable, ZeRO-3 at 18.6 within it."""
    answers = {
        "target": "accelerate", "hardware": "nvidia", "gpu_model": "A10G", "gpus_per_node": 8, "gpu_memory_gb": 24,
        "cpu_memory_gb": 192, "model": "30B-A3B", "method": "lora", "sequence_length": 4096, "micro_batch_size": 1,
    }  # fmt: skip
    result = decide(answers, tmp_path, write=True)
    est = result.recommendation.facts.estimates
    assert est["fsdp2"].tight and not est["zero3"].tight and est["zero3"].fits
    assert result.recommendation.settings["strategy"] == "zero3"
    ds = json.loads(file(result, "ds_config.json").text)
    assert ds["zero_optimization"]["stage"] == 3
    assert "offload_optimizer" not in ds["zero_optimization"] or ds["zero_optimization"]["offload_optimizer"].get(
        "device"
    ) in (None, "none")
