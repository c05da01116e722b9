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

from helpers import decide, tree
from realtools import accelerate_dry_run, axolotl_validate, deepspeed_parse
from wizard.app import Result
from wizard.checks import check_config
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
                assert rec.because.startswith("Nothing fits."), answers
                assert "To change that:" in rec.because
            else:  # a TPU without torch_xla, parallel sizes or a Mac that do not fit: says what is missing
                assert rec.rule.id in ("tpu_without_torch_xla", "parallel_does_not_fit", "apple_mps_does_not_fit"), (
                    rec.rule.id
                )
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
