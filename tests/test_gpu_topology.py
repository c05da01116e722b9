"""GPU links from `nvidia-smi topo -m` / `rocm-smi --showtopotype`, and NCCL_P2P_DISABLE in the launch scripts.

The samples are outputs people posted publicly, copied as posted (the URL above each); only the
columns' spacing is as the page shows it (tabs where the post has tabs).
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from helpers import decided_paths
from wizard.cli import main
from wizard.detect import detect
from wizard.engine.catalog import gpu_catalog, lookup_gpu
from wizard.gpu_topology import nvidia_gpu_link, rocm_gpu_link

LEGEND = """
Legend:

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)
  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node
  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)
  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)
  PIX  = Connection traversing at most a single PCIe bridge
  NV#  = Connection traversing a bonded set of # NVLinks
"""

AFFINITY = "CPU Affinity    NUMA Affinity   GPU NUMA ID"

# 8 x H100 SXM on NVSwitch: https://github.com/HazyResearch/ThunderKittens/issues/167
H100_NVSWITCH_8 = (
    "        GPU0    GPU1    GPU2    GPU3    GPU4    GPU5    GPU6    GPU7    " + AFFINITY + "\n"
    """GPU0     X      NV18    NV18    NV18    NV18    NV18    NV18    NV18    0-47,96-143     0               N/A
GPU1    NV18     X      NV18    NV18    NV18    NV18    NV18    NV18    0-47,96-143     0               N/A
GPU2    NV18    NV18     X      NV18    NV18    NV18    NV18    NV18    0-47,96-143     0               N/A
GPU3    NV18    NV18    NV18     X      NV18    NV18    NV18    NV18    0-47,96-143     0               N/A
GPU4    NV18    NV18    NV18    NV18     X      NV18    NV18    NV18    48-95,144-191   1               N/A
GPU5    NV18    NV18    NV18    NV18    NV18     X      NV18    NV18    48-95,144-191   1               N/A
GPU6    NV18    NV18    NV18    NV18    NV18    NV18     X      NV18    48-95,144-191   1               N/A
GPU7    NV18    NV18    NV18    NV18    NV18    NV18    NV18     X      48-95,144-191   1               N/A
""" + LEGEND
)

# 4 x H100 with NV6 and one NIC per GPU (NIC rows and columns): https://github.com/NVIDIA/nccl/issues/1617
H100_NV6_NICS_4 = (
    "        GPU0    GPU1    GPU2    GPU3    NIC0    NIC1    NIC2    NIC3    " + AFFINITY + "\n"
    """GPU0     X      NV6     NV6     NV6     PIX     SYS     SYS     SYS     6,14,22,30      3               N/A
GPU1    NV6      X      NV6     NV6     SYS     PIX     SYS     SYS     4,12,20,28      1               N/A
GPU2    NV6     NV6      X      NV6     SYS     SYS     PIX     SYS     7,15,23,31      7               N/A
GPU3    NV6     NV6     NV6      X      SYS     SYS     SYS     PIX     5,13,21,29      5               N/A
NIC0    PIX     SYS     SYS     SYS      X      SYS     SYS     SYS
NIC1    SYS     PIX     SYS     SYS     SYS      X      SYS     SYS
NIC2    SYS     SYS     PIX     SYS     SYS     SYS      X      SYS
NIC3    SYS     SYS     SYS     PIX     SYS     SYS     SYS      X
""" + LEGEND
)

# 2 x RTX 5090 behind one host bridge (tab-separated): https://github.com/noonghunna/club-3090/issues/1229
RTX5090_PHB_2 = (
    "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"
    "GPU0\t X \tPHB\t0-63\t0\t\tN/A\n"
    "GPU1\tPHB\t X \t0-63\t0\t\tN/A\n" + LEGEND
)

# 8 x RTX 4090 over two sockets, two NICs (tab-separated, NIC rows without affinity):
# https://github.com/NVIDIA/go-gpuallocator/issues/17
RTX4090_SYS_8 = (
    "\tGPU0\tGPU1\tGPU2\tGPU3\tGPU4\tGPU5\tGPU6\tGPU7\tNIC0\tNIC1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"
    "GPU0\t X \tSYS\tSYS\tSYS\tSYS\tSYS\tSYS\tSYS\tSYS\tSYS\t0-55,112-167\t0\t\tN/A\n"
    "GPU1\tSYS\t X \tSYS\tSYS\tSYS\tSYS\tSYS\tSYS\tSYS\tSYS\t0-55,112-167\t0\t\tN/A\n"
    "GPU2\tSYS\tSYS\t X \tSYS\tSYS\tSYS\tSYS\tSYS\tSYS\tSYS\t0-55,112-167\t0\t\tN/A\n"
    "GPU3\tSYS\tSYS\tSYS\t X \tSYS\tSYS\tSYS\tSYS\tSYS\tSYS\t0-55,112-167\t0\t\tN/A\n"
    "GPU4\tSYS\tSYS\tSYS\tSYS\t X \tSYS\tSYS\tSYS\tSYS\tSYS\t56-111,168-223\t1\t\tN/A\n"
    "GPU5\tSYS\tSYS\tSYS\tSYS\tSYS\t X \tSYS\tSYS\tSYS\tSYS\t56-111,168-223\t1\t\tN/A\n"
    "GPU6\tSYS\tSYS\tSYS\tSYS\tSYS\tSYS\t X \tSYS\tPHB\tPHB\t56-111,168-223\t1\t\tN/A\n"
    "GPU7\tSYS\tSYS\tSYS\tSYS\tSYS\tSYS\tSYS\t X \tSYS\tSYS\t56-111,168-223\t1\t\tN/A\n"
    "NIC0\tSYS\tSYS\tSYS\tSYS\tSYS\tSYS\tPHB\tSYS\t X \tPIX\n"
    "NIC1\tSYS\tSYS\tSYS\tSYS\tSYS\tSYS\tPHB\tSYS\tPIX\t X\n"
)

# 5 x RTX 4090, SYS / PHB / NODE paths: https://github.com/noonghunna/club-3090/issues/46
RTX4090_PCIE_5 = (
    """        GPU0    GPU1    GPU2    GPU3    GPU4    CPU Affinity    NUMA Affinity   GPU NUMA ID
GPU0     X      SYS     SYS     SYS     SYS     8-15,24-31      1               N/A
GPU1    SYS      X      PHB     NODE    NODE    0-7,16-23       0               N/A
GPU2    SYS     PHB      X      NODE    NODE    0-7,16-23       0               N/A
GPU3    SYS     NODE    NODE     X      PHB     0-7,16-23       0               N/A
GPU4    SYS     NODE    NODE    PHB      X      0-7,16-23       0               N/A
"""
    + LEGEND
)

# Mixed: 4 x RTX 3090 in NVLink-bridged pairs (NV4), PCIe between the pairs:
# https://github.com/aikitoria/open-gpu-kernel-modules/pull/18
RTX3090_BRIDGED_PAIRS_4 = (
    """        GPU0    GPU1    GPU2    GPU3    CPU Affinity    NUMA Affinity   GPU NUMA ID
GPU0     X      PHB     NV4     NODE    0-23    0               N/A
GPU1    PHB      X      NODE    NV4     0-23    0               N/A
GPU2    NV4     NODE     X      PHB     0-23    0               N/A
GPU3    NODE    NV4     PHB      X      0-23    0               N/A
"""
    + LEGEND
)

# 2 GPUs on one NUMA node, posted indented with the legend wrapped, followed by the output of
# `nvidia-smi topo -p2p rw` (a second matrix, NS = not supported): the first matrix is the one read.
# https://github.com/noonghunna/club-3090/issues/1125
TWO_NODE_WITH_P2P_MATRIX = """          GPU0 GPU1    CPU Affinity    NUMA Affinity   GPU NUMA ID
    GPU0  X      NODE    0-15    0               N/A
    GPU1 NODE     X      0-15    0               N/A

    Legend:

      X    = Self
      SYS  = Connection traversing PCIe as well as the SMP interconnect between
  NUMA nodes (e.g., QPI/UPI)
      NV#  = Connection traversing a bonded set of # NVLinks

          GPU0 GPU1
     GPU0        X       NS
     GPU1        NS      X
"""

# One Tesla P4 (tab-separated): https://github.com/Project-HAMi/HAMi/pull/99
ONE_P4 = "\tGPU0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\nGPU0\t X \t0-7\t\tN/A\t\tN/A\n" + LEGEND

NVIDIA_SAMPLES = {
    "h100_nvswitch_8": (H100_NVSWITCH_8, "nvlink"),
    "h100_nv6_nics_4": (H100_NV6_NICS_4, "nvlink"),
    "rtx5090_phb_2": (RTX5090_PHB_2, "pcie"),
    "rtx4090_sys_8": (RTX4090_SYS_8, "pcie"),
    "rtx4090_pcie_5": (RTX4090_PCIE_5, "pcie"),
    "rtx3090_bridged_pairs_4": (RTX3090_BRIDGED_PAIRS_4, "pcie"),
    "two_node_with_p2p_matrix": (TWO_NODE_WITH_P2P_MATRIX, "pcie"),
    "one_p4": (ONE_P4, None),
}

# 2 x MI100 without the Infinity Fabric bridge: https://github.com/ROCm/ROCm/issues/1503
MI100_PCIE_2 = """========================== Link Type between two GPUs ==========================
GPU0 GPU1
GPU0 0 PCIE
GPU1 PCIE 0

*******************************
"""

# 8 x MI300X, from `rocm-smi --showtopo` (its hops table and 7 of its NUMA lines left out here):
# ms-swift's AMD guide,
# https://github.com/modelscope/ms-swift/blob/main/docs/source_en/BestPractices/AMD-support.md
MI300X_XGMI_8 = """============================ ROCm System Management Interface ============================
WARNING: AMD GPU device(s) is/are in a low-power state. Check power control/runtime_status

================================ Weight between two GPUs =================================
       GPU0         GPU1         GPU2         GPU3         GPU4         GPU5         GPU6         GPU7
GPU0   0            15           15           15           15           15           15           15
GPU1   15           0            15           15           15           15           15           15
GPU2   15           15           0            15           15           15           15           15
GPU3   15           15           15           0            15           15           15           15
GPU4   15           15           15           15           0            15           15           15
GPU5   15           15           15           15           15           0            15           15
GPU6   15           15           15           15           15           15           0            15
GPU7   15           15           15           15           15           15           15           0

=============================== Link Type between two GPUs ===============================
       GPU0         GPU1         GPU2         GPU3         GPU4         GPU5         GPU6         GPU7
GPU0   0            XGMI         XGMI         XGMI         XGMI         XGMI         XGMI         XGMI
GPU1   XGMI         0            XGMI         XGMI         XGMI         XGMI         XGMI         XGMI
GPU2   XGMI         XGMI         0            XGMI         XGMI         XGMI         XGMI         XGMI
GPU3   XGMI         XGMI         XGMI         0            XGMI         XGMI         XGMI         XGMI
GPU4   XGMI         XGMI         XGMI         XGMI         0            XGMI         XGMI         XGMI
GPU5   XGMI         XGMI         XGMI         XGMI         XGMI         0            XGMI         XGMI
GPU6   XGMI         XGMI         XGMI         XGMI         XGMI         XGMI         0            XGMI
GPU7   XGMI         XGMI         XGMI         XGMI         XGMI         XGMI         XGMI         0

======================================= Numa Nodes =======================================
GPU[0]          : (Topology) Numa Node: 0
GPU[0]          : (Topology) Numa Affinity: 0
================================== End of ROCm SMI Log ===================================
"""

ROCM_SAMPLES = {"mi100_pcie_2": (MI100_PCIE_2, "pcie"), "mi300x_xgmi_8": (MI300X_XGMI_8, "nvlink")}


@pytest.mark.parametrize(("text", "link"), NVIDIA_SAMPLES.values(), ids=NVIDIA_SAMPLES)
def test_nvidia_topology_samples(text: str, link: str | None) -> None:
    assert nvidia_gpu_link(text) == link


@pytest.mark.parametrize(("text", "link"), ROCM_SAMPLES.values(), ids=ROCM_SAMPLES)
def test_rocm_topology_samples(text: str, link: str | None) -> None:
    assert rocm_gpu_link(text) == link


def drop_line(text: str, start: str) -> str:
    return "".join(line for line in text.splitlines(keepends=True) if not line.startswith(start))


@pytest.mark.parametrize(
    "text",
    [
        "",
        "No devices were found",
        "NVIDIA H100 80GB HBM3, 81559\nNVIDIA H100 80GB HBM3, 81559\n",  # the memory query's CSV
        drop_line(H100_NVSWITCH_8, "GPU7"),  # a GPU row missing
        H100_NVSWITCH_8.replace("GPU1    NV18", "GPU1    ??", 1),  # a cell no driver prints
        H100_NVSWITCH_8.replace("GPU0     X", "GPU0    NV18", 1),  # no diagonal
        LEGEND,
    ],
)
def test_unreadable_nvidia_output_says_nothing(text: str) -> None:
    assert nvidia_gpu_link(text) is None


def test_unreadable_rocm_output_says_nothing() -> None:
    assert rocm_gpu_link("") is None
    assert rocm_gpu_link(MI300X_XGMI_8.replace("Link Type", "Hops")) is None
    assert rocm_gpu_link(drop_line(MI100_PCIE_2, "GPU1")) is None
    assert rocm_gpu_link(MI100_PCIE_2.replace("PCIE 0", "PCIE")) is None
    one = "=== Link Type between two GPUs ===\n       GPU0\nGPU0   0\n=== End of ROCm SMI Log ===\n"
    assert rocm_gpu_link(one) is None


def test_one_pcie_pair_among_nvlink_makes_pcie() -> None:
    """NVLink only when every pair is NV#: one pair over PCIe sets the pace of a ring."""
    one_pair = H100_NVSWITCH_8.replace("GPU6    NV18", "GPU6    SYS", 1)
    assert nvidia_gpu_link(H100_NVSWITCH_8) == "nvlink" and nvidia_gpu_link(one_pair) == "pcie"


def test_detect_fills_gpu_link_from_the_topology() -> None:
    query = "NVIDIA H100 80GB HBM3, 81559\n" * 8

    def runner(command: Any) -> str | None:
        return H100_NVSWITCH_8 if list(command) == ["nvidia-smi", "topo", "-m"] else query

    found = detect(runner, Path("/nonexistent"))
    (link,) = [d for d in found.answers if d.key == "gpu_link"]
    assert (link.value, link.source) == ("nvlink", "nvidia-smi topo -m")
    one = detect(lambda command: "NVIDIA H100 80GB HBM3, 81559\n", Path("/nonexistent"))
    assert "gpu_link" not in one.as_answers(), "one GPU: no link to detect"


def test_detect_reads_rocm_smi_topotype_on_amd() -> None:
    cards = {f"card{i}": {"Card Series": "AMD Instinct MI100", "VRAM Total Memory (B)": "34342961152"} for i in (0, 1)}

    def runner(command: Any) -> str | None:
        if command[0] != "rocm-smi":
            return None
        return MI100_PCIE_2 if list(command) == ["rocm-smi", "--showtopotype"] else json.dumps(cards)

    found = detect(runner, Path("/nonexistent"))
    (link,) = [d for d in found.answers if d.key == "gpu_link"]
    assert (found.as_answers()["hardware"], link.value, link.source) == ("amd", "pcie", "rocm-smi --showtopotype")


def standin(folder: Path, name: str, outputs: dict[str, str]) -> None:
    """An executable `name` on PATH that prints outputs[its arguments joined by spaces]."""
    folder.mkdir(exist_ok=True)
    for args, text in outputs.items():
        (folder / (args.replace(" ", "_").replace("=", "").replace(",", "") + ".out")).write_text(text)
    script = folder / name
    script.write_text(
        "#!/usr/bin/env bash\n"
        'key="$*"; key="${key// /_}"; key="${key//=/}"; key="${key//,/}"\n'
        f'out="{folder}/$key.out"\n'
        'if [ -f "$out" ]; then cat "$out"; else exit 9; fi\n'
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)


QUERY = "--query-gpu=name,memory.total --format=csv,noheader,nounits"


def run_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str], answers: str) -> tuple[int, Any, str]:
    path = tmp_path / "a.yaml"
    path.write_text(answers)
    out = tmp_path / "out"
    code = main(["--answers", str(path), "--detect", "--output", "json", "--output-dir", str(out), "--force"])
    captured = capsys.readouterr()
    return code, json.loads(captured.out), captured.err


@pytest.mark.parametrize(
    ("card", "topology", "link", "p2p_off"),
    [
        ("NVIDIA H100 80GB HBM3, 81559", H100_NVSWITCH_8, "nvlink", False),
        ("NVIDIA GeForce RTX 4090, 24564", RTX4090_SYS_8, "pcie", True),
        ("NVIDIA GeForce RTX 4090, 24564", "garbage", None, True),
    ],
    ids=["h100_nvswitch", "rtx4090_pcie", "rtx4090_unreadable_topology"],
)
def test_detect_through_the_cli_with_a_standin_nvidia_smi(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    card: str,
    topology: str,
    link: str | None,
    p2p_off: bool,
) -> None:
    """--detect runs the nvidia-smi found on PATH: its topology fills gpu_link, and the written
    launch.sh turns NCCL P2P off for 8 RTX 4090s (never for H100s)."""
    standin(tmp_path / "bin", "nvidia-smi", {QUERY: f"{card}\n" * 8, "topo -m": topology})
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    code, envelope, err = run_cli(tmp_path, capsys, "target: accelerate\nmodel: 8B\nmethod: lora\n")
    assert code == 0, err
    answers = envelope["answers"]
    assert answers["gpus_per_node"] == 8 and answers["hardware"] == "nvidia"
    if link is not None:
        assert answers["gpu_link"] == link and f"detected gpu_link = {link} (nvidia-smi topo -m)" in err
    else:
        assert "detected gpu_link" not in err
    launch = (tmp_path / "out" / "launch.sh").read_text()
    assert ("\nexport NCCL_P2P_DISABLE=1\n" in launch) == p2p_off
    said = [w for w in envelope["warnings"] if w.startswith("launch.sh sets NCCL_P2P_DISABLE=1")]
    assert len(said) == int(p2p_off), "the summary's warnings say so, once"


def p2p_off_expected(answers: dict[str, Any]) -> bool:
    gpu = lookup_gpu(answers.get("gpu_model"))
    several = int(answers.get("gpus_per_node") or 1) > 1
    return answers.get("hardware") == "nvidia" and several and gpu is not None and gpu.nccl_p2p_disable


def test_every_launch_script_turns_nccl_p2p_off_exactly_for_several_no_p2p_cards(tmp_path: Path) -> None:
    seen = {True: 0, False: 0}
    for answers, result in decided_paths(tmp_path):
        expected = p2p_off_expected(answers)
        scripts = [f for f in result.files if f.name in ("launch.sh", "slurm.sbatch")]
        for script in scripts:
            assert ("\nexport NCCL_P2P_DISABLE=1\n" in script.text) == expected, (script.name, answers)
        notes = [n for n in result.warnings if "NCCL_P2P_DISABLE" in n]
        assert bool(notes) == expected, answers
        seen[expected] += 1
    assert seen[True] >= 4 and seen[False] > 100, seen


def test_the_catalogue_marks_exactly_the_geforce_rtx_40_and_50_series() -> None:
    marked = {gpu.name for gpu in gpu_catalog() if gpu.nccl_p2p_disable}
    assert marked and all(name.startswith(("GeForce RTX 40", "GeForce RTX 50")) for name in marked)
    assert {gpu.name for gpu in gpu_catalog() if gpu.name.startswith(("GeForce RTX 40", "GeForce RTX 50"))} == marked
    assert all(not gpu.p2p for gpu in gpu_catalog() if gpu.nccl_p2p_disable), "no NCCL P2P only where no P2P"
