"""Count a config.json's parameters by its architecture, as transformers builds the model.

The layout of each family (which projections have a bias, which norms a layer holds, whether
the MLP is gated, how the experts are placed) is data: wizard/data/architectures.yaml, keyed by
config.json's `model_type`. This module walks one decoder layer of that layout and adds the
embeddings, the final norm and the output head, so the total equals the sum of `p.numel()` over
the model transformers builds from the same config.json (the tests compare the two).

A config.json without `model_type` (written by hand) is counted with the Llama layout, with
Mixtral-style experts where it names them; an unknown `model_type` is refused, never guessed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from wizard.engine.catalog import architectures_catalog

# A config.json without model_type: the layout the wizard has always assumed for one.
GENERIC = "llama"
_GENERIC_EXPERTS = ("num_local_experts", "num_experts")
# Norm kind -> parameters per normalised feature: RMSNorm has a weight, LayerNorm a weight and a
# bias, Cohere's LayerNorm only a weight, OLMo's LayerNorm none (elementwise_affine=False).
_NORM_PARAMS = {"rms": 1, "layer": 2, "weight": 1, "none": 0}


class ConfigCountError(ValueError):
    """The config.json cannot be counted; the message names the field or the model_type."""


@dataclass(frozen=True)
class ParamCount:
    """A model's parameters by kind, and the facts of its layout the memory model reads.

    `total` equals transformers' count for the config; `active` counts, in MoE layers, only the
    experts a token is routed to. `block_linear` is the weights of the linear layers inside the
    decoder layers (what bitsandbytes quantizes in QLoRA; the experts counted as linear), and
    `lora_dims` the sum of their input and output widths (a rank-r LoRA adapter on each adds r
    times that). `largest_module` is one embedding or linear weight (DeepSpeed's largest layer),
    `largest_tensor` also the fused expert tensors. `outside` counts the parameters outside the
    decoder layers: embeddings, output head and final norm.
    """

    model_type: str
    total: int
    active: int
    block_linear: int
    lora_dims: int
    largest_module: int
    largest_tensor: int
    outside: int
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
    layer_class: str | None = None
    moe_block_class: str | None = None


class _Tally:
    """Running sums of the parameters, by the kinds `ParamCount` keeps."""

    def __init__(self) -> None:
        self.total = 0
        self.active = 0
        self.block_linear = 0
        self.lora_dims = 0
        self.largest_module = 0
        self.largest_tensor = 0

    def linear(self, inputs: int, outputs: int, bias: bool, copies: int = 1) -> None:
        """`copies` Linear(inputs, outputs) layers inside the decoder layers."""
        size = inputs * outputs + (outputs if bias else 0)
        self.total += copies * size
        self.active += copies * size
        if copies:
            self.block_linear += copies * inputs * outputs
            self.lora_dims += copies * (inputs + outputs)
            self.largest_module = max(self.largest_module, inputs * outputs)

    def experts(self, hidden: int, width: int, experts: int, used: int, copies: int) -> None:
        """`copies` layers of `experts` gated experts, `used` of them per token.

        Transformers 5 keeps them as two fused tensors per layer (`gate_up_proj` of shape
        [experts, 2 x width, hidden] and `down_proj`), e.g. MixtralExperts in modeling_mixtral.py.
        """
        one = 3 * hidden * width
        self.total += copies * experts * one
        self.active += copies * used * one
        if copies:
            self.block_linear += copies * experts * one
            self.lora_dims += copies * experts * 3 * (hidden + width)
            self.largest_module = max(self.largest_module, hidden * width)
            self.largest_tensor = max(self.largest_tensor, experts * 2 * width * hidden)

    def vector(self, size: int, copies: int = 1) -> None:
        """Norm weights, biases and routers: counted, neither quantized nor adapted."""
        self.total += copies * size
        self.active += copies * size


class _Fields:
    """A config.json read as transformers reads it: a missing field takes the class default."""

    def __init__(self, config: Mapping[str, Any], defaults: Mapping[str, Any]) -> None:
        self.config = config
        self.defaults = defaults

    def raw(self, key: str) -> Any:
        return self.config[key] if key in self.config else self.defaults.get(key)

    def has(self, key: str) -> bool:
        return self.raw(key) is not None

    def number(self, key: str, default: int | None = None, *, zero: bool = False) -> int:
        """A positive integer field (0 allowed with `zero`); `default` when it is null or absent."""
        value = self.raw(key)
        if value is None and default is not None:
            return default
        low = 0 if zero else 1
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            what = "a non-negative" if zero else "a positive"
            raise ConfigCountError(f"config.json field '{key}' must be {what} integer, got {value!r}")
        return value

    def flag(self, spec: Any) -> bool:
        """A yes/no from the layout: a literal, or the first of the named fields that is present."""
        if isinstance(spec, bool):
            return spec
        for key in [spec] if isinstance(spec, str) else spec:
            value = self.raw(key)
            if value is not None:
                if not isinstance(value, bool):
                    raise ConfigCountError(f"config.json field '{key}' must be true or false, got {value!r}")
                return value
        return False

    def first_int(self, keys: Sequence[str]) -> int | None:
        for key in keys:
            if self.has(key):
                return self.number(key, zero=True)
        return None

    def int_list(self, key: str) -> frozenset[int]:
        value = self.raw(key)
        if value is None:
            return frozenset()
        if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            raise ConfigCountError(f"config.json field '{key}' must be a list of layer numbers, got {value!r}")
        return frozenset(value)


def families() -> Mapping[str, Mapping[str, Any]]:
    """Every architecture the counter knows, by model_type."""
    fams: Mapping[str, Mapping[str, Any]] = architectures_catalog()["families"]
    return fams


def family_name(config: Mapping[str, Any]) -> str | None:
    """The family a config.json belongs to: its model_type, else its architectures entry; None if neither.

    Raises:
        ConfigCountError: model_type names an architecture the wizard does not count.
    """
    model_type = config.get("model_type")
    if model_type is not None:
        name = architectures_catalog().get("same_as", {}).get(model_type, model_type)
        if not isinstance(name, str) or name not in families():
            raise ConfigCountError(unknown_model_type(model_type))
        return name
    archs = config.get("architectures")
    if isinstance(archs, list) and archs and isinstance(archs[0], str):
        for name, family in families().items():
            if family.get("causal_lm") == archs[0]:
                return name
    return None


def text_part(config: Mapping[str, Any]) -> Mapping[str, Any]:
    """The language model of a multimodal config.json (its `text_config`), else the config itself.

    Gemma 3's config.json (model_type gemma3) keeps the decoder's fields under text_config, whose
    model_type is gemma3_text; one without a model_type takes it from `same_as`.
    """
    text = config.get("text_config")
    if not isinstance(text, Mapping) or "hidden_size" in config:
        return config
    if "model_type" not in text and isinstance(config.get("model_type"), str):
        same = architectures_catalog().get("same_as", {}).get(config["model_type"])
        if same is not None:
            return {**text, "model_type": same}
    return text


def unknown_model_type(model_type: object) -> str:
    """Why a model_type is refused, and the three ways around it."""
    shown = model_type if isinstance(model_type, str) and model_type.isprintable() else repr(model_type)
    return (
        f"config.json model_type '{shown}' is not an architecture the wizard can count from config.json "
        f"(known: {', '.join(sorted(families()))}); give the model's local folder with its *.safetensors files, "
        "its Hub id (org/name), or its size as a number such as 7B"
    )


def count_config(config: Mapping[str, Any]) -> ParamCount:
    """Count a config.json's parameters by its architecture (see the module docstring).

    Raises:
        ConfigCountError: an unknown model_type, or a field that is missing or not a number.
    """
    config = text_part(config)
    name = family_name(config)
    generic = name is None
    family = families()[name or GENERIC]
    fields = _Fields(config, {} if generic else family.get("defaults", {}))
    h = fields.number("hidden_size")
    layers = fields.number("num_hidden_layers")
    vocab = fields.number("vocab_size")
    n_q = fields.number("num_attention_heads")
    attention = family["attention"]
    tally = _Tally()
    kv_heads, head_dim = _attention(tally, fields, attention, h, n_q, layers)
    norm = _NORM_PARAMS[family["norm"]]
    tally.vector(norm * h * _norms_per_layer(fields, family), layers)
    moe = _moe_spec(family, fields, generic)
    mlp_width, experts, per_token, width = _mlp(tally, fields, family, moe, h, layers)
    tied = fields.flag("tie_word_embeddings")
    head = 0 if tied else vocab * h
    outside = vocab * h + head + norm * h + (vocab if family.get("lm_head_bias") else 0)
    tally.vector(outside)
    tally.largest_module = max(tally.largest_module, vocab * h)
    tally.largest_tensor = max(tally.largest_tensor, tally.largest_module)
    layer_class = config.get("layer_class") if generic else family.get("layer_class")
    return ParamCount(
        model_type=str(config.get("model_type") or GENERIC),
        total=tally.total,
        active=tally.active,
        block_linear=tally.block_linear,
        lora_dims=tally.lora_dims,
        largest_module=tally.largest_module,
        largest_tensor=tally.largest_tensor,
        outside=outside,
        hidden_size=h,
        layers=layers,
        vocab_size=vocab,
        heads=n_q,
        kv_heads=kv_heads,
        head_dim=head_dim,
        intermediate_size=width if experts > 1 else mlp_width,
        tied_embeddings=tied,
        experts=experts,
        experts_per_token=per_token,
        layer_class=layer_class if isinstance(layer_class, str) else None,
        moe_block_class=moe.get("block_class") if moe and experts > 1 else None,
    )


def _attention(
    tally: _Tally, fields: _Fields, spec: Mapping[str, Any], h: int, n_q: int, layers: int
) -> tuple[int, int]:
    """Add the attention of every layer; return (key/value heads, head_dim) for the memory model."""
    bias, out_bias = fields.flag(spec.get("bias", False)), fields.flag(spec.get("out_bias", False))
    if spec["kind"] == "mla":
        return _latent_attention(tally, fields, h, n_q, layers, bias, out_bias)
    if spec["kind"] == "falcon":
        # FalconAttention: query_key_value's width follows new_decoder_architecture, then multi_query.
        d = h // n_q
        if fields.flag("new_decoder_architecture"):
            n_kv = fields.number("num_kv_heads", n_q)
        else:
            n_kv = 1 if fields.flag("multi_query") else n_q
    else:
        n_kv = n_q if spec.get("kv_heads") == "all" else fields.number("num_key_value_heads", n_q)
        d = fields.number("head_dim", h // n_q) if h // n_q else fields.number("head_dim")
    q_out, kv_out = n_q * d, n_kv * d
    tally.linear(h, q_out, bias, layers)
    tally.linear(h, kv_out, bias, 2 * layers)
    tally.linear(q_out, h, out_bias, layers)
    qk = spec.get("qk_norm")
    if qk and fields.flag(qk.get("when", True)):
        size = {"head": 2 * d, "heads": q_out + kv_out, "hidden_per_head": 2 * (h // n_q)}[qk["size"]]
        tally.vector(_NORM_PARAMS[qk["norm"]] * size, layers)
    return n_kv, d


def _latent_attention(
    tally: _Tally, fields: _Fields, h: int, n_q: int, layers: int, bias: bool, out_bias: bool
) -> tuple[int, int]:
    """DeepSeek's multi-head latent attention (DeepseekV3Attention in modeling_deepseek_v3.py).

    Queries go through a low-rank q_a_proj / q_a_layernorm / q_b_proj when q_lora_rank is set
    (one q_proj otherwise); keys and values through kv_a_proj_with_mqa (the latent plus the
    shared rotary key), kv_a_layernorm and kv_b_proj.
    """
    rope, nope, v = fields.number("qk_rope_head_dim"), fields.number("qk_nope_head_dim"), fields.number("v_head_dim")
    kv_rank = fields.number("kv_lora_rank")
    qk_head = nope + rope
    if fields.has("q_lora_rank"):
        q_rank = fields.number("q_lora_rank")
        tally.linear(h, q_rank, bias, layers)
        tally.vector(q_rank, layers)
        tally.linear(q_rank, n_q * qk_head, False, layers)
    else:
        tally.linear(h, n_q * qk_head, False, layers)
    tally.linear(h, kv_rank + rope, bias, layers)
    tally.vector(kv_rank, layers)
    tally.linear(kv_rank, n_q * (nope + v), False, layers)
    tally.linear(n_q * v, h, out_bias, layers)
    return fields.number("num_key_value_heads", n_q), qk_head


def _norms_per_layer(fields: _Fields, family: Mapping[str, Any]) -> int:
    count = family["norms_per_layer"]
    if count != "falcon":
        return int(count)
    # FalconDecoderLayer: two norms unless attention and MLP run in parallel on one; the new
    # architecture gives the parallel block two (ln_attn, ln_mlp) unless num_ln_in_parallel_attn says 1.
    if not fields.flag("parallel_attn"):
        return 2
    default = 2 if fields.flag("new_decoder_architecture") else 1
    return 2 if fields.number("num_ln_in_parallel_attn", default) == 2 else 1


def _moe_spec(family: Mapping[str, Any], fields: _Fields, generic: bool) -> Mapping[str, Any] | None:
    if not generic:
        moe: Mapping[str, Any] | None = family.get("moe")
        return moe
    if fields.first_int(_GENERIC_EXPERTS) is None:
        return None
    # The layout the wizard assumed before it read model_type: Mixtral-style experts of
    # moe_intermediate_size (Qwen-MoE's field) where given, else intermediate_size.
    width = "moe_intermediate_size" if fields.has("moe_intermediate_size") else "intermediate_size"
    return {"experts": _GENERIC_EXPERTS, "per_token": ["num_experts_per_tok"], "width": width, "placement": "every"}


def _mlp(
    tally: _Tally,
    fields: _Fields,
    family: Mapping[str, Any],
    moe: Mapping[str, Any] | None,
    h: int,
    layers: int,
) -> tuple[int, int, int, int]:
    """Add the MLP or MoE block of every layer; return (dense width, experts, per token, expert width)."""
    spec = family["mlp"]
    width_key = spec.get("width", "intermediate_size")
    dense = fields.number(width_key, 4 * h) if width_key == "ffn_hidden_size" else fields.number(width_key)
    bias = fields.flag(spec.get("bias", False))
    matrices = 3 if spec["kind"] == "gated" else 2
    experts = fields.first_int(moe["experts"]) if moe else None
    sparse = _sparse_layers(fields, moe, layers) if moe and experts else 0
    tally.linear(h, dense, bias, (matrices - 1) * (layers - sparse))
    tally.linear(dense, h, bias, layers - sparse)
    if not moe or not experts:
        return dense, 1, 1, dense
    per_token = fields.first_int(moe["per_token"])
    if per_token is None:
        raise ConfigCountError(f"config.json field '{moe['per_token'][0]}' must be a positive integer, got None")
    per_token = min(per_token, experts)
    width = fields.number(moe["width"])
    tally.vector(experts * h, sparse)  # the router: one score per expert
    tally.experts(h, width, experts, per_token, sparse)
    shared = _shared_width(fields, moe, width)
    if shared:
        tally.linear(h, shared, False, 2 * sparse)
        tally.linear(shared, h, False, sparse)
    if moe.get("shared_gate"):
        tally.vector(h, sparse)  # shared_expert_gate: Linear(hidden, 1)
    return dense, experts, per_token, width


def _shared_width(fields: _Fields, moe: Mapping[str, Any], width: int) -> int:
    if "shared_width" in moe:
        return fields.number(moe["shared_width"], zero=True)
    if "shared_experts" in moe:
        return width * fields.number(moe["shared_experts"], 0, zero=True)
    return 0


def _sparse_layers(fields: _Fields, moe: Mapping[str, Any], layers: int) -> int:
    """How many decoder layers hold the experts (the others a dense MLP of intermediate_size)."""
    placement = moe.get("placement", "every")
    if placement == "qwen":
        # Qwen2MoeDecoderLayer: sparse unless listed in mlp_only_layers, every decoder_sparse_step-th layer.
        step = fields.number("decoder_sparse_step", 1)
        dense = fields.int_list("mlp_only_layers")
        return sum(1 for i in range(layers) if i not in dense and (i + 1) % step == 0)
    if placement == "deepseek":
        # The first first_k_dense_replace layers are dense (DeepseekV3DecoderLayer); DeepSeek's own
        # modeling_deepseek.py also keeps only every moe_layer_freq-th layer sparse (1 in every release).
        first = fields.number("first_k_dense_replace", 0, zero=True)
        freq = fields.number("moe_layer_freq", 1)
        return sum(1 for i in range(layers) if i >= first and i % freq == 0)
    return layers
