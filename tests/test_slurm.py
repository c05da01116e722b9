"""The SLURM batch script of multi-machine runs, executed with stand-ins for srun, scontrol and the tools."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

from helpers import decide
from test_scenarios import ANSWERS

STUBS = {
    "scontrol": "echo node-a\necho node-b\necho node-c\necho node-d\n",
    # srun: start the command once per machine of the allocation, as SLURM would.
    "srun": 'while [ "${1#--}" != "$1" ]; do shift; done\n'
    'for id in $(seq 0 $((NODES - 1))); do SLURM_NODEID=$id "$@"; done\n',
    "accelerate": 'echo "accelerate $*"\n',
    "axolotl": 'echo "axolotl $*"\n',
}


def stub_path(tmp_path: Path) -> str:
    folder = tmp_path / "stubs"
    folder.mkdir()
    for name, body in STUBS.items():
        path = folder / name
        path.write_text("#!/usr/bin/env bash\n" + body)
        path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return f"{folder}{os.pathsep}{os.environ['PATH']}"


def submit(tmp_path: Path, row: int, *args: str) -> tuple[Path, list[str]]:
    out = tmp_path / "out"
    result = decide(ANSWERS[row], out, write=True)
    nodes = int(result.recommendation.settings["num_machines"])
    script = out / "slurm.sbatch"
    assert os.access(script, os.X_OK)
    env = {
        **os.environ,
        "PATH": stub_path(tmp_path),
        "SLURM_SUBMIT_DIR": str(out),
        "SLURM_JOB_NODELIST": "n[1-4]",
        "NODES": str(nodes),
    }
    proc = subprocess.run(
        ["bash", str(script), *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    return script, proc.stdout.splitlines()


def test_accelerate_job_starts_one_launcher_per_machine(tmp_path: Path) -> None:
    script, lines = submit(tmp_path, 24, "train.py", "--lr", "1e-5")
    text = script.read_text()
    assert "#SBATCH --nodes=2" in text and "#SBATCH --gpus-per-node=8" in text and "#SBATCH --ntasks-per-node=1" in text
    assert text.index("#SBATCH") < text.index("set -euo")  # directives before the first command
    assert len(lines) == 2
    for rank, line in enumerate(lines):
        assert f"--machine_rank {rank}" in line and "--main_process_ip node-a" in line
        assert line.endswith("train.py --lr 1e-5") and "--config_file" in line


def test_axolotl_job_preprocesses_once_then_trains_on_every_machine(tmp_path: Path) -> None:
    _, lines = submit(tmp_path, 25)
    assert [line for line in lines if "preprocess" in line] == ["axolotl preprocess axolotl.yaml"]
    trains = [line for line in lines if line.startswith("axolotl train")]
    assert len(trains) == 2
    for rank, line in enumerate(trains):
        assert f"--node_rank {rank}" in line and "--rdzv_endpoint node-a:29500" in line and "--nnodes 2" in line


@pytest.mark.parametrize("row", [8, 13])
def test_single_machine_runs_have_no_slurm_script(tmp_path: Path, row: int) -> None:
    result = decide(ANSWERS[row], tmp_path)
    assert "slurm.sbatch" not in {f.name for f in result.files}
