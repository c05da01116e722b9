"""launch.sh for a brought DeepSpeed JSON that cannot start on the planned GPUs stops itself there.

The invariant, over every decided path of the walk: launch.sh checks the cards' memory exactly where
the summary says "do not run launch.sh on these GPUs" on NVIDIA GPUs; run with a stand-in nvidia-smi,
it stops (exit 2, nothing launched, the size the summary names in its message) on cards of the
planned size, and launches on cards of that size, where nvidia-smi is missing, or when told to skip.
"""

from __future__ import annotations

import re
import stat
from io import StringIO
from pathlib import Path

from rich.console import Console
from shell_tools import install_stand_ins, run_script

from helpers import decide, decided_paths, tree
from wizard.engine.evaluate import chosen_estimate
from wizard.ui.console import print_result

SKIP = "BACKEND_WIZARD_SKIP_MEMORY_CHECK"


def _nvidia_smi(bin_dir: Path, mib: list[int] | None) -> None:
    """An nvidia-smi beside the stand-ins that answers the memory.total query as the real one does (MiB per GPU).

    None: no nvidia-smi at all (a machine without the driver's tools, where the script checks nothing).
    """
    tool = bin_dir / "nvidia-smi"
    if mib is None:
        tool.unlink(missing_ok=True)
        return
    lines = "\\n".join(str(m) for m in mib)
    tool.write_text(f'#!/usr/bin/env bash\nprintf "{lines}\\n"\n')
    tool.chmod(tool.stat().st_mode | stat.S_IEXEC)


def test_launch_sh_stops_on_gpus_too_small_for_the_json_as_written(tmp_path: Path) -> None:
    guarded = 0
    paths = decided_paths(tmp_path, lambda a: bool(a.get("deepspeed_config")))
    assert paths
    for number, (answers, _) in enumerate(paths):
        folder = tmp_path / f"out{number}"
        result = decide(answers, folder, write=True)
        launch = folder / "launch.sh"
        if not launch.is_file():
            continue
        out = StringIO()
        print_result(Console(file=out, width=200), tree(), result, dry_run=False, detail=False)
        said = " ".join(out.getvalue().split())
        told = "launch.sh itself stops before launching" in said
        # Said exactly where the summary tells the reader that the JSON cannot run as written on these GPUs.
        cannot = "Next: your JSON cannot run as written on these GPUs: it needs more than the GPU itself" in said
        assert told is (cannot and answers["hardware"] == "nvidia"), said[-800:]
        script = launch.read_text()
        assert (SKIP in script) is told, (answers, said[-600:])
        if not told:
            continue
        guarded += 1
        found = re.search(r"needs GPUs with at least (\d+) GiB each|on NVIDIA GPUs with less than (\d+) GiB\)", said)
        assert found is not None, said[-800:]
        need = int(found.group(1) or found.group(2))
        est = chosen_estimate(result.recommendation)
        assert est is not None and est.past_device
        card_mib = est.gpu_memory // 2**20
        script_args = ["train.py"] if answers["target"] == "accelerate" else []
        tool = "accelerate" if answers["target"] == "accelerate" else "axolotl"
        run_dir = tmp_path / f"run{number}"
        bin_dir = install_stand_ins(run_dir)
        # Machine 0 of several, where the script asks for a rank and an address.
        rank = {"MACHINE_RANK": "0", "NODE_RANK": "0", "MAIN_PROCESS_IP": "10.0.0.1"}
        # On the planned cards: it stops, names the size the summary names, launches nothing.
        _nvidia_smi(bin_dir, [card_mib] * 2)
        proc, calls = run_script(launch, run_dir, *script_args, env=rank)
        assert proc.returncode == 2 and not calls, (proc.stdout, proc.stderr, calls)
        assert f"at least {need} GiB each" in proc.stderr and f"has {card_mib // 1024} GiB" in proc.stderr
        # Told to skip the check: it launches.
        proc, calls = run_script(launch, run_dir, *script_args, env={**rank, SKIP: "1"})
        assert proc.returncode == 0 and calls and calls[-1].tool in (tool, "torchrun"), proc.stderr
        # On cards of the size it needs it launches; one card smaller than that stops it again.
        _nvidia_smi(bin_dir, [need * 1024] * 2)
        proc, calls = run_script(launch, run_dir, *script_args, env=rank)
        assert proc.returncode == 0 and calls, proc.stderr
        _nvidia_smi(bin_dir, [need * 1024, need * 1024 - 1])
        proc, calls = run_script(launch, run_dir, *script_args, env=rank)
        assert proc.returncode == 2 and not calls, proc.stderr
        # No nvidia-smi: nothing to read, no check.
        _nvidia_smi(bin_dir, None)
        proc, calls = run_script(launch, run_dir, *script_args, env=rank)
        assert proc.returncode == 0 and calls, proc.stderr
    assert guarded >= 2, guarded
