"""A refusal's "add GPUs" names only a count at which the run is decided, and never where GPUs cannot help.

Invariants, over every refused one-machine path of the walk:
* "about N in all, sharded without offload": the same answers on N GPUs are decided (sharding
  shrinks the model states; the activations, the gathered layer, the overhead and the loss's
  moment at the start of the backward pass stay on every GPU, and the count accounts for all);
* where that moment and the activations alone take more than the whole GPU, the refusal says
  more GPUs cannot help and does not tell the user to add them; and indeed 8 GPUs are refused too.
"""

from __future__ import annotations

import re
from pathlib import Path

from helpers import decide, decided_paths

COUNT = re.compile(r"add GPUs \(about (\d+) in all, sharded without offload")


def _flat(text: str) -> str:
    return " ".join(text.split())


def test_the_gpu_count_a_refusal_names_is_decided(tmp_path: Path) -> None:
    seen = {"count": 0, "cannot": 0}
    for answers, result in decided_paths(tmp_path, refusals=True):
        rec = result.recommendation
        if not rec.refused or answers.get("num_nodes", 1) != 1:
            continue
        because = _flat(rec.because)
        if (found := COUNT.search(because)) is not None and int(found.group(1)) <= 64:
            again = decide({**answers, "gpus_per_node": int(found.group(1))}, tmp_path / "again")
            assert not again.recommendation.refused, (answers, found.group(0))
            seen["count"] += 1
        if "the loss's moment smaller" in because:
            assert "add GPUs" not in because, because
            more = decide({**answers, "gpus_per_node": 8}, tmp_path / "more")
            assert more.recommendation.refused, answers
            seen["cannot"] += 1
    assert seen["count"], seen


def test_a_loss_peak_refusal_names_the_moment_and_no_gpu_count(tmp_path: Path) -> None:
    # One RTX 4090, QLoRA of a 7.6B model at 8,192 tokens and 2 sequences per micro-batch: through
    # the step it would fit with everything offloaded; the fp32 loss's moment does not, on any count.
    answers = {
        "target": "accelerate",
        "hardware": "nvidia",
        "gpu_model": "RTX 4090",
        "gpus_per_node": 1,
        "num_nodes": 1,
        "model": "qwen2.5-7b",
        "method": "qlora",
        "sequence_length": 8192,
        "micro_batch_size": 2,
    }
    rec = decide(answers, tmp_path).recommendation
    because = _flat(rec.because)
    assert rec.refused
    assert "within the 19.2 GiB usable, but at the start of the backward pass the loss's fp32 temporaries" in because
    assert "a lighter method cannot help at this micro-batch, nor more GPUs (splitting" in because
    assert "add GPUs" not in because
    assert "lower micro_batch_size" in because
    for count in (2, 4):
        assert decide({**answers, "gpus_per_node": count}, tmp_path / str(count)).recommendation.refused
    # From 16,384 tokens more GPUs can split each sequence: the refusal says so, and two GPUs do fit.
    long = {**answers, "model": "llama-3.1-8b", "sequence_length": 16384, "micro_batch_size": 1}
    refused = decide(long, tmp_path / "long").recommendation
    assert refused.refused and "nor more GPUs unless they split each sequence between them" in _flat(refused.because)
    assert not decide({**long, "gpus_per_node": 2}, tmp_path / "long2").recommendation.refused


NEEDS = re.compile(r"needs about ([\d.]+) GiB and only ([\d.]+) GiB")


def test_a_refusal_that_says_needs_and_only_names_a_larger_need(tmp_path: Path) -> None:
    """ "needs about X GiB and only Y GiB are usable" is a reason only where X is more than Y: a run
    short only by the loss's moment says that moment instead (a Mac at micro-batch 8 among them)."""
    mac = {"target": "accelerate", "hardware": "mps", "gpu_memory_gb": 36, "model": "llama-3.2-1b"}
    mac |= {"method": "lora", "sequence_length": 2048, "micro_batch_size": 8, "global_batch_size": 16}
    runs = [*decided_paths(tmp_path, refusals=True), (mac, decide(mac, tmp_path / "mac"))]
    said = 0
    for answers, result in runs:
        if not result.recommendation.refused:
            continue
        for need, usable in NEEDS.findall(_flat(result.recommendation.because)):
            assert float(need) > float(usable), (answers, need, usable)
            said += 1
    mac_text = _flat(runs[-1][1].recommendation.because)
    assert "the loss's fp32 temporaries add" in mac_text and "more than the 36 GiB the Mac has" in mac_text, mac_text
    assert said
