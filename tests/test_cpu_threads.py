"""A launch script whose optimizer step runs on the CPU gives its processes the machine's cores.

accelerate launch and torchrun start each process with OMP_NUM_THREADS=1 unless it is set, so
an offloaded Adam update (DeepSpeed's CPU Adam, or PyTorch's AdamW under FSDP2's offload) would
run on one core per process. Properties over every path of the walk:
- launch.sh exports OMP_NUM_THREADS exactly where a GPU run's optimizer state lives in host RAM
  or on NVMe (and Ray, which starts its workers elsewhere, is not the launcher);
- run with the stand-in tools, the tool sees the cores this shell may use split over the
  machine's processes (at least 1), and a value already set is kept.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from shell_tools import recorded_threads, run_script

from helpers import decided_paths, file
from wizard.app import Result
from wizard.engine.facts import GPU_HARDWARE


def _wants_threads(answers: dict[str, object], result: Result) -> bool:
    settings = result.recommendation.settings
    return (
        answers.get("hardware") in GPU_HARDWARE
        and settings.get("offload_optimizer") in ("cpu", "nvme")
        # Ray places the workers itself, on several machines only (a one-machine run ignores use_ray).
        and not (answers.get("use_ray") and int(str(answers.get("num_nodes", 1))) > 1)
    )


def _body(text: str) -> str:
    return "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))


def test_the_launch_script_splits_the_cores_where_the_optimizer_runs_on_the_cpu(tmp_path: Path) -> None:
    cores = int(subprocess.run(["nproc"], capture_output=True, text=True, check=True).stdout)
    seen = {True: 0, False: 0}
    ran: set[tuple[str, int]] = set()
    for answers, result in decided_paths(tmp_path):
        if result.recommendation.refused or "launch.sh" not in {f.name for f in result.files}:
            continue
        text = file(result, "launch.sh").text
        wanted = _wants_threads(answers, result)
        assert ("export OMP_NUM_THREADS" in _body(text)) is wanted, answers
        seen[wanted] += 1
        per_node = int(answers.get("gpus_per_node", 1))
        target = str(answers.get("target"))
        if not wanted or (target, per_node) in ran:
            continue
        ran.add((target, per_node))
        out = tmp_path / "runs" / f"{target}-{per_node}"
        out.mkdir(parents=True)
        for rendered in result.files:
            (out / rendered.name).write_text(rendered.text, encoding="utf-8")
        env = {"MACHINE_RANK": "0", "NODE_RANK": "0", "MAIN_PROCESS_IP": "10.0.0.1"}
        args = ["train.py"] if target == "accelerate" else []
        proc, calls = run_script(out / "launch.sh", out, *args, env=env)
        assert proc.returncode == 0 and calls, proc.stderr
        assert set(recorded_threads(out)) == {str(max(1, cores // per_node))}, (answers, recorded_threads(out))
        proc, _ = run_script(out / "launch.sh", out, *args, env={**env, "OMP_NUM_THREADS": "3"})
        assert proc.returncode == 0 and set(recorded_threads(out)) == {"3"}, proc.stderr
    assert seen[True] and seen[False], seen
    assert {target for target, _ in ran} == {"accelerate", "axolotl"}, ran
