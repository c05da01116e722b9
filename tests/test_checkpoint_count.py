"""A local model folder is counted exactly from its safetensors headers, never reading the weights.

Shards are written here byte by byte (8-byte little-endian length, JSON header, then the data
region, left sparse), by the `safetensors` package, or by transformers' own save_pretrained.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import struct
from pathlib import Path
from typing import Any

import pytest

from realtools import require_tool
from wizard.checkpoint import local_weights
from wizard.cli import main
from wizard.engine.param_count import count_config
from wizard.engine.safetensors_count import SafetensorsProblem, count_weights, header_length, parse_header
from wizard.errors import InvalidAnswerError

DTYPE_BYTES = {"BF16": 2, "F16": 2, "F32": 4, "I32": 4, "U8": 1, "I8": 1, "F8_E4M3": 1}

# A tiny Llama: 2 layers, hidden 64, 4 heads of which 2 key/value heads, MLP 128, vocabulary 256.
TINY = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 256,
    "tie_word_embeddings": False,
}


def tiny_tensors(layers: int = 2) -> dict[str, tuple[str, list[int]]]:
    """The tensors of TINY as a Llama checkpoint names them, in bf16."""
    h, inter, kv, vocab = 64, 128, 32, 256
    tensors = {"model.embed_tokens.weight": [vocab, h], "model.norm.weight": [h], "lm_head.weight": [vocab, h]}
    for i in range(layers):
        p = f"model.layers.{i}."
        tensors |= {
            p + "self_attn.q_proj.weight": [h, h],
            p + "self_attn.k_proj.weight": [kv, h],
            p + "self_attn.v_proj.weight": [kv, h],
            p + "self_attn.o_proj.weight": [h, h],
            p + "mlp.gate_proj.weight": [inter, h],
            p + "mlp.up_proj.weight": [inter, h],
            p + "mlp.down_proj.weight": [h, inter],
            p + "input_layernorm.weight": [h],
            p + "post_attention_layernorm.weight": [h],
        }
    return {name: ("BF16", shape) for name, shape in tensors.items()}


TINY_COUNT = count_config(TINY).total


def write_shard(path: Path, tensors: dict[str, tuple[str, list[int]]], *, sparse_tail: int = 0) -> None:
    """A safetensors file: the header as the format gives it, and a data region that is never written.

    The data region is a hole (truncate), so a reader that read the weights would read zeros
    for as long as the file claims, `sparse_tail` bytes more than the tensors need.
    """
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, (dtype, shape) in tensors.items():
        size = math.prod(shape) * DTYPE_BYTES[dtype]
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header).encode("utf-8")
    raw += b" " * (-len(raw) % 8)  # the writer pads the header to 8 bytes
    with path.open("wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw)
        f.truncate(8 + len(raw) + offset + sparse_tail)


def model_folder(tmp_path: Path, config: dict[str, Any], shards: dict[str, dict[str, tuple[str, list[int]]]]) -> Path:
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    for name, tensors in shards.items():
        write_shard(folder / name, tensors)
    if len(shards) > 1:
        weight_map = {tensor: name for name, tensors in shards.items() for tensor in tensors}
        index = {"metadata": {"total_size": 0}, "weight_map": weight_map}
        (folder / "model.safetensors.index.json").write_text(json.dumps(index), encoding="utf-8")
    return folder


def run_cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


def estimate_params(model: str) -> tuple[int, str, str]:
    code, out, err = run_cli("estimate", "--model", model, "--gpu-memory-gb", "80", "--output", "json")
    return code, (json.loads(out)["params"] if code == 0 else out), err


# --- the header format ---------------------------------------------------------------------------


def test_header_length_is_little_endian_and_bounded() -> None:
    assert header_length(struct.pack("<Q", 1234) + b"rest") == 1234
    with pytest.raises(SafetensorsProblem, match="outside"):
        header_length(struct.pack("<Q", 2**40))
    with pytest.raises(SafetensorsProblem, match="shorter"):
        header_length(b"\x01\x02")


def test_header_entries_become_element_counts() -> None:
    header = json.dumps({"__metadata__": {"a": "b"}, "w": {"dtype": "F32", "shape": [3, 5], "data_offsets": [0, 60]}})
    tensors = parse_header(header.encode() + b"   ")
    assert list(tensors) == ["w"] and tensors["w"].elements == 15
    with pytest.raises(SafetensorsProblem, match="dtype and shape"):
        parse_header(json.dumps({"w": {"dtype": "F32", "shape": [-1]}}).encode())


# --- local folders ---------------------------------------------------------------------------------


def test_single_file_folder_counts_the_header(tmp_path: Path) -> None:
    folder = model_folder(tmp_path, TINY, {"model.safetensors": tiny_tensors()})
    weights = local_weights(folder, TINY, str(folder))
    assert weights is not None and (weights.params, weights.files) == (TINY_COUNT, 1)
    assert TINY_COUNT == 2 * 256 * 64 + 64 + 2 * (2 * 64 * 64 + 2 * 32 * 64 + 3 * 64 * 128 + 2 * 64)


def test_sharded_folder_reads_the_shards_its_index_names(tmp_path: Path) -> None:
    tensors = tiny_tensors()
    names = list(tensors)
    shards = {
        "model-00001-of-00002.safetensors": {n: tensors[n] for n in names[:7]},
        "model-00002-of-00002.safetensors": {n: tensors[n] for n in names[7:]},
    }
    folder = model_folder(tmp_path, TINY, shards)
    write_shard(folder / "stray.safetensors", {"extra": ("F32", [1000])})  # not in the index: not read
    weights = local_weights(folder, TINY, str(folder))
    assert weights is not None and (weights.params, weights.files) == (TINY_COUNT, 2)


def test_the_weights_are_never_read(tmp_path: Path) -> None:
    folder = model_folder(tmp_path, TINY, {})
    # A shard that claims 64 GiB of weights beyond its tensors: only its header is read.
    write_shard(folder / "model.safetensors", tiny_tensors(), sparse_tail=64 * 2**30)
    assert (folder / "model.safetensors").stat().st_size > 64 * 2**30
    weights = local_weights(folder, TINY, str(folder))
    assert weights is not None and weights.params == TINY_COUNT


def test_a_missing_shard_is_named(tmp_path: Path) -> None:
    tensors = tiny_tensors()
    names = list(tensors)
    shards = {"a.safetensors": {n: tensors[n] for n in names[:5]}, "b.safetensors": {n: tensors[n] for n in names[5:]}}
    folder = model_folder(tmp_path, TINY, shards)
    (folder / "b.safetensors").unlink()
    with pytest.raises(InvalidAnswerError, match=r"names b\.safetensors, which is not in the folder"):
        local_weights(folder, TINY, str(folder))


def test_a_cut_short_or_broken_header_is_one_line(tmp_path: Path) -> None:
    folder = model_folder(tmp_path, TINY, {})
    shard = folder / "model.safetensors"
    shard.write_bytes(struct.pack("<Q", 500) + b'{"w": ')
    code, _, err = estimate_params(str(folder))
    assert code == 2 and "ends inside its 500-byte header" in err and err.count("\n") == 1
    shard.write_bytes(struct.pack("<Q", 4) + b"nope")
    code, _, err = estimate_params(str(folder))
    assert code == 2 and "the header is not JSON" in err and "Traceback" not in err


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes are POSIX")
def test_a_pipe_named_like_a_shard_is_refused_not_waited_on(tmp_path: Path) -> None:
    folder = model_folder(tmp_path, TINY, {})
    os.mkfifo(folder / "model.safetensors")
    code, _, err = estimate_params(str(folder))
    assert code == 2 and "named pipe" in err and "model.safetensors" in err


def test_layers_past_num_hidden_layers_are_left_out(tmp_path: Path) -> None:
    # DeepSeek-V3 ships its multi-token-prediction layer as layer 61 of 61; transformers drops it.
    tensors = tiny_tensors(layers=3)
    weights = count_weights({"model.safetensors": _as_tensors(tensors)}, TINY)
    assert weights.params == TINY_COUNT and weights.extra_layers == (2,)


def test_an_unknown_architecture_with_weights_is_counted_from_them(tmp_path: Path) -> None:
    config = {**TINY, "model_type": "someday_lm", "architectures": ["SomedayForCausalLM"]}
    folder = model_folder(tmp_path, config, {"model.safetensors": tiny_tensors()})
    assert estimate_params(str(folder))[:2] == (0, TINY_COUNT)
    # Without the weights, the same config.json is refused with the ways out.
    (folder / "model.safetensors").unlink()
    code, _, err = estimate_params(str(folder / "config.json"))
    assert code == 2 and "model_type 'someday_lm'" in err and "*.safetensors" in err


def test_the_estimate_and_the_decision_use_the_header_count(tmp_path: Path) -> None:
    # The header count wins over config.json's: here the checkpoint has one tensor more.
    tensors = {**tiny_tensors(), "model.extra_head.weight": ("BF16", [10, 64])}
    folder = model_folder(tmp_path, TINY, {"model.safetensors": tensors})
    assert estimate_params(str(folder))[:2] == (0, TINY_COUNT + 640)
    code, out, _ = run_cli("estimate", "--model", str(folder), "--gpu-memory-gb", "80", "--output", "json")
    assert code == 0
    model = json.loads(out)["model"]
    assert (model["source"], model["counted_from"], model["exact_params"]) == (
        "safetensors",
        "safetensors headers",
        TINY_COUNT + 640,
    )
    code, out, _ = run_cli("estimate", "--model", "7B", "--gpu-memory-gb", "80", "--output", "json")
    assert code == 0 and json.loads(out)["model"]["source"] == "size"


# --- quantized checkpoints -----------------------------------------------------------------------


def _as_tensors(spec: dict[str, tuple[str, list[int]]]) -> dict[str, Any]:
    from wizard.engine.safetensors_count import Tensor

    return {name: Tensor(dtype, tuple(shape)) for name, (dtype, shape) in spec.items()}


def _quantized(kind: str) -> dict[str, tuple[str, list[int]]]:
    """TINY's tensors with every linear weight inside the layers quantized as `kind` stores it."""
    out: dict[str, tuple[str, list[int]]] = {}
    for name, (dtype, shape) in tiny_tensors().items():
        linear = ".layers." in name and name.endswith("proj.weight")
        if not linear:
            out[name] = (dtype, shape)
            continue
        rows, cols = shape  # [out_features, in_features]
        stem = name.removesuffix(".weight")
        if kind == "gptq":  # qweight [in / 8, out] int32, 4 bits
            out |= {
                stem + ".qweight": ("I32", [cols // 8, rows]),
                stem + ".qzeros": ("I32", [cols // 128 or 1, rows // 8]),
                stem + ".scales": ("F16", [cols // 128 or 1, rows]),
                stem + ".g_idx": ("I32", [cols]),
            }
        elif kind == "awq":  # qweight [in, out / 8] int32, 4 bits
            out |= {
                stem + ".qweight": ("I32", [cols, rows // 8]),
                stem + ".qzeros": ("I32", [1, rows // 8]),
                stem + ".scales": ("F16", [1, rows]),
            }
        elif kind == "bnb4":  # two 4-bit values per byte, plus the quantization state
            out |= {
                name: ("U8", [rows * cols // 2, 1]),
                name + ".absmax": ("F32", [rows * cols // 64]),
                name + ".quant_map": ("F32", [16]),
                name + ".quant_state.bitsandbytes__nf4": ("U8", [120]),
            }
        elif kind == "bnb8":
            out |= {name: ("I8", [rows, cols]), stem + ".SCB": ("F32", [rows]), stem + ".weight_format": ("U8", [1])}
        elif kind == "fp8":
            out |= {name: ("F8_E4M3", [rows, cols]), name + "_scale_inv": ("F32", [1, 1])}
    return out


QUANT_CONFIGS = {
    "gptq": {"quant_method": "gptq", "bits": 4, "group_size": 128},
    "awq": {"quant_method": "awq", "bits": 4, "group_size": 128, "version": "gemm"},
    "bnb4": {"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_quant_type": "nf4"},
    "bnb8": {"quant_method": "bitsandbytes", "load_in_8bit": True},
    "fp8": {"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 128]},
}


@pytest.mark.parametrize("kind", sorted(QUANT_CONFIGS))
def test_quantized_checkpoints_count_the_unquantized_parameters(tmp_path: Path, kind: str) -> None:
    config = {**TINY, "quantization_config": QUANT_CONFIGS[kind]}
    folder = model_folder(tmp_path, config, {"model.safetensors": _quantized(kind)})
    weights = local_weights(folder, config, str(folder))
    assert weights is not None and weights.params == TINY_COUNT
    assert weights.quantization == QUANT_CONFIGS[kind]["quant_method"]


def test_packed_weights_are_recognised_without_a_quantization_config(tmp_path: Path) -> None:
    weights = count_weights({"m": _as_tensors(_quantized("bnb4"))}, TINY)
    assert (weights.params, weights.quantization) == (TINY_COUNT, "bitsandbytes")


def test_an_unknown_quantization_is_refused_in_one_line(tmp_path: Path) -> None:
    config = {**TINY, "quantization_config": {"quant_method": "hqq", "nbits": 4}}
    folder = model_folder(tmp_path, config, {"model.safetensors": tiny_tensors()})
    code, _, err = estimate_params(str(folder))
    assert code == 2 and err.count("\n") == 1
    assert "quantized with 'hqq'" in err and "7B" in err


def test_gptq_with_bits_that_do_not_pack_evenly_is_refused(tmp_path: Path) -> None:
    config = {**TINY, "quantization_config": {"quant_method": "gptq", "bits": 3}}
    with pytest.raises(SafetensorsProblem, match="bits 3"):
        count_weights({"m": _as_tensors(_quantized("gptq"))}, config)


# --- against the real writers ----------------------------------------------------------------------


@pytest.mark.tools
def test_the_safetensors_package_writes_what_is_counted(tmp_path: Path) -> None:
    require_tool("numpy")
    numpy_st = require_tool("safetensors.numpy")
    import numpy as np

    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(TINY), encoding="utf-8")
    arrays = {name: np.zeros(shape, dtype=np.float16) for name, (_, shape) in tiny_tensors().items()}
    numpy_st.save_file(arrays, str(folder / "model.safetensors"))
    weights = local_weights(folder, TINY, str(folder))
    assert weights is not None and weights.params == TINY_COUNT


@pytest.mark.tools
@pytest.mark.parametrize(
    "config",
    [
        TINY,
        {**TINY, "tie_word_embeddings": True},
        {
            "model_type": "qwen3_moe",
            "architectures": ["Qwen3MoeForCausalLM"],
            "hidden_size": 32,
            "intermediate_size": 64,
            "moe_intermediate_size": 16,
            "num_experts": 4,
            "num_experts_per_tok": 2,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "head_dim": 8,
            "vocab_size": 128,
        },
    ],
    ids=["llama", "llama-tied", "qwen3-moe"],
)
def test_a_folder_saved_by_transformers_counts_its_parameters(tmp_path: Path, config: dict[str, Any]) -> None:
    require_tool("torch")
    transformers = require_tool("transformers")
    source = tmp_path / "source"
    source.mkdir()
    (source / "config.json").write_text(json.dumps(config), encoding="utf-8")
    model = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.from_pretrained(str(source)))
    model.save_pretrained(str(tmp_path / "saved"))
    saved = json.loads((tmp_path / "saved" / "config.json").read_text(encoding="utf-8"))
    weights = local_weights(tmp_path / "saved", saved, "saved")
    expected = sum(p.numel() for p in model.parameters())
    assert weights is not None and weights.params == expected == count_config(config).total
