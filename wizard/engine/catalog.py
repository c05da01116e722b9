"""The package's read-only data catalogues (known models and GPUs), loaded once."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from wizard.engine.located_yaml import parse_yaml


@dataclass(frozen=True)
class GpuInfo:
    """What a known GPU model implies."""

    pattern: str
    memory_gb: float
    bf16: bool
    flash_attention: bool
    arch: str | None = None  # GPU generation: volta, turing, ampere, ada, hopper, blackwell, cdna*
    fp8: bool = False  # FP8 tensor cores (Ada, Hopper, Blackwell)


def _load(name: str) -> Any:
    text = resources.files("wizard.data").joinpath(name).read_text(encoding="utf-8")
    return parse_yaml(text)


@cache
def models_catalog() -> dict[str, Any]:
    """The reference model shapes, MoE aliases and layer-class map (wizard/data/models.yaml)."""
    data: dict[str, Any] = _load("models.yaml")
    return data


@cache
def gpu_catalog() -> tuple[GpuInfo, ...]:
    """Known GPUs, longest pattern first so the most specific name wins."""
    rows = [GpuInfo(**row) for row in _load("gpus.yaml")["gpus"]]
    return tuple(sorted(rows, key=lambda g: (len(g.pattern.split()), len(g.pattern)), reverse=True))


def lookup_gpu(name: str | None) -> GpuInfo | None:
    """Match a free-text GPU name ("NVIDIA A100-SXM4-80GB") against the catalogue."""
    if not name:
        return None
    tokens = set(re.split(r"[\s\-_/]+", name.lower()))
    for gpu in gpu_catalog():
        # Every word of the pattern must be a word of the name ("40" also matches "40gb"), so
        # "A100-SXM4-40GB" is the 40 GB card and "L40S" never matches the "L4" pattern.
        if all(word in tokens or f"{word}gb" in tokens for word in gpu.pattern.split()):
            return gpu
    return None
