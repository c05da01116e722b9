"""DPO: preference pairs against a frozen reference model, in the memory model, the decision and the files.

The invariants, over every DPO path of the walk (tests/paths.py):

* each layout's activations are those of supervised training at twice the micro-batch (a pair is a
  chosen and a rejected sequence);
* its model states are supervised training's plus the reference copy's share on each GPU: the whole
  copy where the layout keeps whole weights (one GPU, DDP, ZeRO-1/2), 1/N where it shards them
  (ZeRO-3, FSDP2), none where it offloads them (its host RAM holds the copy instead); and nothing
  with LoRA or QLoRA (the base with the adapters off) or precomputed log-probs;
* the copy is 16-bit under DeepSpeed and Axolotl, and the fp32 deep copy of the trained model for an
  Accelerate script outside DeepSpeed;
* the written axolotl.yaml trains DPO (rl: dpo, no sample packing) and Axolotl's own validator takes it;
* the Accelerate files tell the script what the estimate assumed about the reference.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from helpers import decide, decided_paths, file, parsed
from realtools import axolotl_validate
from wizard.engine.advice import model_assumption
from wizard.engine.memory import (
    GIB,
    estimate,
    reference_bytes,
    reference_shards,
    to_gib,
    weight_bytes,
)


def _dpo(answers: dict[str, Any]) -> bool:
    return answers.get("objective") == "dpo"


@pytest.fixture(scope="module")
def dpo_paths(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[dict[str, Any], Any]]:
    paths = decided_paths(tmp_path_factory.mktemp("walk"), _dpo, refusals=True)
    assert len(paths) >= 20, "the walk's DPO paths are missing"
    return paths


def test_every_layout_counts_pairs_and_the_reference_where_it_lives(
    dpo_paths: list[tuple[dict[str, Any], Any]],
) -> None:
    checked = 0
    for answers, result in dpo_paths:
        facts = result.recommendation.facts
        work = facts.workload
        if work is None:
            continue
        assert work.pairs
        expected_reference = (
            "base" if answers["method"] != "full" else "precomputed" if answers.get("reference_log_probs") else "copy"
        )
        assert work.reference == expected_reference, answers
        sft = replace(work, pairs=False, reference="", micro_batch_size=2 * work.micro_batch_size)
        for strategy, est in facts.estimates.items():
            gpu = est.gpu_memory / GIB
            host = None if est.host_memory is None else est.host_memory / GIB
            plain = estimate(sft, strategy, gpu, host)
            assert est.activations == plain.activations, (answers, strategy)
            shards = reference_shards(work, strategy)
            on_gpu = reference_bytes(work, strategy) // shards if shards else 0
            assert est.model_states == plain.model_states + on_gpu, (answers, strategy)
            if work.reference == "copy":
                deepspeed = strategy.startswith("zero")
                fp32 = answers["target"] == "accelerate" and not deepspeed and work.half_precision
                assert reference_bytes(work, strategy) == weight_bytes(work) * (2 if fp32 else 1) > 0
                if strategy in ("ddp", "zero1", "zero2", "zero2_offload_optimizer"):
                    assert shards == 1, strategy
                elif strategy in ("zero3", "zero3_offload_optimizer", "fsdp2"):
                    assert shards == work.world_size, strategy
                elif strategy in ("zero3_offload_all", "fsdp2_offload"):
                    # Offloaded with the weights: host RAM holds it, with the offload's buffer allowance.
                    assert shards == 0 and est.host_per_node > plain.host_per_node, strategy
            else:
                assert on_gpu == 0 and est.host_per_node == plain.host_per_node, (answers, strategy)
            checked += 1
    assert checked > 100


def test_a_full_dpo_run_needs_more_than_the_same_sft_run_and_never_a_lighter_layout(tmp_path: Path) -> None:
    base = {
        "target": "accelerate",
        "hardware": "nvidia",
        "gpu_model": "A100",
        "gpus_per_node": 8,
        "model": "8B",
        "method": "full",
        "sequence_length": 2048,
        "micro_batch_size": 1,
    }
    sft = decide(base, tmp_path / "sft").recommendation
    dpo = decide({**base, "objective": "dpo"}, tmp_path / "dpo").recommendation
    whole = 2 * sft.facts.shape.params
    ddp_sft, ddp_dpo = sft.facts.estimates["ddp"], dpo.facts.estimates["ddp"]
    # A whole fp32 copy beside DDP's fp32 weights (TRL deep-copies the model the script trains), and the
    # activations of two sequences per pair; DeepSpeed casts its copy to 16 bit.
    assert ddp_dpo.model_states - ddp_sft.model_states == 2 * whole
    assert ddp_dpo.activations > ddp_sft.activations
    zero3_sft, zero3_dpo = sft.facts.estimates["zero3"], dpo.facts.estimates["zero3"]
    assert zero3_dpo.model_states - zero3_sft.model_states == whole // 8
    # The reference never makes a lighter layout fit.
    for strategy, est in dpo.facts.estimates.items():
        assert not est.fits or sft.facts.estimates[strategy].fits, strategy


def test_the_assumed_line_names_the_pairs_and_the_reference_copy(dpo_paths: list[tuple[dict[str, Any], Any]]) -> None:
    for answers, result in dpo_paths:
        work = result.recommendation.facts.workload
        if work is None or result.recommendation.refused:
            continue
        strategy = str(result.recommendation.settings.get("strategy"))
        line = " ".join(model_assumption(result.session.answers, result.recommendation.facts, strategy).split())
        assert "DPO: each pair of the micro-batch" in line and "chosen and a rejected answer" in line, answers
        if work.reference == "copy":
            assert f"({to_gib(reference_bytes(work, strategy))} GiB)" in line and "as the reference" in line, answers
        elif work.reference == "base":
            assert "base model with the adapters switched off" in line, answers
        else:
            assert "reference log-probs are computed in one forward pass over the data before training" in line, answers


def test_written_axolotl_configs_train_dpo_and_axolotl_accepts_them(
    dpo_paths: list[tuple[dict[str, Any], Any]], tmp_path: Path
) -> None:
    seen = 0
    for index, (answers, result) in enumerate(dpo_paths):
        if answers["target"] != "axolotl" or result.recommendation.refused:
            continue
        config = parsed(result, "axolotl.yaml")
        assert config["rl"] == "dpo" and config["sample_packing"] is False, answers
        assert config["datasets"][0]["type"] == "chatml.intel"
        path = tmp_path / f"axolotl{index}.yaml"
        path.write_text(file(result, "axolotl.yaml").text)
        gpus = int(answers.get("gpus_per_node", 1)) * int(answers.get("num_nodes", 1))
        axolotl_validate(path, n_gpu=gpus)
        seen += 1
    assert seen >= 8


def test_accelerate_files_say_how_the_script_keeps_the_reference(dpo_paths: list[tuple[dict[str, Any], Any]]) -> None:
    seen = set()
    for answers, result in dpo_paths:
        if answers["target"] != "accelerate" or result.recommendation.refused or not result.files:
            continue
        head = " ".join(result.files[0].text.replace("#", " ").split())
        assert "TRL's DPOTrainer" in head, answers
        work = result.recommendation.facts.workload
        kind = work.reference if work is not None else "base"
        if kind == "copy":
            assert "keeps a frozen copy of the model as the reference" in head
        elif kind == "precomputed":
            assert "set DPOConfig(precompute_ref_log_probs=True) and pass no ref_model" in head
        else:
            assert "base model with the adapters switched off" in head
        seen.add(kind)
    assert seen == {"copy", "precomputed", "base"}


def test_supervised_runs_write_no_rl_key(tmp_path: Path) -> None:
    answers = {
        "target": "axolotl",
        "hardware": "nvidia",
        "gpu_model": "A100",
        "gpus_per_node": 2,
        "model": "7B",
        "method": "lora",
        "sequence_length": 2048,
    }
    result = decide(answers, tmp_path)
    config = parsed(result, "axolotl.yaml")
    assert "rl" not in config and config["sample_packing"] is True
    dpo = decide({**answers, "objective": "dpo"}, tmp_path / "dpo")
    assert parsed(dpo, "axolotl.yaml")["rl"] == "dpo"


ONE_4090_1B_FULL_DPO = {
    "target": "accelerate",
    "hardware": "nvidia",
    "gpu_model": "RTX 4090",
    "gpus_per_node": 1,
    "cpu_memory_gb": 64,
    "model": "1B",
    "method": "full",
    "objective": "dpo",
    "sequence_length": 2048,
}


def test_precomputing_the_reference_is_offered_where_the_copy_forces_offload(tmp_path: Path) -> None:
    """1B full DPO on an RTX 4090: the copy pushes one GPU past its usable memory, so the run offloads;
    the lever says that precomputed log-probs fit without offload, with the figure of that run."""
    result = decide(ONE_4090_1B_FULL_DPO, tmp_path / "live")
    rec = result.recommendation
    assert rec.settings.get("offload_optimizer") == "cpu"
    lever = next(w for w in result.levers if "reference log-probs precomputed" in w.change)
    precomputed = decide({**ONE_4090_1B_FULL_DPO, "reference_log_probs": "precomputed"}, tmp_path / "pre")
    chosen = precomputed.recommendation.settings["strategy"]
    assert chosen == "ddp" and precomputed.recommendation.settings.get("offload_optimizer") in (None, "none")
    assert lever.gib_per_gpu == to_gib(precomputed.recommendation.facts.estimates[chosen].total)
    # Axolotl loads the copy either way: no such lever there.
    axolotl = decide({**ONE_4090_1B_FULL_DPO, "target": "axolotl"}, tmp_path / "ax")
    assert not any("reference log-probs" in w.change for w in axolotl.levers)


def test_smoke_refuses_a_dpo_set_and_says_what_to_run_instead(tmp_path: Path) -> None:
    out = tmp_path / "set"
    decide(ONE_4090_1B_FULL_DPO, out, write=True)
    done = subprocess.run(
        [sys.executable, "-m", "wizard", "smoke", str(out)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "is a DPO set" in done.stderr and "--set objective=sft" in done.stderr


def test_axolotl_dpo_with_a_4bit_base_never_gets_fsdp2(dpo_paths: list[tuple[dict[str, Any], Any]]) -> None:
    """Axolotl's validator refuses FSDP2 with load_in_4bit for rl: dpo: such a run keeps full copies (DDP
    or one GPU) or is refused with the DeepSpeed JSON to bring; Accelerate's QLoRA DPO may shard."""
    refused = sharded_elsewhere = 0
    for answers, result in dpo_paths:
        rec = result.recommendation
        if answers["method"] != "qlora":
            continue
        if answers["target"] == "axolotl":
            assert rec.backend != "fsdp2", answers
            if rec.refused and rec.rule.id == "axolotl_dpo_quantized_sharded":
                text = " ".join(str(rec.because).split())
                assert "its config check refuses FSDP2 with load_in_4bit for rl: dpo" in text, text
                assert "--set target=accelerate" in text and "deepspeed_config" in text, text
                refused += 1
        elif rec.backend == "fsdp2":
            sharded_elsewhere += 1
    assert refused and sharded_elsewhere


def test_the_memory_line_never_calls_a_run_past_the_usable_line_within_it(tmp_path: Path) -> None:
    """Property over every decided path: "still within the usable memory" is said only where the loss
    peak is within the usable line, and a run past that line (a brought JSON run as written) says so."""
    from wizard.engine.memory import memory_gib
    from wizard.ui.console import verdict_lines

    checked = past = 0
    for _, result in decided_paths(tmp_path)[::2]:
        rec = result.recommendation
        lines = dict(verdict_lines(rec))
        est = rec.facts.estimates.get(str(rec.settings.get("strategy"))) if rec.facts.estimates else None
        if "Memory" not in lines or est is None:
            continue
        memory = lines["Memory"]
        if "still within the usable memory" in memory:
            assert est.peak <= est.budget, memory
        if est.total > est.gpu_memory:
            # Past the GPU itself: said as a run that cannot start, not as one past a margin.
            assert "as written it cannot run" in memory and f"{memory_gib(est.gpu_memory)} GiB itself" in memory
            past += 1
        elif est.total > est.budget:
            assert f"more than the {to_gib(est.budget)} GiB usable" in memory, memory
            past += 1
        checked += 1
    assert checked > 100 and past


def test_an_accelerate_dpo_set_names_trl_and_its_config_and_offers_no_smoke(tmp_path: Path) -> None:
    answers = {**ONE_4090_1B_FULL_DPO, "model": "7B", "method": "lora", "global_batch_size": 16}
    path = tmp_path / "answers.yaml"
    path.write_text(yaml.safe_dump(answers))
    out = tmp_path / "set"
    done = subprocess.run(
        [sys.executable, "-m", "wizard", "--answers", str(path), "--output-dir", str(out)],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert done.returncode == 0, done.stderr
    assert "backend-wizard smoke" not in done.stdout  # smoke runs no DPO set
    header = " ".join((out / "accelerate_config.yaml").read_text().replace("#", " ").split())
    assert "pip install trl" in header
    assert "DPOConfig(per_device_train_batch_size=1, gradient_accumulation_steps=16)" in header
    assert "DPOConfig(per_device_train_batch_size=1, max_length=2048)" in header
    assert "DPOConfig(gradient_checkpointing=True)" in header
    assert "DataLoader(batch_size" not in header and "get_peft_model" not in header


def test_precomputed_log_probs_drop_the_reference_pass_from_the_step(tmp_path: Path) -> None:
    """LoRA keeps no reference copy, but scores with the base every step: precomputing shortens the step,
    never the memory; with a full fine-tune it drops the copy as well."""
    lora = {**ONE_4090_1B_FULL_DPO, "method": "lora"}
    live = decide(lora, tmp_path / "live").recommendation
    pre = decide({**lora, "reference_log_probs": "precomputed"}, tmp_path / "pre").recommendation
    strategy = live.settings["strategy"]
    assert pre.settings["strategy"] == strategy
    assert pre.facts.estimates[strategy].total == live.facts.estimates[strategy].total
    assert pre.facts.speeds[strategy].low < live.facts.speeds[strategy].low
