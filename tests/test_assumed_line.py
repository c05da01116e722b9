"""Every summary with a memory estimate says what it assumed: the count, the shape, the optimizer."""

from __future__ import annotations

import json
from pathlib import Path

from helpers import decide, decided_paths
from wizard.engine.advice import model_assumption

LLAMA32_1B = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 2048,
    "intermediate_size": 8192,
    "num_hidden_layers": 16,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "vocab_size": 128256,
    "tie_word_embeddings": True,
}


def test_a_config_json_run_says_its_count_and_the_optimizer_it_assumes(tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps(LLAMA32_1B))
    answers = {"target": "accelerate", "hardware": "mps", "gpu_memory_gb": 16, "model": str(config), "method": "lora"}
    result = decide(answers, tmp_path / "out")
    said = model_assumption(result.session.answers, result.recommendation.facts)
    assert said.startswith("Assumed: 1,235,814,400 parameters counted from the model's config.json"), said
    assert "16 layers, hidden size 2,048, vocabulary 128,256" in said
    assert "Adam, 16 bytes per trained parameter" in said and "LoRA adapters of rank 16" in said
    assert "Give the model's config.json" not in said  # it was given


def test_every_estimate_states_its_assumptions(tmp_path: Path) -> None:
    checked = 0
    for _, result in decided_paths(tmp_path)[::5]:
        facts = result.recommendation.facts
        if not facts.estimates:
            continue
        said = model_assumption(result.session.answers, facts)
        assert said.startswith("Assumed") and "16 bytes per trained parameter" in said, said
        checked += 1
    assert checked > 50, checked
