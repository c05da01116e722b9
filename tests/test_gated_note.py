"""A model the training downloads from a gated Hub organisation gets the steps to access it first."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers import decide

AXOLOTL = {
    "target": "axolotl",
    "hardware": "nvidia",
    "gpu_model": "RTX 4090",
    "gpus_per_node": 1,
    "model": "8B",
    "method": "qlora",
}


@pytest.mark.parametrize(
    ("base_model", "told"),
    [
        ("meta-llama/Llama-3.1-8B", True),
        ("google/gemma-2-9b", True),
        ("mistralai/Mistral-7B-v0.3", True),
        ("Qwen/Qwen2.5-7B", False),
        ("google/flan-t5-xl", False),
        ("./models/meta-llama/Llama-3.1-8B", False),  # a local folder downloads nothing
    ],
)
def test_the_access_steps_name_the_gated_model_and_its_page(base_model: str, told: bool, tmp_path: Path) -> None:
    result = decide({**AXOLOTL, "base_model": base_model}, tmp_path / "out", write=True)
    notes = [w for w in result.warnings if "gated" in w]
    assert bool(notes) == told, result.warnings
    if told:
        (note,) = notes
        assert f"https://huggingface.co/{base_model}" in note and "hf auth login" in note
        # In the written config too, where the training is started from.
        assert f"https://huggingface.co/{base_model}" in (tmp_path / "out" / "axolotl.yaml").read_text()
