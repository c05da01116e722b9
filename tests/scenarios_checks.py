"""Acceptance table rows where the user brings a config with a mistake (23, 41, 42): `backend-wizard check`
reports it with the tool's severity and the fix, and row 23's ambiguous file is split into one
candidate per sharding stack, each accepted by Axolotl's own validator."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from realtools import axolotl_validate
from scenario_table import row
from wizard.cli import main

# An A100 Axolotl starter in the shape the table's rows describe (8B/7B full fine-tunes).
BASE: dict[str, Any] = {
    "base_model": "meta-llama/Llama-3.1-8B",
    "datasets": [{"path": "tatsu-lab/alpaca", "type": "alpaca"}],
    "output_dir": "./outputs/run",
    "sequence_len": 4096,
    "micro_batch_size": 1,
    "gradient_accumulation_steps": 4,
    "num_epochs": 1,
    "learning_rate": 2.0e-5,
    "optimizer": "adamw_torch_fused",
    "bf16": True,
}
ZERO2 = {
    "train_batch_size": "auto",
    "train_micro_batch_size_per_gpu": "auto",
    "gradient_accumulation_steps": "auto",
    "zero_optimization": {"stage": 2},
}
FSDP_CONFIG = {
    "auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
    "transformer_layer_cls_to_wrap": "LlamaDecoderLayer",
    "state_dict_type": "SHARDED_STATE_DICT",
    "reshard_after_forward": True,
}


def write(folder: Path, name: str, data: dict[str, Any]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def errors(findings: list[dict[str, Any]], file: Path) -> dict[str, dict[str, Any]]:
    return {f["path"]: f for f in findings if f["severity"] == "error" and f["file"] == str(file)}


class _Capture:
    """capsys is a fixture; row checks get only tmp_path, so capture stdout by hand."""

    def __init__(self) -> None:
        import io
        import sys

        self._sys, self._buffer, self._saved = sys, io.StringIO(), sys.stdout

    def __enter__(self) -> _Capture:
        self._sys.stdout = self._buffer
        return self

    def __exit__(self, *exc: object) -> None:
        self._sys.stdout = self._saved

    @property
    def text(self) -> str:
        return self._buffer.getvalue()


def check_files(*args: str) -> tuple[int, list[dict[str, Any]]]:
    """`backend-wizard check ARGS --output json` with stdout captured."""
    with _Capture() as captured:
        code = main(["check", *args, "--output", "json"])
    return code, json.loads(captured.text)["findings"]


@row(23)
def _row23_both_stacks_is_an_error_and_splits_into_two_candidates(tmp_path: Path) -> None:
    (tmp_path / "zero2.json").write_text(json.dumps(ZERO2), encoding="utf-8")
    both = write(
        tmp_path, "axolotl.yaml", {**BASE, "deepspeed": "zero2.json", "fsdp_version": 2, "fsdp_config": FSDP_CONFIG}
    )
    code, findings = check_files(str(both), "--world-size", "8", "--split", str(tmp_path / "split"))
    assert code == 1
    assert "deepspeed" in errors(findings, both), findings
    deepspeed = tmp_path / "split" / "axolotl.deepspeed.yaml"
    fsdp2 = tmp_path / "split" / "axolotl.fsdp2.yaml"
    # Each candidate names exactly one stack and passes the checker (no error finding)...
    ds_data, fsdp_data = yaml.safe_load(deepspeed.read_text()), yaml.safe_load(fsdp2.read_text())
    assert ds_data["deepspeed"] == "zero2.json" and "fsdp_config" not in ds_data and "fsdp_version" not in ds_data
    assert "deepspeed" not in fsdp_data and fsdp_data["fsdp_config"] == FSDP_CONFIG and fsdp_data["fsdp_version"] == 2
    assert not errors(findings, deepspeed) and not errors(findings, fsdp2), findings
    # ... and Axolotl's own schema validator, while the original file is refused by it.
    assert axolotl_validate(deepspeed)["deepspeed"] == "zero2.json"
    assert axolotl_validate(fsdp2)["fsdp_config"]["reshard_after_forward"] is True
    with pytest.raises(ValueError, match=r"cannot be used together|deepspeed"):
        axolotl_validate(both)
    # A second split never replaces a candidate the user edited, unless asked to.
    fsdp2.write_text("# my edits\n" + fsdp2.read_text(), encoding="utf-8")
    assert main(["check", str(both), "--split", str(tmp_path / "split")]) == 1
    assert fsdp2.read_text().startswith("# my edits")
    assert main(["check", str(both), "--split", str(tmp_path / "split"), "--force"]) == 1
    assert fsdp2.read_text().startswith("# Candidate split from axolotl.yaml")


@row(41)
def _row41_legacy_flash_flag_beside_attn_implementation(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "axolotl.yaml",
        {**BASE, "fsdp_version": 2, "fsdp_config": FSDP_CONFIG, "flash_attention": True, "attn_implementation": "sdpa"},
    )
    code, findings = check_files(str(path), "--world-size", "8")
    assert code == 1
    found = errors(findings, path)
    assert "flash_attention" in found, findings
    assert "attn_implementation" in found["flash_attention"]["fix"] or "remove" in found["flash_attention"]["fix"]
    fixed = write(
        tmp_path, "fixed.yaml", {**BASE, "fsdp_version": 2, "fsdp_config": FSDP_CONFIG, "attn_implementation": "sdpa"}
    )
    assert check_files(str(fixed), "--world-size", "8")[0] == 0


@row(42)
def _row42_fp32_norms_with_deepspeed_is_two_errors(tmp_path: Path) -> None:
    (tmp_path / "zero3.json").write_text(json.dumps({**ZERO2, "zero_optimization": {"stage": 3}}), encoding="utf-8")
    path = write(tmp_path, "axolotl.yaml", {**BASE, "deepspeed": "zero3.json", "fp32_norms": True})
    code, findings = check_files(str(path), "--world-size", "4")
    assert code == 1
    fp32 = [f for f in findings if f["path"] == "fp32_norms" and f["severity"] == "error"]
    messages = " ".join(f["message"] for f in fp32)
    # Both of the checker's errors: no fsdp_config, and fsdp_version is not 2.
    assert len(fp32) == 2 and "fsdp_config" in messages and "fsdp_version" in messages, fp32
    assert all("FSDP2" in f["fix"] or "remove fp32_norms" in f["fix"] for f in fp32)
