"""Model sizes: parse "7B" / "8x7B" / "30B-A3B" / counts, and count parameters from a config.json.

The parameter formula counts the weights a decoder-only transformer's config.json describes
(the fields of transformers' LlamaConfig, MistralConfig, ...: embeddings, attention with
num_key_value_heads, the gated MLP, norms, an untied LM head): Llama, Mistral, Qwen2 with q/k/v
biases, Gemma with its own head_dim, Phi-3, Mixtral- and Qwen-MoE-style mixtures of experts.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

from wizard.engine.catalog import models_catalog

_SIZE = re.compile(r"^\s*(?:(?P<experts>\d+)\s*x\s*)?(?P<num>\d+(?:\.\d+)?)\s*(?P<unit>[kmbt])?\s*$", re.I)
# "30B-A3B": a mixture-of-experts model with 30B parameters in total, 3B of them active per token
# (the naming of Qwen3-30B-A3B, Qwen3-235B-A22B, ...). The unit is required on both numbers.
_ACTIVE = re.compile(
    r"^\s*(?P<num>\d+(?:\.\d+)?)\s*(?P<unit>[kmbt])\s*-?\s*a\s*(?P<anum>\d+(?:\.\d+)?)\s*(?P<aunit>[kmbt])\s*$",
    re.I,
)
_UNITS = {"k": 1e3, "m": 1e6, "b": 1e9, "t": 1e12}
# config.json keys for the number of routed experts (Mixtral; Qwen-MoE and OLMoE) and for the
# width of one expert's MLP where it differs from the dense intermediate_size (Qwen-MoE).
_EXPERT_KEYS = ("num_local_experts", "num_experts")

MIN_PARAMS = 1_000
MAX_PARAMS = 100e12  # 100T: far above any real model, below float trouble


class ModelSizeError(ValueError):
    """The text is not a size the wizard understands; the message says what is allowed."""


@dataclass(frozen=True)
class ModelShape:
    """What the memory model needs to know about a model.

    `params` is authoritative. The other fields come from the model's own config.json, or from
    the closest reference shape when only a size was given (`reference` names it).
    """

    params: int
    hidden_size: int
    layers: int
    vocab_size: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate_size: int
    tied_embeddings: bool
    experts: int = 1
    experts_per_token: int = 1
    active_params: int = 0
    layer_class: str | None = None
    reference: str | None = None

    @property
    def is_moe(self) -> bool:
        """A mixture-of-experts model: several experts per layer, or fewer active than total parameters."""
        return self.experts > 1 or 0 < self.active_params < self.params

    @property
    def embedding_params(self) -> int:
        """Input embedding plus the output head (once when tied)."""
        return self.vocab_size * self.hidden_size * (1 if self.tied_embeddings else 2)

    @property
    def largest_layer_params(self) -> int:
        """DeepSpeed's LL: the biggest single module (the embedding, or one MLP projection)."""
        return max(self.vocab_size * self.hidden_size, self.hidden_size * self.intermediate_size)

    @property
    def largest_param_tensor(self) -> int:
        """The largest single parameter tensor, never below `largest_layer_params`.

        DeepSpeed partitions, offloads and swaps parameters tensor by tensor. Transformers 5 keeps
        the experts of one MoE layer in one fused tensor (`gate_up_proj` of shape
        [experts, 2 x intermediate, hidden] in modeling_mixtral.py and modeling_qwen3_moe.py), and
        some dense models fuse the gate and up projections (Phi-3's `gate_up_proj`), so both
        shapes are counted too: an over-estimate for a model without them is harmless.
        """
        fused_mlp = self.experts * 2 * self.intermediate_size * self.hidden_size
        return max(self.largest_layer_params, fused_mlp)

    @property
    def decoder_params(self) -> int:
        """Parameters inside the decoder layers: all but the embeddings, the output head and the final norm."""
        return max(self.params - self.embedding_params - self.hidden_size, 0)

    @property
    def quantizable_params(self) -> int:
        """Weights bitsandbytes quantizes in QLoRA: the linear layers inside the blocks."""
        return max(self.params - self.embedding_params - (2 * self.layers + 1) * self.hidden_size, 0)

    def lora_params(self, rank: int = 16) -> int:
        """Trainable LoRA parameters with adapters on every linear layer (q, k, v, o, gate, up, down)."""
        h, d = self.hidden_size, self.head_dim
        q_out, kv_out = self.heads * d, self.kv_heads * d
        attn = (h + q_out) + 2 * (h + kv_out) + (q_out + h)
        mlp = self.experts * 3 * (h + self.intermediate_size)
        return rank * (attn + mlp) * self.layers


def count_params(config: Mapping[str, Any]) -> tuple[int, int]:
    """Total and active parameter counts of a decoder-only transformer config.json."""
    h = _int(config, "hidden_size")
    n_q = _int(config, "num_attention_heads")
    n_kv = _int(config, "num_key_value_heads", n_q)
    d = _int(config, "head_dim", h // n_q) if config.get("head_dim") else h // n_q
    layers = _int(config, "num_hidden_layers")
    vocab = _int(config, "vocab_size")
    experts = config_experts(config)
    inter = _expert_width(config, experts)
    per_token = _int(config, "num_experts_per_tok", experts) if experts > 1 else 1
    tied = bool(config.get("tie_word_embeddings", False))
    bias = _has_qkv_bias(config)
    attn = h * n_q * d + 2 * h * n_kv * d + n_q * d * h + ((n_q * d + 2 * n_kv * d) if bias else 0)
    mlp = 3 * h * inter
    router = h * experts if experts > 1 else 0
    norms = 2 * h
    embed = vocab * h * (1 if tied else 2)
    total = layers * (attn + experts * mlp + router + norms) + embed + h
    active = layers * (attn + per_token * mlp + router + norms) + embed + h
    return total, active


def shape_from_config(config: Mapping[str, Any]) -> ModelShape:
    """Build a `ModelShape` from a Hugging Face config.json mapping."""
    total, active = count_params(config)
    h = _int(config, "hidden_size")
    n_q = _int(config, "num_attention_heads")
    experts = config_experts(config)
    archs = config.get("architectures") or []
    layer_class = config.get("layer_class")
    if not layer_class and archs and isinstance(archs[0], str):
        layer_class = models_catalog()["layer_classes"].get(archs[0])
    return ModelShape(
        params=total,
        hidden_size=h,
        layers=_int(config, "num_hidden_layers"),
        vocab_size=_int(config, "vocab_size"),
        heads=n_q,
        kv_heads=_int(config, "num_key_value_heads", n_q),
        head_dim=_int(config, "head_dim", h // n_q) if config.get("head_dim") else h // n_q,
        intermediate_size=_expert_width(config, experts),
        tied_embeddings=bool(config.get("tie_word_embeddings", False)),
        experts=experts,
        experts_per_token=_int(config, "num_experts_per_tok", experts) if experts > 1 else 1,
        active_params=active,
        layer_class=layer_class if isinstance(layer_class, str) else None,
    )


def config_experts(config: Mapping[str, Any]) -> int:
    """The number of routed experts per MoE layer in a config.json (1 for a dense model)."""
    for key in _EXPERT_KEYS:
        if config.get(key):
            return _int(config, key)
    return 1


def _expert_width(config: Mapping[str, Any], experts: int) -> int:
    """One expert's MLP width: moe_intermediate_size where the config has one (Qwen-MoE)."""
    if experts > 1 and config.get("moe_intermediate_size"):
        return _int(config, "moe_intermediate_size")
    return _int(config, "intermediate_size")


def active_size(text: str | int | float) -> tuple[int, int] | None:
    """(total, active) parameter counts of a "30B-A3B" size, or None for any other text.

    Raises:
        ModelSizeError: The active count is not below the total, or a count is out of range.
    """
    if not isinstance(text, str):
        return None
    match = _ACTIVE.match(text)
    if match is None:
        return None
    total = _count(float(match["num"]) * _UNITS[match["unit"].lower()])
    active = _count(float(match["anum"]) * _UNITS[match["aunit"].lower()])
    if active >= total:
        raise ModelSizeError(f"{text.strip()}: the active count (after A) must be smaller than the total")
    return total, active


def alias_model(text: object) -> str | None:
    """The catalogue model a size alias names ("8x7B" is mixtral-8x7b, "30B-A3B" qwen3-30b-a3b), else None.

    Spelled as `parse_model_size` and `shape_for_model` read it; any other size names no model.
    """
    if not isinstance(text, str):
        return None
    aliases = models_catalog()["aliases"]
    if _ACTIVE.match(text):
        name = text.strip().lower().replace(" ", "")
        alias = aliases.get(name if "-" in name else name.replace("a", "-a", 1))
    else:
        match = _SIZE.match(text)
        if match is None or not match["experts"]:
            return None
        alias = aliases.get(f"{match['experts']}x{match['num']}{(match['unit'] or '').lower()}")
    return alias if isinstance(alias, str) else None


def _count(value: float) -> int:
    if not math.isfinite(value) or not MIN_PARAMS <= value <= MAX_PARAMS:
        raise ModelSizeError(f"a parameter count between {MIN_PARAMS:,} and 100T")
    return round(value)


def parse_model_size(text: str | int | float) -> int:
    """Parse "7B", "1.3b", "125M", "8x7B" (a known MoE), "30B-A3B" (MoE total and active) or a count."""
    if isinstance(text, bool):
        raise ModelSizeError("expected a size such as 7B, 1.3b, 8x7B or a parameter count")
    moe = active_size(text)
    if moe is not None:
        return moe[0]
    if isinstance(text, int | float):
        value = float(text)
    else:
        match = _SIZE.match(text)
        if not match:
            raise ModelSizeError(
                "expected a size such as 7B, 1.3b, 125M, 8x7B, 30B-A3B, a parameter count, or a path to a config.json"
            )
        if match["experts"]:
            name = alias_model(text)
            if name is None:
                known = ", ".join(sorted(models_catalog()["aliases"]))
                raise ModelSizeError(
                    f"unknown mixture-of-experts size (known: {known}); give the model's config.json or its total count"
                )
            return count_params(models_catalog()["models"][name])[0]
        value = float(match["num"]) * _UNITS.get((match["unit"] or "").lower(), 1.0)
    return _count(value)


def shape_for_model(text: str | int | float) -> ModelShape:
    """The shape for a size answer: `shape_for_size`, except for the "30B-A3B" form.

    A known "<total>-A<active>" name (a catalogue alias) keeps its own config's expert layout. Any
    other one borrows the dense reference shape closest to its *active* count: hidden size and
    layers follow the active parameters (they set the activations), while the total count stays
    the given one (it sets the weights, gradients and optimizer state).
    """
    moe = active_size(text)
    if moe is None:
        return shape_for_size(parse_model_size(text))
    return _shape_for_active(moe[0], moe[1], str(text).strip().lower().replace(" ", ""))


@cache
def _shape_for_active(total: int, active: int, name: str) -> ModelShape:
    alias = alias_model(name)
    if alias is not None:
        shape = shape_from_config(models_catalog()["models"][alias])
        fields = {**shape.__dict__, "params": total, "active_params": active, "reference": alias, "layer_class": None}
        return ModelShape(**fields)
    dense = shape_for_size(active)
    return ModelShape(**{**dense.__dict__, "params": total, "active_params": active})


@cache
def shape_for_size(params: int) -> ModelShape:
    """A shape for a size-only model: the closest reference shape, with the given count.

    MoE aliases resolve to their own config, so their expert layout is kept. Cached: facts are
    derived again after every answer, and the result is immutable.
    """
    catalog = models_catalog()["models"]
    best_name, best_shape, best_gap = "", None, math.inf
    for name, cfg in catalog.items():
        shape = shape_from_config(cfg)
        if shape.params == params:
            return _with_reference(shape, name, params)
        gap = abs(math.log(shape.params) - math.log(params))
        if shape.experts == 1 and gap < best_gap:
            best_name, best_shape, best_gap = name, shape, gap
    assert best_shape is not None  # the catalogue ships with dense shapes
    return _with_reference(best_shape, best_name, params)


def _with_reference(shape: ModelShape, name: str, params: int) -> ModelShape:
    active = shape.active_params if shape.params == params else params
    # A size says nothing about the model's code, so no layer class is guessed from the reference.
    fields = {**shape.__dict__, "params": params, "active_params": active, "reference": name, "layer_class": None}
    return ModelShape(**fields)


def _has_qkv_bias(config: Mapping[str, Any]) -> bool:
    if "attention_bias" in config:
        return bool(config["attention_bias"])
    if config.get("qkv_bias") is not None:
        return bool(config["qkv_bias"])
    return str(config.get("model_type", "")).startswith("qwen2")


def _int(config: Mapping[str, Any], key: str, default: int | None = None) -> int:
    value = config.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ModelSizeError(f"config.json field '{key}' must be a positive integer, got {value!r}")
    return value
