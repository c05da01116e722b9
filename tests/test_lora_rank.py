"""The LoRA rank is an answer: the estimate counts it, the files write it, the summary says it.

The invariants, over the walk's decided LoRA and QLoRA paths answered again at rank 64 (and once at rank 4):
* the trained parameters are the model shape's adapters at that rank, and every estimated layout's GPU figure at
  rank 64 is at least its figure at the default 16 (more adapters, never less memory);
* axolotl.yaml's lora_r is the rank and lora_alpha twice it, and Axolotl's own validator keeps both;
* the summary's Assumed line and an Accelerate script's list of needs name the rank, never the default's 16;
* a full fine-tune is never asked it, and an answers file that gives it for one says it was ignored.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from helpers import ONE_4090_8B_QLORA, decide, decided_paths, ignored, parsed
from realtools import axolotl_validate
from wizard.cli import main
from wizard.engine.memory import trainable_params

RANK = 64


def _adapter_paths(tmp_path: Path) -> list[tuple[dict[str, Any], Any]]:
    paths = decided_paths(tmp_path, lambda a: a["method"] in ("lora", "qlora") and "deepspeed_config" not in a)
    assert len(paths) > 40
    return paths[::7]


def test_the_rank_answered_is_the_rank_counted_and_written(tmp_path: Path) -> None:
    checked = 0
    for answers, default in _adapter_paths(tmp_path):
        result = decide({**answers, "lora_rank": RANK}, tmp_path / "out")
        facts = result.recommendation.facts
        if facts.workload is None or facts.shape is None:
            continue
        checked += 1
        assert trainable_params(facts.workload) == facts.shape.lora_params(RANK), answers
        before = default.recommendation.facts.estimates
        for name, est in facts.estimates.items():
            if name in before:
                assert est.total >= before[name].total, (answers, name)
        assert any(est.total > before[name].total for name, est in facts.estimates.items() if name in before)
        if result.recommendation.refused:
            continue  # more adapters can tip a run past the memory it has (a mixture of experts' many linears)
        names = {f.name for f in result.files}
        if "axolotl.yaml" in names:
            config = parsed(result, "axolotl.yaml")
            assert (config["lora_r"], config["lora_alpha"]) == (RANK, 2 * RANK), answers
        else:
            # The script's list of needs, or the snippet that builds the adapters, names the rank.
            text = " ".join(" ".join(re.sub(r"\n#", " ", f.text).split()) for f in result.files)
            assert f"assumes rank {RANK} on every linear layer" in text or f"LoraConfig(r={RANK}," in text, answers
            assert "rank 16" not in text and "LoraConfig(r=16," not in text, answers
    assert checked > 20


def test_axolotl_keeps_the_rank_as_written(tmp_path: Path) -> None:
    """Axolotl 0.21's own validator reads lora_r and lora_alpha as the wizard wrote them."""
    answers = {
        "target": "axolotl",
        "hardware": "nvidia",
        "gpu_model": "A10G",
        "gpus_per_node": 1,
        "model": "1B",
        "method": "lora",
        "lora_rank": 8,
    }
    decide(answers, tmp_path / "out", write=True)
    validated = axolotl_validate(tmp_path / "out" / "axolotl.yaml")
    assert (validated["lora_r"], validated["lora_alpha"]) == (8, 16)


def test_the_summary_says_the_rank_it_counted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    answers = dict(ONE_4090_8B_QLORA)
    path = tmp_path / "answers.yaml"
    path.write_text(yaml.safe_dump(answers), encoding="utf-8")
    texts = {}
    for rank in (4, 64):
        code = main(["--answers", str(path), "--dry-run", "--set", f"lora_rank={rank}"])
        texts[rank] = " ".join(capsys.readouterr().out.split())
        assert code == 0
        assert f"LoRA adapters of rank {rank} on every linear layer" in texts[rank]
        assert f"lora_rank: {rank}" in texts[rank]  # the answers.yaml it would write keeps it
    # 8B's adapters at rank 64 are 16 times those at rank 4: the trained count moves with the answer.
    assert "10.5M trained parameters" in texts[4] and "167.8M trained parameters" in texts[64]


def test_a_full_fine_tune_is_not_asked_the_rank(tmp_path: Path) -> None:
    answers = {
        "target": "accelerate",
        "hardware": "nvidia",
        "gpu_model": "H100",
        "gpus_per_node": 8,
        "model": "7B",
        "method": "full",
        "lora_rank": 32,
    }
    result = decide(answers, tmp_path / "out")
    assert "lora_rank" not in result.session.answers
    assert ignored("lora_rank", result.warnings), result.warnings
