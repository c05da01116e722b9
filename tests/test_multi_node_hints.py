"""A launch script for several machines says how to check that NCCL uses the fast network."""

from __future__ import annotations

import subprocess
from pathlib import Path

from helpers import decided_paths, file


def test_every_multi_machine_launch_script_says_how_to_check_the_network_nccl_uses(tmp_path: Path) -> None:
    seen = {True: 0, False: 0}
    targets: set[str] = set()
    for answers, result in decided_paths(tmp_path):
        names = {f.name for f in result.files}
        if "launch.sh" not in names:
            continue
        text = file(result, "launch.sh").text
        # Ray places the workers from its head node: no per-machine launch to check there.
        many = int(answers.get("num_nodes", 1)) > 1 and not answers.get("use_ray")
        hint = "NCCL_DEBUG=INFO" in text and "NET/IB" in text and "NCCL_SOCKET_IFNAME" in text
        assert hint is many, answers
        if many:
            targets.add(str(answers.get("target")))
        seen[many] += 1
    assert seen[True] and seen[False]
    assert {"accelerate", "axolotl"} <= targets, targets
    # Still a script bash reads.
    last = tmp_path / "launch.sh"
    last.write_text(text, encoding="utf-8")
    assert subprocess.run(["bash", "-n", str(last)], capture_output=True).returncode == 0
