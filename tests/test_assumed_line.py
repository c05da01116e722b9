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


def test_a_size_whose_reference_model_counts_otherwise_gives_that_models_figure_too(tmp_path: Path) -> None:
    """Property: for every path given a size whose reference model's own count differs by more than 5%,
    the Assumed line's figure "with its count" is the chosen layout's total when the run names that
    model instead, and its fit verdict is that run's; for every other path no such figure is given."""
    import re

    from wizard.engine.memory import sum_gib, to_gib

    figure = re.compile(
        r"with its count, the chosen layout \((.+?)\) needs about ([\d.]+) GiB (?:per GPU|on the Mac)"
        r"(?: through a step and about ([\d.]+) GiB at the loss peak)?, against [\d.]+ GiB usable"
        r" \((it [a-z ]+)(?:(, tightly)|, close to the limit at (\d+)% of it)?"
    )
    checked = 0
    for answers, result in decided_paths(tmp_path)[::3]:
        rec = result.recommendation
        strategy = rec.settings.get("strategy")
        if not rec.facts.estimates or strategy not in rec.facts.estimates:
            continue
        said = model_assumption(result.session.answers, rec.facts, strategy)
        shape = rec.facts.shape
        found = figure.search(said)
        if shape is None or shape.reference is None or "itself has" not in said:
            assert found is None, said
            continue
        assert found, said
        named = decide({**answers, "model": shape.reference}, tmp_path / "named")
        own = named.recommendation.facts.estimates[strategy]
        assert found.group(1) == own.label
        assert float(found.group(2)) == to_gib(own.total), (answers, said)
        # The loss peak, where the estimate has one, is the figure the verdict judges.
        assert (found.group(3) is not None) == bool(own.transient), said
        if found.group(3) is not None:
            assert float(found.group(3)) == sum_gib(own.total, own.transient), said
        assert own.fits == (found.group(4) != "it would not fit")
        assert (found.group(5) is not None) == own.tight, said
        if found.group(6) is not None:  # a share of the usable memory, never past it (that is tight)
            assert int(found.group(6)) <= 100, said
        checked += 1
    assert checked >= 10, checked


def test_a_qlora_run_that_fits_one_gpu_says_what_lora_would_need_there(tmp_path: Path) -> None:
    """Property over the one-GPU QLoRA paths that fit: the Why gives LoRA's figure on the same GPU, the
    one-GPU total of the same answers with method: lora, and says whether it fits the usable memory."""
    import re

    from wizard.engine.memory import to_gib

    checked = 0
    for answers, result in decided_paths(tmp_path):
        rec = result.recommendation
        if answers.get("method") != "qlora" or rec.rule.id != "single_gpu":
            continue
        because = " ".join(rec.because.split())
        said = r"LoRA on the 16-bit base would need about ([\d.]+) GiB, counted the same way"
        said += r"(, more than|, which fits too)"
        found = re.search(said, because)
        assert found, because
        lora = decide({**answers, "method": "lora"}, tmp_path / "lora").recommendation.facts.estimates["ddp"]
        assert float(found.group(1)) == to_gib(lora.total)
        assert (found.group(2) == ", which fits too") == lora.fits
        checked += 1
    assert checked >= 3, checked
