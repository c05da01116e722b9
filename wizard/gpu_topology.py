"""How the GPUs of this machine are linked, read from `nvidia-smi topo -m` or `rocm-smi --showtopotype`.

Both tools print a matrix with one row and one column per GPU. `nvidia-smi topo -m` marks each
pair with NV# (a bonded set of # NVLinks, NVSwitch included) or a PCIe path (PIX, PXB, PHB, NODE,
SYS; SOC on old drivers), its diagonal with X, and adds columns and rows for network cards (NIC0,
mlx5_0) and the CPU and NUMA affinity; a legend follows. `rocm-smi --showtopotype` prints a
"Link Type between two GPUs" table of XGMI (AMD Infinity Fabric) or PCIE, 0 on its diagonal.
(nvidia-smi documentation: https://docs.nvidia.com/deploy/nvidia-smi/index.html; ROCm SMI:
https://rocm.docs.amd.com/projects/rocm_smi_lib/en/latest/.)

The answer is the gpu_link question's: "nvlink" when every pair of GPUs has its own links (NV#,
XGMI), "pcie" as soon as one pair goes over PCIe, since a ring all-reduce runs at the pace of its
slowest hop. One GPU, or output that is not such a matrix, says nothing (None).
"""

from __future__ import annotations

import re

_GPU = re.compile(r"GPU\d+")
_NVLINK = re.compile(r"NV\d+")
_PCIE_PATHS = frozenset({"PIX", "PXB", "PHB", "NODE", "SYS", "SOC"})
# Words that open the affinity columns of the header ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID").
_AFFINITY = frozenset({"CPU", "NUMA", "GPU"})
_ROCM_TITLE = "Link Type between two GPUs"


def nvidia_gpu_link(text: str) -> str | None:
    """The gpu_link answer `nvidia-smi topo -m` gives: nvlink, pcie, or None (one GPU, unreadable)."""
    lines = [line.split() for line in text.splitlines() if line.strip()]
    # The header names the columns; every GPU row has an X where it meets its own column (the
    # header may open with whitespace or not, so its first word cannot tell it from a row).
    header = next((words for words in lines if "X" not in words and any(_GPU.fullmatch(w) for w in words)), None)
    if header is None:
        return None
    columns: list[str] = []
    for word in header:
        if word in _AFFINITY:
            break
        columns.append(word)
    gpus = [name for name in columns if _GPU.fullmatch(name)]
    rows: dict[str, list[str]] = {}
    for words in lines:
        if _GPU.fullmatch(words[0]) and "X" in words:
            # The first matrix's row: `nvidia-smi topo -p2p` prints another one after it.
            rows.setdefault(words[0], words[1 : 1 + len(columns)])
    cells: list[str] = []
    for row in gpus:
        found = rows.get(row)
        if found is None or len(found) < len(columns):
            return None
        for column, cell in zip(columns, found, strict=True):
            if column not in gpus:
                continue  # a network card's column
            if column == row:
                if cell != "X":
                    return None
            elif _NVLINK.fullmatch(cell) or cell in _PCIE_PATHS:
                cells.append(cell)
            else:
                return None
    return _link(gpus, [_NVLINK.fullmatch(cell) is not None for cell in cells])


def rocm_gpu_link(text: str) -> str | None:
    """The gpu_link answer `rocm-smi --showtopotype` gives: nvlink (all XGMI), pcie, or None."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if _ROCM_TITLE in line), None)
    if start is None:
        return None
    table: list[list[str]] = []
    for line in lines[start + 1 :]:
        if line.lstrip().startswith("="):
            break  # the next section, or the end of the log
        if line.strip():
            table.append(line.split())
    if not table or not table[0] or not all(_GPU.fullmatch(word) for word in table[0]):
        return None
    gpus = table[0]
    rows = {words[0]: words[1:] for words in table[1:] if words}
    kinds: list[bool] = []
    for row in gpus:
        found = rows.get(row)
        if found is None or len(found) != len(gpus):
            return None
        for column, cell in zip(gpus, found, strict=True):
            if column == row:
                continue  # rocm-smi prints 0 for a GPU and itself
            if cell not in ("XGMI", "PCIE"):
                return None
            kinds.append(cell == "XGMI")
    return _link(gpus, kinds)


def _link(gpus: list[str], own_links: list[bool]) -> str | None:
    """The answer: nvlink when every pair has its own links, pcie when one does not; None for one GPU."""
    if len(gpus) < 2 or len(set(gpus)) != len(gpus):
        return None
    return "nvlink" if all(own_links) else "pcie"
