"""`estimate` says what it leaves out that the main run counts: a brought JSON's overlap_comm buffers.

The invariant: with answers that bring a DeepSpeed JSON with overlap_comm on, `estimate` names the buffers,
their size (the figure the main run adds) and the rows they go on; the main run marks a row they take past
the usable line 'buffers' where `estimate`'s own table says yes. Without overlap_comm, or with no JSON,
nothing is said.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
from pathlib import Path
from typing import Any

import pytest

from helpers import FOUR_A100_40GB_13B_FULL, decide, write_yaml
from wizard.cli import main
from wizard.engine.advice import brought_buffers
from wizard.engine.memory import to_gib

NOTE = re.compile(
    r"Not in this table: your DeepSpeed JSON's overlap_comm buffers at its bucket sizes \(DeepSpeed's defaults where"
    r" it sets none\), about ([\d.]+) GiB per GPU more on the (.+?) rows; the main run \(backend-wizard --answers\)"
    r" counts them, and marks a row they take past the usable line 'buffers'\."
)


def _estimate(path: Path) -> str:
    buffer = io.StringIO()
    with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stdout(buffer):
        patch.setenv("COLUMNS", "80")
        assert main(["estimate", "--answers", str(path)]) == 0
    return " ".join(buffer.getvalue().split())


@pytest.mark.parametrize("overlap", [True, False, None])
def test_estimate_names_the_buffers_the_main_run_counts(tmp_path: Path, overlap: bool | None) -> None:
    answers: dict[str, Any] = dict(FOUR_A100_40GB_13B_FULL)
    if overlap is not None:
        ds = tmp_path / "ds.json"
        data = {"train_micro_batch_size_per_gpu": "auto", "zero_optimization": {"stage": 2, "overlap_comm": overlap}}
        ds.write_text(json.dumps(data), encoding="utf-8")
        answers["deepspeed_config"] = str(ds)
    text = _estimate(write_yaml(tmp_path / "answers.yaml", answers))
    found = NOTE.search(text)
    facts = decide(answers, tmp_path / "out").recommendation.facts
    buffers = brought_buffers(facts)
    assert (found is not None) is bool(overlap) is bool(buffers), text[-800:]
    if found is None:
        return
    assert float(found.group(1)) == to_gib(max(buffers.values()))
    assert found.group(2) == "ZeRO-1, ZeRO-2, ZeRO-2 + optim->CPU"
    # The row the table calls yes that the main run calls 'buffers': the case the note is there for.
    row = re.search(r"ZeRO-2 \+ optim->CPU │ [\d.]+ │ [\d.]+ │ [\d.]+ │ [\d.]+ │ [\d.]+ │ (\w+) │", text)
    assert row is not None and row.group(1) == "yes", text[:2000]
    est = facts.estimates["zero2_offload_optimizer"]
    assert est.fits and est.high + buffers["zero2_offload_optimizer"] > est.budget
