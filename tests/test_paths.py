"""Every path through the tree reaches a recommendation or a clear refusal, renders, passes
`check`, and every distinct config it writes is accepted by the real tools."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from paths import enumerate_paths
from test_real_tools import launch_args

from helpers import decide, tree
from realtools import (
    accelerate_deepspeed_precision,
    accelerate_dry_run,
    axolotl_validate,
    deepspeed_parse,
    trainer_deepspeed_precision,
)
from wizard.app import Result
from wizard.checks import check_config
from wizard.engine.model_size import alias_model
from wizard.errors import WizardError

FORMATS = {"accelerate_config.yaml": "accelerate", "axolotl.yaml": "axolotl", "ds_config.json": "deepspeed"}


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[dict[str, Any], Result | WizardError]]:
    """Decide and render every path once (dry run)."""
    folder = tmp_path_factory.mktemp("paths")
    results: list[tuple[dict[str, Any], Result | WizardError]] = []
    for answers in enumerate_paths(folder):
        try:
            results.append((answers, decide(answers, folder / "out")))
        except WizardError as exc:
            results.append((answers, exc))
    return results


def test_every_path_ends_in_a_recommendation_or_a_clear_refusal(
    outcomes: list[tuple[dict[str, Any], Result | WizardError]],
) -> None:
    backends: set[str] = set()
    refusals = rejected = 0
    for answers, outcome in outcomes:
        if isinstance(outcome, WizardError):
            # Only the combinations the tree disables (CPU/MPS for Axolotl, QLoRA without a GPU)
            # and a tensor parallel size that leaves FSDP2 nothing to shard.
            assert int(outcome.exit_code) == 2, (answers, outcome.message)
            assert "not available here" in outcome.message or "tensor_parallel_size" in outcome.message, (
                answers,
                outcome.message,
            )
            rejected += 1
        elif outcome.recommendation.refused:
            rec = outcome.recommendation
            if rec.rule.id == "nothing_fits":
                # "without offload" exactly where the answers rule offload out.
                opening = "Nothing fits without offload." if answers.get("offload") == "none" else "Nothing fits."
                assert rec.because.startswith(opening), answers
                assert "To change that, one or more of:" in rec.because
            else:  # no torch_xla, or parallel sizes, a Mac or NVMe buffers that do not fit: says what is missing
                assert rec.rule.id in (
                    "tpu_without_torch_xla",
                    "parallel_does_not_fit",
                    "apple_mps_does_not_fit",
                    "nvme_offload_host_short",
                    "axolotl_dpo_quantized_sharded",
                ), rec.rule.id
                if rec.rule.id == "nvme_offload_host_short":
                    assert "To change that, one or more of:" in rec.because and "GiB usable" in rec.because
                assert len(rec.because) > 80, rec.because
            refusals += 1
        else:
            backends.add(str(outcome.recommendation.backend))
            names = {f.name for f in outcome.files}
            assert "answers.yaml" in names and "launch.sh" in names
    assert len(outcomes) > 500
    # Every backend of the tree is reached by some path.
    assert backends == set(tree().backends)
    assert refusals and rejected


def distinct_configs(outcomes: list[tuple[dict[str, Any], Result | WizardError]]) -> dict[str, tuple[str, str, int]]:
    """Rendered configs by content: text -> (file name, companion ds_config.json text, world size)."""
    configs: dict[str, tuple[str, str, int]] = {}
    for _, outcome in outcomes:
        if isinstance(outcome, WizardError) or outcome.recommendation.refused:
            continue
        texts = {f.name: f.text for f in outcome.files}
        world = int(outcome.recommendation.settings["num_processes"])
        for name in FORMATS:
            if name in texts:
                configs.setdefault(texts[name], (name, texts.get("ds_config.json", ""), world))
    return configs


def test_every_rendered_config_passes_check(outcomes: list[tuple[dict[str, Any], Result | WizardError]]) -> None:
    configs = distinct_configs(outcomes)
    assert len(configs) > 50
    for text, (name, ds_text, world) in configs.items():
        data = json.loads(text) if name.endswith(".json") else yaml.safe_load(text)

        def load_json(path: str, ds_text: str = ds_text) -> object:
            return json.loads(ds_text) if path == "ds_config.json" else json.loads(Path(path).read_text())

        errors = [
            f for f in check_config(data, FORMATS[name], world_size=world, load_json=load_json) if f.severity == "error"
        ]
        assert not errors, (name, errors, text)


@pytest.mark.tools
def test_every_distinct_config_is_accepted_by_the_real_tools(
    outcomes: list[tuple[dict[str, Any], Result | WizardError]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]))
    checked = {"accelerate": 0, "deepspeed": 0, "axolotl": 0}
    for index, (text, (name, ds_text, world)) in enumerate(distinct_configs(outcomes).items()):
        folder = tmp_path / str(index)
        folder.mkdir()
        (folder / name).write_text(text)
        if ds_text:
            (folder / "ds_config.json").write_text(ds_text)
        fmt = FORMATS[name]
        if fmt == "accelerate":
            data = yaml.safe_load(text)
            extra = ["--machine_rank", "0", "--main_process_ip", "127.0.0.1"] if data["num_machines"] > 1 else []
            summary = accelerate_dry_run(folder / name, cwd=folder, extra_args=extra)
            assert int(summary["num_processes"]) == data["num_processes"]
        elif fmt == "deepspeed":
            deepspeed_parse(folder / name, world_size=world)
        else:
            axolotl_validate(folder / name, n_gpu=world)
        checked[fmt] += 1
    assert all(checked.values()), checked


Outcomes = list[tuple[dict[str, Any], Result | WizardError]]


def decided(outcomes: Outcomes) -> list[tuple[dict[str, Any], Result]]:
    """The paths that reached a recommendation (no refusal)."""
    return [(a, o) for a, o in outcomes if not isinstance(o, WizardError) and not o.recommendation.refused]


def brought_deepspeed(outcomes: Outcomes) -> list[tuple[dict[str, Any], Result]]:
    """The paths that run a DeepSpeed JSON the user brought."""
    return [(a, o) for a, o in decided(outcomes) if "deepspeed_config" in a and o.recommendation.backend == "deepspeed"]


def test_a_brought_json_is_launched_with_the_precision_the_wizard_reports(outcomes: Outcomes) -> None:
    """A brought JSON's "auto" bf16/fp16 switches take the launcher's mixed precision (fp32 when
    none is given), so the launch carries the reported one: launch.sh's --mixed_precision for
    Accelerate, the bf16/fp16 keys for Axolotl (the Trainer fills "auto" from them)."""
    paths = brought_deepspeed(outcomes)
    assert len(paths) > 20
    for answers, outcome in paths:
        reported = outcome.recommendation.settings["mixed_precision"]
        texts = {f.name: f.text for f in outcome.files}
        if answers["target"] == "accelerate":
            assert f"  --mixed_precision {reported} \\\n" in texts["launch.sh"], answers
            assert "mixed_precision" not in yaml.safe_load(texts["accelerate_config.yaml"])
        else:
            cfg = yaml.safe_load(texts["axolotl.yaml"])
            flags = (cfg.get("bf16") is True, cfg.get("fp16") is True)
            assert flags == (reported == "bf16", reported == "fp16"), answers


@pytest.mark.tools
def test_a_brought_json_trains_in_the_precision_the_wizard_reports(outcomes: Outcomes, tmp_path: Path) -> None:
    """Accelerate's own resolution of each distinct launch (and the Trainer's, for Axolotl), parsed
    by DeepSpeed, gives the engine the reported precision."""
    seen: set[tuple[str, ...]] = set()
    for answers, outcome in brought_deepspeed(outcomes):
        reported = outcome.recommendation.settings["mixed_precision"]
        world = int(outcome.recommendation.settings["num_processes"])
        texts = {f.name: f.text for f in outcome.files}
        if answers["target"] == "accelerate":
            key = (texts["accelerate_config.yaml"], texts["launch.sh"], texts["ds_config.json"])
            if key in seen:
                continue
            seen.add(key)
            folder = tmp_path / str(len(seen))
            folder.mkdir()
            for name in ("accelerate_config.yaml", "launch.sh", "ds_config.json"):
                (folder / name).write_text(texts[name])
            got = accelerate_deepspeed_precision(
                folder / "accelerate_config.yaml", cwd=folder, extra_args=launch_args(folder)
            )
            assert got == {"mixed_precision": reported, "precision": reported}, answers
        else:
            cfg = yaml.safe_load(texts["axolotl.yaml"])
            key = (str(cfg.get("bf16")), str(cfg.get("fp16")), texts["ds_config.json"], str(world))
            if key in seen:
                continue
            seen.add(key)
            ds = json.loads(texts["ds_config.json"])
            got = trainer_deepspeed_precision(
                ds, bf16=cfg.get("bf16") is True, fp16=cfg.get("fp16") is True, world_size=world
            )
            assert got == {"mismatches": [], "precision": reported}, answers
    assert len(seen) > 5


def _squeezed(text: str) -> str:
    """Text without any whitespace (comment wrapping may also break after a hyphen)."""
    return "".join(text.split())


def test_every_moe_model_under_zero3_gets_its_layer_class_or_a_warning(outcomes: Outcomes) -> None:
    """Accelerate + DeepSpeed ZeRO-3 with a mixture-of-experts model: accelerate_config.yaml names
    the MoE block class (deepspeed_moe_layer_cls_names), or a warning in the summary, the JSON
    output and the file header says it is missing and how to find it. A size alias that names its
    model (8x7B: Mixtral) always gets the class."""
    written = warned = brought = 0
    for answers, outcome in decided(outcomes):
        rec = outcome.recommendation
        moe_zero3 = rec.backend == "deepspeed" and rec.settings["zero_stage"] == 3 and rec.facts.get("moe") is True
        if answers["target"] != "accelerate" or not moe_zero3:
            continue
        text = next(f.text for f in outcome.files if f.name == "accelerate_config.yaml")
        names = yaml.safe_load(text)["deepspeed_config"].get("deepspeed_moe_layer_cls_names")
        warnings = [w for w in rec.warnings if "deepspeed_moe_layer_cls_names" in w]
        brought += "deepspeed_config" in answers
        if names:
            assert names == rec.facts.get("moe_block_class") and not warnings, answers
            written += 1
            continue
        assert len(warnings) == 1 and warnings[0] in outcome.warnings, answers
        assert "ZeRO-3" in warnings[0] and "SparseMoeBlock" in warnings[0]  # what it needs, how to find it
        header = " ".join(line[2:] for line in text.splitlines() if line.startswith("# "))
        assert _squeezed(warnings[0]) in _squeezed(header), answers
        assert alias_model(answers["model"]) is None, answers  # an alias names its model's class
        warned += 1
    assert written and warned and brought, (written, warned, brought)
