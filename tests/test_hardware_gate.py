"""The hardware gate beyond the table rows: TPU, Gaudi (HPU), Intel GPUs (XPU), Ascend NPUs,
Cambricon MLUs and Moore Threads GPUs (guidelines H1-H3 and H6 of decision_tree.yaml).

What a CPU can prove about these configs, and what it cannot (the harness in tests/realtools.py):
every file passes the wizard's own checks, accelerate 1.15.0's loader and its launch-argument
checks; an XLA config also passes ``prepare_tpu``, the TPU launcher's
environment step, and the MULTI_* ones ``prepare_multi_gpu_env``, the torchrun route they share
with MULTI_GPU. Not provable here: torch_xla's multiprocessing on a TPU, the Habana stack, the
other vendors' runtimes, HPU communication hooks and mixed precision on the device.
"""

from __future__ import annotations

import contextlib
import io
import json
import shlex
import shutil
import string
from pathlib import Path
from typing import Any

import pytest
import yaml
from shell_tools import lint

from helpers import decide, file, ignored, parsed
from realtools import accelerate_dry_run
from scenario_data import answers
from wizard.checks import check_config
from wizard.cli import main
from wizard.errors import ExitCode, InvalidAnswerError

NEW_HARDWARE = ("tpu", "hpu", "xpu", "npu", "mlu", "musa")
# hardware -> (Accelerate type for several devices, mixed precision)
DEVICES = {
    "hpu": ("MULTI_HPU", "bf16"),
    "xpu": ("MULTI_XPU", "no"),
    "npu": ("MULTI_NPU", "no"),
    "mlu": ("MULTI_MLU", "no"),
    "musa": ("MULTI_MUSA", "no"),
}
# The acceptance table's rows 1, 2 and 37 (tests/scenarios/hardware.yaml).
ROW1 = answers("tpu_with_torch_xla")
ROW2 = answers("tpu_without_torch_xla")
ROW37 = answers("gaudi_eight_cards")
LORA_1B = {"target": "accelerate", "model": "1B", "method": "lora", "sequence_length": 2048, "micro_batch_size": 1}


def device_answers(hardware: str, devices: int, **extra: Any) -> dict[str, Any]:
    return {**LORA_1B, "hardware": hardware, "gpus_per_node": devices, "gpu_memory_gb": 64, **extra}


def header(text: str) -> str:
    """A generated file's comment header as one line (the explanation is wrapped over lines)."""
    return " ".join(line[2:] for line in text.splitlines() if line.startswith("# "))


# ---------------------------------------------------------------------------------------------
# Decisions
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("hardware", sorted(DEVICES))
def test_several_devices_are_the_vendors_data_parallel_type(tmp_path: Path, hardware: str) -> None:
    dtype, precision = DEVICES[hardware]
    result = decide(device_answers(hardware, 4), tmp_path)
    rec = result.recommendation
    assert rec.backend == f"multi_{hardware}" and rec.settings["mixed_precision"] == precision, rec.because
    assert rec.settings["num_processes"] == 4
    acc = parsed(result, "accelerate_config.yaml")
    assert acc["distributed_type"] == dtype and acc["mixed_precision"] == precision
    assert acc["num_processes"] == 4 and acc["gpu_ids"] == "all" and acc["use_cpu"] is False
    assert "deepspeed_config" not in acc and "fsdp_config" not in acc
    assert rec.facts.get("fits_ddp") is True, "a 1B LoRA copy fits, so the explanation carries no warning"
    # Why not one device: the count, not the memory.
    (single,) = [r for r in rec.runner_ups if r.backend == "single_device"]
    assert "Needs exactly one " in single.reason and single.reason.endswith("; this run has 4."), single.reason


@pytest.mark.parametrize("hardware", sorted(DEVICES))
def test_one_device_is_a_single_process_without_a_distributed_backend(tmp_path: Path, hardware: str) -> None:
    _, precision = DEVICES[hardware]
    result = decide(device_answers(hardware, 1), tmp_path)
    rec = result.recommendation
    assert rec.backend == "single_device" and rec.settings["num_processes"] == 1, rec.because
    assert rec.settings["mixed_precision"] == precision
    acc = parsed(result, "accelerate_config.yaml")
    assert acc["distributed_type"] == "NO" and acc["num_processes"] == 1 and acc["use_cpu"] is False
    assert "gpu_ids" not in acc, "a single-process config needs no device list"
    (multi,) = [r for r in rec.runner_ups if r.backend == f"multi_{hardware}"]
    assert "Needs 2 or more " in multi.reason and multi.reason.endswith("; this run has 1."), multi.reason


@pytest.mark.parametrize("hardware", sorted(DEVICES))
def test_a_full_copy_that_does_not_fit_is_a_clear_warning(tmp_path: Path, hardware: str) -> None:
    answers = device_answers(hardware, 2, model="13B", method="full", gpu_memory_gb=32, micro_batch_size=2)
    rec = decide(answers, tmp_path).recommendation
    # Still data parallel (sharding is outside the guidance here), and the estimate says it does not
    # fit: the explanation warns of it (its words: the Gaudi snapshot in tests/snapshots/).
    assert rec.backend == f"multi_{hardware}"
    assert rec.facts.get("fits_ddp") is False


def test_multi_node_gaudi_uses_the_rendezvous_questions(tmp_path: Path) -> None:
    answers = {**ROW37, "num_nodes": 2, "main_process_ip": "10.0.0.1", "main_process_port": 29600}
    result = decide(answers, tmp_path)
    rec = result.recommendation
    assert rec.backend == "multi_hpu" and rec.settings["num_processes"] == 16
    assert rec.settings["num_machines"] == 2
    acc = parsed(result, "accelerate_config.yaml")
    assert (acc["num_machines"], acc["num_processes"], acc["machine_rank"]) == (2, 16, 0)
    assert acc["main_process_ip"] == "10.0.0.1" and acc["main_process_port"] == 29600
    assert acc["same_network"] is True and acc["rdzv_backend"] == "static"
    launch = file(result, "launch.sh").text
    assert '--machine_rank "$MACHINE_RANK"' in launch and '--main_process_ip "$MAIN_PROCESS_IP"' in launch
    sbatch = file(result, "slurm.sbatch").text
    assert "#SBATCH --nodes=2" in sbatch
    assert "#SBATCH --gpus-per-node" not in sbatch, "Gaudi cards are not SLURM's gpu resource"
    assert "Also request the 8 Gaudi cards (HPUs) of each machine" in header(sbatch)


def test_multi_node_on_different_networks_uses_c10d(tmp_path: Path) -> None:
    answers = device_answers("npu", 8, num_nodes=3, same_network=False)
    acc = parsed(decide(answers, tmp_path), "accelerate_config.yaml")
    assert acc["distributed_type"] == "MULTI_NPU" and acc["num_machines"] == 3 and acc["num_processes"] == 24
    assert acc["same_network"] is False and acc["rdzv_backend"] == "c10d"


def test_tpu_asks_no_machine_count_and_no_device_count_without_torch_xla(tmp_path: Path) -> None:
    result = decide({**ROW1, "num_nodes": 2}, tmp_path)
    assert ignored("num_nodes", result.warnings)
    assert parsed(result, "accelerate_config.yaml")["num_machines"] == 1
    assert "slurm.sbatch" not in [f.name for f in result.files]
    refused = decide({**ROW2, "gpus_per_node": 8}, tmp_path / "refused")
    assert refused.recommendation.refused
    assert ignored("gpus_per_node", refused.warnings)


def test_tpu_without_torch_xla_is_the_default_and_the_cli_refuses(tmp_path: Path) -> None:
    answers = {k: v for k, v in ROW2.items() if k != "torch_xla"}
    path = tmp_path / "answers.yaml"
    path.write_text(yaml.safe_dump(answers))
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["--answers", str(path), "--output", "json", "--output-dir", str(tmp_path / "out")])
    assert code == ExitCode.REFUSED, err.getvalue()
    envelope = json.loads(out.getvalue())
    assert envelope["recommendation"]["refused"] is True and envelope["answers"]["torch_xla"] is False
    assert (envelope["recommendation"]["rule"], envelope["recommendation"]["backend"]) == (
        "tpu_without_torch_xla",
        None,
    )
    assert not (tmp_path / "out").exists(), "nothing is written for a refusal"


@pytest.mark.parametrize("hardware", NEW_HARDWARE)
def test_axolotl_refuses_every_new_accelerator_with_the_reason(tmp_path: Path, hardware: str) -> None:
    with pytest.raises(InvalidAnswerError) as info:
        decide({**LORA_1B, "target": "axolotl", "hardware": hardware}, tmp_path)
    assert info.value.key == "hardware" and info.value.value == hardware


@pytest.mark.parametrize("hardware", NEW_HARDWARE)
def test_qlora_needs_a_cuda_or_rocm_gpu(tmp_path: Path, hardware: str) -> None:
    answers = {**ROW1, "method": "qlora"} if hardware == "tpu" else device_answers(hardware, 2, method="qlora")
    with pytest.raises(InvalidAnswerError) as info:
        decide(answers, tmp_path)
    assert info.value.key == "method" and "CUDA or ROCm GPU" in info.value.message


@pytest.mark.parametrize("hardware", sorted(DEVICES))
def test_deepspeed_and_offload_stay_nvidia_and_amd(tmp_path: Path, hardware: str) -> None:
    result = decide(device_answers(hardware, 2, offload="cpu", cpu_memory_gb=512, gpu_model="A100"), tmp_path)
    # gpu_model is asked on Gaudi too (the GPU catalogue knows Gaudi 2 and 3), not on the others.
    dropped = ("offload", "cpu_memory_gb") if hardware == "hpu" else ("offload", "cpu_memory_gb", "gpu_model")
    for key in dropped:
        assert ignored(key, result.warnings)
    assert (ignored("gpu_model", result.warnings)) is (hardware != "hpu")
    assert result.recommendation.backend == f"multi_{hardware}"


# ---------------------------------------------------------------------------------------------
# The files: the wizard's own checks, accelerate's loader and launch checks, bash -n
# ---------------------------------------------------------------------------------------------


def launch_flags(out: Path) -> list[str]:
    """The arguments launch.sh gives `accelerate launch` before the script, with its variables set."""
    text = (out / "launch.sh").read_text()
    body = text.split("exec accelerate launch \\\n", 1)[1].split('"$@"', 1)[0]
    values = {"here": str(out), "MACHINE_RANK": "0", "MAIN_PROCESS_IP": "127.0.0.1"}
    return [string.Template(word).substitute(values) for word in shlex.split(body.replace("\\\n", " "))]


CASES: dict[str, dict[str, Any]] = {
    "xla": ROW1,
    "multi_hpu": ROW37,
    "multi_hpu_two_nodes": {**ROW37, "num_nodes": 2, "main_process_ip": "10.0.0.1"},
    "single_hpu": device_answers("hpu", 1),
    "multi_xpu": device_answers("xpu", 4),
    "multi_npu_two_nodes_c10d": device_answers("npu", 8, num_nodes=2, main_process_ip="10.0.0.1", same_network=False),
    "multi_mlu": device_answers("mlu", 2),
    "multi_musa": device_answers("musa", 2),
    "single_xpu": device_answers("xpu", 1),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_wizards_own_checks_pass_without_warnings(tmp_path: Path, case: str) -> None:
    result = decide(CASES[case], tmp_path)
    acc = parsed(result, "accelerate_config.yaml")
    findings = check_config(acc, "accelerate", world_size=acc["num_processes"])
    assert [f for f in findings if f.severity != "info"] == []
    assert not [w for w in result.warnings if "accelerate_config.yaml" in w]


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
@pytest.mark.parametrize("case", sorted(CASES))
def test_the_scripts_are_valid_bash(tmp_path: Path, case: str) -> None:
    result = decide(CASES[case], tmp_path, write=True)
    scripts = [tmp_path / name for name in ("launch.sh", "slurm.sbatch") if (tmp_path / name).exists()]
    assert lint(scripts) == []  # bash -n and shellcheck
    assert result.files


@pytest.mark.tools
@pytest.mark.parametrize("case", sorted(CASES))
def test_accelerate_accepts_the_config_and_the_launch_flags(tmp_path: Path, case: str) -> None:
    decide(CASES[case], tmp_path, write=True)
    config = yaml.safe_load((tmp_path / "accelerate_config.yaml").read_text())
    flags = launch_flags(tmp_path)
    summary = accelerate_dry_run(tmp_path / "accelerate_config.yaml", cwd=tmp_path, extra_args=flags)
    assert str(summary["distributed_type"]).split(".")[-1] == config["distributed_type"]
    assert int(summary["num_processes"]) == config["num_processes"]
    assert summary["mixed_precision"] == config["mixed_precision"]
    if config["distributed_type"] == "XLA":
        assert "--tpu" in flags and summary["launcher"] == "xla"
        assert summary["main_training_function"] == "main" and summary["downcast_bf16"] is False
        # On a machine without a TPU, prepare_tpu exports no bf16 variable: that part is the TPU's.
        assert not {"XLA_USE_BF16", "XLA_DOWNCAST_BF16"} & set(summary["env"])
    elif config["distributed_type"] == "NO":
        assert summary["launcher"] == "simple" and summary["env"]["ACCELERATE_USE_CPU"] == "False"
    else:
        assert summary["launcher"] == "torchrun" and int(summary["num_machines"]) == config["num_machines"]
        assert summary["env"]["ACCELERATE_MIXED_PRECISION"] == config["mixed_precision"]


@pytest.mark.tools
def test_a_tpu_pod_is_not_something_the_dry_run_pretends_to_cover(tmp_path: Path) -> None:
    decide(ROW1, tmp_path, write=True)
    path = tmp_path / "accelerate_config.yaml"
    pod = yaml.safe_load(path.read_text()) | {"tpu_use_cluster": True, "tpu_name": "my-pod"}
    path.write_text(yaml.safe_dump(pod))
    with pytest.raises(NotImplementedError):
        accelerate_dry_run(path, cwd=tmp_path)


# ---------------------------------------------------------------------------------------------
# The acceptance table's rows (their decisions: tests/scenarios/hardware.yaml)
# ---------------------------------------------------------------------------------------------


def test_row01_tpu_with_torch_xla_writes_an_xla_config(tmp_path: Path) -> None:
    result = decide(ROW1, tmp_path)
    acc = parsed(result, "accelerate_config.yaml")
    assert acc["distributed_type"] == "XLA" and acc["mixed_precision"] == "bf16"
    assert acc["num_processes"] == 8 and acc["num_machines"] == 1 and acc["use_cpu"] is False
    assert acc["main_training_function"] == "main" and acc["downcast_bf16"] is False
    assert acc["tpu_use_cluster"] is False and "gpu_ids" not in acc
    launch = file(result, "launch.sh").text
    assert "  --tpu \\\n" in launch, launch
    assert [f.name for f in result.files] == ["accelerate_config.yaml", "launch.sh", "answers.yaml"]


def test_row02_tpu_without_torch_xla_writes_nothing(tmp_path: Path) -> None:
    result = decide(ROW2, tmp_path)
    assert result.recommendation.refused and result.files == [], "no executable XLA config is written"
    # The XLA backend is the runner-up (why it lost is in the refusal's snapshot, tests/snapshots/).
    assert "xla" in [r.backend for r in result.recommendation.runner_ups]


def test_row37_gaudi_warning_travels_with_the_config(tmp_path: Path) -> None:
    result = decide(ROW37, tmp_path)
    rec = result.recommendation
    assert rec.facts.get("fits_ddp") is False, "7B x 16 B does not fit in 0.8 x 96 GB"
    acc = parsed(result, "accelerate_config.yaml")
    assert acc["distributed_type"] == "MULTI_HPU" and acc["mixed_precision"] == "bf16"
    assert acc["num_processes"] == 8 and acc["gpu_ids"] == "all" and acc["use_cpu"] is False
    assert not {"deepspeed_config", "fsdp_config", "downcast_bf16", "tpu_use_cluster"} & set(acc)
    # The explanation, with its warning that a full copy does not fit, is the config's header comment.
    assert " ".join(rec.because.split()) in header(file(result, "accelerate_config.yaml").text)
