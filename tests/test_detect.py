"""--detect with recorded nvidia-smi / rocm-smi outputs, and on this GPU-less machine."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from wizard.cli import main
from wizard.detect import detect
from wizard.engine.catalog import lookup_gpu

NVIDIA_SMI = (
    "NVIDIA A100-SXM4-80GB, 81920\nNVIDIA A100-SXM4-80GB, 81920\nNVIDIA A100-SXM4-80GB, 81920\n"
    "NVIDIA A100-SXM4-80GB, 81920\n"
)
ROCM_SMI = json.dumps(
    {
        "card0": {"Card Series": "AMD Instinct MI300X", "VRAM Total Memory (B)": "206141652992"},
        "card1": {"Card Series": "AMD Instinct MI300X", "VRAM Total Memory (B)": "206141652992"},
    }
)


def replay(outputs: dict[str, str]) -> Callable[[Sequence[str]], str | None]:
    def runner(command: Sequence[str]) -> str | None:
        return outputs.get(command[0])

    return runner


def test_nvidia_smi(tmp_path: Path) -> None:
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       1056563584 kB\nMemFree: 1 kB\n")
    found = detect(replay({"nvidia-smi": NVIDIA_SMI}), meminfo)
    assert found.as_answers() == {
        "hardware": "nvidia",
        "gpus_per_node": 4,
        "gpu_model": "NVIDIA A100-SXM4-80GB",
        "gpu_memory_gb": 80,
        "cpu_memory_gb": 1008,
    }
    assert {d.source for d in found.answers} == {"nvidia-smi", str(meminfo)}


def test_rocm_smi() -> None:
    found = detect(replay({"rocm-smi": ROCM_SMI}), Path("/nonexistent"))
    assert found.as_answers() == {
        "hardware": "amd",
        "gpus_per_node": 2,
        "gpu_model": "AMD Instinct MI300X",
        "gpu_memory_gb": 191.98,  # 206141652992 B = 196592 MiB, 16 MiB short of 192 GiB
    }
    assert lookup_gpu("AMD Instinct MI300X").memory_gib == 191.98  # type: ignore[union-attr]


# memory.total as nvidia-smi prints it for real cards (name, MiB), and the catalogue entry it maps to.
NVIDIA_SMI_LINES = [
    ("NVIDIA A10G", 23028),
    ("NVIDIA A10", 23028),
    ("NVIDIA L4", 23034),
    ("NVIDIA L40S", 46068),
    ("NVIDIA A100-SXM4-80GB", 81920),
    ("NVIDIA A100-SXM4-40GB", 40960),
    ("NVIDIA A100-PCIE-40GB", 40960),
    ("NVIDIA A100 80GB PCIe", 81920),
    ("NVIDIA H100 80GB HBM3", 81559),
    ("NVIDIA H100 PCIe", 81559),
    ("NVIDIA H100 NVL", 95830),
    ("NVIDIA H200", 143771),
    ("NVIDIA B200", 183359),
    ("NVIDIA GH200 480GB", 97871),
    ("NVIDIA GeForce RTX 4090", 24564),
    ("NVIDIA GeForce RTX 3090", 24576),
    ("NVIDIA GeForce RTX 5090", 32607),
    ("NVIDIA RTX A6000", 49140),
    ("NVIDIA RTX 6000 Ada Generation", 49140),
    ("Tesla T4", 15360),
    ("Tesla V100-SXM2-16GB", 16160),
    ("Tesla V100-SXM2-32GB", 32510),
]


@pytest.mark.parametrize(("name", "mib"), NVIDIA_SMI_LINES, ids=[n for n, _ in NVIDIA_SMI_LINES])
def test_nvidia_smi_names_map_to_the_catalogue_and_its_mib(name: str, mib: int) -> None:
    found = detect(replay({"nvidia-smi": f"{name}, {mib}\n{name}, {mib}\n"}), Path("/nonexistent"))
    answers = found.as_answers()
    assert answers["gpu_model"] == name and answers["gpus_per_node"] == 2
    assert answers["gpu_memory_gb"] == round(mib / 1024, 2)
    gpu = lookup_gpu(answers["gpu_model"])
    assert gpu is not None and gpu.memory_from == "nvidia-smi" and gpu.memory_mib == mib
    assert gpu.memory_gib == answers["gpu_memory_gb"], "detected and catalogue defaults agree"


def test_mixed_gpus_use_the_smallest() -> None:
    out = "NVIDIA H100 80GB HBM3, 81559\nNVIDIA A10G, 23028\n"
    assert detect(replay({"nvidia-smi": out}), Path("/nonexistent")).as_answers()["gpu_memory_gb"] == 22.49


def test_no_reported_total_falls_back_to_the_catalogue() -> None:
    found = detect(replay({"nvidia-smi": "NVIDIA H100 NVL, [N/A]\n"}), Path("/nonexistent"))
    (memory,) = [d for d in found.answers if d.key == "gpu_memory_gb"]
    assert memory.value == 93.58 and "GPU catalogue" in memory.source and "nvidia-smi" in memory.source
    # An unknown card without a total: the memory is left to ask, the GPUs are still detected.
    found = detect(replay({"nvidia-smi": "NVIDIA Future GPU, [N/A]\n"}), Path("/nonexistent"))
    assert found.as_answers() == {"hardware": "nvidia", "gpus_per_node": 1, "gpu_model": "NVIDIA Future GPU"}


def test_no_gpu_detects_cpu_and_imports_nothing() -> None:
    before = set(sys.modules)
    found = detect(replay({}), Path("/nonexistent"))
    assert found.as_answers() == {"hardware": "cpu"}
    assert "torch" not in set(sys.modules) - before
    assert set(found.packages) >= {"torch", "deepspeed", "torch_xla"}


def test_garbage_tool_output_is_ignored() -> None:
    found = detect(replay({"nvidia-smi": "No devices were found", "rocm-smi": "{not json"}), Path("/nonexistent"))
    assert found.as_answers() == {"hardware": "cpu"}


def test_detect_flag_fills_missing_answers_and_the_file_wins(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import wizard.detect

    monkeypatch.setattr(wizard.detect, "run_command", replay({"nvidia-smi": NVIDIA_SMI}))
    answers = tmp_path / "a.yaml"
    answers.write_text("target: accelerate\nmodel: 7B\nmethod: full\ngpus_per_node: 2\n")
    code = main(
        ["--answers", str(answers), "--detect", "--output", "json", "--dry-run", "--output-dir", str(tmp_path / "out")]
    )
    captured = capsys.readouterr()
    assert code == 0, captured.err
    used = json.loads(captured.out)["answers"]
    assert used["hardware"] == "nvidia" and used["gpu_memory_gb"] == 80 and used["gpu_model"].endswith("80GB")
    assert used["gpus_per_node"] == 2, "the answers file wins over detection"
    assert "detected gpus_per_node = 4 (nvidia-smi)" in captured.err


def test_detect_on_this_machine(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    if detect().as_answers()["hardware"] != "cpu":
        pytest.skip("this machine has a GPU")
    code = main(
        [
            "--detect",
            "--set",
            "model=125M",
            "--set",
            "method=full",
            "--defaults",
            "--output",
            "json",
            "--dry-run",
            "--output-dir",
            str(tmp_path),
        ]
    )
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert json.loads(captured.out)["recommendation"]["backend"] == "cpu"
    assert "detected hardware = cpu" in captured.err


def installed(*names: str) -> Callable[[str], bool]:
    """A package finder that sees exactly `names`."""
    return lambda name: name in names


def test_an_installed_torch_xla_fills_the_tpu_question() -> None:
    found = detect(replay({}), Path("/nonexistent"), installed("torch", "torch_xla"))
    assert found.as_answers() == {"hardware": "cpu", "torch_xla": True}
    assert found.packages["torch_xla"] is True and found.packages["habana_frameworks"] is False
    (xla,) = [d for d in found.answers if d.key == "torch_xla"]
    assert "TPU runtime is not checked" in xla.source
    # Without the package nothing is detected: the question's own default (no) stands.
    assert "torch_xla" not in detect(replay({}), Path("/nonexistent"), installed("torch")).as_answers()


def test_habana_frameworks_is_reported_and_never_imported() -> None:
    before = set(sys.modules)
    found = detect(replay({}), Path("/nonexistent"), installed("habana_frameworks"))
    assert found.packages["habana_frameworks"] is True and found.packages["torch_xla"] is False
    assert not any(name.startswith("habana_frameworks") for name in set(sys.modules) - before)


def run_detect_cli(tmp_path: Path, answers: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, Any, str]:
    """Run --detect on an answers file; return (exit code, the JSON envelope, stderr)."""
    path = tmp_path / "a.yaml"
    path.write_text(answers)
    code = main(["--answers", str(path), "--detect", "--output", "json", "--dry-run", "--output-dir", str(tmp_path)])
    captured = capsys.readouterr()
    return code, json.loads(captured.out), captured.err


TPU_ANSWERS = "target: accelerate\nhardware: tpu\ngpus_per_node: 8\nmodel: 1B\nmethod: full\n"


def test_detect_on_a_tpu_vm_with_torch_xla_picks_xla(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import wizard.detect

    monkeypatch.setattr(wizard.detect, "run_command", replay({}))
    monkeypatch.setattr(wizard.detect, "package_installed", installed("torch", "torch_xla"))
    code, envelope, err = run_detect_cli(tmp_path, TPU_ANSWERS, capsys)
    assert code == 0, err
    assert envelope["answers"]["torch_xla"] is True and envelope["recommendation"]["backend"] == "xla"
    assert "detected torch_xla = True (torch_xla package found" in err
    assert "detected packages: torch, torch_xla" in err


def test_detect_without_torch_xla_refuses_the_tpu_and_reports_habana(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import wizard.detect

    monkeypatch.setattr(wizard.detect, "run_command", replay({}))
    monkeypatch.setattr(wizard.detect, "package_installed", installed("torch", "habana_frameworks"))
    code, envelope, err = run_detect_cli(tmp_path, TPU_ANSWERS.replace("gpus_per_node: 8\n", ""), capsys)
    assert code == 4 and envelope["recommendation"]["refused"] is True
    assert envelope["answers"]["torch_xla"] is False
    assert "detected packages: torch, habana_frameworks" in err


def test_a_mac_with_apple_silicon_detects_mps_and_its_memory() -> None:
    """macOS on arm64 is Apple silicon: hardware mps, its memory from sysctl (bytes, as GiB), and
    never the CPU; an Intel Mac (or Python under Rosetta, which reports x86_64) stays cpu."""
    sixteen = str(16 * 2**30)
    found = detect(replay({"sysctl": sixteen}), Path("/nonexistent"), system=("darwin", "arm64"))
    assert found.as_answers() == {"hardware": "mps", "gpu_memory_gb": 16.0}
    assert [d.source for d in found.answers] == ["macOS on Apple silicon (arm64)", "sysctl -n hw.memsize"]
    unknown = detect(replay({"sysctl": "not a number"}), Path("/nonexistent"), system=("darwin", "arm64"))
    assert unknown.as_answers() == {"hardware": "mps"}
    intel = detect(replay({"sysctl": sixteen}), Path("/nonexistent"), system=("darwin", "x86_64"))
    assert intel.as_answers() == {"hardware": "cpu"}
    linux = detect(replay({"sysctl": sixteen}), Path("/nonexistent"), system=("linux", "aarch64"))
    assert linux.as_answers() == {"hardware": "cpu"}
