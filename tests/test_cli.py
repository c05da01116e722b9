"""The command line with answers files: results, files, and every user error
(exit code, one readable line naming key / value / allowed, no traceback, nothing written)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from test_assumed_line import LLAMA32_1B

from helpers import REPO, decide, write_yaml
from wizard.cli import main

EXAMPLE = REPO / "examples" / "a100x4-7b-full-accelerate.yaml"
BASE: dict[str, Any] = {
    "target": "accelerate",
    "hardware": "nvidia",
    "gpu_model": "A100",
    "gpus_per_node": 4,
    "model": "7B",
    "method": "full",
}


def run_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main([*args, "--output-dir", str(tmp_path / "out")])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def answers(tmp_path: Path, **changes: Any) -> str:
    data = {**BASE, **changes}
    data = {k: v for k, v in data.items() if v is not None}
    return str(write_yaml(tmp_path / "answers.yaml", data))


def assert_one_line_error(err: str, *fragments: str) -> None:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("error: "), err
    assert "Traceback" not in err
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])


def test_example_writes_configs_and_summary(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(tmp_path, capsys, "--answers", str(EXAMPLE))
    assert code == 0, err
    written = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert written == ["accelerate_config.yaml", "answers.yaml", "launch.sh"]
    assert os.access(tmp_path / "out" / "launch.sh", os.X_OK)
    assert "FSDP2" in out and "Why:" in out and "Memory per GPU" in out and "Why not the others" in out
    assert "Next, in this order:" in out
    # The smoke check it points to is a command the CLI takes, on the folder just written.
    import argparse
    import shlex

    from wizard.commands.smoke import add_arguments

    line = next(line.strip() for line in out.splitlines() if line.strip().startswith("backend-wizard smoke "))
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(shlex.split(line)[2:])
    assert Path(args.dir) == tmp_path / "out", args
    # As printed, it gets past the plan: a model given by size has no config.json, so --tiny is there.
    from wizard.smoke.plan import load_plan

    assert args.tiny and load_plan(args.dir, tiny=args.tiny).world_size == 4
    # With --tiny the line promises what it proves (the processes' resolution), not a memory check.
    said = " ".join(out.split())
    assert "a --tiny model cannot test the memory" in said, said
    assert "what the processes resolve and the memory they hold" not in said


def test_replaying_saved_answers_gives_byte_identical_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--answers", str(EXAMPLE), "--output-dir", str(tmp_path / "a")]) == 0
    assert main(["--answers", str(tmp_path / "a" / "answers.yaml"), "--output-dir", str(tmp_path / "b")]) == 0
    for name in ("accelerate_config.yaml", "launch.sh", "answers.yaml"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name
    saved = yaml.safe_load((tmp_path / "a" / "answers.yaml").read_text())
    assert saved["schema_version"] == 1 and saved["answers"]["gpus_per_node"] == 4


def test_json_output_is_one_object_with_the_contract(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(tmp_path, capsys, "--answers", str(EXAMPLE), "--output", "json")
    assert code == 0
    data = json.loads(out)
    assert data["schema_version"] == 2
    rec = data["recommendation"]
    assert rec["backend"] == "fsdp2" and rec["zero_stage"] is None
    assert rec["offload_optimizer"] == "none" and rec["offload_param"] == "none"
    assert rec["mixed_precision"] == "bf16" and rec["num_processes"] == 4 and rec["num_machines"] == 1
    assert [t["held"] for t in data["trace"]][-1] is True and data["trace"][-1]["rule"] == "sharded_fsdp2"
    assert {e["strategy"] for e in data["estimates"]} >= {"ddp", "zero3", "fsdp2"}
    assert all(isinstance(e["total_bytes"], int) for e in data["estimates"])
    assert {f["action"] for f in data["files"]} == {"create"}
    assert isinstance(data["warnings"], list)


def test_json_zero_stage_for_deepspeed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = answers(tmp_path, gpus_per_node=1, offload="cpu")
    code, out, _ = run_cli(tmp_path, capsys, "--answers", path, "--output", "json", "--dry-run")
    rec = json.loads(out)["recommendation"]
    assert code == 0 and rec["backend"] == "deepspeed" and rec["zero_stage"] == 2 and rec["offload_optimizer"] == "cpu"


def test_set_overrides_the_answers_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(
        tmp_path,
        capsys,
        "--answers",
        str(EXAMPLE),
        "--set",
        "model=1B",
        "--set",
        "gpus_per_node=2",
        "--output",
        "json",
        "--dry-run",
    )
    data = json.loads(out)
    assert code == 0 and data["recommendation"]["backend"] == "ddp" and data["recommendation"]["num_processes"] == 2


def test_an_empty_set_value_drops_the_answer(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--set KEY= runs the file as if it lacked KEY: a brought DeepSpeed JSON left out, a required
    answer then missing is named as missing, and explain reads it the same way."""
    ds = tmp_path / "ds.json"
    ds.write_text(json.dumps({"train_micro_batch_size_per_gpu": "auto", "zero_optimization": {"stage": 2}}))
    path = answers(tmp_path, deepspeed_config=str(ds), gpus_per_node=4)
    with_json = json.loads(run_cli(tmp_path, capsys, "--answers", path, "--output", "json", "--dry-run")[1])
    assert with_json["recommendation"]["rule"] == "existing_deepspeed_json"
    code, out, _ = run_cli(
        tmp_path, capsys, "--answers", path, "--set", "deepspeed_config=", "--output", "json", "--dry-run"
    )
    assert code == 0 and json.loads(out)["recommendation"]["rule"] != "existing_deepspeed_json", out
    code, _, err = run_cli(tmp_path, capsys, "--answers", path, "--set", "model=", "--dry-run")
    assert code == 2, err
    assert_one_line_error(err, "model")
    code = main(["explain", "--answers", path, "--set", "deepspeed_config="])
    out = capsys.readouterr().out
    assert code == 0 and "This run brings a DeepSpeed JSON" not in out, out
    assert main(["explain", "--answers", path]) == 0
    assert "This run brings a DeepSpeed JSON" in " ".join(capsys.readouterr().out.split())


def test_set_and_defaults_without_a_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(
        tmp_path,
        capsys,
        "--set",
        "model=7B",
        "--set",
        "gpu_memory_gb=24",
        "--defaults",
        "--output",
        "json",
        "--dry-run",
    )
    data = json.loads(out)
    assert code == 0
    assert data["answers"]["target"] == "accelerate" and data["answers"]["method"] == "lora"
    assert data["recommendation"]["backend"] == "single_gpu"


def test_dry_run_writes_nothing_and_shows_the_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(tmp_path, capsys, "--answers", str(EXAMPLE), "--dry-run")
    assert code == 0 and not (tmp_path / "out").exists()
    assert "dry run" in out and "distributed_type: FSDP" in out


def test_a_dry_run_beside_differing_files_shows_the_diff_exits_0_and_changes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    (out_dir / "accelerate_config.yaml").write_text("mine: true\n")
    code, out, err = run_cli(tmp_path, capsys, "--answers", str(EXAMPLE), "--dry-run")
    assert code == 0 and "error" not in err, err
    assert "-mine: true" in out and "1 existing file differs" in " ".join(out.split()), out
    assert "unless --force is given" in " ".join(out.split())
    assert [p.name for p in out_dir.iterdir()] == ["accelerate_config.yaml"]
    assert (out_dir / "accelerate_config.yaml").read_text() == "mine: true\n"


def test_existing_file_is_not_overwritten_without_force(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    (out_dir / "accelerate_config.yaml").write_text("mine: true\n")
    code, out, err = run_cli(tmp_path, capsys, "--answers", str(EXAMPLE))
    assert code == 1
    assert_one_line_error(err, "not overwriting", "accelerate_config.yaml", "--force")
    assert (out_dir / "accelerate_config.yaml").read_text() == "mine: true\n"
    assert sorted(p.name for p in out_dir.iterdir()) == ["accelerate_config.yaml"], "nothing else written"
    assert "-mine: true" in out, "the diff is shown"
    code, _, _ = run_cli(tmp_path, capsys, "--answers", str(EXAMPLE), "--force")
    assert code == 0 and "distributed_type: FSDP" in (out_dir / "accelerate_config.yaml").read_text()


def test_rerun_with_same_answers_is_unchanged(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_cli(tmp_path, capsys, "--answers", str(EXAMPLE))
    code, out, _ = run_cli(tmp_path, capsys, "--answers", str(EXAMPLE), "--output", "json")
    assert code == 0 and {f["action"] for f in json.loads(out)["files"]} == {"unchanged"}


@pytest.mark.parametrize(
    ("changes", "fragments"),
    [
        ({"gpus_per_node": "four"}, ["gpus_per_node", "'four'", "whole number"]),
        ({"gpus_per_node": 0}, ["gpus_per_node", "0", "at least 1"]),
        ({"gpus_per_node": 2.5}, ["gpus_per_node", "2.5", "whole number"]),
        ({"gpus_per_node": True}, ["gpus_per_node", "True", "whole number"]),
        ({"gpu_memory_gb": -80}, ["gpu_memory_gb", "-80", "more than 0"]),
        ({"gpu_memory_gb": float("nan")}, ["gpu_memory_gb", "nan", "finite"]),
        ({"sequence_length": 10**9}, ["sequence_length", "1000000000", "at most 1048576"]),
        ({"method": "lorra"}, ["method", "'lorra'", "allowed: full, lora, qlora", "did you mean 'lora'"]),
        ({"target": "axolotl", "hardware": "mps"}, ["hardware", "'mps'", "(CUDA) and AMD (ROCm) GPUs only"]),
        ({"hardware": "cpu", "method": "qlora"}, ["method", "'qlora'", "CUDA or ROCm"]),
        ({"model": "seven billion"}, ["model", "'seven billion'", "7B"]),
        ({"model": "./missing/config.json"}, ["model", "does not exist"]),
        ({"offload": "nvme", "nvme_path": "relative/dir"}, ["nvme_path", "absolute path"]),
        ({"gpu_model": "A100\x07"}, ["gpu_model", "control characters"]),
        ({"num_nodes": [1, 2]}, ["num_nodes", "single value"]),
    ],
)
def test_bad_answers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], changes: dict[str, Any], fragments: list[str]
) -> None:
    code, out, err = run_cli(tmp_path, capsys, "--answers", answers(tmp_path, **changes))
    assert code == 2
    assert_one_line_error(err, "answers file" if "num_nodes" not in changes else "num_nodes", *fragments)
    assert not (tmp_path / "out").exists()
    assert out == ""


def test_unknown_key_gets_did_you_mean(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = answers(tmp_path, gpus_per_node=None, gpus_per_nod=4)
    code, _, err = run_cli(tmp_path, capsys, "--answers", path)
    assert code == 2
    assert_one_line_error(err, "unknown key 'gpus_per_nod'", "did you mean 'gpus_per_node'")


def test_bad_set_value(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(tmp_path, capsys, "--answers", str(EXAMPLE), "--set", "num_nodes=-2")
    assert code == 2
    assert_one_line_error(err, "--set", "num_nodes", "'-2'", "at least 1")
    code, _, err = run_cli(tmp_path, capsys, "--answers", str(EXAMPLE), "--set", "offload")
    assert code == 2
    assert_one_line_error(err, "--set", "key=value")


def test_missing_required_answer_names_the_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = answers(tmp_path, model=None)
    code, _, err = run_cli(tmp_path, capsys, "--answers", path)
    assert code == 2
    # model has no default, so --defaults cannot answer it and the hint does not offer it.
    assert_one_line_error(err, "model: no answer given", "--set model=VALUE (it has no default)")
    assert "--defaults" not in err
    path = answers(tmp_path, target=None)
    assert run_cli(tmp_path, capsys, "--answers", path)[0] == 2
    code, out, _ = run_cli(tmp_path, capsys, "--answers", path, "--defaults", "--output", "json", "--dry-run")
    assert code == 0 and json.loads(out)["answers"]["target"] == "accelerate"


def test_memory_default_comes_from_the_gpu_model(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(tmp_path, capsys, "--answers", str(EXAMPLE), "--output", "json", "--dry-run")
    assert json.loads(out)["answers"]["gpu_memory_gb"] == 80
    path = answers(tmp_path, gpu_model="some new card")
    code, _, err = run_cli(tmp_path, capsys, "--answers", path)
    assert code == 2
    assert_one_line_error(
        err, "gpu_memory_gb: no answer given", "gpu_model 'some new card' is not a GPU model", "must be given"
    )
    # --defaults cannot invent the memory of an unknown card either.
    code, _, err = run_cli(tmp_path, capsys, "--answers", path, "--defaults")
    assert code == 2
    assert_one_line_error(err, "gpu_memory_gb", "'some new card'", "gpu_memory_gb must be given")


@pytest.mark.parametrize(
    ("content", "fragments"),
    [
        # The reason is the parser's own words (libyaml's and PyYAML's differ): only the place is asserted.
        ("target: accelerate\nhardware: [nvidia\n", ["line 3", "column 1"]),
        ("- target\n- accelerate\n", ["must be a mapping", "list"]),
        ("", ["is empty"]),
        ("base: &b accelerate\ntarget: *b\n", ["anchors and aliases"]),
        ("target: !!python/object/apply:os.system [echo hi]\n", ["line 1"]),
        ("target: accelerate\ntarget: axolotl\n", ["duplicate key 'target'"]),
        ("schema_version: 9\nanswers: {}\n", ["schema_version must be 1"]),
    ],
)
def test_malformed_answers_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, fragments: list[str]
) -> None:
    path = tmp_path / "answers.yaml"
    path.write_text(content, encoding="utf-8")
    code, _, err = run_cli(tmp_path, capsys, "--answers", str(path))
    assert code == 2
    assert_one_line_error(err, "answers file", *fragments)
    assert not (tmp_path / "out").exists()


def test_answers_file_that_is_a_directory_missing_or_binary(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(tmp_path, capsys, "--answers", str(tmp_path))
    assert code == 2
    assert_one_line_error(err, "is a directory")
    code, _, err = run_cli(tmp_path, capsys, "--answers", str(tmp_path / "nope.yaml"))
    assert code == 2
    assert_one_line_error(err, "does not exist")
    binary = tmp_path / "bin.yaml"
    binary.write_bytes(b"\xff\xfe\x00target")
    code, _, err = run_cli(tmp_path, capsys, "--answers", str(binary))
    assert code == 2
    assert_one_line_error(err, "not UTF-8")
    big = tmp_path / "big.yaml"
    big.write_text("# " + "x" * 300_000)
    code, _, err = run_cli(tmp_path, capsys, "--answers", str(big))
    assert code == 2
    assert_one_line_error(err, "the limit is")


@pytest.mark.parametrize(
    ("content", "fragments"),
    [
        ('{"zero_optimization": {"stage": 2,}}', ["invalid JSON at line 1, column"]),
        ('{\n  "train_batch_size": 8\n}', ["zero_optimization is missing"]),
        ('{"zero_optimization": {"stage": "auto"}}', ["stage is 'auto'", "0, 1, 2, 3"]),
        (
            '{"zero_optimization": {"stage": 3}, "bf16": {"enabled": true}, "fp16": {"enabled": true}}',
            ["both bf16.enabled and fp16.enabled"],
        ),
        ('{"zero_optimization": {"stage": 3, "offload_param": {"device": "nvme"}}}', ["nvme_path is missing"]),
        ('{"zero_optimization": {"stage": 3, "offload_param": {"device": "floppy"}}}', ["'floppy'", "none, cpu, nvme"]),
        ('{"zero_optimization": {"stage": 1}, "zero_optimization": {"stage": 2}}', ["duplicate key"]),
        (
            '{"zero_optimization": {"stage": 2}, "train_batch_size": 64, "train_micro_batch_size_per_gpu": 1, '
            '"gradient_accumulation_steps": 2}',
            ["train_batch_size 64 != micro batch 1 x accumulation 2 x 4 processes = 8", "set train_batch_size to 8"],
        ),
        ("[1, 2]", ["must be a JSON object"]),
    ],
)
def test_bad_deepspeed_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, fragments: list[str]
) -> None:
    ds = tmp_path / "ds.json"
    ds.write_text(content, encoding="utf-8")
    code, _, err = run_cli(tmp_path, capsys, "--answers", answers(tmp_path, deepspeed_config=str(ds)))
    assert code == 2
    assert_one_line_error(err, "ds.json", *fragments)
    assert not (tmp_path / "out").exists()


def test_bf16_json_on_a_gpu_without_bf16(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ds = tmp_path / "ds.json"
    ds.write_text('{"zero_optimization": {"stage": 2}, "bf16": {"enabled": true}}')
    code, _, err = run_cli(tmp_path, capsys, "--answers", answers(tmp_path, gpu_model="V100", deepspeed_config=str(ds)))
    assert code == 2
    assert_one_line_error(err, "bf16.enabled is true but this GPU has no bf16", "fp16")


def test_refusal_exit_code_and_reason(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = answers(tmp_path, gpus_per_node=1, gpu_memory_gb=16, model="70B", offload="none")
    code, out, err = run_cli(tmp_path, capsys, "--answers", path)
    assert code == 4
    # One short line: the reasons and the levers are in the panel on stdout, not repeated here.
    assert_one_line_error(err, "no backend fits, so nothing was written", "what to change is above")
    assert len(err.strip()) < 100, err
    assert "No backend fits" in out  # the panel with the reasons
    # No answers.yaml was written: the pointer to explain names the file given.
    # (rich may fold a long path at the terminal's width: compare without the white space)
    assert "".join(f"More: backend-wizard explain --answers {path}".split()) in "".join(out.split())
    assert not (tmp_path / "out").exists()
    # The refusal is the rule for a run that fits nowhere with offload ruled out (its wording:
    # tests/snapshots/nothing_fits.txt).
    rec = decide(yaml.safe_load(Path(path).read_text()), tmp_path / "decided").recommendation
    assert (rec.rule.id, rec.refused, rec.settings["offload_optimizer"]) == ("nothing_fits", True, "none")


def test_user_text_is_serialized_not_pasted(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    nasty = 'org/model: "x"\ndeepspeed_config_file: /etc/passwd\n{{ 7*7 }}'
    path = answers(
        tmp_path,
        target="axolotl",
        gpus_per_node=1,
        gpu_memory_gb=80,
        method="lora",
        base_model=nasty,
        gpu_model="A100 'quoted' # not a comment",
    )
    code, _, err = run_cli(tmp_path, capsys, "--answers", path)
    assert code == 0, err
    cfg = yaml.safe_load((tmp_path / "out" / "axolotl.yaml").read_text())
    assert cfg["base_model"] == nasty
    assert "deepspeed_config_file" not in cfg and "deepspeed" not in cfg
    saved = yaml.safe_load((tmp_path / "out" / "answers.yaml").read_text())
    assert saved["answers"]["base_model"] == nasty


def test_no_tty_and_no_answers_names_the_flag(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "wizard", "--output-dir", str(tmp_path / "out")],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=60,
    )
    assert proc.returncode == 2
    assert_one_line_error(proc.stderr, "no terminal", "--answers")
    assert proc.stdout == "" and not (tmp_path / "out").exists()


def test_output_dir_that_is_a_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    code = main(["--answers", str(EXAMPLE), "--output-dir", str(blocker)])
    err = capsys.readouterr().err
    assert code == 5
    assert_one_line_error(err, "is not a directory")
    assert blocker.read_text() == "x"


def test_python_dash_m_and_version() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "wizard", "--version"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=60,
    )
    assert proc.returncode == 0 and proc.stdout.startswith("backend-wizard ")


@pytest.mark.parametrize(
    ("address", "allowed"),
    [
        ("10.0.0.1", True),
        ("gpu-node-01", True),
        ("node_7.cluster.local", True),
        ("10.0.0.1:29500", False),  # the port is main_process_port
        ("10.0.0..1", False),
        ("10.0.0.256", False),
        ("10.0.0", False),
        ("fe80::1", False),  # would need brackets in torchrun's HOST:PORT endpoint
        ("-node", False),
        ("node..local", False),
    ],
)
def test_a_machine_address_is_one_the_launchers_can_use(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], address: str, allowed: bool
) -> None:
    path = answers(tmp_path, num_nodes=2, main_process_ip=address)
    code, _, err = run_cli(tmp_path, capsys, "--answers", path, "--dry-run")
    if allowed:
        assert code == 0, err
    else:
        assert code == 2
        assert_one_line_error(err, "main_process_ip", repr(address))


def test_a_multi_machine_run_written_to_a_relative_folder_changes_into_its_absolute_path(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The folder must be at the same path on every machine: the cd command names it whole, since a
    relative path names nothing on another machine."""
    monkeypatch.chdir(tmp_path)
    code = main(["--answers", answers(tmp_path, num_nodes=2), "--output-dir", "run"])
    out = capsys.readouterr().out
    assert code == 0
    commands = [line.strip() for line in out.splitlines() if line.startswith("  ")]
    assert f"cd {tmp_path.resolve() / 'run'}" in commands, commands
    assert "(here run)" in " ".join(out.split())


def test_next_step_of_a_multi_machine_run_names_the_rank_and_the_address(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run_cli(tmp_path, capsys, "--answers", answers(tmp_path, num_nodes=2))
    assert code == 0
    text = " ".join(out.split())
    folder = tmp_path / "out"
    assert (
        "Next: on every machine, from this folder at the same path, best on storage the machines share"
        f" (here {folder}):" in text
    )
    # Each command alone on its line, whole, so that it can be copied as it is; one line per machine.
    commands = [line.strip() for line in out.splitlines() if line.startswith("  ")]
    at = commands.index(f"cd {folder}")
    assert commands[at + 1 : at + 4] == [
        "export MAIN_PROCESS_IP=<machine 0's address>",
        "MACHINE_RANK=0 ./launch.sh YOUR_TRAINING_SCRIPT.py  # on machine 0",
        "MACHINE_RANK=1 ./launch.sh YOUR_TRAINING_SCRIPT.py  # on machine 1",
    ]
    assert all(len(c) + 2 <= 80 for c in commands[at + 1 : at + 4])
    assert "sbatch slurm.sbatch YOUR_TRAINING_SCRIPT.py" in commands
    assert "sbatch slurm.sbatch YOUR_TRAINING_SCRIPT.py" in text
    # The multi-machine file alone has no address, but launch.sh passes it: no warning about it.
    assert "main_process_ip is not set" not in text


@pytest.mark.parametrize(
    "changes",
    [
        {"num_nodes": 2},
        {"num_nodes": 3, "main_process_ip": "10.0.0.5"},
        {"num_nodes": 2, "target": "axolotl", "method": "lora"},
        {"num_nodes": 6},
    ],
    ids=["accelerate-2", "accelerate-3-with-address", "axolotl-2", "accelerate-6"],
)
def test_the_printed_per_machine_commands_run_and_give_each_machine_its_rank(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], changes: dict[str, Any]
) -> None:
    """Property: pasting the Next lines on machine n (placeholders filled in) starts the launcher with rank n."""
    from shell_tools import run_script

    code, out, err = run_cli(tmp_path, capsys, "--answers", answers(tmp_path, **changes))
    assert code == 0, err
    lines = [line.strip() for line in out.splitlines() if line.startswith("  ")]
    at = lines.index(f"cd {tmp_path / 'out'}")
    block = lines[at:]
    block = block[: next((i for i, c in enumerate(block) if c.startswith("sbatch")), len(block))]
    setup = [c.replace("<machine 0's address>", "10.0.0.1") for c in block if not c.startswith(("MACHINE", "NODE"))]
    per_machine = [c for c in block if c.startswith(("MACHINE_RANK", "NODE_RANK"))]
    assert all(len(c) + 2 <= 80 for c in block[1:]), block
    for n in range(changes["num_nodes"]):
        line = (
            per_machine[n]
            if len(per_machine) > 1
            else per_machine[0].replace(f"<0..{changes['num_nodes'] - 1}>", str(n))
        )
        pasted = tmp_path / f"machine{n}.sh"
        pasted.write_text("\n".join([*setup, line]) + "\n")
        proc, calls = run_script(pasted, tmp_path / "tools")
        assert proc.returncode == 0, proc.stderr
        # The launch itself (Axolotl's script also runs its preprocessing first).
        (call,) = [c for c in calls if {"--machine_rank", "--node_rank"} & set(c.argv)]
        flag = "--machine_rank" if "--machine_rank" in call.argv else "--node_rank"
        assert call.argv[call.argv.index(flag) + 1] == str(n), call.argv
        address = changes.get("main_process_ip", "10.0.0.1")
        assert address in " ".join(call.argv), call.argv


def test_estimate_takes_defaults_like_the_other_commands(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # One command line for the main command, explain and estimate: --defaults changes nothing here,
    # since estimate always fills what is missing and prints what it assumed.
    args = ("estimate", "--set", "model=7B", "--set", "method=lora", "--gpu-model", "A100", "--output", "json")
    codes, outs = [], []
    for extra in ((), ("--defaults",)):
        codes.append(main([*args, *extra]))
        outs.append(json.loads(capsys.readouterr().out))
    assert codes == [0, 0] and outs[0] == outs[1]


@pytest.mark.parametrize(
    ("typed", "meant"), [("estimat", "estimate"), ("glosary", "glossary"), ("complete", "completion")]
)
def test_a_mistyped_subcommand_gets_a_did_you_mean(
    typed: str, meant: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run_cli(tmp_path, capsys, typed, "--answers", str(EXAMPLE))
    assert code == 2 and out == ""
    assert_one_line_error(err, f"unknown command '{typed}'", f"did you mean 'backend-wizard {meant}'?")
    assert not (tmp_path / "out").exists()


def test_a_word_far_from_every_subcommand_lists_them(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(tmp_path, capsys, "xyzzy")
    assert code == 2
    assert_one_line_error(
        err, "unknown command 'xyzzy'", "allowed: estimate, explain, tree, glossary, check, completion"
    )
    assert "did you mean" not in err


def test_a_bare_folder_name_is_a_model_path_and_a_bare_unknown_word_is_not(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--set model=l1b` with a folder l1b here reads its config.json, as `./l1b` does."""
    folder = tmp_path / "l1b"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(LLAMA32_1B))
    monkeypatch.chdir(tmp_path)
    counts = []
    for value in ("l1b", "./l1b"):
        code = main(["estimate", "--set", f"model={value}", "--gpu-model", "A100", "--output", "json"])
        out, err = capsys.readouterr()
        assert code == 0, err
        counts.append(json.loads(out)["params"])
    assert counts[0] == counts[1] != 1_000_000_000
    code = main(["estimate", "--set", "model=l2b", "--gpu-model", "A100"])
    _, err = capsys.readouterr()
    assert code == 2 and "'l2b' is not allowed" in err


def test_a_refusals_pointer_to_explain_keeps_the_set_values(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """explain, run as the refusal says, refuses too: the --set values that led there are in the command."""
    path = answers(tmp_path, gpus_per_node=1, gpu_memory_gb=16, model="7B")
    code, out, _ = run_cli(tmp_path, capsys, "--answers", path, "--set", "model=70B", "--set", "offload=none")
    assert code == 4
    said = "".join(out.split())
    assert "".join(f"More: backend-wizard explain --answers {path} --set model=70B --set offload=none".split()) in said


def test_a_refusals_pointer_promises_only_what_explain_shows_for_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A refusal's More: line names the memory breakdown, not a step-time table, and explain on the same
    answers indeed prints no step-time table (a refusal has no chosen layout to time)."""
    path = answers(tmp_path, gpus_per_node=1, gpu_memory_gb=16, model="7B")
    code, out, _ = run_cli(tmp_path, capsys, "--answers", path, "--set", "model=70B", "--set", "offload=none")
    assert code == 4
    said = " ".join(out.split())
    assert "with the memory breakdown;" in said and "step-time table" not in said.split("More:")[1]
    main(["explain", "--answers", path, "--set", "model=70B", "--set", "offload=none"])
    refused = capsys.readouterr().out
    assert "No backend fits" in refused or "nothing fits" in refused.lower(), refused[:500]
    assert "Time per optimizer step, roughly" not in refused
    assert main(["explain", "--answers", path, "--set", "model=1B"]) == 0  # a run that fits has one
    assert "Time per optimizer step, roughly" in capsys.readouterr().out


@pytest.mark.parametrize(
    "given",
    [
        {"target": "accelerate", "hardware": "mps", "gpu_memory_gb": 64, "model": "llama-3.2-3b", "method": "lora",
         "base_dtype": "bf16", "sequence_length": 2048, "global_batch_size": 32},
        {**BASE, "method": "lora", "global_batch_size": 64},
    ],
)  # fmt: skip
def test_estimate_on_an_answers_file_counts_the_micro_batch_the_run_picks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], given: dict[str, Any]
) -> None:
    """A given global batch settles the micro-batch: estimate prints the same figure per GPU as the decision."""
    path = write_yaml(tmp_path / "given.yaml", given)
    result = decide(given, tmp_path / "run", write=False)
    rec = result.recommendation
    chosen = rec.facts.estimates[str(rec.settings["strategy"])]
    assert int(result.session.answers["micro_batch_size"]) > 1  # picked, or the test shows nothing
    code = main(["estimate", "--answers", str(path), "--output", "json"])
    report = json.loads(capsys.readouterr().out)
    row = next(r for r in report["strategies"] if r["id"] == rec.settings["strategy"])
    assert code == 0 and row["gpu_bytes"] == chosen.total, (row, chosen.total)


@pytest.mark.parametrize(
    ("changes", "verdict"),
    [
        ({"model": "1B"}, 0),
        ({"model": "70B", "offload": "none"}, 4),  # refused
        # A close call at a long context: the loss peak may pass the card.
        ({"gpu_model": "RTX 4090", "model": "llama-3.1-8b", "method": "qlora", "sequence_length": 8192}, 9),
    ],
)
def test_explain_exits_with_the_code_the_run_gives_the_same_answers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], changes: dict[str, Any], verdict: int
) -> None:
    path = answers(tmp_path, gpus_per_node=1, gpu_memory_gb=16, model="7B")
    sets = [arg for key, value in changes.items() for arg in ("--set", f"{key}={value}")]
    if "gpu_model" in changes:
        sets += ["--set", "gpu_memory_gb="]
    code, _, _ = run_cli(tmp_path, capsys, "--answers", path, *sets, "--dry-run")
    assert code == verdict
    assert main(["explain", "--answers", path, *sets]) == verdict
    err = " ".join(capsys.readouterr().err.split())
    assert (f"exit {verdict}, as the run itself would:" in err) == (verdict != 0), err
