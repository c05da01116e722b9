"""Model sizes: parse "7B" / "8x7B" / "30B-A3B" / counts, and count parameters from a config.json.

A config.json is counted by its architecture (`wizard.engine.param_count`, dispatching on
`model_type` over the layouts in wizard/data/architectures.yaml): the total equals the count of
the model transformers builds from it. A size given as a number borrows the closest reference
shape (wizard/data/models.yaml) for the fields the memory model needs beyond the count.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import cache
from typing import Any

from wizard.engine.catalog import models_catalog
from wizard.engine.param_count import ConfigCountError, ParamCount, count_config, text_part
from wizard.engine.suggest import closest

_SIZE = re.compile(r"^\s*(?:(?P<experts>\d+)\s*x\s*)?(?P<num>\d+(?:\.\d+)?)\s*(?P<unit>[kmbt])?\s*$", re.I)
# "30B-A3B": a mixture-of-experts model with 30B parameters in total, 3B of them active per token
# (the naming of Qwen3-30B-A3B, Qwen3-235B-A22B, ...). The unit is required on both numbers.
_ACTIVE = re.compile(
    r"^\s*(?P<num>\d+(?:\.\d+)?)\s*(?P<unit>[kmbt])\s*-?\s*a\s*(?P<anum>\d+(?:\.\d+)?)\s*(?P<aunit>[kmbt])\s*$",
    re.I,
)
_UNITS = {"k": 1e3, "m": 1e6, "b": 1e9, "t": 1e12}

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
    # Counted from the model's own layout (`wizard.engine.param_count`); 0 where only a size is
    # known, and the properties below then use the Llama-shaped formulas.
    block_linear: int = 0
    lora_dims: int = 0
    largest_module: int = 0
    largest_tensor: int = 0
    outside_params: int = 0
    moe_block_class: str | None = None
    model_type: str | None = None

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
        if self.largest_module:
            return self.largest_module
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
        return max(self.largest_layer_params, fused_mlp, self.largest_tensor)

    @property
    def decoder_params(self) -> int:
        """Parameters inside the decoder layers: all but the embeddings, the output head and the final norm."""
        if self.outside_params:
            return max(self.params - self.outside_params, 0)
        return max(self.params - self.embedding_params - self.hidden_size, 0)

    @property
    def quantizable_params(self) -> int:
        """Weights bitsandbytes quantizes in QLoRA: the linear layers inside the blocks."""
        if self.block_linear:
            return self.block_linear
        return max(self.params - self.embedding_params - (2 * self.layers + 1) * self.hidden_size, 0)

    def lora_params(self, rank: int = 16) -> int:
        """Trainable LoRA parameters with adapters on every linear layer (q, k, v, o, gate, up, down)."""
        if self.lora_dims:
            return rank * self.lora_dims
        h, d = self.hidden_size, self.head_dim
        q_out, kv_out = self.heads * d, self.kv_heads * d
        attn = (h + q_out) + 2 * (h + kv_out) + (q_out + h)
        mlp = self.experts * 3 * (h + self.intermediate_size)
        return rank * (attn + mlp) * self.layers


def count_params(config: Mapping[str, Any]) -> tuple[int, int]:
    """Total and active parameter counts of a decoder-only transformer config.json, by its architecture.

    Raises:
        ModelSizeError: an unknown model_type, or a field that is missing or not a number.
    """
    counted = _counted(config)
    return counted.total, counted.active


def _counted(config: Mapping[str, Any]) -> ParamCount:
    try:
        return count_config(config)
    except ConfigCountError as exc:
        raise ModelSizeError(str(exc)) from None


def shape_from_config(config: Mapping[str, Any], params: int | None = None) -> ModelShape:
    """Build a `ModelShape` from a Hugging Face config.json mapping.

    `params`, when given, is an exact count read elsewhere (the checkpoint's safetensors
    headers): it replaces the counted total, and the active count moves with it.
    """
    try:
        c = _counted(config)
    except ModelSizeError:
        if params is None:
            raise
        # The weights gave the count: an architecture the counter does not know still lends its
        # hidden size, layers and heads (read as the Llama layout) to the activation estimate.
        layout = {k: v for k, v in text_part(config).items() if k not in ("model_type", "architectures")}
        c = _counted(layout)
    layer_class = c.layer_class
    if layer_class is None:
        archs = config.get("architectures") or []
        if archs and isinstance(archs[0], str):
            layer_class = models_catalog()["layer_classes"].get(archs[0])
    total, active = c.total, c.active
    block_linear, outside = c.block_linear, c.outside
    if params is not None and params != total:
        # The checkpoint holds what the config does not describe (DeepSeek-V3's multi-token
        # prediction layer, a vision tower): the difference is counted as active too, and the
        # config's split of the weights no longer holds for the count.
        total, active = params, max(active + params - total, 1)
        block_linear = outside = 0
    return ModelShape(
        params=total,
        hidden_size=c.hidden_size,
        layers=c.layers,
        vocab_size=c.vocab_size,
        heads=c.heads,
        kv_heads=c.kv_heads,
        head_dim=c.head_dim,
        intermediate_size=c.intermediate_size,
        tied_embeddings=c.tied_embeddings,
        experts=c.experts,
        experts_per_token=c.experts_per_token,
        active_params=active,
        layer_class=layer_class if isinstance(layer_class, str) else None,
        block_linear=block_linear,
        lora_dims=c.lora_dims,
        largest_module=c.largest_module,
        largest_tensor=c.largest_tensor,
        outside_params=outside,
        moe_block_class=c.moe_block_class,
        model_type=c.model_type,
    )


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
            name = catalog_model(text)
            if name is not None:
                return shape_for_catalog(name).params
            raise ModelSizeError(_not_a_size(text))
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


def _not_a_size(text: str) -> str:
    """What a model answer may be, with the catalogue model closest to `text` when one is close."""
    allowed = (
        "expected a size such as 7B, 1.3b, 125M, 8x7B, 30B-A3B, a parameter count, a model of the bundled "
        "catalog (llama-3-8b, mistral-7b, ...), a Hub id such as org/name, or a path to a config.json"
    )
    suggestion = closest(_catalog_key(text), models_catalog()["models"])
    return f"{allowed}; did you mean {suggestion}?" if suggestion else allowed


def _catalog_key(text: str) -> str:
    """A model name as the catalogue spells its keys: "Llama 3 8B" and "Meta-Llama-3-8B" are llama-3-8b."""
    key = re.sub(r"[\s_]+", "-", text.strip().lower())
    key = key.removeprefix("meta-")
    for suffix in _NAME_SUFFIXES:
        key = key.removesuffix(suffix)
    return key


# Name endings that do not change the parameter count: a model's chat or instruction-tuned
# variant, or its first release.
_NAME_SUFFIXES = ("-hf", "-instruct", "-chat", "-it", "-base", "-v0.1")


def catalog_model(text: object) -> str | None:
    """The bundled catalogue model a name without an org names ("Llama-3-8B", "mistral 7b"), else None."""
    if not isinstance(text, str) or "/" in text:
        return None
    key = _catalog_key(text)
    return key if key in models_catalog()["models"] else None


def catalog_hub_id(text: object) -> str | None:
    """The Hub repository of the catalogue model a name without an org names, else None."""
    name = catalog_model(text)
    hub_ids: dict[str, str] = models_catalog().get("hub_ids", {})
    return hub_ids.get(name) if name is not None else None


@cache
def shape_for_catalog(name: str) -> ModelShape:
    """A catalogue model's own shape: its config.json values, counted by its architecture."""
    return shape_from_config(models_catalog()["models"][name])


def shape_for_model(text: str | int | float) -> ModelShape:
    """The shape for a size answer: `shape_for_size`, except for the "30B-A3B" form.

    A known "<total>-A<active>" name (a catalogue alias) keeps its own config's expert layout. Any
    other one borrows the dense reference shape closest to its *active* count: hidden size and
    layers follow the active parameters (they set the activations), while the total count stays
    the given one (it sets the weights, gradients and optimizer state).
    """
    moe = active_size(text)
    name = catalog_model(text) if moe is None else None
    if name is not None:
        return shape_for_catalog(name)
    if moe is None:
        return shape_for_size(parse_model_size(text))
    return _shape_for_active(moe[0], moe[1], str(text).strip().lower().replace(" ", ""))


@cache
def _shape_for_active(total: int, active: int, name: str) -> ModelShape:
    alias = alias_model(name)
    if alias is not None:
        shape = shape_from_config(models_catalog()["models"][alias])
        return replace(_size_only(shape), params=total, active_params=active, reference=alias, layer_class=None)
    return replace(_size_only(shape_for_size(active)), params=total, active_params=active)


@cache
def shape_for_size(params: int) -> ModelShape:
    """A shape for a size-only model: the closest reference shape, with the given count.

    MoE aliases resolve to their own config, so their expert layout is kept. Cached: facts are
    derived again after every answer, and the result is immutable.
    """
    catalog = models_catalog()["models"]
    best_name, best_shape, best_gap = "", None, math.inf
    for name, cfg in catalog.items():
        if cfg.get("size_reference") is False:
            continue
        shape = shape_from_config(cfg)
        if shape.params == params:
            return _with_reference(shape, name, params)
        gap = abs(math.log(shape.params) - math.log(params))
        if shape.experts == 1 and gap < best_gap:
            best_name, best_shape, best_gap = name, shape, gap
    assert best_shape is not None  # the catalogue ships with dense shapes
    return _with_reference(best_shape, best_name, params)


def shape_for_size_of(params: int, name: str) -> ModelShape:
    """A size-only model with a named catalogue model's layer shape (the base_model an Axolotl run loads)."""
    return _with_reference(shape_for_catalog(name), name, params)


def _with_reference(shape: ModelShape, name: str, params: int) -> ModelShape:
    active = shape.active_params if shape.params == params else params
    # A size says nothing about the model's code, so no layer class is guessed from the reference.
    base = shape if shape.params == params else _size_only(shape)
    return replace(base, params=params, active_params=active, reference=name, layer_class=None)


def _size_only(shape: ModelShape) -> ModelShape:
    """`shape` without what a reference shape cannot say about a model of another size.

    The parameters inside and outside the decoder layers follow the given count (the Llama-shaped
    formulas of `ModelShape`), and the model's code is unknown.
    """
    return replace(shape, block_linear=0, outside_params=0, moe_block_class=None, model_type=None)
