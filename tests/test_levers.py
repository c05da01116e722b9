"""Each "To get a different answer" lever tells the outcome the wizard gives for the changed answers.

A lever changes one of the user's answers; the defaults computed from the answers (layer
offloading, the context-parallel size, ...) follow the change, as they do when the user makes it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from helpers import ONE_A100_13B_FULL, decide, decided_paths
from wizard.engine.memory import to_gib
from wizard.engine.what_if import LEVERS

RTX4090_13B_LORA = {
    "target": "axolotl",
    "hardware": "nvidia",
    "gpu_model": "RTX 4090",
    "gpus_per_node": 1,
    "cpu_memory_gb": 64,
    "model": "13B",
    "method": "lora",
    "sequence_length": 4096,
}


def outcome(answers: dict[str, Any], folder: Path) -> tuple[Any, float | None]:
    return decided_figure(decide(answers, folder).recommendation)


def decided_figure(rec: Any) -> tuple[Any, float | None]:
    """The decided backend and its layout's GiB per GPU (None for a refusal), as a lever states them."""
    est = rec.facts.estimates.get(str(rec.settings.get("strategy"))) if not rec.refused else None
    return rec.backend, to_gib(est.total) if est is not None else None


def told_changes(result: Any) -> list[tuple[Any, dict[str, Any]]]:
    """Each lever the summary shows, with the change of answers it stands for."""
    told = {lever.change: lever for lever in result.levers}
    shown = []
    for label, lever in LEVERS:
        change = lever(result.session.answers)
        if change is None:
            continue
        if "gpus_per_node" in change:  # named by the count ("4 GPUs per machine instead of 2")
            count = change["gpus_per_node"]
            before = result.session.answers["gpus_per_node"]
            label = f"{count} GPU{'s' if count > 1 else ''} per machine instead of {before}"
        # A lever whose run picks another micro-batch names it after the change.
        found = told.get(label) or next(
            (t for c, t in told.items() if c.startswith((f"{label}, at micro_batch_size", f"{label} (with your "))),
            None,
        )
        if found is not None:  # else the lever did not change the decision, or is not offered here
            shown.append((found, change))
    return shown


def test_every_lever_leads_where_the_changed_answers_lead(tmp_path: Path) -> None:
    checked = 0
    with_levers = [(a, r) for a, r in decided_paths(tmp_path, refusals=True) if r.levers]
    for answers, result in with_levers[::6]:
        for told, change in told_changes(result):
            checked += 1
            backend, total = outcome({**answers, **change}, tmp_path / "out")
            assert (told.backend, told.gib_per_gpu) == (backend, total), (answers, told.change)
    assert checked >= 15, checked


def test_a_given_global_batch_settles_in_each_lever_as_in_the_run(tmp_path: Path) -> None:
    """With a global batch and no micro-batch answer, a lever's figure is for the micro-batch its run would pick."""
    micro_batches = set()
    for answers in (
        {**RTX4090_13B_LORA, "sequence_length": 2048, "global_batch_size": 32},
        {**RTX4090_13B_LORA, "target": "accelerate", "sequence_length": 1024, "global_batch_size": 64},
    ):
        result = decide(answers, tmp_path / "run")
        shown = told_changes(result)
        assert shown, answers
        for told, change in shown:
            lever_run = decide({**answers, **change}, tmp_path / "lever")
            assert (told.backend, told.gib_per_gpu) == decided_figure(lever_run.recommendation), change
            micro = lever_run.session.answers["micro_batch_size"]
            micro_batches.add(micro)
            # Its figures are for that micro-batch: the lever says so where it is not this run's.
            # 1 is the smallest, not "the largest that fits with room": said as what it is.
            why = "(the largest that fits with room there)" if micro > 1 else "(the smallest; no larger one fits"
            named = f", at micro_batch_size {micro} {why}" in told.change
            assert named is (micro != result.session.answers["micro_batch_size"]), (told.change, micro)
    assert max(micro_batches) > 1, micro_batches  # some lever's run picked a larger micro-batch than the default


def test_a_defaulted_layer_offload_does_not_hide_the_qlora_lever(tmp_path: Path) -> None:
    result = decide(RTX4090_13B_LORA, tmp_path)
    assert result.recommendation.settings.get("strategy") == "ddp_layer_offload"
    levers = {lever.change: lever for lever in result.levers}
    qlora = levers["QLoRA instead of LoRA"]
    # QLoRA fits on the GPU alone: the layer-offloading default, yes for LoRA, is no for it.
    assert (qlora.backend, qlora.host_gib_per_machine) == ("single_gpu", None), qlora
    assert qlora.gib_per_gpu == outcome({**RTX4090_13B_LORA, "method": "qlora"}, tmp_path)[1]
    # With offload: none the refusal's "allow offload" lever is the layer offload, not FSDP2.
    refused = decide({**RTX4090_13B_LORA, "offload": "none"}, tmp_path)
    allow = {lever.change: lever for lever in refused.levers}["CPU offload allowed (offload: auto)"]
    assert allow.backend == "single_gpu" and allow.host_gib_per_machine is not None, allow


RTX4090X2_70B_QLORA = {
    "target": "axolotl",
    "hardware": "nvidia",
    "gpu_model": "RTX 4090",
    "gpus_per_node": 2,
    "model": "70B",
    "method": "qlora",
}


def test_fewer_gpus_is_named_only_for_a_refusal_or_the_host_ram_it_saves(tmp_path: Path) -> None:
    """A run that decides is told to drop GPUs only where that needs less host RAM than its own layout.

    Fewer GPUs is slower (the tokens per second say by how much); for a run that fits it is worth
    naming only for the host RAM it saves, and a layer-offload outcome says why one GPU needs less
    of it than several.
    """
    seen = 0
    for _, result in decided_paths(tmp_path, refusals=True):
        rec = result.recommendation
        for lever in result.levers:
            if not lever.change.startswith("1 GPU per machine"):
                continue
            seen += 1
            if not rec.refused:
                est = rec.facts.estimates[str(rec.settings["strategy"])]
                assert lever.host_gib_per_machine is not None
                assert lever.host_gib_per_machine < to_gib(est.host_per_node), (lever, est)
            if "layer offloading" in lever.title:
                assert "each process would keep a copy of its own" in lever.title, lever.title
    assert seen


def test_two_rtx_4090s_that_offload_are_shown_the_one_gpu_layer_offload(tmp_path: Path) -> None:
    for host, refused in ((None, False), (64, True)):
        answers = {**RTX4090X2_70B_QLORA, **({"cpu_memory_gb": host} if host else {})}
        result = decide(answers, tmp_path / str(host))
        assert result.recommendation.refused is refused
        one = [lever for lever in result.levers if lever.change == "1 GPU per machine instead of 2"]
        assert len(one) == 1 and "with layer offloading" in one[0].title, result.levers
        assert one[0].host_gib_per_machine is not None and one[0].host_gib_per_machine < 51.2  # 80% of 64


def test_the_fewest_gpus_lever_names_the_smallest_count_that_needs_no_offload(tmp_path: Path) -> None:
    """Property over the one-machine GPU paths that offload (offload: auto) or are refused: where a
    "the fewest that ..." lever is told, the run with that many GPUs per machine fits (without offload
    for an offloading run), every count between twice the current one and it does not, and its figure
    is that run's; where none is told, no count up to 8 beyond the doubled one gets there."""
    import re

    from wizard.engine.memory import OFFLOAD_STRATEGIES
    from wizard.engine.what_if import GPU_COUNTS

    told_count = 0
    for answers, result in decided_paths(tmp_path, refusals=True)[::2]:
        rec, given = result.recommendation, result.session.answers
        offloads = rec.settings.get("strategy") in OFFLOAD_STRATEGIES
        if not (offloads or rec.refused) or given.get("offload", "auto") == "cpu":
            continue
        if given.get("num_nodes", 1) != 1 or given.get("hardware") not in ("nvidia", "amd"):
            continue
        now = given["gpus_per_node"]

        def gets_there(count: int, answers: dict[str, Any] = answers, offloads: bool = offloads) -> bool:
            other = decide({**answers, "gpus_per_node": count}, tmp_path / "n").recommendation
            # Layer offloading beside DDP is taken by preference where FSDP2 would fit too: no offload is needed.
            sharded = other.facts.estimates.get("fsdp2")
            preferred = (
                other.settings.get("strategy") == "ddp_layer_offload"
                and bool(other.facts.get("layer_offload_beside_ddp"))
                and sharded is not None
                and sharded.fits
            )
            offloaded = other.settings.get("strategy") in OFFLOAD_STRATEGIES and not preferred
            return not other.refused and not (offloads and offloaded)

        fewest = [lever for lever in result.levers if "the fewest that" in lever.change]
        beyond = [c for c in GPU_COUNTS if c > now * 2]
        if not fewest:  # doubling gets there (its own lever says so), or nothing up to 8 GPUs does
            doubled = now * 2 in GPU_COUNTS and gets_there(now * 2)
            assert doubled or not any(gets_there(c) for c in beyond), answers
            continue
        (lever,) = fewest
        count = int(re.match(r"(\d+) GPUs per machine", lever.change).group(1))  # type: ignore[union-attr]
        assert count in beyond and gets_there(count), (answers, lever)
        assert not any(gets_there(c) for c in beyond if c < count), (answers, lever)
        assert not gets_there(now * 2) or now * 2 not in GPU_COUNTS, (answers, lever)
        assert lever.gib_per_gpu == outcome({**answers, "gpus_per_node": count}, tmp_path / "m")[1]
        told_count += 1
    assert told_count >= 3, told_count


def test_an_offloading_full_fine_tune_on_one_gpu_is_offered_8bit_adamw(tmp_path: Path) -> None:
    """Adam's moments in a byte each (bitsandbytes) can save the offload: the lever says so, with the figure."""
    answers = {
        "target": "accelerate",
        "hardware": "nvidia",
        "gpu_model": "RTX 4090",
        "gpus_per_node": 1,
        "cpu_memory_gb": 64,
        "model": "1.5B",
        "method": "full",
    }
    result = decide(answers, tmp_path / "run")
    assert result.recommendation.settings.get("offload_optimizer") == "cpu", result.recommendation.settings
    levers = {lever.change: lever for lever in result.levers}
    eight = levers["8-bit AdamW instead of AdamW"]
    assert (eight.backend, eight.host_gib_per_machine) == ("single_gpu", None), eight
    assert eight.gib_per_gpu == outcome({**answers, "optimizer": "adamw_8bit"}, tmp_path / "lever")[1]
    # Where the question does not apply (several GPUs: bitsandbytes' 8-bit state cannot be sharded), no lever.
    sharded = decide({**answers, "gpus_per_node": 2, "model": "7B"}, tmp_path / "two")
    assert "8-bit AdamW instead of AdamW" not in {lever.change for lever in sharded.levers}


def test_no_lever_leads_to_a_layout_short_of_host_ram(tmp_path: Path) -> None:
    """Invariant: a lever is a way out, so none leads to a layout whose offload the host RAM cannot hold; checked
    over the walk's runs with a known host RAM and the run that surfaced it: a brought ZeRO-2 offload JSON on one
    A100 with 256 GiB, run as written though short of host RAM, was offered "2 GPUs per machine" at the same
    290.6 GiB."""
    brought = tmp_path / "z2off.json"
    brought.write_text(
        '{"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}},'
        ' "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto", "bf16": {"enabled": "auto"}}'
    )
    case = {**ONE_A100_13B_FULL, "deepspeed_config": str(brought)}
    # Every third run with a known host RAM (levers are decided lazily, each a dozen decisions): ~1/3 of the time.
    known = decided_paths(tmp_path, lambda a: "cpu_memory_gb" in a, refusals=True)[::3]
    runs = [(a, r) for a, r in known if r.levers]
    runs.append((case, decide(case, tmp_path / "case")))
    checked = 0
    for answers, result in runs:
        usable = 0.8 * float(answers["cpu_memory_gb"])
        for lever in result.levers:
            # (The more-RAM lever is held to the RAM it names; NVMe layouts keep only swap buffers in RAM.)
            more_ram = "of host RAM per machine instead of" in lever.change
            if lever.host_gib_per_machine is not None and "nvme" not in lever.change and not more_ram:
                assert lever.host_gib_per_machine <= usable + 0.05, (answers, lever)
                checked += 1
    assert checked >= 1


def test_a_lever_keeps_the_answers_the_run_set_aside_where_it_makes_them_apply(tmp_path: Path) -> None:
    """A Mac's base_dtype does not apply to a full fine-tune and is set aside; the "LoRA instead" lever,
    where it applies again, counts it as the user gave it: the lever leads where the user's own answers
    with the change lead, never to a figure for the default fp32 base."""
    checked = 0
    for memory in (16, 24, 32, 64):
        for dtype in ("bf16", "fp32"):
            answers = {
                "target": "accelerate",
                "hardware": "mps",
                "gpu_memory_gb": memory,
                "model": "llama-3.2-3b",
                "method": "full",
                "base_dtype": dtype,
            }
            result = decide(answers, tmp_path / "out")
            assert "base_dtype" in result.session.ignored
            for told, change in told_changes(result):
                if change.get("method") != "lora":
                    continue
                checked += 1
                assert (told.backend, told.gib_per_gpu) == outcome({**answers, **change}, tmp_path / "out"), (
                    memory,
                    dtype,
                    told.change,
                )
                # The figure rests on the set-aside answer: the lever's label names it, as the user gave it.
                assert f"(with your base_dtype: {dtype})" in told.change, told.change
    assert checked >= 4, checked
