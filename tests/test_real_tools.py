"""Everything the wizard writes is accepted by the real tools, on this CPU machine.

* every accelerate_config.yaml: Accelerate 1.15.0's loader, launch checks and plugin construction;
* every DeepSpeed JSON written or read: DeepSpeed 0.19.8's DeepSpeedConfig, with the world size;
* every axolotl.yaml: Axolotl 0.21.0's validate_config, for the GPUs the answers describe;
* real `accelerate launch` runs of a tiny two-process job with configs the wizard wrote: DDP
  (gloo on the CPU), DeepSpeed ZeRO-2 with the optimizer offloaded, and MULTI_CPU through the
  generated launch.sh.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from check_patterns import PATTERNS, write
from helpers import decide
from realtools import (
    TINY_TRAIN,
    TINY_TRAIN_MARKER,
    accelerate_dry_run,
    accelerate_launch,
    axolotl_validate,
    deepspeed_parse,
    require_tool,
    tool_env,
)
from test_scenarios import ANSWERS
from wizard.processes import kill_session

pytestmark = pytest.mark.tools

GPU = {"target": "accelerate", "hardware": "nvidia", "num_nodes": 1}


def ds_json(tmp_path: Path, stage: int, *, optimizer: str = "none", param: str = "none") -> str:
    """A DeepSpeed JSON the user brings: "auto" batch sizes and precision, this stage and offload."""
    zero: dict[str, Any] = {"stage": stage}
    if optimizer != "none":
        zero["offload_optimizer"] = {"device": optimizer}
    if param != "none":
        zero["offload_param"] = {"device": param}
    data = {
        "train_batch_size": "auto",
        "train_micro_batch_size_per_gpu": "auto",
        "gradient_accumulation_steps": "auto",
        "bf16": {"enabled": "auto"},
        "zero_optimization": zero,
    }
    path = tmp_path / "ds.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return str(path)


def extra_cases(tmp: Path) -> dict[str, dict[str, Any]]:
    """Answers beyond the scenario table, so that every template branch is exercised."""
    user_fp16 = tmp / "user_fp16.json"
    user_fp16.write_text(
        json.dumps(
            {"fp16": {"enabled": True}, "train_micro_batch_size_per_gpu": "auto", "zero_optimization": {"stage": 1}}
        )
    )
    base = {**GPU, "micro_batch_size": 1, "sequence_length": 2048, "gpu_model": "A100"}
    # A 13B full fine-tune on 8 x A100 40GB with CPU offload: the run both global-batch cases plan.
    offload_13b = {"gpus_per_node": 8, "gpu_memory_gb": 40, "model": "13B", "method": "full", "offload": "cpu"}
    offload_13b["cpu_memory_gb"] = 1000
    return {
        # A global batch: split by the wizard without a micro-batch (axolotl.yaml), or accumulated by the
        # script beside a ZeRO JSON whose batch keys stay "auto".
        "axolotl_global_batch": {
            **{k: v for k, v in base.items() if k != "micro_batch_size"},
            "target": "axolotl",
            **offload_13b,
            "global_batch_size": 96,
        },
        "accelerate_global_batch_zero": {**base, **offload_13b, "global_batch_size": 64},
        "user_json_zero3": {
            **base,
            "gpus_per_node": 8,
            "gpu_memory_gb": 80,
            "model": "70B",
            "method": "full",
            "deepspeed_config": ds_json(tmp, 3, optimizer="cpu", param="cpu"),
        },
        "user_json_fp16_axolotl": {
            **base,
            "target": "axolotl",
            "gpu_model": "V100",
            "gpus_per_node": 4,
            "gpu_memory_gb": 32,
            "model": "1B",
            "method": "full",
            "deepspeed_config": str(user_fp16),
        },
        "v100_offload_fp16": {
            **base,
            "gpu_model": "V100",
            "gpus_per_node": 2,
            "gpu_memory_gb": 32,
            "model": "7B",
            "method": "full",
            "offload": "cpu",
        },
        "zero3_offload_all_multinode": {
            **base,
            "gpus_per_node": 8,
            "num_nodes": 2,
            "gpu_memory_gb": 24,
            "model": "70B",
            "method": "full",
            "offload": "cpu",
        },
        "axolotl_nvme": {
            **base,
            "target": "axolotl",
            "gpus_per_node": 2,
            "gpu_memory_gb": 80,
            "model": "7B",
            "method": "full",
            "offload": "nvme",
            "nvme_path": "/local_nvme",
        },
        "axolotl_ddp_multinode_lora": {
            **base,
            "target": "axolotl",
            "gpus_per_node": 4,
            "num_nodes": 2,
            "gpu_memory_gb": 80,
            "model": "8B",
            "method": "lora",
        },
        "ddp_multinode": {
            **base,
            "gpus_per_node": 4,
            "num_nodes": 2,
            "gpu_memory_gb": 80,
            "model": "1B",
            "method": "full",
        },
        "ddp_multinode_c10d": {
            **base,
            "gpus_per_node": 4,
            "num_nodes": 2,
            "gpu_memory_gb": 80,
            "model": "1B",
            "method": "full",
            "main_process_ip": "10.1.2.3",
            "same_network": False,
        },
        "fsdp2_multinode": {
            **base,
            "gpus_per_node": 8,
            "num_nodes": 2,
            "gpu_memory_gb": 80,
            "model": "13B",
            "method": "full",
        },
    }


@pytest.fixture(scope="module")
def outputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, dict[str, Any]]]:
    """Write the configs for every case once: name -> (output folder, answers)."""
    tmp = tmp_path_factory.mktemp("real")
    extra = extra_cases(tmp)
    assert sorted(extra) == sorted(EXTRA)
    cases = {f"row{row}": answers for row, answers in ANSWERS.items()} | extra
    written = {}
    for name, answers in cases.items():
        out = tmp / name
        result = decide(answers, out, write=True)
        assert not result.recommendation.refused, name
        written[name] = (out, answers)
    return written


EXTRA = [
    "axolotl_global_batch",
    "accelerate_global_batch_zero",
    "user_json_zero3",
    "user_json_fp16_axolotl",
    "v100_offload_fp16",
    "zero3_offload_all_multinode",
    "axolotl_nvme",
    "axolotl_ddp_multinode_lora",
    "ddp_multinode",
    "ddp_multinode_c10d",
    "fsdp2_multinode",
]
CASES = [f"row{row}" for row in sorted(ANSWERS)] + EXTRA


def launch_args(out: Path) -> list[str]:
    """The flags launch.sh adds to `accelerate launch` (read from the generated script)."""
    script = (out / "launch.sh").read_text()
    args = []
    if "--deepspeed_config_file" in script:
        args += ["--deepspeed_config_file", str(out / "ds_config.json")]
    if "--machine_rank" in script:
        args += ["--machine_rank", "0", "--main_process_ip", "127.0.0.1"]
    precision = re.search(r"^\s*--mixed_precision (\S+)", script, re.M)
    if precision:
        args += ["--mixed_precision", precision.group(1)]
    return args


@pytest.mark.parametrize("case", CASES)
def test_real_tools_accept_the_outputs(
    outputs: dict[str, tuple[Path, dict[str, Any]]], case: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # MULTI_CPU's launch check looks for mpirun, which the mpich wheel puts beside this Python.
    monkeypatch.setenv("PATH", os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]))
    out, answers = outputs[case]
    saved = yaml.safe_load((out / "answers.yaml").read_text())["answers"]
    world = saved.get("gpus_per_node", saved.get("cpu_processes", 1)) * saved.get("num_nodes", 1)
    checked = 0
    accelerate_yaml = out / "accelerate_config.yaml"
    if accelerate_yaml.exists():
        config = yaml.safe_load(accelerate_yaml.read_text())
        summary = accelerate_dry_run(accelerate_yaml, cwd=out, extra_args=launch_args(out))
        assert str(summary["distributed_type"]).split(".")[-1] == config["distributed_type"]
        assert int(summary["num_processes"]) == config["num_processes"]
        if config["distributed_type"] == "FSDP":
            assert summary["fsdp"]["version"] == 2 and summary["fsdp"]["reshard_after_forward"] is True
        if config["distributed_type"] == "DEEPSPEED":
            ds_file = Path(config["deepspeed_config"]["deepspeed_config_file"])
            ds = json.loads((ds_file if ds_file.is_absolute() else out / ds_file).read_text())
            zero = summary["deepspeed_config"]["zero_optimization"]
            assert zero["stage"] == ds["zero_optimization"]["stage"]
            # The YAML alone also works when launched from its folder (the path is relative to it).
            alone = accelerate_dry_run(accelerate_yaml, cwd=out, extra_args=launch_args(out)[2:])
            assert alone["deepspeed_config"]["zero_optimization"]["stage"] == zero["stage"]
        checked += 1
    for json_path in [out / "ds_config.json", Path(str(answers.get("deepspeed_config", "")))]:
        if json_path.is_file():
            deepspeed_parse(json_path, world_size=world)
            checked += 1
    axolotl_yaml = out / "axolotl.yaml"
    if axolotl_yaml.exists():
        bf16 = saved.get("gpu_model") not in ("V100",)
        caps = {
            "bf16": bf16,
            "fp8": False,
            "tf32": bf16,
            "n_gpu": world,
            "compute_capability": "sm_80" if bf16 else "sm_70",
        }
        cfg = axolotl_validate(axolotl_yaml, capabilities=caps, n_gpu=world)
        assert cfg["base_model"] == yaml.safe_load(axolotl_yaml.read_text())["base_model"]
        checked += 1
    assert checked >= 1


def tiny_records(stdout: str) -> list[dict[str, Any]]:
    return sorted(
        (json.loads(line) for line in stdout.splitlines() if line.startswith(TINY_TRAIN_MARKER)),
        key=lambda r: r["rank"],
    )


@pytest.mark.launch
def test_launch_ddp_config_written_by_the_wizard(tmp_path: Path) -> None:
    answers = {
        **GPU,
        "gpus_per_node": 2,
        "gpu_memory_gb": 24,
        "model": "1B",
        "method": "lora",
        "sequence_length": 512,
        "micro_batch_size": 1,
        "gpu_model": "A10G",
    }
    result = decide(answers, tmp_path, write=True)
    assert result.recommendation.backend == "ddp"
    # ACCELERATE_USE_CPU makes the MULTI_GPU launch run gloo DDP on the CPU (test-only).
    ranks = accelerate_launch(
        tmp_path / "accelerate_config.yaml", cwd=tmp_path, nproc_expected=2, env={"ACCELERATE_USE_CPU": "true"}
    )
    assert [r["rank"] for r in ranks] == [0, 1]


@pytest.mark.launch
def test_launch_deepspeed_offload_config_written_by_the_wizard(tmp_path: Path) -> None:
    answers = {
        **GPU,
        "gpus_per_node": 2,
        "gpu_memory_gb": 80,
        "model": "1B",
        "method": "full",
        "offload": "cpu",
        "sequence_length": 512,
        "micro_batch_size": 1,
        "gpu_model": "A100",
    }
    result = decide(answers, tmp_path / "out", write=True)
    assert result.recommendation.settings["zero_stage"] == 2
    assert result.recommendation.settings["offload_optimizer"] == "cpu"
    out = tmp_path / "out"
    # Launched from another folder with the flag launch.sh adds, as a user would.
    ranks = accelerate_launch(
        out / "accelerate_config.yaml", cwd=tmp_path, nproc_expected=2, extra_args=launch_args(out), timeout=420
    )
    assert len(ranks) == 2
    # The script creates torch.optim.AdamW; what the engine steps with is DeepSpeed's CPU Adam in AdamW mode, as
    # the launch note says, and the note is there for this run.
    assert [(r["engine_optimizer"], r["adam_w_mode"]) for r in ranks] == [("DeepSpeedCPUAdam", True)] * 2, ranks
    replaced = "Your script's optimizer is replaced when accelerator.prepare runs"
    assert any(w.startswith(replaced) for w in result.warnings), result.warnings


@pytest.mark.launch
def test_launch_multi_cpu_through_the_generated_script(tmp_path: Path) -> None:
    require_tool("accelerate.commands.launch")  # launch.sh runs the real `accelerate launch`
    decide({**ANSWERS[6], "cpu_processes": 2}, tmp_path / "out", write=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACCELERATE_", "FSDP_"))}
    env.update(tool_env())
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    # In a session of its own, so that a hang kills mpirun and its proxy too (subprocess.run's
    # timeout kills only bash, leaving them to spin); a hang is retried once, since two mpirun
    # launches on the machine at once (the default port) can wait on each other.
    for attempt in (1, 2):
        proc = subprocess.Popen(
            ["bash", str(tmp_path / "out" / "launch.sh"), str(TINY_TRAIN)],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        try:
            stdout, stderr = proc.communicate(timeout=240)
            break
        except subprocess.TimeoutExpired:
            kill_session(proc.pid)  # mpirun's proxy sets a process group of its own
            proc.communicate()
            assert attempt == 1, "launch.sh hung twice"
    assert proc.returncode == 0, stderr[-3000:]
    records = tiny_records(stdout)
    assert [r["rank"] for r in records] == [0, 1]
    assert all(r["world_size"] == 2 and r["rank_sum"] == 1 for r in records)


@pytest.mark.tools
def test_check_patterns_get_the_real_tools_verdict(tmp_path: Path) -> None:
    """The real tool's verdict on every file of tests/check_patterns.py, in one batch.

    tests/test_checks.py asserts what `check` says of the same files: an error exactly where the
    tool below refuses the file, with the same reason.
    """
    for pattern in PATTERNS:
        path = write(pattern, tmp_path / pattern.name)
        world = pattern.world_size or 1
        try:
            if pattern.tool == "accelerate":
                accelerate_dry_run(path, cwd=path.parent)
            elif pattern.tool == "deepspeed":
                deepspeed_parse(path, world_size=world)
            else:
                axolotl_validate(path, n_gpu=world)
        except Exception as exc:  # the verdict is whatever the tool raises
            verdict = f"{type(exc).__name__}: {exc}"
        else:
            verdict = ""
        if pattern.rejects:
            assert pattern.rejects in verdict, (pattern.name, verdict)
        else:
            assert verdict == "", (pattern.name, verdict)
