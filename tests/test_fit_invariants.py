"""Properties of the decision over every path of the tree: no offload, parallelism or hardware
that the numbers and the user's answers do not call for, and a warning whenever a brought
DeepSpeed JSON does not fit."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from paths import plain_zero3_json

from helpers import decide, decided_paths, file
from wizard.app import Result
from wizard.engine.facts import expert_parallel_supported
from wizard.engine.json_fit import LEVERS
from wizard.engine.memory import OFFLOAD_STRATEGIES
from wizard.engine.model_size import shape_for_model

Outcome = tuple[dict[str, Any], Result]


@pytest.fixture(scope="module")
def decided(tmp_path_factory: pytest.TempPathFactory) -> list[Outcome]:
    """Every path that reaches a decision (recommendation or refusal), dry run."""
    results = decided_paths(tmp_path_factory.mktemp("invariants"), refusals=True)
    assert len(results) > 500
    return results


def _gpu_answers(answers: dict[str, Any]) -> bool:
    return answers.get("hardware") in ("nvidia", "amd")


def test_no_offload_when_a_strategy_without_offload_fits(decided: list[Outcome]) -> None:
    """Offload only when the user asked for it or nothing without it fits; one GPU uses the one-GPU figure."""
    checked = single = 0
    for answers, result in decided:
        rec = result.recommendation
        if (
            not _gpu_answers(answers)
            or rec.refused
            or "deepspeed_config" in answers
            or answers.get("megatron")
            or answers.get("offload", "auto") in ("cpu", "nvme")
            # Axolotl's layer offloading asked for by name runs where it fits, as asked.
            or answers.get("layer_offloading") is True
            # Beside DDP on several GPUs it is the guide's lever before sharding (test_layer_offload_beside_ddp).
            or (rec.settings.get("strategy") == "ddp_layer_offload" and rec.facts.get("layer_offload_beside_ddp"))
        ):
            continue
        est = rec.facts.estimates
        world = rec.facts.get("world_size")
        candidates = ("ddp",) if world == 1 else ("ddp", "fsdp2", "hsdp")
        if any(est[name].fits for name in candidates if name in est):
            checked += 1
            assert rec.settings["strategy"] not in OFFLOAD_STRATEGIES, (answers, rec.rule.id)
            assert rec.settings["offload_optimizer"] == "none" and rec.settings["offload_param"] == "none", answers
            # Axolotl's layer offloading (frozen layers in CPU RAM) is offload too: only when asked.
            if "layer_offloading" not in answers:
                assert result.session.answers.get("layer_offloading") is not True, answers
            if world == 1:
                single += 1
                assert rec.backend == "single_gpu", (answers, rec.rule.id)
    assert checked > 100 and single > 20, (checked, single)


def test_qlora_on_several_gpus_is_sharded_only_when_a_whole_copy_does_not_fit(decided: list[Outcome]) -> None:
    """QLoRA on several GPUs takes FSDP2 because the model must be sharded: where a full copy fits on
    each GPU, plain DDP (the same rule as any method) wins, as it is the faster layout."""
    sharded = whole = 0
    for answers, result in decided:
        rec = result.recommendation
        if rec.refused or answers.get("method") != "qlora" or (rec.facts.get("world_size") or 1) < 2:
            continue
        if rec.rule.id == "qlora_sharded":
            sharded += 1
            assert rec.facts.get("fits_ddp") is False, answers
        plain = not answers.get("megatron") and "deepspeed_config" not in answers
        asked = answers.get("offload", "auto") != "auto" or rec.facts.get("nd_parallel") is True
        if rec.facts.get("fits_ddp") and plain and not asked:
            whole += 1
            assert rec.settings["strategy"] == "ddp", (answers, rec.rule.id)
    assert sharded > 0 and whole > 0, (sharded, whole)


def test_parallel_sizes_only_when_asked_or_nothing_fits_without(decided: list[Outcome]) -> None:
    """TP, CP and EP above 1 come from the user's answer or from a plain FSDP2 shard that does not fit."""
    derived = 0
    for answers, result in decided:
        rec = result.recommendation
        if rec.refused or answers.get("megatron") or answers.get("model_parallel"):
            continue  # asked for: Megatron-LM's layout, or a tensor parallel size set by hand
        for key, question in (
            ("tp_size", "tensor_parallel_size"),
            ("cp_size", "context_parallel_size"),
            ("ep_size", "expert_parallel_size"),
        ):
            size = rec.settings.get(key) or 1
            if size <= 1 or question in answers:
                continue
            derived += 1
            assert not rec.facts.estimates["fsdp2"].fits, (answers, key, size)
            if key == "ep_size":
                assert expert_parallel_supported(rec.facts.shape), answers  # type: ignore[arg-type]
    assert derived, "no path derives a parallel size: the walk lost its long-context or MoE paths"


def test_expert_parallel_never_for_a_model_the_plugin_excludes(decided: list[Outcome]) -> None:
    mixtral = [(a, r) for a, r in decided if a.get("model") in ("8x7B", "8x22B")]
    assert mixtral
    for answers, result in mixtral:
        assert (result.recommendation.settings.get("ep_size") or 1) == 1, answers
        assert "expert_parallel_size" not in result.session.answers, answers
    assert not expert_parallel_supported(shape_for_model("8x7B"))
    assert expert_parallel_supported(shape_for_model("30B-A3B"))


def test_brought_json_that_does_not_fit_is_warned_with_the_keys_that_fit(decided: list[Outcome]) -> None:
    warned = host_short = offload_named = 0
    for answers, result in decided:
        rec = result.recommendation
        if "deepspeed_config" not in answers or rec.refused or not rec.facts.estimates:
            continue
        est = rec.facts.estimates[rec.settings["strategy"]]
        notes = [w for w in result.warnings if "your DeepSpeed JSON" in w]
        if est.fits and est.host_fits is not False:
            assert not notes, (answers, notes)
            continue
        warned += 1
        host_short += est.fits
        assert len(notes) == 1, (answers, result.warnings)
        head = "axolotl.yaml" if answers.get("target") == "axolotl" else "accelerate_config.yaml"
        assert "your DeepSpeed JSON" in file(result, head).text, answers
        launch = " ".join(line.lstrip("#").strip() for line in file(result, "launch.sh").text.splitlines())
        assert f"at the head of {head} before the first run" in launch, answers
        note = notes[0]
        if est.fits:  # the GPU holds it, the host RAM does not
            assert "not the host RAM" in note and f"{est.host_per_node / 2**30:.1f} GiB per machine" in note
        if "To make it fit" in note:
            edit = note.split("To make it fit, ", 1)[1].split(" in the JSON's", 1)[0]
            # A stage the JSON already has is said as kept ('keep "stage": 2 and put ...').
            kept = re.match(r'keep ("stage": \d) and put (.*)', edit)
            members = f"{kept.group(1)}, {kept.group(2)}" if kept else edit.removeprefix("put ")
            block = json.loads("{" + members + "}")
            lever = next(name for name, keys in LEVERS.items() if keys == block)
            if kept:
                assert f"zero{block['stage']}" in str(rec.settings["strategy"]), (kept.group(1), rec.settings)
            assert rec.facts.estimates[lever].fits, (answers, lever)
            assert rec.facts.estimates[lever].host_fits is not False, (answers, lever)
            assert "its other keys stay as they are" in note, note
        elif "none fits this host RAM" in note:
            # The offload named needs the least host RAM of the layouts that fit the GPU.
            block = json.loads("{" + note.split(" is ", 1)[1].split(" (", 1)[1].split(" in the JSON's", 1)[0] + "}")
            lever = next(name for name, keys in LEVERS.items() if keys == block)
            fitting = [
                rec.facts.estimates[n] for n in LEVERS if n in rec.facts.estimates and rec.facts.estimates[n].fits
            ]
            assert rec.facts.estimates[lever].fits, (answers, lever)
            assert rec.facts.estimates[lever].host_per_node == min(e.host_per_node for e in fitting), (answers, lever)
            installed = round(rec.facts.estimates[lever].host_per_node / 0.8 / 2**30, 1)
            assert f"about {installed} GiB of RAM installed (free -g's total; " in note, note
            offload_named += 1
    assert warned > 3 and host_short and offload_named, (warned, host_short, offload_named)


def test_one_device_hardware_shows_only_what_runs_there(decided: list[Outcome]) -> None:
    seen = 0
    for answers, result in decided:
        if answers.get("hardware") not in ("mps", "hpu", "xpu", "npu", "mlu", "musa"):
            continue
        rec = result.recommendation
        if rec.facts.estimates:
            seen += 1
            assert set(rec.facts.estimates) == {"ddp"}, answers
        if answers["hardware"] == "mps" and rec.refused:
            assert rec.rule.id == "apple_mps_does_not_fit"
            levers = rec.because.split("levers that apply here are:", 1)[1]
            for lever in ("QLoRA", "add GPUs", "offload"):
                assert lever not in levers, (lever, rec.because)
            assert f"about {rec.facts.estimates['ddp'].total / 2**30:.1f} GiB" in rec.because
    assert seen > 20


# The cases below are the journeys that went wrong; each pins the decision a user should get.

ONE_GPU = {"hardware": "nvidia", "gpus_per_node": 1}


def test_one_24gb_gpu_8b_lora_runs_on_one_gpu_without_offload(tmp_path: Path) -> None:
    answers = {
        **ONE_GPU,
        "gpu_model": "RTX 4090",
        "gpu_memory_gb": 24,
        "cpu_memory_gb": 64,
        "model": "8B",
        "method": "lora",
        "sequence_length": 2048,
    }
    for target in ("axolotl", "accelerate"):
        rec = decide({**answers, "target": target}, tmp_path).recommendation
        assert (rec.backend, rec.rule.id) == ("single_gpu", "single_gpu"), target
        assert rec.settings["offload_optimizer"] == rec.settings["offload_param"] == "none"


def test_one_gpu_offload_text_uses_the_one_gpu_figure(tmp_path: Path) -> None:
    rec = decide(
        {**ONE_GPU, "target": "accelerate", "gpu_model": "A100 80GB", "model": "7B", "method": "full"},
        tmp_path,
    ).recommendation
    assert rec.settings["strategy"] in OFFLOAD_STRATEGIES
    ddp = rec.facts.estimates["ddp"].total / 2**30
    assert f"On one GPU the 7.0B full fine-tune run needs about {ddp:.1f} GiB" in rec.because


A10G_MOE = {"target": "axolotl", "hardware": "nvidia", "gpu_model": "A10G", "sequence_length": 4096}


def test_mixtral_qlora_on_four_a10g_is_plain_fsdp2(tmp_path: Path) -> None:
    answers = {**A10G_MOE, "gpus_per_node": 4, "cpu_memory_gb": 192, "model": "8x7B", "method": "qlora"}
    answers |= {"micro_batch_size": 1, "base_model": "mistralai/Mixtral-8x7B-v0.1"}
    result = decide(answers, tmp_path)
    rec = result.recommendation
    assert (rec.backend, rec.settings["strategy"]) == ("fsdp2", "fsdp2")
    assert (rec.settings.get("ep_size") or 1) == 1
    assert "expert_parallel_size" not in file(result, "axolotl.yaml").text


def test_a_supported_moe_that_does_not_fit_sharded_is_asked_for_expert_parallel_but_not_given_it(
    tmp_path: Path,
) -> None:
    # Qwen3-30B-A3B full on 8 x A10G: the plugin supports its experts, so the question is asked,
    # but no expert-parallel size lowers the estimate below a plain FSDP2 shard (which does not
    # fit), so the default stays 1 and the tree offloads instead.
    answers = {**A10G_MOE, "gpus_per_node": 8, "gpu_memory_gb": 24, "model": "30B-A3B", "method": "full"}
    result = decide(answers, tmp_path)
    rec = result.recommendation
    assert not rec.facts.estimates["fsdp2"].fits
    assert result.session.answers["expert_parallel_size"] == 1
    assert (rec.rule.id, rec.settings["strategy"]) == ("offload_fsdp2", "fsdp2_offload")


def test_brought_zero3_json_for_70b_on_two_machines_is_warned(tmp_path: Path) -> None:
    result = decide(
        {
            "target": "accelerate",
            "hardware": "nvidia",
            "gpu_model": "H100",
            "gpus_per_node": 8,
            "num_nodes": 2,
            "gpu_memory_gb": 80,
            "cpu_memory_gb": 2048,
            "model": "70B",
            "method": "full",
            "deepspeed_config": plain_zero3_json(tmp_path),
        },
        tmp_path / "out",
    )
    (note,) = [w for w in result.warnings if "your DeepSpeed JSON" in w]
    assert "does not fit" in note and '"offload_optimizer": {"device": "cpu"' in note
    assert note.split(" ")[0] in file(result, "accelerate_config.yaml").text


def test_a_refusal_names_only_levers_that_can_help(tmp_path: Path) -> None:
    # 13B full on one RTX 4090 with 64 GB of RAM: offloading everything fits the GPU (3 GiB) but
    # not the host RAM, so the levers are host RAM or NVMe, not a shorter sequence.
    result = decide(
        {
            **ONE_GPU,
            "target": "axolotl",
            "gpu_model": "RTX 4090",
            "cpu_memory_gb": 64,
            "model": "13B",
            "method": "full",
        },
        tmp_path,
    )
    rec = result.recommendation
    assert rec.rule.id == "nothing_fits"
    levers = rec.because.split("To change that, one or more of:", 1)[1]
    host = rec.facts.estimates["fsdp2_offload"].host_per_node / 2**30
    # Installed RAM: the wizard counts only part of it as usable.
    installed = host / 0.8
    assert f"add host RAM (about {installed:.1f} GiB per machine as free -g's total" in levers, levers
    assert "offload: nvme" in levers
    assert "sequence_length" not in levers
    # A long sequence that does not fit even offloaded: the activation levers are named.
    long = decide(
        {**ONE_GPU, "target": "axolotl", "gpu_model": "RTX 4090", "model": "8B", "method": "lora"}
        | {"sequence_length": 262144, "gradient_checkpointing": False},
        tmp_path,
    ).recommendation
    assert long.rule.id == "nothing_fits" and "shorten sequence_length" in long.because
    assert "turn on gradient checkpointing" in long.because


def test_full_1b_on_a_16gb_mac_refuses_with_levers_that_apply(tmp_path: Path) -> None:
    result = decide(
        {"target": "accelerate", "hardware": "mps", "gpu_memory_gb": 16, "model": "1B", "method": "full"}, tmp_path
    )
    rec = result.recommendation
    assert rec.refused and rec.rule.id == "apple_mps_does_not_fit"
    assert set(rec.facts.estimates) == {"ddp"}
    levers = rec.because.split("levers that apply here are:", 1)[1]
    assert "use LoRA" in levers and "QLoRA" not in levers


def test_the_chosen_figure_is_shown_part_by_part_and_the_parts_add_up(decided: list[Outcome]) -> None:
    """Every decision: its model states, activations and overhead, part by part, sum to the
    estimate's bytes exactly, and the summary line names each part with its rounded size."""
    from wizard.engine.memory import activation_parts, figure_parts, state_parts
    from wizard.ui.console import made_of

    checked = 0
    for answers, result in decided:
        rec = result.recommendation
        work, strategy = rec.facts.workload, str(rec.settings.get("strategy"))
        est = rec.facts.estimates.get(strategy) if rec.facts.estimates else None
        if rec.refused or work is None or est is None:
            assert made_of(rec) is None
            continue
        assert sum(size for _, size in state_parts(work, strategy)) == est.model_states, answers
        assert sum(size for _, size in activation_parts(work, strategy)) == est.activations, answers
        parts = figure_parts(work, strategy)
        assert sum(size for _, size in parts) == est.total, answers
        line = made_of(rec)
        assert line is not None and all(what in line for what, _ in parts), (answers, line)
        checked += 1
    assert checked > 300
