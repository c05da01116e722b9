"""Where the wizard keeps a layout that its own step-time table rates slower, it says so and names the faster one.

Properties over every path of the walk:
- Axolotl on several machines with an offload the wizard adds: HSDP + offload only where plain
  FSDP2 offload is not shorter at both ends of the band; plain FSDP2 offload says why not HSDP.
- HSDP with CPU offload asked for by name beside a plain FSDP2 offload that fits with a shorter
  step: the decision says "not for speed", gives both bands as printed, and how to run plain FSDP2
  offload; where plain FSDP2 offload is not shorter, it says nothing of the kind.
- FSDP2 chosen with ZeRO-2 suggested instead: where ZeRO-1 fits with a shorter step still, the
  suggestion names ZeRO-1, its band and its "stage": 1; otherwise it does not.
- A layout that fits through the step but not at the fp32 loss peak says which limit it passes,
  not "the usable line or the GPU".
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from helpers import decide, decided_paths
from wizard.engine.memory import STRATEGY_TITLES, to_gib
from wizard.engine.speed import band_text, shown_middle


def _flat(text: str) -> str:
    return " ".join(text.split())


def _shorter(rec: Any, faster: str, slower: str) -> bool:
    """Whether `faster` fits and its printed band's middle is more than 5% below `slower`'s (the texts' test)."""
    mine, other = rec.facts.speeds.get(faster), rec.facts.speeds.get(slower)
    fits = rec.facts.estimates.get(faster)
    return bool(mine and other and fits and fits.fits and shown_middle(mine) < shown_middle(other) / 1.05)


# Two machines of 8 x H100 over 400 Gb/s, a 70B full fine-tune with Axolotl: the offload the wizard
# adds takes plain FSDP2 offload, since HSDP's CPU Adam would run over a full copy on each machine
# (the step-time table's slower layout); asked for by name (offload: cpu), it stays HSDP.
TWO_H100_MACHINES_70B = {
    "target": "axolotl",
    "hardware": "nvidia",
    "gpu_model": "H100",
    "gpus_per_node": 8,
    "num_nodes": 2,
    "network_gbps": 400,
    "cpu_memory_gb": 2048,
    "model": "llama-3.1-70b",
    "method": "full",
    "sequence_length": 4096,
    "global_batch_size": 32,
}


def _multi_machine_offload_runs(tmp_path: Path) -> list[tuple[dict[str, Any], Any]]:
    """Every path of the walk, and the two-machine 70B run with the offload added and asked for by name."""
    asked = {**TWO_H100_MACHINES_70B, "offload": "cpu"}
    return [
        *decided_paths(tmp_path),
        (TWO_H100_MACHINES_70B, decide(TWO_H100_MACHINES_70B, tmp_path / "h100")),
        (asked, decide(asked, tmp_path / "asked")),
    ]


def _plain_shorter_at_both_ends(rec: Any) -> bool:
    plain, hybrid = rec.facts.speeds.get("fsdp2_offload"), rec.facts.speeds.get("hsdp_offload")
    fits = rec.facts.estimates.get("fsdp2_offload")
    return bool(
        plain
        and hybrid
        and fits
        and fits.fits
        and fits.host_fits is not False
        and plain.low < hybrid.low
        and plain.high < hybrid.high
    )


def test_an_offload_the_wizard_adds_across_machines_takes_the_layout_with_the_shorter_step(tmp_path: Path) -> None:
    """Axolotl on several machines with offload: auto gets HSDP + offload only where plain FSDP2
    offload is not shorter at both ends of the band; otherwise plain FSDP2 offload, which says
    why it is not HSDP (the bands and host RAM of both, or HSDP's host RAM over the usable part)."""
    hybrid = plain = 0
    for answers, result in _multi_machine_offload_runs(tmp_path):
        rec = result.recommendation
        strategy = rec.settings.get("strategy")
        if answers.get("target") != "axolotl" or answers.get("offload", "auto") != "auto" or answers.get("use_ray"):
            continue
        if strategy == "hsdp_offload":
            assert not _plain_shorter_at_both_ends(rec), answers
            hybrid += 1
        elif strategy == "fsdp2_offload" and int(answers.get("num_nodes", 1)) > 1:
            h, f = rec.facts.estimates.get("hsdp_offload"), rec.facts.estimates["fsdp2_offload"]
            if h is None or not h.fits:
                continue
            because = _flat(rec.because)
            assert "Why plain FSDP2 offload over HSDP + offload:" in because, (answers, because)
            if h.host_fits is False:
                assert f"about {to_gib(h.host_per_node)} GiB, more than the" in because, because
            else:
                assert _plain_shorter_at_both_ends(rec), answers
                mine, other = rec.facts.speeds["fsdp2_offload"], rec.facts.speeds["hsdp_offload"]
                assert f"a step of about {band_text(mine)} against {band_text(other)} for HSDP + offload" in because
                assert f"{to_gib(f.host_per_node)} GiB of host RAM per machine against {to_gib(h.host_per_node)}" in (
                    because
                )
            plain += 1
    assert plain, (hybrid, plain)
    rec = decide(TWO_H100_MACHINES_70B, tmp_path / "again").recommendation
    assert rec.settings["strategy"] == "fsdp2_offload" and "dp_replicate_size" not in rec.settings


def test_hsdp_offload_asked_for_by_name_says_when_plain_fsdp2_offload_has_the_shorter_step(tmp_path: Path) -> None:
    said = quiet = 0
    for answers, result in _multi_machine_offload_runs(tmp_path):
        rec = result.recommendation
        if rec.settings.get("strategy") != "hsdp_offload":
            continue
        because = _flat(rec.because)
        mine, plain = rec.facts.speeds.get("hsdp_offload"), rec.facts.speeds.get("fsdp2_offload")
        # The wizard's own test for the offload it adds: shorter at both ends of the band.
        shorter = _plain_shorter_at_both_ends(rec)
        assert ("Why HSDP over plain FSDP2 offload: not for speed." in because) is shorter, (answers, because)
        if shorter:
            assert answers.get("offload") == "cpu", answers  # an offload the wizard adds takes the shorter step
            assert plain is not None and mine is not None
            assert f"({band_text(plain)} against {band_text(mine)})" in because, because
            assert "HSDP is kept because the offload was asked for by name (offload: cpu)" in because, because
            world = int(rec.settings["num_processes"])
            assert f"set dp_replicate_size: 1 and dp_shard_size: {world} in axolotl.yaml" in because, because
            said += 1
        else:
            quiet += 1
    assert said and quiet, (said, quiet)


def test_the_zero2_suggestion_names_zero1_where_its_step_is_shorter_still(tmp_path: Path) -> None:
    named = 0
    for answers, result in decided_paths(tmp_path):
        rec = result.recommendation
        because = _flat(rec.because)
        if "To run ZeRO-2 instead" not in because:
            assert "ZeRO-1 fits too (about" not in because, answers
            continue
        zero1, zero2 = rec.facts.speeds.get("zero1"), rec.facts.speeds.get("zero2")
        shorter = _shorter(rec, "zero1", "zero2")
        assert ("ZeRO-1 fits too (about" in because) is shorter, (answers, because)
        if shorter:
            assert zero1 is not None and zero2 is not None
            assert f"({band_text(zero1)} against {band_text(zero2)} for ZeRO-2)" in because, because
            assert 'write "stage": 1 in that file' in because, because
            named += 1
    assert named, "the walk has a run where ZeRO-1 is the faster DeepSpeed stage"


def test_a_layout_short_only_at_the_loss_peak_names_the_limit_it_passes(tmp_path: Path) -> None:
    checked = 0
    for answers, result in decided_paths(tmp_path):
        for runner in result.recommendation.runner_ups:
            first = runner.reason.split("\n")[0]
            if not first.startswith("Without offload it does not fit"):
                continue
            assert " or, for the moment" not in first, (answers, first)
            # The micro-batch its figures are at is named exactly where it is above 1.
            micro = result.session.answers["micro_batch_size"]
            opening = f"Without offload it does not fit{f' at this micro_batch_size {micro}' if micro > 1 else ''}: "
            assert first.startswith(opening), (answers, first)
            for clause in first.removeprefix(opening).rstrip(".").split("; "):
                # Each layout with one limit: the usable line, or the whole GPU at the peak.
                assert ("more than the GPU's" in clause) != ("usable per GPU" in clause), (answers, clause)
                checked += 1
    assert checked


def test_axolotl_offload_says_how_to_run_a_faster_deepspeed_offload(tmp_path: Path) -> None:
    """Axolotl offloads with FSDP2; where DeepSpeed's offload has the shorter step, its "why not"
    says how to run it (a JSON of one's own), never that the wizard writes that JSON."""
    said = 0
    # One A100, a 7B full fine-tune: FSDP2's offload moves the weights over PCIe, ZeRO-2's keeps them.
    one = {"target": "axolotl", "hardware": "nvidia", "gpu_model": "A100", "gpus_per_node": 1, "model": "7B"}
    one["method"] = "full"
    runs = [
        *decided_paths(tmp_path),
        (TWO_H100_MACHINES_70B, decide(TWO_H100_MACHINES_70B, tmp_path / "h100")),
        (one, decide(one, tmp_path / "one")),
    ]
    for answers, result in runs:
        rec = result.recommendation
        if answers.get("target") != "axolotl" or rec.settings.get("strategy") not in ("fsdp2_offload", "hsdp_offload"):
            continue
        if answers.get("method") == "qlora":
            continue  # FSDP2 is QLoRA's own path there: ZeRO-3 with 4-bit weights is not offered
        reason = _flat(next((r.reason for r in rec.runner_ups if r.backend == "deepspeed"), ""))
        if "It would fit with CPU offload" not in reason:
            continue
        assert "the wizard writes them as a DeepSpeed JSON" not in reason, (answers, reason)
        compared = re.search(r"It would fit with CPU offload: (?:on one GPU, )?(.+?) needs about", reason)
        assert compared, reason
        layout = next((name for name, title in STRATEGY_TITLES.items() if title == compared.group(1)), None)
        chosen = rec.facts.speeds.get(str(rec.settings["strategy"]))
        runner = rec.facts.speeds.get(layout) if layout else None
        faster = bool(runner and chosen and shown_middle(runner) < shown_middle(chosen) / 1.05)
        assert ("bring a DeepSpeed JSON with that offload as deepspeed_config" in reason) is faster, (answers, reason)
        said += faster
    assert said


def test_a_lever_whose_gpus_do_not_divide_the_global_batch_says_it_must_change(tmp_path: Path) -> None:
    from wizard.engine.batch import GLOBAL_BATCH

    answers = {**TWO_H100_MACHINES_70B, "global_batch_size": 128}
    result = decide(answers, tmp_path / "h100")
    levers = {lever.change: lever for lever in result.levers}
    three = next(change for change in levers if change.startswith("3 machines instead of 2"))
    assert "with another global_batch_size (128 cannot be split there:" in three, three
    assert "nearest: 120 or 144" in three, three
    # Taken with a nearest value, the lever runs as it says.
    rerun = decide({**answers, "num_nodes": 3, GLOBAL_BATCH: 144}, tmp_path / "three")
    assert not rerun.recommendation.refused and rerun.recommendation.backend == levers[three].backend
    # Levers whose GPUs divide the batch say nothing of it.
    assert all("another global_batch_size" not in change for change in levers if change != three)


def test_a_multi_machine_axolotl_set_says_how_to_tokenize_once_and_offers_no_smoke(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import yaml

    from wizard.cli import main

    path = tmp_path / "answers.yaml"
    path.write_text(yaml.safe_dump(TWO_H100_MACHINES_70B), encoding="utf-8")
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["--answers", str(path), "--defaults", "--output-dir", str(tmp_path / "set")]) == 0
    out = _flat(capsys.readouterr().out)
    assert "start every machine but machine 0 with SKIP_PREPROCESS=1 as well" in out, out
    # smoke runs a one-machine set only: it would refuse this one.
    assert "backend-wizard smoke" not in out
    launch = (tmp_path / "set" / "launch.sh").read_text(encoding="utf-8")
    assert "start the others with SKIP_PREPROCESS=1" in " ".join(line.lstrip("# ") for line in launch.splitlines())


def test_the_pcie_volumes_a_decision_names_are_the_step_models_per_optimizer_step(tmp_path: Path) -> None:
    """Where an offload's reason gives PCIe traffic with a step time, it is per optimizer step, into
    the GPU and out, as the step-time model counts it; the copy time in that model is the larger
    direction over the link (both run at once), so a reader can redo the arithmetic."""
    checked = 0
    for answers, result in _multi_machine_offload_runs(tmp_path):
        rec = result.recommendation
        because = _flat(rec.because)
        found = re.search(
            r"each optimizer step (?:the|each) GPU moves about ([\d.]+) GiB into the GPU over PCIe", because
        )
        if not found:
            continue
        step = rec.facts.speeds[str(rec.settings["strategy"])]
        out = step.host_bytes - step.host_in
        assert float(found.group(1)) == to_gib(step.host_in), (answers, because)
        assert f") and {to_gib(out)} GiB out (" in because, (answers, because)
        assert rec.facts.links is not None
        assert step.host_s == pytest.approx(max(step.host_in, out) / rec.facts.links.host_link)
        assert "every micro-batch each GPU moves" not in because, because
        checked += 1
    assert checked


def test_key_settings_say_where_axolotl_checkpoints_under_fsdp(tmp_path: Path) -> None:
    """axolotl.yaml writes gradient_checkpointing: false where FSDP checkpoints instead: over every
    Axolotl path, Key settings names FSDP's checkpointing exactly where the file turns it on."""
    import yaml

    from wizard.ui.console import written_training_settings

    seen = {True: 0, False: 0}
    for answers, result in decided_paths(tmp_path):
        if answers.get("target") != "axolotl":
            continue
        data = yaml.safe_load(next(f.text for f in result.files if f.name == "axolotl.yaml"))
        on = bool((data.get("fsdp_config") or {}).get("activation_checkpointing"))
        rows = dict(written_training_settings(result))
        said = (
            rows.get("gradient checkpointing") == "on, by FSDP (fsdp_config.activation_checkpointing in axolotl.yaml)"
        )
        assert said is on, answers
        assert not on or data.get("gradient_checkpointing") is False, answers
        seen[on] += 1
    assert seen[True] and seen[False], seen
