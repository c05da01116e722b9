"""`backend-wizard check` on files: exit codes, output, and the table of checks in docs/checks.md."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from helpers import REPO
from realtools import axolotl_validate
from scenario_data import checks
from wizard.checks import CHECKS, checks_table
from wizard.cli import main


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["check", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_clean_and_failing_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = tmp_path / "good.json"
    good.write_text('{"zero_optimization": {"stage": 2}, "train_micro_batch_size_per_gpu": 1}')
    code, out, _ = run(capsys, str(good))
    assert code == 0 and "ok" in out
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "distributed_type: DEEPSPEED\nmixed_precision: no\nnum_processes: 2\n"
        "deepspeed_config:\n  zero_stage: 7\n  zero3_init_flg: true\n"
    )
    code, out, _ = run(capsys, str(bad), "--output", "json")
    assert code == 1
    findings = json.loads(out)["findings"]
    by_path = {(f["path"], f["severity"]) for f in findings}
    assert ("deepspeed_config.zero_stage", "error") in by_path
    assert ("mixed_precision", "error") in by_path
    typo = next(f for f in findings if f["path"] == "deepspeed_config.zero3_init_flg")
    assert "did you mean 'zero3_init_flag'" in typo["fix"]
    assert all(f["tag"] and f["fix"] and f["file"] == str(bad) for f in findings)


def test_unreadable_files_exit_2_with_line_and_column(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text("distributed_type: [MULTI_GPU\n")
    code, out, err = run(capsys, str(broken))
    assert code == 2 and "line 2, column 1" in err and "Traceback" not in err and out == ""
    bad_json = tmp_path / "bad.json"
    bad_json.write_text('{"zero_optimization": {"stage": 2,}}')
    code, _, err = run(capsys, str(bad_json))
    assert code == 2 and "line 1, column" in err
    code, _, err = run(capsys, str(tmp_path / "missing.yaml"))
    assert code == 2 and "does not exist" in err


def test_detection_uses_the_suffix_and_skips_files_of_no_format(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "400")  # the long temporary path stays on one line
    # A DeepSpeed JSON with a key DeepSpeed does not know is checked as DeepSpeed; a launcher's YAML
    # is none of the formats.
    ds = tmp_path / "ds.json"
    ds.write_text('{"zero_optimization": {"stage": 1}, "train_batch_size": 8, "my_comment": "x"}')
    launcher = tmp_path / "cloud.yaml"
    launcher.write_text("provider: modal\ngpu: h100\ngpu_count: 8\nbranch: main\n")
    code, out, _ = run(capsys, str(ds), str(launcher), "--output", "json")
    findings = json.loads(out)["findings"]
    # Every file is listed with its format and counts, whatever it was found to hold.
    files = {f["file"]: (f["format"], f["errors"]) for f in json.loads(out)["files"]}
    assert files == {str(ds): ("deepspeed", 0), str(launcher): ("none", 0)}
    assert {(f["file"], f["format"]) for f in findings} == {(str(ds), "deepspeed"), (str(launcher), "none")}
    assert [f["check"] for f in findings if f["file"] == str(launcher)] == ["not-a-config"]
    assert code == 0 and not [f for f in findings if f["severity"] == "error"]
    code, out, _ = run(capsys, str(launcher))
    words = " ".join(out.split())
    assert code == 0 and words.startswith(f"skipped {launcher}: not a config this tool checks info")
    assert "--format" in words  # the info finding, with what to do if it is one of the formats


def test_a_repeated_yaml_key_is_a_finding_of_its_file_and_the_others_are_checked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    twice = tmp_path / "twice.yaml"
    twice.write_text("distributed_type: MULTI_GPU\nnum_processes: 2\nfsdp_config:\n  a: 1\n  a: 2\nnum_processes: 4\n")
    bad = tmp_path / "bad.yaml"
    bad.write_text("distributed_type: DEEPSPEED\nnum_processes: 2\ndeepspeed_config:\n  zero_stage: 7\n")
    code, out, err = run(capsys, str(twice), str(bad), "--output", "json")
    findings = json.loads(out)["findings"]
    repeats = [(f["path"], f["severity"]) for f in findings if f["check"] == "duplicate-key"]
    assert repeats == [("fsdp_config.a", "warning"), ("num_processes", "warning")]
    assert any(f["file"] == str(bad) and f["check"] == "acc-zero-stage" for f in findings)
    assert code == 1 and err == ""
    # The later value is the one checked (num_processes 4), as the tools' loader keeps it.
    said = next(f["message"] for f in findings if f["path"] == "num_processes")
    assert "line 6" in said and "keeps the later value, 4, silently" in said  # the value that wins, named
    # A JSON's repeated key stays a parse error (exit 2): DeepSpeed refuses the file.
    dup_json = tmp_path / "dup.json"
    dup_json.write_text('{"zero_optimization": {"stage": 2}, "zero_optimization": {"stage": 3}}')
    code, _, err = run(capsys, str(dup_json))
    assert code == 2 and "duplicate key" in err


def test_world_size_and_format_options(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "axolotl.yaml"
    cfg.write_text(
        "base_model: x\ncontext_parallel_size: 4\nfsdp_version: 2\nfsdp_config:\n  reshard_after_forward: true\n"
        "attn_implementation: flash_attention_2\n"
    )
    assert run(capsys, str(cfg))[0] == 0
    code, out, _ = run(capsys, str(cfg), "--world-size", "6", "--output", "json")
    assert code == 1 and any("context_parallel_size" in f["path"] for f in json.loads(out)["findings"])
    code, out, _ = run(capsys, str(cfg), "--format", "deepspeed", "--output", "json")
    assert code == 1 and json.loads(out)["findings"][0]["format"] == "deepspeed"


def test_the_checks_page_lists_every_check() -> None:
    page = (REPO / "docs" / "checks.md").read_text(encoding="utf-8")
    block = re.search(r"<!-- checks:begin.*?-->\n(.*?)\n<!-- checks:end -->", page, re.S)
    assert block and block.group(1) == checks_table(), (
        "docs/checks.md checks table is stale: run python tests/test_readme_examples.py"
    )
    assert f"All {len(CHECKS)} checks" in page


def test_wizard_refuses_to_write_a_config_that_fails_its_checks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import wizard.app
    from wizard.render.renderer import RenderedFile, render_plan

    def broken_render(plan: object) -> list[RenderedFile]:
        files = render_plan(plan)  # type: ignore[arg-type]
        return [
            RenderedFile(f.name, f.text.replace("distributed_type: FSDP", "distributed_type: FSPD"), f.executable)
            for f in files
        ]

    monkeypatch.setattr(wizard.app, "render_plan", broken_render)
    code = main(
        ["--answers", str(REPO / "examples" / "a100x4-7b-full-accelerate.yaml"), "--output-dir", str(tmp_path / "out")]
    )
    err = capsys.readouterr().err
    assert code == 6
    assert "refusing to write accelerate_config.yaml: distributed_type" in err and "FSPD" in err
    assert not (tmp_path / "out").exists()


def test_row23_split_gives_one_candidate_per_stack_that_axolotl_accepts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The acceptance table's row 23 (tests/scenarios/checks.yaml): DeepSpeed and FSDP2 together.
    (entry,) = [entry for entry in checks() if entry.name == "axolotl_deepspeed_and_fsdp2_together"]
    both = entry.write(tmp_path)
    code, out, _ = run(capsys, str(both), "--world-size", "8", "--split", str(tmp_path / "split"), "--output", "json")
    assert code == 1
    findings = json.loads(out)["findings"]
    deepspeed = tmp_path / "split" / "axolotl.deepspeed.yaml"
    fsdp2 = tmp_path / "split" / "axolotl.fsdp2.yaml"
    # Each candidate names exactly one stack and passes the checker (no error finding)...
    ds_data, fsdp_data = yaml.safe_load(deepspeed.read_text()), yaml.safe_load(fsdp2.read_text())
    assert ds_data["deepspeed"] == "zero2.json" and "fsdp_config" not in ds_data and "fsdp_version" not in ds_data
    original = entry.files["axolotl.yaml"]
    assert "deepspeed" not in fsdp_data and fsdp_data["fsdp_config"] == original["fsdp_config"]
    assert fsdp_data["fsdp_version"] == 2
    errors = [f for f in findings if f["severity"] == "error" and f["file"] in (str(deepspeed), str(fsdp2))]
    assert errors == [], errors
    # ... and Axolotl's own schema validator, while the original file is refused by it.
    assert axolotl_validate(deepspeed)["deepspeed"] == "zero2.json"
    assert axolotl_validate(fsdp2)["fsdp_config"]["reshard_after_forward"] is True
    with pytest.raises(ValueError, match=r"cannot be used together|deepspeed"):
        axolotl_validate(both)
    # A second split never replaces a candidate the user edited, unless asked to.
    fsdp2.write_text("# my edits\n" + fsdp2.read_text(), encoding="utf-8")
    assert run(capsys, str(both), "--split", str(tmp_path / "split"))[0] == 1
    assert fsdp2.read_text().startswith("# my edits")
    assert run(capsys, str(both), "--split", str(tmp_path / "split"), "--force")[0] == 1
    assert not fsdp2.read_text().startswith("# my edits")
