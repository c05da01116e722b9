"""Exact parameter counts from safetensors headers, without the weights.

The format (https://huggingface.co/docs/safetensors/index, "Format"): "8 bytes: N, an unsigned
little-endian 64-bit integer, containing the size of the header", then "N bytes: a JSON UTF-8
string representing the header": a mapping of tensor name to {"dtype", "shape", "data_offsets"},
plus an optional "__metadata__" mapping of strings. The element count of a tensor is the product
of its shape, so the header alone gives the model's parameters.

Quantized checkpoints store some weights packed, beside bookkeeping tensors that are no model
parameter; each is counted as the unquantized model has it:

- GPTQ and AutoAWQ (`quantization_config.quant_method` gptq or awq): an int32 `qweight` packs
  32 / bits weights per element; `qzeros`, `scales` and `g_idx` are bookkeeping
  (https://huggingface.co/docs/transformers/main/en/quantization/gptq, .../awq);
- bitsandbytes 4-bit: a uint8 `weight` packs two 4-bit values per byte, beside `absmax`,
  `quant_map`, `nested_*` and `quant_state.bitsandbytes__nf4` / `__fp4` entries; 8-bit keeps an
  int8 `weight` of the full shape beside its `SCB` scales
  (https://huggingface.co/docs/transformers/main/en/quantization/bitsandbytes);
- FP8 (DeepSeek-V3's `quant_method: fp8`): one element per weight, beside `weight_scale_inv`.

Any other quantization method is refused: its packing is not known here.
"""

from __future__ import annotations

import math
import re
import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from wizard.engine.strict_json import JsonProblem, loads_strict

LENGTH_BYTES = 8
# safetensors refuses a longer header itself (MAX_HEADER_SIZE = 100_000_000 in its tensor.rs).
MAX_HEADER_BYTES = 100_000_000
INDEX_FILE = "model.safetensors.index.json"
# Tensor-name endings that quantization adds beside the weights: never model parameters.
_BOOKKEEPING = {
    "gptq": (".qzeros", ".scales", ".g_idx"),
    "awq": (".qzeros", ".scales"),
    "bitsandbytes": (".absmax", ".quant_map", ".nested_absmax", ".nested_quant_map", ".SCB", ".weight_format"),
    "fp8": ("_scale_inv", ".weight_scale", ".input_scale"),
}
_BNB_STATE = re.compile(r"\.quant_state\.bitsandbytes__(nf4|fp4)$")
# Decoder layers are named <prefix>layers.<n>. in every family counted here.
_LAYER = re.compile(r"^(?:model\.|model\.language_model\.|language_model\.model\.)layers\.(\d+)\.")


class SafetensorsProblem(ValueError):
    """A header that cannot be read or counted; the message says why, ready to follow "FILE: "."""


@dataclass(frozen=True)
class Tensor:
    """One entry of a safetensors header."""

    dtype: str
    shape: tuple[int, ...]

    @property
    def elements(self) -> int:
        """The number of values the tensor holds (1 for a scalar)."""
        return math.prod(self.shape)


@dataclass(frozen=True)
class WeightCount:
    """The parameters a checkpoint's headers describe, as the unquantized model counts them."""

    params: int
    files: int
    tensors: int
    quantization: str | None = None
    extra_layers: tuple[int, ...] = ()  # layers past num_hidden_layers, left out (DeepSeek's MTP layer)


def header_length(prefix: bytes) -> int:
    """N, the header's length, from a file's first 8 bytes (little-endian unsigned 64-bit)."""
    if len(prefix) < LENGTH_BYTES:
        raise SafetensorsProblem(f"{len(prefix)} bytes long, shorter than the 8-byte header length")
    (length,) = struct.unpack("<Q", prefix[:LENGTH_BYTES])
    if not 2 <= length <= MAX_HEADER_BYTES:
        raise SafetensorsProblem(f"header length {length:,} is outside 2 to {MAX_HEADER_BYTES:,} bytes")
    return int(length)


def parse_header(data: bytes) -> dict[str, Tensor]:
    """The tensors of a safetensors header (the N bytes after the length), by name."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SafetensorsProblem(f"the header is not UTF-8 (byte {exc.start})") from None
    try:
        header = loads_strict(text.rstrip(" "))  # the writer may pad the header with spaces
    except JsonProblem as exc:
        raise SafetensorsProblem(f"the header is not JSON: {exc}") from None
    if not isinstance(header, dict):
        raise SafetensorsProblem("the header is not a JSON object")
    return tensors_of(header)


def tensors_of(header: Mapping[str, Any]) -> dict[str, Tensor]:
    """The tensors of a parsed header mapping (the Hub's metadata has the same entries)."""
    tensors: dict[str, Tensor] = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        dtype = entry.get("dtype") if isinstance(entry, Mapping) else None
        shape = entry.get("shape") if isinstance(entry, Mapping) else None
        if (
            not isinstance(dtype, str)
            or not isinstance(shape, list)
            or not all(isinstance(n, int) and not isinstance(n, bool) and 0 <= n < 2**63 for n in shape)
        ):
            shown = name if name.isprintable() and len(name) <= 80 else repr(name[:80])
            raise SafetensorsProblem(f"tensor {shown} has no dtype and shape of whole numbers")
        tensors[name] = Tensor(dtype, tuple(shape))
    return tensors


def quantization_method(config: Mapping[str, Any], names: Iterable[str]) -> str | None:
    """The quantization a checkpoint uses: config.json's quant_method, else what its tensor names show."""
    quant = config.get("quantization_config")
    if isinstance(quant, Mapping) and quant.get("quant_method") is not None:
        return str(quant["quant_method"]).lower()
    for name in names:
        if name.endswith(".qweight"):
            return "gptq"
        if _BNB_STATE.search(name) or name.endswith(".SCB"):
            return "bitsandbytes"
    return None


def count_weights(files: Mapping[str, Mapping[str, Tensor]], config: Mapping[str, Any]) -> WeightCount:
    """The parameters of a checkpoint's files (file name -> its tensors), unquantized.

    Tensors of decoder layers past config.json's num_hidden_layers are left out: transformers
    builds no such layer and drops their weights on loading (DeepSeek-V3's checkpoint holds its
    multi-token-prediction layer as layer 61 of 61).

    Raises:
        SafetensorsProblem: a quantization method whose packing is not known here.
    """
    tensors = {name: tensor for shard in files.values() for name, tensor in shard.items()}
    method = quantization_method(config, tensors)
    if method is not None and method not in _BOOKKEEPING:
        raise SafetensorsProblem(f"the checkpoint is quantized with '{method}', whose packing the wizard cannot unpack")
    pack = _pack_factor(config, method)
    layers = _layer_count(config)
    bnb4 = {_BNB_STATE.sub("", name) for name in tensors if _BNB_STATE.search(name)}
    total, extra = 0, set()
    for name, tensor in tensors.items():
        match = _LAYER.match(name)
        if match and layers is not None and int(match[1]) >= layers:
            extra.add(int(match[1]))
            continue
        if method is not None and (name.endswith(_BOOKKEEPING[method]) or ".quant_state." in name):
            continue
        if name.endswith(".qweight"):
            total += tensor.elements * pack
        elif name in bnb4:
            total += tensor.elements * 2  # two 4-bit values per uint8
        else:
            total += tensor.elements
    return WeightCount(total, len(files), len(tensors), method, tuple(sorted(extra)))


def _pack_factor(config: Mapping[str, Any], method: str | None) -> int:
    """Weights per int32 `qweight` element for GPTQ and AWQ: 32 / bits."""
    if method not in ("gptq", "awq"):
        return 1
    quant = config.get("quantization_config")
    bits = quant.get("bits", quant.get("w_bit")) if isinstance(quant, Mapping) else None
    if bits not in (2, 4, 8):
        raise SafetensorsProblem(f"{method} checkpoint with bits {bits!r}: only 2, 4 or 8 bits pack evenly into int32")
    return 32 // int(bits)


def _layer_count(config: Mapping[str, Any]) -> int | None:
    text = config.get("text_config")
    part = text if isinstance(text, Mapping) and "num_hidden_layers" not in config else config
    layers = part.get("num_hidden_layers")
    return layers if isinstance(layers, int) and not isinstance(layers, bool) and layers > 0 else None


def shard_names(index: Any) -> list[str]:
    """The shard files an index (model.safetensors.index.json) names in its weight_map, in order.

    Raises:
        SafetensorsProblem: no weight_map, or a shard name that is a path rather than a file name.
    """
    weight_map = index.get("weight_map") if isinstance(index, Mapping) else None
    if not isinstance(weight_map, Mapping) or not weight_map:
        raise SafetensorsProblem("it has no weight_map of tensor names to shard files")
    names = list(dict.fromkeys(weight_map.values()))
    for name in names:
        if not isinstance(name, str) or not name.endswith(".safetensors") or "/" in name or "\\" in name:
            raise SafetensorsProblem(f"its weight_map names {name!r}, not a .safetensors file beside it")
    return names
