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
    assert {"wizard/data/models.yaml", "wizard/data/gpus.yaml", "wizard/data/architectures.yaml"} <= names

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    subprocess.run([str(venv / "bin" / "pip"), "install", "-q", str(wheel)], check=True, timeout=600)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    # Without the checkout on PYTHONPATH (a developer's shell may export it), or the probe below
    # would import the checkout instead of the installed wheel.
    clean = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    answers = shutil.copy(REPO / "examples" / "a10g-7b-lora-axolotl.yaml", elsewhere / "answers.yaml")
    proc = subprocess.run(
        [str(venv / "bin" / "backend-wizard"), "--answers", str(answers), "--output", "json"],
        cwd=elsewhere,
        capture_output=True,
        text=True,
        timeout=120,
        env=clean,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["recommendation"]["backend"] == "single_gpu"
    assert (elsewhere / "backend-wizard-out" / "axolotl.yaml").is_file()
    probe = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import wizard.resources as r; print(r.templates_dir())"],
        cwd=elsewhere,
        capture_output=True,
        text=True,
        timeout=60,
        env=clean,
    )
    assert "_bundled" in probe.stdout and str(REPO) not in probe.stdout
    # The installed wheel counts a config.json by its architecture (wizard/data/architectures.yaml).
    config = shutil.copy(REPO / "tests" / "assets" / "configs" / "EleutherAI--pythia-12b.json", elsewhere / "c.json")
    estimate = [str(venv / "bin" / "backend-wizard"), "estimate", "--gpu-memory-gb", "80", "--output", "json"]
    proc = subprocess.run(
        [*estimate, "--model", str(config)], cwd=elsewhere, capture_output=True, text=True, timeout=120, env=clean
    )
    assert proc.returncode == 0 and json.loads(proc.stdout)["params"] == 11_846_072_320, proc.stderr
    # Without the optional extra, a Hub id the cache does not hold says how to install it (no request is made:
    # the import fails first).
    bare = {k: v for k, v in clean.items() if not k.startswith(("HF_", "TRANSFORMERS_"))}
    bare["HF_HOME"] = str(tmp_path / "hf")
    proc = subprocess.run(
        [*estimate[:-2], "--model", "acme/tiny"], cwd=elsewhere, capture_output=True, text=True, timeout=120, env=bare
    )
    assert proc.returncode == 2 and "pip install 'backend-wizard[hub]'" in proc.stderr, proc.stderr
