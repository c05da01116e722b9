"""The memory estimate against what training on a real GPU holds: `backend-wizard smoke` over seven plans.

Each plan in ``bench/gpu_smoke/`` is an answers file for one NVIDIA GPU (a 1.2B or 3B Llama shape from
the wizard's bundled catalog, random weights, nothing downloaded). For each one this script writes the
set with the wizard, runs ``backend-wizard smoke DIR --device gpu --output json`` on it (the set's own
launch.sh, 4 steps), and prints one Markdown row: what the process resolved (backend, ZeRO stage or
FSDP version, precision), the model states it held after a step against the estimated states, and its
peak against the estimated peak (states, activations, the loss's fp32 temporaries and the buffers the
backend documents), with smoke's verdict.

On one GPU every layout runs as one process, so nothing is divided between GPUs: what the rows test is
each backend's own copies and buffers (DeepSpeed's 16-bit weights beside its fp32 master copy, ZeRO-3's
and FSDP2's gathered layer, the offload's GPU side), the activations and the loss's peak. The wizard
plans FSDP2 for several GPUs only; the ``fsdp2_one_process`` row launches the one-GPU set with the
Accelerate config of that name (FSDP2, one process) and is held against the FSDP2 row of the same
estimate.

Needs one NVIDIA GPU with about 48 GiB free, and torch, accelerate, transformers, peft and deepspeed
(DeepSpeed's CPU Adam is built on first use for the offload plan: a C++ compiler).
``python bench/gpu_smoke.py [--only NAME ...] [--jsonl FILE]``; about 8 minutes on an H200.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent / "gpu_smoke"
REPO = HERE.parent.parent
GIB = 2**30
# Each plan: its answers file, the Accelerate config swapped in (or None), the smoke's time limit.
PLANS: dict[str, tuple[str, str | None, int]] = {
    "full_checkpointing": ("full_checkpointing.yaml", None, 240),
    "full_no_checkpointing": ("full_no_checkpointing.yaml", None, 240),
    "lora_3b": ("lora_3b.yaml", None, 300),
    "zero2": ("zero2.yaml", None, 240),
    "zero3": ("zero3.yaml", None, 240),
    "fsdp2_one_process": ("full_checkpointing.yaml", "fsdp2_one_process.yaml", 240),
    # Last: DeepSpeed builds its CPU Adam (a C++ extension) on first use, a minute or more.
    "offload_16gb": ("offload_16gb.yaml", None, 420),
}


def _wizard(*args: str, timeout: int = 600) -> subprocess.CompletedProcess[str]:
    """`python -m wizard ARGS` from the plans' folder (their DeepSpeed JSON paths are relative to it)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    return subprocess.run(
        [sys.executable, "-m", "wizard", *args],
        cwd=HERE,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _fsdp2_peak(answers_file: Path, folder: Path) -> tuple[int, int]:
    """The FSDP2 row of the plan's own estimate: (states, states + activations + the loss's temporaries)."""
    sys.path.insert(0, str(REPO))
    from wizard.app import load, run
    from wizard.inputs import load_answers_file
    from wizard.session import Sources

    tree = load(None)
    result = run(tree, Sources(file_values=load_answers_file(answers_file)), folder, force=False, dry_run=True)
    est = result.recommendation.facts.estimates["fsdp2"]
    return est.model_states, est.model_states + est.activations + est.transient


def measure(name: str, work: Path) -> dict[str, Any]:
    """Write the plan's set, smoke it on the GPU and return smoke's JSON report with the row's figures."""
    answers, config, timeout = PLANS[name]
    folder = work / name
    written = _wizard("--answers", answers, "--output-dir", str(folder))
    if written.returncode != 0:
        return {"name": name, "error": (written.stderr or written.stdout).strip()[-500:]}
    if config:
        shutil.copy(HERE / config, folder / "accelerate_config.yaml")
    started = time.monotonic()
    args = ["smoke", str(folder), "--device", "gpu", "--steps", "4", "--timeout", str(timeout), "--output", "json"]
    ran = _wizard(*args, timeout=timeout + 120)
    try:
        report: dict[str, Any] = json.loads(ran.stdout)
    except json.JSONDecodeError:
        return {"name": name, "error": (ran.stderr or ran.stdout).strip()[-500:], "rc": ran.returncode}
    report.update(name=name, rc=ran.returncode, seconds=round(time.monotonic() - started))
    planned = report.get("planned") or {}
    report["estimated_states_bytes"] = planned.get("model_states_bytes")
    report["estimated_peak_bytes"] = report.get("estimate_bytes")
    if config:
        states, peak = _fsdp2_peak(HERE / answers, work / f"{name}-estimate")
        report["estimated_states_bytes"], report["estimated_peak_bytes"] = states, peak
    return report


def row(report: dict[str, Any]) -> str:
    """One Markdown row: the plan, what the process resolved, states and peak (measured / estimated), verdict."""
    name = report["name"]
    if "error" in report:
        return f"| {name} | error: {report['error'][:120]} | | | |"
    resolved = str(report.get("distributed_type"))
    if report.get("zero_stage") is not None:
        resolved += f" ZeRO-{report['zero_stage']}"
    if report.get("fsdp_version"):
        resolved += f" FSDP{report['fsdp_version']}"
    if report.get("offload_param") not in (None, "none"):
        resolved += f", offload {report['offload_param']}"
    resolved += f", {report.get('param_dtype')} / {report.get('mixed_precision')}"
    states = max(report.get("states_bytes") or [0])
    peak = max(report.get("peak_bytes") or [0])
    est_states = int(report.get("estimated_states_bytes") or 0)
    est_peak = int(report.get("estimated_peak_bytes") or 0)
    ratio = f"{peak / est_peak:.2f}x" if est_peak else "-"
    verdict = report.get("verdict")
    if report.get("edited_files") and est_peak:
        # smoke holds the swapped launch against the one-GPU plan (and says the backend differs):
        # the row applies smoke's own band to the FSDP2 estimate instead.
        from wizard.smoke import TOLERANCE, TOLERANCE_BYTES

        within = abs(peak - est_peak) <= TOLERANCE * est_peak + TOLERANCE_BYTES
        verdict = f"{'within' if within else 'outside'} {TOLERANCE:.0%} of the FSDP2 row"
    return (
        f"| {name} | {resolved} | {states / GIB:.2f} / {est_states / GIB:.2f} | {peak / GIB:.2f} / {est_peak / GIB:.2f}"
        f" ({ratio}) | {verdict} |"
    )


def main() -> None:
    """Run the plans (all, or --only), print the table and write each report as a JSON line (--jsonl)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", choices=sorted(PLANS), help="run these plans only (default: all)")
    parser.add_argument("--jsonl", type=Path, help="append each smoke report here as one JSON line")
    args = parser.parse_args()
    print("| plan | resolved (backend, weights / autocast) | states GiB, measured / estimated | peak GiB | verdict |")
    print("| --- | --- | --- | --- | --- |")
    with tempfile.TemporaryDirectory() as work:
        for name in args.only or list(PLANS):
            report = measure(name, Path(work))
            if args.jsonl:
                with args.jsonl.open("a", encoding="utf-8") as out:
                    out.write(json.dumps(report) + "\n")
            print(row(report), flush=True)


if __name__ == "__main__":
    main()
