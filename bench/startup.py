"""Whole-process start-up cost of backend-wizard, as ratios measured in one run.

Runs each command N times in fresh processes, interleaved, prints the median of each and the two
ratios the project holds itself to (each the median of the rounds' own ratios, so a machine whose
speed drifts during the run moves both sides of a ratio alike):

* ``backend-wizard --help`` against ``python -c pass`` (target: at most 3x);
* ``backend-wizard --answers EXAMPLE --dry-run --output json`` against
  ``python -c "import yaml, jinja2"`` (target: at most 2x), the two libraries that run needs.

backend-wizard runs as its installed console script does (``from wizard.cli import main``).
Every command runs with compiled bytecode, as an installed package has it, and the wizard with
its compiled-template cache filled, as after its first run: both go to a temporary folder
(``PYTHONPYCACHEPREFIX``, ``BACKEND_WIZARD_CACHE_DIR``), so the checkout and the user's cache
are left as they were. It also lists
which heavy modules the answers-file run imported (there must be none).

Usage: python bench/startup.py [--runs N]
"""

from __future__ import annotations

import argparse
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
HEAVY = ("torch", "accelerate", "deepspeed", "axolotl", "transformers", "huggingface_hub", "questionary", "rich")
# What the installed `backend-wizard` script runs (pip writes it from the entry point).
WIZARD = [sys.executable, "-c", "import sys; from wizard.cli import main; sys.exit(main())"]
# (name, the command measured, the baseline it is divided by, the most the ratio may be)
TARGETS = (
    ("backend-wizard --help", "python -c pass", 3.0),
    ("backend-wizard --answers F --dry-run --output json", 'python -c "import yaml, jinja2"', 2.0),
)


def timed(cmd: list[str], env: dict[str, str]) -> float:
    """Seconds one fresh process of `cmd` takes, start to exit."""
    start = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, timeout=60)
    return time.perf_counter() - start


def main() -> int:
    """Measure, print the medians and the ratios; exit 1 when a ratio is over its target."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=21, help="runs of each command (default: %(default)s)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env.update(PYTHONPATH=str(REPO), PYTHONPYCACHEPREFIX=str(Path(scratch) / "pycache"))
        env["BACKEND_WIZARD_CACHE_DIR"] = str(Path(scratch) / "templates")  # filled by the warm-up
        out = str(Path(scratch) / "out")
        answers = ["--answers", str(EXAMPLE), "--dry-run", "--output", "json", "--output-dir", out]
        commands = {
            "python -c pass": [sys.executable, "-c", "pass"],
            'python -c "import yaml, jinja2"': [sys.executable, "-c", "import yaml, jinja2"],
            "backend-wizard --help": [*WIZARD, "--help"],
            "backend-wizard --answers F --dry-run --output json": [*WIZARD, *answers],
        }
        samples: dict[str, list[float]] = {name: [] for name in commands}
        for cmd in commands.values():
            timed(cmd, env)  # warm-up: writes the bytecode, fills the file cache
        for _ in range(args.runs):
            for name, cmd in commands.items():
                samples[name].append(timed(cmd, env))
        probe = subprocess.run(
            [
                sys.executable,
                "-c",
                "import sys, json; from wizard.cli import main; "
                f"main({answers!r}); sys.stderr.write(json.dumps(sorted(sys.modules)))",
            ],
            capture_output=True,
            text=True,
            env=env,
            check=True,
            timeout=60,
        )
    loaded = {m.split(".")[0] for m in json.loads(probe.stderr.strip().splitlines()[-1])}
    medians = {name: statistics.median(values) for name, values in samples.items()}
    print(f"{'command':52} {'median s':>9}   ({args.runs} runs each, interleaved)")
    for name, median in medians.items():
        print(f"{name:52} {median:9.3f}")
    over = False
    for name, base, target in TARGETS:
        # The median of each round's own ratio: the two commands of a round ran one after the
        # other, so a machine that speeds up or slows down during the run moves both alike.
        ratio = statistics.median(w / b for w, b in zip(samples[name], samples[base], strict=True))
        over = over or ratio > target
        verdict = "ok" if ratio <= target else "OVER"
        print(f"{name} / {base}: {ratio:.1f}x (target at most {target:g}x: {verdict})")
    heavy = sorted(set(HEAVY) & loaded)
    print(f"heavy modules imported by the answers-file run: {', '.join(heavy) if heavy else 'none'}")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
