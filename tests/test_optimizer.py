"""The optimizer answer: its state in the memory model, the decision it moves, the files it writes."""

from __future__ import annotations

import py_compile
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from helpers import decide, decided_paths, file, parsed, write_yaml
from realtools import axolotl_validate
from wizard.cli import main
from wizard.engine.memory import (
    BNB_BLOCK,
    CPU_STEP_STRATEGIES,
    EIGHT_BIT_STRATEGIES,
    OPTIMIZERS,
    Workload,
    applicable_strategies,
    estimate,
    moment_bytes,
    state_parts,
    trainable_params,
)
from wizard.engine.model_size import shape_for_model
from wizard.errors import WizardError

# Workloads over the methods, precisions and layouts (one GPU, one machine of 8, 4 machines of 8).
WORKLOADS = [
    Workload(
        shape=shape_for_model(model),
        method=method,
        world_size=world,
        num_nodes=nodes,
        sequence_length=2048,
        micro_batch_size=1,
        gradient_checkpointing=True,
        half_precision=half,
    )
    for model in ("1.3B", "7B", "70B")
    for method in ("full", "lora", "qlora")
    for half in (True, False)
    for world, nodes in ((1, 1), (8, 1), (32, 4))
]


def _divisor(workload: Workload, strategy: str) -> int:
    """How many ways the strategy splits the optimizer state (the ZeRO paper's formulas)."""
    if strategy in ("ddp", "ddp_layer_offload"):
        return 1
    if strategy == "hsdp":
        return max(workload.world_size // workload.num_nodes, 1)
    return workload.world_size


@pytest.mark.parametrize("workload", WORKLOADS, ids=lambda w: f"{w.method}-{w.world_size}-{w.half_precision}")
def test_state_bytes_per_optimizer(workload: Workload) -> None:
    t = trainable_params(workload)
    assert moment_bytes(replace(workload, optimizer="adamw")) == 8 * t
    eight = moment_bytes(replace(workload, optimizer="adamw_8bit"))
    assert eight == 2 * t + -(-8 * t // BNB_BLOCK)  # two 1-byte moments and an fp32 scale per block
    assert moment_bytes(replace(workload, optimizer="paged_adamw_8bit")) == eight
    assert moment_bytes(replace(workload, optimizer="adafactor")) < eight


@pytest.mark.parametrize("workload", WORKLOADS, ids=lambda w: f"{w.method}-{w.world_size}-{w.half_precision}")
def test_every_strategy_orders_the_optimizers_by_their_state(workload: Workload) -> None:
    """8-bit <= AdamW and Adafactor <= 8-bit in every strategy; the difference is the moments' term only."""
    for strategy in applicable_strategies(workload):
        runs = {o: estimate(replace(workload, optimizer=o), strategy, 80, 2048) for o in OPTIMIZERS}
        adamw = runs["adamw"]
        assert runs["adamw_8bit"].total <= adamw.total, strategy
        assert runs["paged_adamw_8bit"].total == runs["adamw_8bit"].total, strategy
        assert runs["adafactor"].total <= runs["adamw_8bit"].total, strategy
        for name, run in runs.items():
            # Only the model states change, by the moments' bytes over the strategy's split.
            assert (run.activations, run.overhead, run.gathered) == (adamw.activations, adamw.overhead, adamw.gathered)
            saved = moment_bytes(replace(workload, optimizer="adamw"), strategy) - moment_bytes(
                replace(workload, optimizer=name), strategy
            )
            if strategy in CPU_STEP_STRATEGIES:
                # The optimizer step runs on the CPU with AdamW: nothing changes, host RAM included.
                assert saved == 0 and run == adamw, (strategy, name)
                continue
            expected = saved / _divisor(workload, strategy)
            assert abs((adamw.model_states - run.model_states) - expected) <= 2, (strategy, name)
            assert run.host_per_node == adamw.host_per_node
            parts = dict(state_parts(replace(workload, optimizer=name), strategy))
            assert sum(parts.values()) == run.model_states


def test_the_breakdown_names_the_optimizer() -> None:
    workload = replace(WORKLOADS[3], optimizer="adamw_8bit")
    words = " ".join(what for what, _ in state_parts(workload, "ddp"))
    assert "8-bit AdamW" in words and "Adam's two moments" not in words
    words = " ".join(what for what, _ in state_parts(workload, "zero2_offload_optimizer"))
    assert "8-bit" not in words


# ---------------------------------------------------------------------------------------------
# Over the paths of the tree
# ---------------------------------------------------------------------------------------------


def _asked(answers: dict[str, Any], result: Any) -> bool:
    """Whether the optimizer question applies: NVIDIA/AMD GPUs, no CPU/NVMe offload, no Megatron-LM."""
    return (
        answers.get("hardware") in ("nvidia", "amd")
        and answers.get("offload") not in ("cpu", "nvme")
        and answers.get("megatron") is not True
    )


def _files(result: Any) -> dict[str, str]:
    return {f.name: f.text for f in result.files if f.name != "answers.yaml"}


def test_adamw_answered_gives_todays_outputs_on_every_path(tmp_path: Path) -> None:
    # Every third path where the question applies (one and several GPUs), to keep the suite's time.
    paths = [(a, r) for a, r in decided_paths(tmp_path) if _asked(a, r)][::3]
    assert len(paths) >= 20
    for answers, before in paths:
        after = decide({**answers, "optimizer": "adamw"}, tmp_path / "out")
        assert after.recommendation.backend == before.recommendation.backend, answers
        assert after.recommendation.settings == before.recommendation.settings, answers
        assert after.recommendation.facts.estimates == before.recommendation.facts.estimates, answers
        assert _files(after) == _files(before), answers


def test_eight_bit_never_needs_more_memory_on_any_path(tmp_path: Path) -> None:
    paths = [(a, r) for a, r in decided_paths(tmp_path) if _asked(a, r)]
    flipped = 0
    for answers, before in paths:
        try:
            after = decide({**answers, "optimizer": "adamw_8bit"}, tmp_path / "out")
        except WizardError as exc:
            # Disabled only where a DeepSpeed JSON is brought: the reason says so.
            assert "deepspeed_config" in answers, answers
            assert "flattened partitions" in str(exc)
            continue
        old, new = before.recommendation.facts, after.recommendation.facts
        for strategy, est in new.estimates.items():
            assert est.total <= old.estimates[strategy].total, (answers, strategy)
            assert est.host_per_node <= old.estimates[strategy].host_per_node, (answers, strategy)
        if old.get("fits_without_offload"):
            assert new.get("fits_without_offload"), answers
        flipped += bool(new.get("fits_without_offload")) and not old.get("fits_without_offload")
    assert flipped >= 1  # somewhere the smaller state lets a run fit without offload


# ---------------------------------------------------------------------------------------------
# A known case and the written files, through the CLI
# ---------------------------------------------------------------------------------------------

SIX_B = {
    "target": "accelerate",
    "hardware": "nvidia",
    "gpu_model": "A100 80GB",
    "gpus_per_node": 1,
    "cpu_memory_gb": 512,
    "model": "6B",
    "method": "full",
    "offload": "auto",
}


def test_six_b_full_on_one_a100_fits_without_offload_with_eight_bit(tmp_path: Path) -> None:
    """6B full fine-tune, one A100 80GB: AdamW ~16 B/param needs offload; 8-bit AdamW ~10 B/param fits."""
    adamw = decide(dict(SIX_B), tmp_path / "a")
    assert adamw.recommendation.settings["offload_optimizer"] == "cpu"
    for optimizer in ("adamw_8bit", "paged_adamw_8bit", "adafactor"):
        run = decide({**SIX_B, "optimizer": optimizer}, tmp_path / optimizer)
        assert run.recommendation.settings["offload_optimizer"] == "none", optimizer
        assert run.recommendation.backend == "single_gpu"


@pytest.mark.parametrize(
    ("optimizer", "module", "cls"),
    [
        ("adamw_8bit", "bitsandbytes.optim", "AdamW8bit"),
        ("paged_adamw_8bit", "bitsandbytes.optim", "PagedAdamW8bit"),
        ("adafactor", "transformers.optimization", "Adafactor"),
    ],
)
def test_snippet_builds_the_optimizer(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], optimizer: str, module: str, cls: str
) -> None:
    answers = write_yaml(tmp_path / "a.yaml", {**SIX_B, "optimizer": optimizer})
    code = main(["--answers", str(answers), "--output-dir", str(tmp_path / "out")])  # the CLI end to end
    assert code == 0, capsys.readouterr().err
    snippet = tmp_path / "out" / "train_snippet.py"
    py_compile.compile(str(snippet), doraise=True)
    text = snippet.read_text()
    assert f"from {module} import {cls}" in text and f"optimizer = {cls}(" in text
    # Imported inside main, where it is used: the module imports nothing but the standard library.
    top = text.split("def ")[0]
    imported = [line.split()[1].split(".")[0] for line in top.splitlines() if line.startswith(("import ", "from "))]
    assert module.split(".")[0] not in imported
    header = (tmp_path / "out" / "launch.sh").read_text()
    assert ("pip install bitsandbytes" in header) == (module == "bitsandbytes.optim")


def test_adamw_writes_no_snippet_for_the_optimizer(tmp_path: Path) -> None:
    run = decide({**SIX_B, "offload": "none", "model": "1.3B"}, tmp_path)
    assert "train_snippet.py" not in [f.name for f in run.files]


AXOLOTL = {
    "target": "axolotl",
    "hardware": "nvidia",
    "gpu_model": "A100 80GB",
    "gpus_per_node": 1,
    "model": "7B",
    "base_model": "meta-llama/Llama-2-7b-hf",
    "method": "lora",
}


@pytest.mark.parametrize(
    ("optimizer", "name"),
    [
        ("adamw", "adamw_torch_fused"),
        ("adamw_8bit", "adamw_bnb_8bit"),
        ("paged_adamw_8bit", "paged_adamw_8bit"),
        ("adafactor", "adafactor"),
    ],
)
def test_axolotl_yaml_names_the_optimizer_and_validates(tmp_path: Path, optimizer: str, name: str) -> None:
    run = decide({**AXOLOTL, "optimizer": optimizer}, tmp_path / "out", write=True)
    assert parsed(run, "axolotl.yaml")["optimizer"] == name
    cfg = axolotl_validate(tmp_path / "out" / "axolotl.yaml", n_gpu=1)
    assert str(cfg["optimizer"]).split(".")[-1].lower() == name


def test_offloaded_step_writes_adamw(tmp_path: Path) -> None:
    """Where the decision still offloads, the step runs on the CPU with AdamW, and the files say AdamW."""
    run = decide({**SIX_B, "model": "13B", "optimizer": "adamw_8bit"}, tmp_path)
    assert run.recommendation.settings["offload_optimizer"] == "cpu"
    assert "train_snippet.py" not in [f.name for f in run.files]
    assert "bitsandbytes" not in file(run, "ds_config.json").text


def test_brought_json_that_offloads_disables_eight_bit(tmp_path: Path) -> None:
    ds = tmp_path / "ds.json"
    ds.write_text('{"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}}')
    answers = {**SIX_B, "deepspeed_config": str(ds), "optimizer": "adamw_8bit"}
    del answers["offload"]
    with pytest.raises(WizardError, match="CPU Adam"):
        decide(answers, tmp_path / "out")
    answers["optimizer"] = "adafactor"
    with pytest.raises(WizardError, match="flat partitions"):
        decide(answers, tmp_path / "out")


def _written_optimizer(result: Any) -> str | None:
    """The optimizer the written files run: axolotl.yaml's key, or the class train_snippet.py builds."""
    names = {f.name: f for f in result.files}
    if "axolotl.yaml" in names:
        return str(parsed(result, "axolotl.yaml")["optimizer"])
    if "train_snippet.py" in names:
        text = names["train_snippet.py"].text
        for cls in ("PagedAdamW8bit", "AdamW8bit", "Adafactor"):
            if f"optimizer = {cls}(" in text:
                return cls
    return None


EIGHT_BIT_NAMES = {"adamw_bnb_8bit", "paged_adamw_8bit", "AdamW8bit", "PagedAdamW8bit"}


def test_eight_bit_runs_only_beside_whole_copies_and_a_dropped_answer_is_said(tmp_path: Path) -> None:
    """Invariant, over one and several GPUs, both tools, full and LoRA, from a copy that fits to one that needs
    offload: the files run the 8-bit optimizer exactly when the chosen layout keeps whole parameters on every GPU
    (one GPU or DDP); otherwise they run AdamW, the estimate counts AdamW for that layout, and a warning names
    the layout and says why. A full copy that fits with 8-bit AdamW is never sharded."""
    seen: set[str] = set()
    for target in ("accelerate", "axolotl"):
        for gpus in (1, 2, 4):
            for model in ("1.5B", "3B", "7B", "13B"):
                for method in ("full", "lora"):
                    for optimizer in ("adamw_8bit", "paged_adamw_8bit"):
                        answers = {
                            "target": target,
                            "hardware": "nvidia",
                            "gpu_model": "RTX 4090",
                            "gpus_per_node": gpus,
                            "cpu_memory_gb": 512,
                            "model": model,
                            "method": method,
                            "optimizer": optimizer,
                        }
                        run = decide(answers, tmp_path / "out")
                        rec = run.recommendation
                        if rec.refused:
                            continue
                        strategy = str(rec.settings["strategy"])
                        whole = strategy in EIGHT_BIT_STRATEGIES
                        written = _written_optimizer(run)
                        said = [w for w in run.warnings if w.startswith("optimizer: ")]
                        assert (written in EIGHT_BIT_NAMES) == whole, (answers, strategy, written)
                        assert bool(said) == (not whole), (answers, strategy, said)
                        workload = rec.facts.workload
                        assert workload is not None
                        counted = rec.facts.estimates[strategy]
                        as_adamw = estimate(replace(workload, optimizer="adamw"), strategy, 23.99, 512)
                        assert (counted.model_states == as_adamw.model_states) == (not whole), (answers, strategy)
                        if not whole:
                            assert rec.facts.estimates["ddp"].fits is False, answers  # sharded only when needed
                            assert f"the chosen layout ({counted.label}) runs AdamW" in " ".join(said[0].split())
                        seen.add("8-bit" if whole else "adamw")
                        seen.add(f"{'ddp' if gpus > 1 and whole else 'one' if whole else 'sharded'}")
    assert seen >= {"8-bit", "adamw", "ddp", "one", "sharded"}, seen


def test_eight_bit_lets_ddp_keep_a_whole_copy_on_two_4090s(tmp_path: Path) -> None:
    """A 1.5B full fine-tune on two RTX 4090: with AdamW a full copy does not fit (FSDP2 shards it); with 8-bit
    AdamW it does, so DDP runs it, the written Axolotl config validates with adamw_bnb_8bit, and the decision
    says what AdamW would have needed."""
    answers = {
        "target": "axolotl",
        "hardware": "nvidia",
        "gpu_model": "RTX 4090",
        "gpus_per_node": 2,
        "model": "1.5B",
        "method": "full",
    }
    adamw = decide(answers, tmp_path / "adamw").recommendation
    assert adamw.settings["strategy"] != "ddp"
    run = decide({**answers, "optimizer": "adamw_8bit"}, tmp_path / "out", write=True)
    rec = run.recommendation
    assert (rec.backend, rec.settings["strategy"]) == ("ddp", "ddp")
    because = " ".join(rec.because.split())
    assert "with 8-bit AdamW: with AdamW's fp32 moments the same copy would need about" in because, because
    assert parsed(run, "axolotl.yaml")["optimizer"] == "adamw_bnb_8bit"
    cfg = axolotl_validate(tmp_path / "out" / "axolotl.yaml", n_gpu=2)
    assert str(cfg["optimizer"]).split(".")[-1].lower() == "adamw_bnb_8bit"


def test_adafactor_is_offered_on_one_gpu_only(tmp_path: Path) -> None:
    four = {**SIX_B, "gpus_per_node": 4}
    with pytest.raises(WizardError, match="Adafactor on one GPU only"):
        decide({**four, "optimizer": "adafactor"}, tmp_path)


def test_auto_takes_eight_bit_only_where_it_spares_offload_or_sharding(tmp_path: Path) -> None:
    """Invariant of optimizer: auto, over one and several GPUs, both tools, full and LoRA, sizes from fitting to
    needing offload: where AdamW's decision keeps a full copy, auto decides exactly as AdamW; where only 8-bit
    AdamW's does, auto decides exactly as 8-bit AdamW (same layout, same figures, the 8-bit optimizer in the
    files, and the decision says what AdamW would need); where neither does, auto decides as AdamW."""
    seen: set[str] = set()
    for target in ("accelerate", "axolotl"):
        for gpus in (1, 2):
            for model in ("1.5B", "3B", "6B", "13B"):
                for method in ("full", "lora"):
                    base = {
                        "target": target,
                        "hardware": "nvidia",
                        "gpu_model": "RTX 4090" if model in ("1.5B", "3B") else "A100 80GB",
                        "gpus_per_node": gpus,
                        "cpu_memory_gb": 512,
                        "model": model,
                        "method": method,
                    }
                    auto = decide({**base, "optimizer": "auto"}, tmp_path / "auto")
                    adamw = decide({**base, "optimizer": "adamw"}, tmp_path / "adamw")
                    eight = decide({**base, "optimizer": "adamw_8bit"}, tmp_path / "eight")
                    whole = {
                        s: r.recommendation.settings.get("strategy") in EIGHT_BIT_STRATEGIES
                        for s, r in (("adamw", adamw), ("eight", eight))
                    }
                    expected = adamw if whole["adamw"] or not whole["eight"] else eight
                    rec, want = auto.recommendation, expected.recommendation
                    assert (rec.backend, rec.settings) == (want.backend, want.settings), base
                    assert rec.facts.estimates == want.facts.estimates, base
                    assert _written_optimizer(auto) == _written_optimizer(expected), base
                    assert not [w for w in auto.warnings if w.startswith("optimizer: ")], base
                    if expected is eight:
                        assert "(optimizer: auto chose it)" in " ".join(rec.because.split()), base
                        seen.add("eight")
                    else:
                        assert "optimizer: auto chose it" not in rec.because, base
                        seen.add("adamw")
    assert seen == {"eight", "adamw"}, seen


def test_the_cpu_adam_note_is_said_exactly_where_accelerate_swaps_the_scripts_optimizer(tmp_path: Path) -> None:
    """Invariant, over every decided path: the launch notes say the script's optimizer becomes DeepSpeed's CPU Adam
    exactly for an Accelerate run on GPUs with the wizard's own DeepSpeed JSON and the optimizer state offloaded (to
    host RAM or NVMe), the case where Accelerate's prepare makes that swap; never for Axolotl, FSDP2's offload or a
    brought JSON (which may have an optimizer block of its own)."""
    from collections import Counter

    from wizard.engine.facts import GPU_HARDWARE

    said: Counter[bool] = Counter()
    for answers, result in decided_paths(tmp_path):
        rec = result.recommendation
        swapped = (
            answers.get("target") == "accelerate"
            and answers.get("hardware") in GPU_HARDWARE
            and rec.backend == "deepspeed"
            and rec.settings.get("offload_optimizer") in ("cpu", "nvme")
            and answers.get("deepspeed_config") is None
        )
        noted = [w for w in result.warnings if w.startswith("Your script's optimizer is replaced")]
        assert len(noted) == int(swapped), (answers, noted)
        said[swapped] += 1
    assert said[True] >= 10 and said[False] >= 100, said
