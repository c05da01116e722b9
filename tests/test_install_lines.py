"""The summary's "install first" warnings name only what is missing where the wizard runs.

The files' headers list every package they use under "Install first" (they are copied to the
machines that train); the summary repeats a line only where its package is not found here
(importlib's finder, nothing imported; an MPI by its mpirun or mpiexec on PATH).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import wizard.installed
from helpers import REPO
from wizard.render.addons import REQUIREMENTS


def found_here(modules: tuple[str, ...], commands: tuple[str, ...], path: str | None = None) -> bool:
    """What the test itself finds: every module, and one of the commands on PATH (neither: cannot tell)."""
    if not modules and not commands:
        return False
    if not all(importlib.util.find_spec(name) is not None for name in modules):
        return False
    return not commands or any(shutil.which(command, path=path) for command in commands)


@pytest.mark.installed_here
def test_each_requirement_is_found_as_importlib_and_path_find_it() -> None:
    for name, need in REQUIREMENTS.items():
        # The module's own function: the suite replaces it for every test not marked installed_here.
        installed = wizard.installed.requirement_installed(need.modules, need.commands)
        assert installed is found_here(need.modules, need.commands), name
    assert wizard.installed.requirement_installed((), ()) is False  # a system library: cannot be told, so it is said


def summary(tmp_path: Path, answers: dict[str, object], path: str) -> tuple[str, str]:
    """`backend-wizard --answers A --output-dir OUT` in a fresh process: what it prints, and launch.sh."""
    (tmp_path / "answers.yaml").write_text(yaml.safe_dump(answers), encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(REPO), "PATH": path, "COLUMNS": "200"}
    command = [sys.executable, "-m", "wizard", "--answers", "answers.yaml", "--output-dir", "out", "--force"]
    proc = subprocess.run(command, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout + proc.stderr, (tmp_path / "out" / "launch.sh").read_text(encoding="utf-8")


def test_the_summary_says_install_first_only_for_what_is_missing_here(tmp_path: Path) -> None:
    """Through the CLI: the MPI line follows PATH (a stand-in mpirun or none), the Python packages what this
    interpreter finds; the header of launch.sh lists them all either way."""
    answers = {"target": "accelerate", "hardware": "cpu", "cpu_processes": 2, "model": "1B", "method": "full"}
    bare = tmp_path / "empty"  # no MPI at all: the wizard's own Python is started by its full path
    bare.mkdir()
    stand_in = tmp_path / "bin"
    stand_in.mkdir()
    mpirun = stand_in / "mpirun"
    mpirun.write_text("#!/bin/sh\nexit 0\n")
    mpirun.chmod(mpirun.stat().st_mode | stat.S_IEXEC)
    needs = [REQUIREMENTS["accelerate"], REQUIREMENTS["mpi"]]
    for path in (str(bare), str(stand_in)):
        said, launch = summary(tmp_path, answers, path)
        words = " ".join(said.split())
        # The summary's own list of what to install, under its heading.
        heading = "Install where it trains (missing on this machine; check the one that trains)"
        listed = words.split(heading)[1].split("Not used from your answers")[0] if heading in words else ""
        for need in needs:
            missing = not found_here(need.modules, need.commands, path)
            assert (f"{need.package} (" in listed) is missing, (need.package, path, words)
            assert need.package in " ".join(launch.replace("#", " ").split())  # the header lists it either way


def test_a_machine_the_user_declined_to_have_read_gets_every_package_said_as_unchecked(tmp_path: Path) -> None:
    """Interactive "no" to reading this machine: nothing is checked on it, so the summary lists every package the
    files need under a title that says so, never "missing on this machine"; the files' headers list them too.
    (Every package reads as missing here: the suite's stand-in for requirement_installed.)"""
    import io

    from rich.console import Console

    from wizard.app import load, run
    from wizard.session import Sources
    from wizard.ui.console import warnings_list

    answers = {"target": "axolotl", "hardware": "nvidia", "gpu_model": "A10G", "model": "8B", "method": "lora"}
    listed, printed = {}, {}
    for read in (True, False):
        sources = Sources(set_values=answers, use_defaults=True, read_machine=read)
        result = run(load(), sources, tmp_path / f"out{read}", force=False, dry_run=True)
        listed[read] = [
            w.split(": ", 1)[1] for w in result.warnings if w.startswith(("install first: ", "install unchecked: "))
        ]
        out = io.StringIO()
        Console(file=out, width=200).print(warnings_list(result.warnings, "axolotl.yaml"))
        printed[read] = " ".join(out.getvalue().split())
        header = next(f.text for f in result.files if f.name == "axolotl.yaml")
        assert "# Install first" in header and "axolotl" in header.split("# Install first", 1)[1]
    # The same packages either way (the stand-in finds none here); only the title differs.
    assert listed[True] and listed[True] == listed[False], listed
    assert "missing on this machine; check the one that trains" in printed[True]
    assert "not checked" not in printed[True]
    assert "none checked: reading this machine was declined" in printed[False]
    assert "missing on this machine; check the one that trains" not in printed[False]


@pytest.mark.parametrize("platform", ["linux", "darwin"])
def test_a_mac_plan_is_checked_only_on_a_mac(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, platform: str) -> None:
    """A plan for a Mac made on another machine says its packages were not checked: what is installed here says
    nothing of the Mac; made on a Mac, the packages missing there are named as missing."""
    import sys

    from wizard.app import load, run
    from wizard.session import Sources

    monkeypatch.setattr(sys, "platform", platform)
    answers = {"target": "accelerate", "hardware": "mps", "gpu_memory_gb": 64, "model": "1B", "method": "lora"}
    sources = Sources(set_values=answers, use_defaults=True, read_machine=True)
    result = run(load(), sources, tmp_path / "out", force=False, dry_run=True)
    unchecked = [w for w in result.warnings if w.startswith("install unchecked: ")]
    checked = [w for w in result.warnings if w.startswith("install first: ")]
    if platform == "darwin":
        assert not unchecked
    else:
        assert unchecked and not checked, result.warnings
    # The list's heading says why nothing was checked, so it does not read as the other list's contradiction.
    import io

    from rich.console import Console

    from helpers import tree
    from wizard.ui.console import print_result

    out = io.StringIO()
    print_result(Console(file=out, width=200), tree(), result, dry_run=True)
    printed = " ".join(out.getvalue().split())
    assert ("this machine is not a Mac, so none was checked" in printed) == (platform != "darwin"), printed
