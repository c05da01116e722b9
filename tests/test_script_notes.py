"""What an Accelerate script must do, or must not do, for the estimate to hold: said exactly where it applies."""

from __future__ import annotations

from pathlib import Path

from helpers import decided_paths

TURN_ON = "must turn on gradient checkpointing"
NOT_TWICE = "must not also call model.gradient_checkpointing_enable()"


def test_gradient_checkpointing_is_asked_of_the_script_once_and_never_twice(tmp_path: Path) -> None:
    on_fsdp = elsewhere = 0
    for answers, result in decided_paths(tmp_path, lambda a: a.get("target") == "accelerate"):
        rec = result.recommendation
        checkpointing = result.session.answers.get("gradient_checkpointing") is True
        text = " ".join(" ".join(result.warnings).split())
        # A snippet that loads a quantized base with its adapters covers both calls (a plain LoRA one shows them,
        # but the script's own notes stay).
        qlora_snippet = any(f.name == "train_snippet.py" and "BitsAndBytesConfig" in f.text for f in result.files)
        fsdp = rec.backend == "fsdp2"
        # FSDP2's config checkpoints the layers itself: the script must not add the model's own.
        assert (NOT_TWICE in text) == (checkpointing and fsdp and not qlora_snippet), (answers, rec.backend)
        # Everywhere else (Megatron-LM recomputes by its own flag) the script must turn it on.
        wants = checkpointing and rec.backend not in ("fsdp2", "megatron_lm") and not qlora_snippet
        assert (TURN_ON in text) == wants, (answers, rec.backend)
        assert not (TURN_ON in text and NOT_TWICE in text)
        on_fsdp += NOT_TWICE in text
        elsewhere += TURN_ON in text
    assert on_fsdp > 20 and elsewhere > 20, (on_fsdp, elsewhere)


FP32 = "must load the model in fp32 for this estimate to hold (from_pretrained(..., dtype=torch.float32)"


def test_the_mac_script_is_asked_to_load_fp32_weights_and_no_other_is(tmp_path: Path) -> None:
    # The Mac trains in fp32 (mixed_precision: no) and the estimate counts 4 bytes per weight;
    # Transformers 5 would load a bf16 checkpoint in bf16 unless the script asks for fp32.
    mac = 0
    for answers, result in decided_paths(tmp_path, lambda a: a.get("target") == "accelerate"):
        text = " ".join(" ".join(result.warnings).split())
        on_mac = answers.get("hardware") == "mps"
        assert (FP32 in text) == on_mac, answers
        if on_mac:
            assert result.recommendation.settings.get("mixed_precision") in (None, "no"), answers
            mac += 1
    assert mac, "no Mac path"
