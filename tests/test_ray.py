"""Axolotl on a Ray cluster: the question, the rendered files, the checks and the script.

Ray only places the workers, so the backend rules decide exactly as without it; the launch script
is run with stand-ins for `ray` and `axolotl` to prove the commands and their order.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from shell_tools import lint

from helpers import decide, file, ignored, parsed
from realtools import axolotl_validate, gpu_capabilities, require_tool
from scenario_data import answers
from wizard.checks import check_config

# The acceptance table's row 26 (tests/scenarios/multi_node.yaml): 4 nodes x 8 A100 80GB on a Ray
# cluster, full fine-tune of an 8B model, 4k tokens, Axolotl.
ROW26 = answers("axolotl_ray_four_nodes")
# Each stand-in appends its command line to $CALLS, so the test sees the order across tools.
STUBS = {
    "ray": 'echo "ray $*" >> "$CALLS"\nexit "${RAY_EXIT:-0}"\n',
    "axolotl": 'echo "axolotl $*" >> "$CALLS"\n',
}
# One per backend the rules can choose for an Axolotl run on several GPUs.
# Ray is asked only for several machines: on one, `axolotl train` starts the workers itself.
LORA: dict[str, Any] = {**ROW26, "num_nodes": 2, "gpus_per_node": 4, "method": "lora"}
NVME: dict[str, Any] = {**ROW26, "model": "70B", "offload": "nvme", "nvme_path": "/local_nvme"}
CASES = {"fsdp2": ROW26, "ddp": LORA, "deepspeed": NVME}


def run_launch(
    tmp_path: Path, answers: dict[str, Any], **env: str
) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    """Write the wizard's files, then run launch.sh with the stand-ins first on PATH."""
    out = tmp_path / "out"
    decide(answers, out, write=True)
    stubs = tmp_path / "stubs"
    stubs.mkdir()
    for name, body in STUBS.items():
        path = stubs / name
        path.write_text("#!/usr/bin/env bash\n" + body)
        path.chmod(path.stat().st_mode | stat.S_IEXEC)
    calls = tmp_path / "calls.log"
    calls.touch()
    clean = {k: v for k, v in os.environ.items() if k not in ("NODE_RANK", "MAIN_PROCESS_IP", "SKIP_PREPROCESS")}
    proc = subprocess.run(
        ["bash", str(out / "launch.sh")],
        cwd=tmp_path,
        env={
            **clean,
            "PATH": f"{stubs}{os.pathsep}{clean['PATH']}",
            "CALLS": str(calls),
            "HF_HOME": str(tmp_path),
            **env,
        },
        capture_output=True,
        text=True,
        timeout=60,
    )
    return proc, calls.read_text().splitlines()


def test_launch_checks_the_cluster_then_preprocesses_and_trains_from_the_head_node(tmp_path: Path) -> None:
    # No NODE_RANK and no MAIN_PROCESS_IP: Ray places the workers, nothing is asked per machine.
    proc, calls = run_launch(tmp_path, ROW26)
    assert proc.returncode == 0, proc.stderr
    assert calls == ["ray status", "axolotl preprocess axolotl.yaml", "axolotl train axolotl.yaml --use-ray"]


def test_launch_stops_when_no_ray_cluster_is_reachable(tmp_path: Path) -> None:
    proc, calls = run_launch(tmp_path, ROW26, RAY_EXIT="1")
    assert proc.returncode == 1
    assert calls == ["ray status"], "nothing may start without a cluster"


def test_launch_script_is_valid_bash(tmp_path: Path) -> None:
    script = tmp_path / "launch.sh"
    script.write_text(file(decide(ROW26, tmp_path / "out"), "launch.sh").text)
    assert lint([script]) == []  # bash -n and shellcheck


def test_ray_skips_the_rendezvous_questions(tmp_path: Path) -> None:
    result = decide({**ROW26, "main_process_ip": "10.0.0.1", "main_process_port": 29600}, tmp_path)
    assert "main_process_ip" not in result.session.answers and "main_process_port" not in result.session.answers
    assert ignored("main_process_ip", result.warnings)
    torchrun = decide({**ROW26, "use_ray": False}, tmp_path / "torchrun")
    assert torchrun.session.answers["main_process_port"] == 29500
    assert {f.name for f in torchrun.files} >= {"slurm.sbatch"}, "without Ray a SLURM job starts the machines"


def test_use_ray_is_an_axolotl_question(tmp_path: Path) -> None:
    accelerate = {**ROW26, "target": "accelerate"}
    result = decide(accelerate, tmp_path)
    assert "use_ray" not in result.session.answers
    assert ignored("use_ray", result.warnings)
    assert "ray" not in file(result, "launch.sh").text.replace("array", "")
    default = {k: v for k, v in ROW26.items() if k != "use_ray"}
    assert decide(default, tmp_path / "default").session.answers["use_ray"] is False
    # On one machine Ray changes nothing the user needs: the question is not asked.
    one_machine = decide({**ROW26, "num_nodes": 1}, tmp_path / "one")
    assert "use_ray" not in one_machine.session.answers
    assert "ray" not in file(one_machine, "launch.sh").text.replace("array", "")


@pytest.mark.parametrize("backend", sorted(CASES))
def test_ray_never_changes_the_backend_and_the_yaml_keeps_one_stack(tmp_path: Path, backend: str) -> None:
    answers = CASES[backend]
    result = decide(answers, tmp_path / "ray")
    plain = decide({**answers, "use_ray": False}, tmp_path / "plain").recommendation
    rec = result.recommendation
    assert rec.backend == backend == plain.backend
    # The one difference Ray makes: no hybrid sharding, since Ray places the workers itself and
    # one machine's workers are not promised one shard group.
    layout = ("strategy", "dp_replicate_size", "dp_shard_size")
    assert {k: v for k, v in rec.settings.items() if k not in layout} == {
        k: v for k, v in plain.settings.items() if k not in layout
    }
    assert rec.settings.get("dp_replicate_size") in (None, 1) and rec.settings["strategy"] != "hsdp"
    if backend == "fsdp2":
        assert plain.settings["strategy"] == "hsdp" and plain.settings["dp_replicate_size"] == 4
    cfg = parsed(result, "axolotl.yaml")
    world = rec.settings["num_processes"]
    assert cfg["use_ray"] is True and cfg["ray_num_workers"] == world and cfg["resources_per_worker"] == {"GPU": 1}
    assert ("deepspeed" in cfg) == (backend == "deepspeed") and ("fsdp_config" in cfg) == (backend == "fsdp2")
    # Network and rank settings belong to the shell, never to the YAML.
    text = file(result, "axolotl.yaml").text
    assert "NCCL" not in text and "MAIN_PROCESS_IP" not in text and "NODE_RANK" not in text
    assert "slurm.sbatch" not in {f.name for f in result.files}


@pytest.mark.parametrize("backend", sorted(CASES))
def test_ray_config_passes_the_checks_and_axolotls_validator(tmp_path: Path, backend: str) -> None:
    result = decide(CASES[backend], tmp_path, write=True)
    world = int(result.recommendation.settings["num_processes"])
    path = tmp_path / "axolotl.yaml"
    cfg = parsed(result, "axolotl.yaml")
    findings = check_config(cfg, "axolotl", world_size=world, load_json=_load_json(tmp_path))
    # (NVMe offload keeps its deliberate "offload is slow" warning; no errors, no Ray findings.)
    assert [f for f in findings if f.severity == "error" or f.check.startswith("ax-ray")] == []
    # The same file against a smaller cluster: check 36 names the mismatch.
    findings = check_config(cfg, "axolotl", world_size=world // 2, load_json=_load_json(tmp_path))
    assert [f.check for f in findings if f.check.startswith("ax-ray")] == ["ax-ray-workers"]
    # Axolotl's own validation, as on a GPU worker, and as `axolotl train --use-ray` does it on the
    # Ray driver (the head node may have no GPU: it passes no capabilities).
    validated = axolotl_validate(path, capabilities=gpu_capabilities(world))
    assert validated["use_ray"] is True and validated["ray_num_workers"] == world
    assert validated["resources_per_worker"] == {"GPU": 1}
    config, axolotl_dict = require_tool("axolotl.utils.config"), require_tool("axolotl.utils.dict")
    raw = axolotl_dict.DictDefault(yaml.safe_load(path.read_text()))
    assert config.validate_config(raw, capabilities=None, env_capabilities=None)["use_ray"] is True


def _load_json(folder: Path) -> Any:
    """The checker's reader for the DeepSpeed JSON a YAML points at (relative to its folder)."""

    def load(name: str) -> object:
        target = Path(name)
        return json.loads((target if target.is_absolute() else folder / target).read_text())

    return load


def test_row26_ray_writes_one_command_from_the_head_node(tmp_path: Path) -> None:
    result = decide(ROW26, tmp_path)
    cfg = parsed(result, "axolotl.yaml")
    assert cfg["use_ray"] is True and cfg["ray_num_workers"] == 32
    assert cfg["resources_per_worker"] == {"GPU": 1}
    assert cfg["fsdp_version"] == 2 and cfg["fsdp_config"]["reshard_after_forward"] is True
    assert "deepspeed" not in cfg
    launch = file(result, "launch.sh").text
    # `ray status` first, then one command from the head node: no torchrun rendezvous, no ranks.
    assert launch.index("\nray status\n") < launch.index("axolotl preprocess") < launch.index("axolotl train")
    assert "axolotl train axolotl.yaml --use-ray\n" in launch
    assert "--launcher torchrun" not in launch and "NODE_RANK" not in launch
    assert "slurm.sbatch" not in {f.name for f in result.files}
