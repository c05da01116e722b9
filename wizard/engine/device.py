"""How the texts name the device a run trains on: a GPU, or the Mac itself on Apple silicon.

On Apple silicon, PyTorch's MPS backend runs on the Mac's own chip and its memory is the Mac's
unified memory, shared with macOS and every open program ("PyTorch: MPS backend",
https://docs.pytorch.org/docs/stable/notes/mps.html). A Mac user owns no separate GPU with memory
of its own, so "per GPU" and "the GPU's memory" would name hardware they do not have; the
tables, charts and captions take their words from here instead. The figures are the same: only
the words differ. Every other hardware keeps the GPU wording it has always printed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

GPU_DEVICE = "gpu"
MAC_DEVICE = "mac"


@dataclass(frozen=True)
class DeviceWords:
    """The words for one kind of device, as the memory table, its caption and chart use them."""

    per: str  # after a figure or a heading: "per GPU"
    on_each: str  # where the training state lives: "on each GPU"
    memory: str  # what the fit is judged against: "the GPU's memory"
    owner: str  # whose memory a figure is: "the GPU's" (80.0 GiB)
    runtime: str  # what the fixed overhead is for: "the GPU runtime's context and buffers"
    single_row: str  # the memory table's row of a one-device run without offload: "1 GPU"
    single_note: str  # that row's meaning, for the legend under the table
    share_note: str = ""  # after "at most 67% of 16.0 GiB": why that share, where it is not the 80% margin


GPU_WORDS = DeviceWords(
    per="per GPU",
    on_each="on each GPU",
    memory="the GPU's memory",
    owner="the GPU's",
    runtime="the GPU runtime's context and buffers",
    single_row="1 GPU",
    single_note="the whole training state on the one GPU, nothing sharded or offloaded",
    share_note=", the rest for fragmentation and buffers the estimate leaves out",
)
MAC_WORDS = DeviceWords(
    per="on the Mac",
    on_each="on the Mac",
    memory="the Mac's unified memory",
    owner="the Mac's",
    # MPS takes memory of its own before the model loads, as CUDA and ROCm do.
    runtime="the MPS runtime's context and buffers",
    single_row="Mac (MPS)",
    single_note="the whole training state in the Mac's unified memory, nothing sharded or offloaded",
    share_note=", the working set macOS recommends for Metal",
)
_WORDS = {GPU_DEVICE: GPU_WORDS, MAC_DEVICE: MAC_WORDS}


def device_of(hardware: Any) -> str:
    """The kind of device a hardware answer trains on: the Mac for Apple MPS, a GPU otherwise."""
    return MAC_DEVICE if hardware == "mps" else GPU_DEVICE


def words_for(device: str) -> DeviceWords:
    """The words for a kind of device (`device_of`); GPU wording for anything unknown."""
    return _WORDS.get(device, GPU_WORDS)
