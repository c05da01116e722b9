"""A base model whose name says another size than the one the estimate counts is pointed out."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers import decide

A10G_7B = {
    "target": "axolotl",
    "hardware": "nvidia",
    "gpu_model": "A10G",
    "gpus_per_node": 1,
    "model": "7B",
    "method": "lora",
}


@pytest.mark.parametrize(
    ("base_model", "named"),
    [
        # Within 15% of the 7B answered and in the catalogue: its own 8.03B is counted, nothing to point out.
        ("meta-llama/Meta-Llama-3-8B", None),
        ("meta-llama/Llama-3.1-70B", "a 70B"),  # far from the size answered: the size stays, and is pointed out
        ("Qwen/Qwen2.5-14B-Instruct", "a 14B"),
        ("google/gemma-2-2b-it", "a 2B"),
        ("meta-llama/Llama-2-7b-hf", None),  # the same size
        ("mistralai/Mistral-7B-v0.3", None),
        ("mistralai/Mixtral-8x7B-v0.1", None),  # experts x size, not the total: not judged
        ("./my-finetune", None),  # no size in the name
    ],
)
def test_a_size_in_the_base_model_name_is_checked(base_model: str, named: str | None, tmp_path: Path) -> None:
    warnings = decide({**A10G_7B, "base_model": base_model}, tmp_path).warnings
    said = [w for w in warnings if w.startswith(f"base_model {base_model}")]
    if named is None:
        assert not said, said
    else:
        assert len(said) == 1 and f"looks like {named} model" in said[0] and "counts 7.0B" in said[0]


def test_an_ignored_add_on_answer_gets_the_reason_its_question_is_not_asked(tmp_path: Path) -> None:
    """An add-on's condition reads the decision; its reason is the answer that fails, not the decision's absence."""
    answers = {"target": "accelerate", "hardware": "mps", "gpu_memory_gb": 16, "model": "1B", "method": "lora"}
    answers["tune"] = True
    result = decide(answers, tmp_path / "out")
    told = [w for w in result.warnings if w.startswith("ignored 'tune'")]
    assert len(told) == 1 and "Apple MPS" in told[0], told
    assert "refused" not in told[0] and "was given" not in told[0], told


def test_a_size_answer_borrows_the_layers_of_the_base_model_the_run_loads(tmp_path: Path) -> None:
    """Every dense catalogue model, named as base_model beside its own size, lends its layers to the estimate."""
    from wizard.engine.catalog import models_catalog
    from wizard.engine.facts import BASE_MODEL_SHARE
    from wizard.engine.model_size import shape_for_catalog, shape_for_size

    checked = 0
    for name in models_catalog()["models"]:
        own = shape_for_catalog(name)
        if own.experts != 1:
            continue
        size = f"{round(own.params / 1e6)}M" if own.params < 1e9 else f"{own.params / 1e9:.1f}B"
        rec = decide({**A10G_7B, "model": size, "base_model": f"some-org/{name}"}, tmp_path).recommendation
        shape = rec.facts.shape
        assert shape is not None
        assert shape.reference == name, (name, shape.reference)
        assert (shape.layers, shape.hidden_size, shape.vocab_size) == (own.layers, own.hidden_size, own.vocab_size)
        # The model the run loads is known: its own count is the estimate's, not the rounded size beside it.
        assert shape.params == own.params, (name, shape.params, own.params)
        assert abs(
            own.params - shape_for_size(int(float(size[:-1]) * (1e6 if size.endswith("M") else 1e9))).params
        ) <= (BASE_MODEL_SHARE * own.params)
        checked += 1
    assert checked >= 10
    # Too far from the size answered: the closest reference stays, and the name's size is pointed out.
    far = decide({**A10G_7B, "base_model": "meta-llama/Meta-Llama-3-70B"}, tmp_path)
    assert far.recommendation.facts.shape == shape_for_size(7_000_000_000)
    assert any(w.startswith("base_model meta-llama/Meta-Llama-3-70B looks like a 70B") for w in far.warnings)


def test_the_assumed_line_names_the_base_model_it_borrows_from(tmp_path: Path) -> None:
    from wizard.engine.advice import model_assumption

    result = decide({**A10G_7B, "base_model": "mistralai/Mistral-7B-v0.1"}, tmp_path)
    text = model_assumption(result.session.answers, result.recommendation.facts)
    assert "the count of mistral-7b (your base_model mistralai/Mistral-7B-v0.1), which the run loads" in text, text
    assert "7,241,732,096 parameters" in text and "counted here" not in text, text
    # A reference picked by size alone is not called the user's.
    plain = decide(A10G_7B, tmp_path / "plain")
    assert "your base_model" not in model_assumption(plain.session.answers, plain.recommendation.facts)
