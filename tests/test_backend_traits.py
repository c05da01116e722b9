"""Backend traits: what a backend does is data in the tree, and the written files follow it.

A copy of the shipped tree with one backend more (tests/assets/extra_backend.yaml) is decided,
rendered, checked and written through the command line like any user's tree: its files follow its
traits, not its id, which no Python code knows. A bad trait is refused when the tree loads.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from helpers import REPO, tree, write_yaml
from wizard.cli import main
from wizard.engine.traits import NO_BACKEND
from wizard.engine.tree import load_tree
from wizard.errors import TreeError

EXTRA = yaml.safe_load((REPO / "tests" / "assets" / "extra_backend.yaml").read_text(encoding="utf-8"))
SHIPPED = (REPO / "decision_tree.yaml").read_text(encoding="utf-8")
# One GPU that needs CPU offload, where the shipped tree decides DeepSpeed ZeRO-2 with the
# optimizer on the CPU (rule offload_zero2_optimizer) and the extra rule comes first.
ANSWERS: dict[str, Any] = {
    "target": "accelerate",
    "hardware": "nvidia",
    "gpu_model": "RTX 4090",
    "gpu_memory_gb": 24,
    "gpus_per_node": 1,
    "cpu_memory_gb": 64,
    "model": "7B",
    "method": "lora",
    "offload": "cpu",
    "sequence_length": 2048,
}
# The extra backend made FSDP-like: the same rule, FSDP2's CPU offload instead of ZeRO-Offload.
FSDP_LIKE = {
    "traits": {
        "accelerate_type": "FSDP",
        "shards": "all",
        "offload": "fsdp",
        "parallelism_host": "device_mesh",
        "checkpointing": "fsdp",
        "labels": {"layout": "sharded offload"},
    },
    "strategy": "fsdp2_offload",
    "outcome": {"strategy": "fsdp2_offload", "offload_optimizer": "cpu", "offload_param": "cpu", "zero_stage": None},
}


def extra_tree(folder: Path, variant: dict[str, Any] | None = None) -> Path:
    """The shipped tree with the extra backend and its rule (changed by `variant`), written to `folder`."""
    data = yaml.safe_load(SHIPPED)
    backend = dict(EXTRA["backend"])
    rule = dict(EXTRA["rule"])
    if variant is not None:
        backend.update(traits=variant["traits"], strategy=variant["strategy"])
        outcome = {**rule["outcome"], **variant["outcome"]}
        rule["outcome"] = {key: value for key, value in outcome.items() if value is not None}
    data["backends"][EXTRA["id"]] = backend
    at = next(i for i, r in enumerate(data["rules"]) if r["id"] == EXTRA["before"])
    data["rules"].insert(at, rule)
    path = folder / "tree.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=110), encoding="utf-8")
    return path


def run_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    answers = write_yaml(tmp_path / "answers.yaml", ANSWERS)
    code = main(["--answers", str(answers), "--output-dir", str(tmp_path / "out"), *args])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return code, captured.out


def test_an_extra_deepspeed_like_backend_is_decided_rendered_checked_and_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, out = run_cli(tmp_path, capsys, "--tree", str(extra_tree(tmp_path)))
    folder = tmp_path / "out"
    config = yaml.safe_load((folder / "accelerate_config.yaml").read_text(encoding="utf-8"))
    assert config["distributed_type"] == "DEEPSPEED"
    assert config["deepspeed_config"]["deepspeed_config_file"] == "ds_config.json"
    assert "fsdp_config" not in config and "mixed_precision" not in config
    ds = json.loads((folder / "ds_config.json").read_text(encoding="utf-8"))
    assert ds["zero_optimization"]["stage"] == 2
    assert ds["zero_optimization"]["offload_optimizer"]["device"] == "cpu"
    assert "--deepspeed_config_file" in (folder / "launch.sh").read_text(encoding="utf-8")
    header = (folder / "accelerate_config.yaml").read_text(encoding="utf-8")
    assert "Backend: DeepSpeed ZeRO-Offload on one GPU" in " ".join(header.replace("#", " ").split())
    summary = " ".join(out.split())
    # The summary names the chosen memory row by the backend's label, and lists the package its
    # DeepSpeed JSON needs.
    assert "The chosen layout (bold in a terminal): ZeRO-2 + optim->CPU (ZeRO-Offload)." in summary
    listed = summary.split("Install where it trains", 1)[-1]
    assert listed != summary and "deepspeed (the DeepSpeed backend): pip install deepspeed" in listed


def test_the_extra_backend_made_fsdp_like_writes_no_deepspeed_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, out = run_cli(tmp_path, capsys, "--tree", str(extra_tree(tmp_path, FSDP_LIKE)))
    folder = tmp_path / "out"
    config = yaml.safe_load((folder / "accelerate_config.yaml").read_text(encoding="utf-8"))
    assert config["distributed_type"] == "FSDP"
    assert config["fsdp_config"]["fsdp_offload_params"] is True
    assert "deepspeed_config" not in config
    assert not (folder / "ds_config.json").exists()
    assert "--deepspeed_config_file" not in (folder / "launch.sh").read_text(encoding="utf-8")
    summary = " ".join(out.split())
    assert "The chosen layout (bold in a terminal): sharded offload." in summary
    assert "deepspeed (the DeepSpeed backend): pip install deepspeed" not in summary


def test_the_shipped_tree_decides_the_same_answers_with_its_own_deepspeed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The control: without the extra backend the same answers go to the shipped DeepSpeed backend."""
    _, out = run_cli(tmp_path, capsys, "--output", "json", "--dry-run")
    assert json.loads(out)["recommendation"]["backend"] == "deepspeed"


def test_json_output_reads_the_zero_stage_from_the_traits(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, out = run_cli(tmp_path, capsys, "--tree", str(extra_tree(tmp_path)), "--output", "json", "--dry-run")
    recommendation = json.loads(out)["recommendation"]
    assert recommendation["backend"] == "zero_offload" and recommendation["zero_stage"] == 2


def shipped_with(old: str, new: str) -> str:
    """The shipped tree's text with one line's `old` replaced by `new` (it must be there once)."""
    assert SHIPPED.count(old) == 1, old
    return SHIPPED.replace(old, new)


def line_number(text: str, needle: str) -> int:
    return text[: text.index(needle)].count("\n") + 1


@pytest.mark.parametrize(
    ("old", "new", "reason"),
    [
        (
            "shards: all,",
            "shards: everything,",
            "backend fsdp2: traits.shards: 'everything' is not allowed; allowed: none, zero, all, model",
        ),
        (
            "deepspeed_json: true,",
            "deepspeed_json: yes please,",
            "backend deepspeed: traits.deepspeed_json: 'yes please' is not allowed; allowed: true, false",
        ),
        (
            "{accelerate_type: MULTI_GPU, labels",
            "{accelerate_type: MULTI_GPU, sharded: none, labels",
            "backend ddp: traits: unknown trait 'sharded'; allowed: accelerate_type, shards, offload, deepspeed_json,",
        ),
        (
            "{accelerate_type: MULTI_GPU, labels: {layout: DDP}}",
            "{accelerate_type: MULTI_GPU, labels: {row: DDP}}",
            "backend ddp: traits.labels: label 'row' is not allowed; allowed: layout",
        ),
        (
            "{accelerate_type: XLA}",
            "{accelerate_type: TPU}",
            "backend xla: traits.accelerate_type: 'TPU' is not an Accelerate distributed_type; allowed: DEEPSPEED,",
        ),
    ],
)
def test_a_bad_trait_is_refused_naming_file_line_key_value_and_what_is_allowed(old: str, new: str, reason: str) -> None:
    text = shipped_with(old, new)
    with pytest.raises(TreeError) as info:
        load_tree(text, "decision_tree.yaml", lint=False)  # the schema check runs on every load
    assert info.value.message.startswith(f"decision_tree.yaml, line {line_number(text, new)}: "), info.value.message
    assert reason in info.value.message


def test_traits_that_need_another_accelerate_type_are_refused_by_the_linter() -> None:
    text = shipped_with("{accelerate_type: MULTI_CPU}", "{accelerate_type: MULTI_CPU, offload: zero}")
    with pytest.raises(TreeError) as info:
        load_tree(text, "decision_tree.yaml")
    reason = "backend multi_cpu: traits.offload 'zero' needs traits.accelerate_type DEEPSPEED, not MULTI_CPU"
    assert reason in info.value.message


def test_every_shipped_backend_reads_as_its_traits() -> None:
    """The traits that replaced the backend ids in code, on the backends that had them."""
    backends = tree().backends
    assert [b for b, v in backends.items() if v.traits.deepspeed_json] == ["deepspeed"]
    assert [b for b, v in backends.items() if v.traits.fsdp] == ["fsdp2"]
    assert {b for b, v in backends.items() if v.traits.whole_copy and v.strategy} == {"single_gpu", "ddp"}
    assert backends["ddp"].traits.label("layout") == "DDP" and backends["fsdp2"].traits.label("layout") is None
    assert all(v.distributed_type == v.traits.accelerate_type for v in backends.values())
    assert NO_BACKEND.accelerate_type is None and not NO_BACKEND.deepspeed_json
