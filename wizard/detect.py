"""`--detect`: fill defaults from this machine (GPUs, host RAM, optional packages).

GPUs come from `nvidia-smi` or `rocm-smi` queries, host RAM from /proc/meminfo, and packages are
looked up with importlib's finder (found or not, never imported, so torch is not loaded). Every
value carries its source; detected values are defaults the user can change, never decisions.
The command runner is injectable so tests replay recorded tool outputs.

GPU memory is the smallest device's total as the tool reports it (nvidia-smi's memory.total in
MiB, rocm-smi's VRAM total in bytes), in GiB with 2 decimals: an A10G's 23028 MiB is 22.49, the
same number the GPU catalogue gives for the name. When the tool reports no total (``[N/A]``) the
catalogue's value for the name is used; without either, gpu_memory_gb is left to ask.

With more than one GPU, gpu_link comes from `nvidia-smi topo -m` or `rocm-smi --showtopotype`
(wizard.gpu_topology): nvlink when every pair of GPUs is NV# (XGMI on AMD), else pcie; output
that cannot be read leaves the question's own default.
"""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from wizard.engine.catalog import gib_from_mib, lookup_gpu
from wizard.gpu_topology import nvidia_gpu_link, rocm_gpu_link
from wizard.installed import package_installed

Runner = Callable[[Sequence[str]], str | None]
"""Runs a command; returns its stdout, or None when it is missing or fails."""
Finder = Callable[[str], bool]
"""Says whether a top-level package is installed, without importing it."""

PACKAGES = ("torch", "accelerate", "deepspeed", "axolotl", "torch_xla", "habana_frameworks", "bitsandbytes")
_MIB = 2**20
# What nvidia-smi prints for a field it cannot report (some integrated-memory GPUs have no total).
_NOT_REPORTED = frozenset({"[N/A]", "N/A", "[Not Supported]"})


@dataclass(frozen=True)
class Detected:
    """One detected answer with where it came from."""

    key: str
    value: object
    source: str


@dataclass
class Detection:
    """Everything found on this machine."""

    answers: list[Detected] = field(default_factory=list)
    packages: dict[str, bool] = field(default_factory=dict)

    def as_answers(self) -> dict[str, object]:
        """The detected answers as an answers mapping."""
        return {d.key: d.value for d in self.answers}


def run_command(command: Sequence[str]) -> str | None:
    """Run a query tool with a short timeout; None if it is not installed or fails."""
    import subprocess  # only --detect runs a tool: the run that only checks packages stays light

    if shutil.which(command[0]) is None:
        return None
    try:
        proc = subprocess.run(command, capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout if proc.returncode == 0 else None


def detect(
    runner: Runner | None = None,
    meminfo: Path = Path("/proc/meminfo"),
    finder: Finder | None = None,
    system: tuple[str, str] | None = None,
) -> Detection:
    """Look at this machine: its GPUs, a Mac's Apple silicon (`hardware: mps`), or `hardware: cpu`.

    `system` is (sys.platform, platform.machine()), this machine's by default.

    An installed `torch_xla` is detected as an answer too: it only fills the question asked
    for `hardware: tpu`, whose XLA path needs that package (its TPU runtime is not checked).
    `habana_frameworks` (Gaudi) and the other optional packages are reported in `packages`.
    """
    runner = runner or run_command
    finder = finder or package_installed
    found = Detection()
    if system is None:
        import platform  # as subprocess above: only --detect needs it

        system = (sys.platform, platform.machine())
    platform_name, machine = system
    gpus = _nvidia(runner) or _amd(runner)
    if platform_name == "darwin" and machine == "arm64":
        # Apple silicon: one MPS device whose memory is the Mac's own (sysctl hw.memsize, bytes).
        source = "macOS on Apple silicon (arm64)"
        found.answers.append(Detected("hardware", "mps", source))
        memsize = _mac_memory_gib(runner)
        if memsize is not None:
            found.answers.append(Detected("gpu_memory_gb", memsize, "sysctl -n hw.memsize"))
    elif gpus is not None:
        hardware, names, memories, source = gpus
        found.answers += [
            Detected("hardware", hardware, source),
            Detected("gpus_per_node", len(names), source),
            Detected("gpu_model", names[0], source),
        ]
        memory = _memory_answer(names, memories, source)
        if memory is not None:
            found.answers.append(memory)
        link = _gpu_link(runner, hardware) if len(names) > 1 else None
        if link is not None:
            found.answers.append(link)
    else:
        found.answers.append(Detected("hardware", "cpu", "no nvidia-smi or rocm-smi GPU found"))
    ram = _host_ram_gb(meminfo)
    if ram is not None:
        found.answers.append(Detected("cpu_memory_gb", ram, str(meminfo)))
    found.packages = {name: finder(name) for name in PACKAGES}
    if found.packages["torch_xla"]:
        # Without the package the question's own default (no) already holds, so only its
        # presence is worth a detected answer.
        found.answers.append(Detected("torch_xla", True, "torch_xla package found; its TPU runtime is not checked"))
    return found


def _memory_answer(names: list[str], memories: list[float | None], source: str) -> Detected | None:
    """gpu_memory_gb: the smallest reported total, else the catalogue's value for the names."""
    reported = [mib for mib in memories if mib is not None and mib > 0]
    if reported and len(reported) == len(memories):
        return Detected("gpu_memory_gb", gib_from_mib(min(reported)), source)
    known = [lookup_gpu(name) for name in names]
    if known and all(gpu is not None for gpu in known):
        smallest = min((gpu for gpu in known if gpu is not None), key=lambda gpu: gpu.memory_mib)
        return Detected(
            "gpu_memory_gb", smallest.memory_gib, f"GPU catalogue for {smallest.name}; {source} gave no total"
        )
    return None


# The topology query per vendor, and how its output is read (wizard.gpu_topology).
_TOPOLOGY: dict[str, tuple[tuple[str, ...], Callable[[str], str | None]]] = {
    "nvidia": (("nvidia-smi", "topo", "-m"), nvidia_gpu_link),
    "amd": (("rocm-smi", "--showtopotype"), rocm_gpu_link),
}


def _gpu_link(runner: Runner, hardware: str) -> Detected | None:
    """gpu_link from the links between the GPUs: nvlink only when every pair has its own (NV#, XGMI)."""
    command, read = _TOPOLOGY[hardware]
    out = runner(list(command))
    link = read(out) if out else None
    return Detected("gpu_link", link, " ".join(command)) if link is not None else None


def _nvidia(runner: Runner) -> tuple[str, list[str], list[float | None], str] | None:
    out = runner(["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader,nounits"])
    if not out:
        return None
    names: list[str] = []
    memories: list[float | None] = []
    for line in out.strip().splitlines():
        name, comma, mib = line.rpartition(",")
        if not comma or not name.strip():
            return None  # not the CSV asked for ("No devices were found")
        names.append(name.strip())
        mib = mib.strip()
        if mib in _NOT_REPORTED:
            memories.append(None)  # the driver gives no total for this GPU
            continue
        try:
            memories.append(float(mib))  # MiB
        except ValueError:
            return None  # not the CSV asked for
    return ("nvidia", names, memories, "nvidia-smi") if names else None


def _amd(runner: Runner) -> tuple[str, list[str], list[float | None], str] | None:
    out = runner(["rocm-smi", "--showproductname", "--showmeminfo", "vram", "--json"])
    if not out:
        return None
    try:
        cards = json.loads(out)
    except json.JSONDecodeError:
        return None
    names: list[str] = []
    memories: list[float | None] = []
    for key, card in cards.items() if isinstance(cards, dict) else []:
        if not key.startswith("card") or not isinstance(card, dict):
            continue
        total = card.get("VRAM Total Memory (B)")
        name = card.get("Card Series") or card.get("Card series") or card.get("Card model") or "AMD GPU"
        try:
            memories.append(int(str(total)) / _MIB)  # bytes -> MiB
        except ValueError:
            continue
        names.append(str(name))
    return ("amd", names, memories, "rocm-smi") if names else None


def _mac_memory_gib(runner: Runner) -> float | None:
    """The Mac's memory in GiB from `sysctl -n hw.memsize` (bytes), or None."""
    out = runner(["sysctl", "-n", "hw.memsize"])
    try:
        return round(int((out or "").strip()) / 2**30, 2) or None
    except ValueError:
        return None


def _host_ram_gb(meminfo: Path) -> int | None:
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 1024**2)  # kB -> GiB
    except (OSError, ValueError, IndexError):
        return None
    return None
