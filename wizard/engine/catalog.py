"""The package's read-only data catalogues (known models and GPUs), loaded once."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from wizard.engine.located_yaml import parse_yaml

MIB_PER_GIB = 1024
# How a catalogue value was obtained: read from the driver tool's output, or the nominal capacity.
MEMORY_FROM = ("nvidia-smi", "rocm-smi", "hl-smi", "datasheet")


@dataclass(frozen=True)
class GpuSource:
    """A public document behind catalogue entries (vendor datasheet, product page, tool docs)."""

    title: str
    url: str


@dataclass(frozen=True)
class GpuInfo:
    """What a known GPU model implies (one row of wizard/data/gpus.yaml)."""

    name: str
    patterns: tuple[str, ...]
    vendor: str  # nvidia, amd, intel
    memory_mib: int  # one device, as nvidia-smi / rocm-smi / hl-smi report it
    memory_from: str  # one of MEMORY_FROM
    source: str  # key of a GpuSource
    bf16: bool
    flash_attention: bool
    arch: str | None = None  # volta, turing, ampere, ada, hopper, blackwell, cdna*, gaudi*
    fp8: bool = False  # FP8 tensor/matrix cores
    # For the speed band (wizard.engine.speed): peak dense 16-bit tensor TFLOPS, the all-reduce
    # bus bandwidth between the GPUs of one machine over their own links (NVLink, Infinity
    # Fabric, Gaudi's RoCE ports) in GB/s, None where only PCIe links them, whether the entry
    # also covers boards without those links, the host PCIe generation and peer-to-peer over PCIe.
    tflops: float | None = None
    # Where the rate has no datasheet behind it: what it rests on, said beside it in the step's assumptions.
    tflops_note: str = ""
    gpu_link_gbs: float | None = None
    gpu_link_varies: bool = False
    pcie_gen: int = 4
    p2p: bool = True
    # GeForce RTX 40/50: the driver has no P2P between two of them and NCCL's P2P transport has
    # hung there, so a launch script for several exports NCCL_P2P_DISABLE=1 (gpus.yaml's header).
    nccl_p2p_disable: bool = False

    @property
    def short_name(self) -> str:
        """The card as people say it: "A100 80GB", "RTX 4090", "MI300X" (vendor and brand words dropped)."""
        name = re.sub(r"\s*\(.*?\)", "", self.name)
        for prefix in ("NVIDIA ", "GeForce ", "AMD Instinct ", "Intel ", "Tesla "):
            name = name.removeprefix(prefix)
        return name.split(" / ")[0].strip()

    @property
    def memory_gib(self) -> float:
        """The reported memory in GiB (MiB / 1024, 2 decimals): the default for gpu_memory_gb."""
        return gib_from_mib(self.memory_mib)


def gib_from_mib(mib: float) -> float:
    """MiB as nvidia-smi, rocm-smi or hl-smi report them, in GiB with 2 decimals (gpu_memory_gb's unit)."""
    return round(mib / MIB_PER_GIB, 2)


def _parse_directly(kind: str, text: str, parse: Callable[[], Any]) -> Any:
    return parse()


# How the shipped data files are parsed: directly, or through the store of parsed copies the
# command line sets up (wizard.disk_cache); the engine itself writes no files.
_parse_through: Callable[[str, str, Callable[[], Any]], Any] = _parse_directly


def use_parse_store(store: Callable[[str, str, Callable[[], Any]], Any] | None) -> None:
    """Parse the data files through `store(kind, text, parse)` (None: parse them directly)."""
    global _parse_through
    _parse_through = store or _parse_directly


# The package's data folder (wizard/data): plain files beside the modules, in a checkout and in
# the installed wheel alike (as the tree and the templates are, wizard/resources.py).
DATA_DIR = Path(__file__).resolve().parent.parent / "data"


def data_text(name: str) -> str:
    """The text of the shipped data file `name` (wizard/data/NAME)."""
    return (DATA_DIR / name).read_text(encoding="utf-8")


def parse_data(name: str, text: str, parse: Callable[[], Any]) -> Any:
    """`parse()` of the shipped data file `name` whose text is `text`, through the parse store."""
    return _parse_through(f"data {name}", text, parse)


@cache
def _load(name: str) -> Any:
    text = data_text(name)
    # Shipped data, never deep; parsed once per process (gpus.yaml serves two catalogues).
    return parse_data(name, text, lambda: parse_yaml(text, check_depth=False))


@cache
def models_catalog() -> dict[str, Any]:
    """The reference model shapes, MoE aliases and layer-class map (wizard/data/models.yaml)."""
    data: dict[str, Any] = _load("models.yaml")
    return data


@cache
def architectures_catalog() -> dict[str, Any]:
    """How each decoder-only architecture lays out its parameters (wizard/data/architectures.yaml)."""
    data: dict[str, Any] = _load("architectures.yaml")
    return data


@cache
def gpu_catalog() -> tuple[GpuInfo, ...]:
    """Known GPUs, in the order of wizard/data/gpus.yaml."""
    return tuple(GpuInfo(**{**row, "patterns": tuple(row["patterns"])}) for row in _load("gpus.yaml")["gpus"])


@cache
def gpu_sources() -> dict[str, GpuSource]:
    """The documents the GPU catalogue cites, by key."""
    return {key: GpuSource(**value) for key, value in _load("gpus.yaml")["sources"].items()}


@cache
def _patterns() -> tuple[tuple[tuple[str, ...], GpuInfo], ...]:
    """Every (pattern words, GPU), most words first, then the longest, so the most specific wins."""
    pairs = [(tuple(p.split()), gpu) for gpu in gpu_catalog() for p in gpu.patterns]
    return tuple(sorted(pairs, key=lambda pair: (len(pair[0]), len(" ".join(pair[0]))), reverse=True))


# Laptop GPUs reuse desktop names with less memory ("RTX 4090 Laptop GPU" has 16 GB).
_NOT_THE_CARD = frozenset({"laptop", "mobile"})


def name_words(name: str) -> frozenset[str]:
    """The words of a GPU name: split at non-alphanumerics, mixed words also as their parts.

    "NVIDIA A100-SXM4-80GB" gives nvidia, a100, sxm4, 80gb and the parts a, 100, sxm, 4, 80, gb;
    "RTX4090" gives rtx4090, rtx and 4090.
    """
    words: set[str] = set()
    for word in re.split(r"[^a-z0-9]+", name.lower()):
        if word:
            words.add(word)
            words.update(re.findall(r"[a-z]+|[0-9]+", word))
    return frozenset(words)


@cache  # asked again and again with the same answer while one run decides
def lookup_gpu(name: str | None) -> GpuInfo | None:
    """Match a free-text GPU name ("a10g", "NVIDIA A100-SXM4-80GB", "RTX 4090") against the catalogue.

    Every word of a pattern must be a word of the name, in any order; the most specific pattern
    wins. None for an unknown name (the caller then asks for the memory).
    """
    if not name:
        return None
    words = name_words(name)
    if words & _NOT_THE_CARD:
        return None
    for pattern, gpu in _patterns():
        if all(word in words for word in pattern):
            return None if _other_size(name, gpu) else gpu
    return None


# A memory size written in a GPU name: "A100 8GB", "a100-80g", "RTX 4090 24 GB".
_SIZE = re.compile(r"(?<![0-9a-z])([0-9]{1,3})\s*(?:gb|g|gib)(?![a-z])")


def _other_size(name: str, gpu: GpuInfo) -> bool:
    """Whether the name gives a memory size smaller than this card's ("A100 8GB" is no A100 80GB).

    Taking the card's memory then would plan for memory the GPU does not have. A size within 15% of
    the card's counts as its own (names round: an "A6000 48GB" reports 46 GiB); a larger one is
    left alone, since some names count more than the GPU's memory ("NVIDIA GH200 480GB", as
    nvidia-smi names the superchip, adds the CPU's memory to the GPU's 96 GB).
    """
    sizes = [int(n) for n in _SIZE.findall(name.lower())]
    card = gpu.memory_mib / 1024
    return bool(sizes) and all(size < 0.85 * card for size in sizes)
