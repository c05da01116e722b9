"""The wheel carries the decision tree and the templates, and the installed command runs anywhere."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from helpers import REPO


def test_wheel_installs_in_a_fresh_venv_and_runs_from_another_directory(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(dist), str(REPO)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    wheel = next(dist.glob("backend_wizard-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "wizard/_bundled/decision_tree.yaml" in names
    for template in (REPO / "templates").iterdir():
        assert f"wizard/_bundled/templates/{template.name}" in names
    assert {"wizard/data/models.yaml", "wizard/data/gpus.yaml"} <= names

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    subprocess.run([str(venv / "bin" / "pip"), "install", "-q", str(wheel)], check=True, timeout=600)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    answers = shutil.copy(REPO / "examples" / "a10g-7b-lora-axolotl.yaml", elsewhere / "answers.yaml")
    # The installed wheel, never the checkout: a PYTHONPATH naming the checkout would shadow it.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run(
        [str(venv / "bin" / "backend-wizard"), "--answers", str(answers), "--output", "json"],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["recommendation"]["backend"] == "single_gpu"
    assert (elsewhere / "backend-wizard-out" / "axolotl.yaml").is_file()
    probe = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import wizard.resources as r; print(r.templates_dir())"],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "_bundled" in probe.stdout and str(REPO) not in probe.stdout
