"""Whole-process start-up cost of the answers-file path, as ratios measured in one run.

Runs `backend-wizard --answers EXAMPLE --dry-run --output json` and `python -c pass` (and, for
scale, `python -c "import torch"` when torch is installed) N times each, interleaved, and prints
the medians and the ratio to `python -c pass`. It also lists which heavy modules the wizard
process imported (there must be none).

Usage: python bench/startup.py [--runs N]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "examples" / "a100x4-7b-full-accelerate.yaml"
HEAVY = ("torch", "accelerate", "deepspeed", "axolotl", "transformers", "questionary")


def timed(cmd: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    with tempfile.TemporaryDirectory() as out:
        wizard = [
            sys.executable,
            "-m",
            "wizard",
            "--answers",
            str(EXAMPLE),
            "--dry-run",
            "--output",
            "json",
            "--output-dir",
            out,
        ]
        commands = {"python -c pass": [sys.executable, "-c", "pass"], "backend-wizard --answers --dry-run": wizard}
        if importlib.util.find_spec("torch") is not None:
            commands["python -c 'import torch'"] = [sys.executable, "-c", "import torch"]
        samples: dict[str, list[float]] = {name: [] for name in commands}
        for cmd in commands.values():
            timed(cmd, env)  # warm-up
        for _ in range(args.runs):
            for name, cmd in commands.items():
                samples[name].append(timed(cmd, env))
        probe = subprocess.run(
            [
                sys.executable,
                "-c",
                "import sys, json; from wizard.cli import main; "
                f"main({wizard[3:]!r}); sys.stderr.write(json.dumps(sorted(sys.modules)))",
            ],
            capture_output=True,
            text=True,
            env=env,
            check=True,
        )
    loaded = {m.split(".")[0] for m in json.loads(probe.stderr.strip().splitlines()[-1])}
    base = statistics.median(samples["python -c pass"])
    print(f"{'command':40} {'median s':>9} {'ratio':>7}   ({args.runs} runs each, interleaved)")
    for name, values in samples.items():
        median = statistics.median(values)
        print(f"{name:40} {median:9.3f} {median / base:7.1f}x")
    heavy = sorted(set(HEAVY) & loaded)
    print(f"heavy modules imported by the wizard process: {', '.join(heavy) if heavy else 'none'}")


if __name__ == "__main__":
    main()
