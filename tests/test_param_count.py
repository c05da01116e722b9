"""Parameter counts from config.json, by architecture, against transformers' own count.

Every expected integer below is the sum of ``p.numel()`` over the model transformers builds from
the same config.json on the meta device (``AutoModelForCausalLM.from_config``); the tests marked
``tools`` build it again and compare, the others check the integers alone, so they also run
where transformers is not installed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from realtools import require_tool
from wizard.engine.model_size import ModelSizeError, count_params, shape_from_config
from wizard.engine.param_count import count_config, families

CONFIGS = Path(__file__).resolve().parent / "assets" / "configs"

# fixture -> (total, active, decoder-layer class, sparse MoE block class or None)
PUBLISHED: dict[str, tuple[int, int, str, str | None]] = {
    "meta-llama--Meta-Llama-3-8B": (8_030_261_248, 8_030_261_248, "LlamaDecoderLayer", None),
    "mistralai--Mistral-7B-v0.1": (7_241_732_096, 7_241_732_096, "MistralDecoderLayer", None),
    "mistralai--Mixtral-8x7B-v0.1": (46_702_792_704, 12_879_925_248, "MixtralDecoderLayer", "MixtralSparseMoeBlock"),
    "Qwen--Qwen2.5-7B": (7_615_616_512, 7_615_616_512, "Qwen2DecoderLayer", None),
    "Qwen--Qwen1.5-MoE-A2.7B": (14_315_784_192, 2_689_173_504, "Qwen2MoeDecoderLayer", "Qwen2MoeSparseMoeBlock"),
    "Qwen--Qwen3-8B": (8_190_735_360, 8_190_735_360, "Qwen3DecoderLayer", None),
    "Qwen--Qwen3-30B-A3B": (30_532_122_624, 3_353_032_704, "Qwen3MoeDecoderLayer", "Qwen3MoeSparseMoeBlock"),
    "google--gemma-7b": (8_537_680_896, 8_537_680_896, "GemmaDecoderLayer", None),
    "google--gemma-2-9b": (9_241_705_984, 9_241_705_984, "Gemma2DecoderLayer", None),
    "google--gemma-3-1b-pt": (999_885_952, 999_885_952, "Gemma3DecoderLayer", None),
    # The multimodal config: its text_config (which leaves most fields to Gemma3TextConfig's defaults).
    "google--gemma-3-4b-pt": (3_880_263_168, 3_880_263_168, "Gemma3DecoderLayer", None),
    "microsoft--phi-2": (2_779_683_840, 2_779_683_840, "PhiDecoderLayer", None),
    "microsoft--Phi-3-mini-4k-instruct": (3_821_079_552, 3_821_079_552, "Phi3DecoderLayer", None),
    "EleutherAI--pythia-12b": (11_846_072_320, 11_846_072_320, "GPTNeoXLayer", None),
    "tiiuae--falcon-7b": (6_921_720_704, 6_921_720_704, "FalconDecoderLayer", None),
    "tiiuae--falcon-40b": (41_303_293_952, 41_303_293_952, "FalconDecoderLayer", None),
    "allenai--OLMo-7B-hf": (6_888_095_744, 6_888_095_744, "OlmoDecoderLayer", None),
    "allenai--OLMo-2-1124-7B": (7_298_617_344, 7_298_617_344, "Olmo2DecoderLayer", None),
    "bigcode--starcoder2-3b": (3_030_371_328, 3_030_371_328, "Starcoder2DecoderLayer", None),
    "CohereForAI--c4ai-command-r-v01": (34_980_831_232, 34_980_831_232, "CohereDecoderLayer", None),
    "ibm-granite--granite-3.0-2b-base": (2_533_531_648, 2_533_531_648, "GraniteDecoderLayer", None),
    "deepseek-ai--DeepSeek-V2-Lite": (15_706_484_224, 2_661_150_208, "DeepseekV2DecoderLayer", "DeepseekV2Moe"),
    "deepseek-ai--DeepSeek-V3": (671_026_404_352, 37_552_282_624, "DeepseekV3DecoderLayer", "DeepseekV3MoE"),
}

# Shrunk variants (two to four layers) that switch on the branches the real configs leave off:
# biases, q/k norms, sparse-step and dense-only MoE layers, Falcon's other layouts, MLA without
# the query LoRA. (fixture, fields changed, total)
VARIANTS: list[tuple[str, dict[str, Any], int]] = [
    (
        "meta-llama--Meta-Llama-3-8B",
        {"num_hidden_layers": 2, "attention_bias": True, "mlp_bias": True, "tie_word_embeddings": True},
        961_650_688,
    ),
    ("mistralai--Mixtral-8x7B-v0.1", {"num_hidden_layers": 2, "head_dim": 64}, 3_122_745_344),
    (
        "Qwen--Qwen1.5-MoE-A2.7B",
        {"num_hidden_layers": 4, "decoder_sparse_step": 2, "mlp_only_layers": [3], "qkv_bias": False},
        1_347_039_232,
    ),
    ("Qwen--Qwen3-30B-A3B", {"num_hidden_layers": 3, "mlp_only_layers": [1], "attention_bias": True}, 1_925_222_144),
    ("microsoft--phi-2", {"num_hidden_layers": 2, "qk_layernorm": True, "num_key_value_heads": 8}, 399_875_200),
    (
        "CohereForAI--c4ai-command-r-v01",
        {"num_hidden_layers": 2, "use_qk_norm": True, "num_key_value_heads": 8},
        3_506_481_152,
    ),
    (
        "tiiuae--falcon-7b",
        {"num_hidden_layers": 2, "parallel_attn": False, "multi_query": False, "bias": True},
        791_146_752,
    ),
    (
        "tiiuae--falcon-40b",
        {"num_hidden_layers": 2, "num_ln_in_parallel_attn": 1, "ffn_hidden_size": 20000},
        1_473_298_432,
    ),
    ("bigcode--starcoder2-3b", {"num_hidden_layers": 2, "use_bias": False}, 342_915_072),
    (
        "deepseek-ai--DeepSeek-V3",
        {
            "num_hidden_layers": 4,
            "first_k_dense_replace": 1,
            "q_lora_rank": None,
            "attention_bias": True,
            "n_routed_experts": 16,
            "n_group": 4,
            "topk_group": 2,
        },
        5_754_240_256,
    ),
    ("deepseek-ai--DeepSeek-V2-Lite", {"num_hidden_layers": 3, "q_lora_rank": 256}, 1_655_193_856),
    (
        "EleutherAI--pythia-12b",
        {"num_hidden_layers": 2, "attention_bias": False, "tie_word_embeddings": True},
        888_770_560,
    ),
    ("allenai--OLMo-7B-hf", {"num_hidden_layers": 2, "attention_bias": True, "num_key_value_heads": 8}, 766_529_536),
    (
        "ibm-granite--granite-3.0-2b-base",
        {"num_hidden_layers": 2, "mlp_bias": True, "tie_word_embeddings": False},
        323_020_800,
    ),
    ("google--gemma-2-9b", {"num_hidden_layers": 2, "attention_bias": True}, 1_313_921_536),
]


def load(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((CONFIGS / f"{name}.json").read_text(encoding="utf-8"))
    return data


def transformers_model(config: dict[str, Any], tmp_path: Path) -> Any:
    """The model transformers builds from this config.json, on the meta device (no memory, no weights)."""
    require_tool("torch")
    transformers = require_tool("transformers")
    import torch

    (tmp_path / "config.json").write_text(json.dumps(config), encoding="utf-8")
    cfg = transformers.AutoConfig.from_pretrained(str(tmp_path))
    if config.get("text_config") and hasattr(cfg, "text_config"):
        cfg = cfg.text_config  # the language model of a multimodal config
    with torch.device("meta"):
        return transformers.AutoModelForCausalLM.from_config(cfg)


def numel(model: Any) -> int:
    return sum(p.numel() for p in model.parameters())


def test_every_family_has_a_real_config() -> None:
    counted = {count_config(load(name)).model_type for name in PUBLISHED}
    assert set(families()) <= counted | {"gemma3_text"}, set(families()) - counted


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_count_is_the_published_integer(name: str) -> None:
    total, active, layer, block = PUBLISHED[name]
    counted = count_config(load(name))
    assert (counted.total, counted.active) == (total, active)
    assert counted.layer_class == layer
    assert counted.moe_block_class == block


@pytest.mark.tools
@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_count_equals_transformers(name: str, tmp_path: Path) -> None:
    total, _, layer, block = PUBLISHED[name]
    model = transformers_model(load(name), tmp_path)
    assert numel(model) == total == count_config(load(name)).total
    # FSDP wraps the class the model names as its unit of splitting (accelerate reads the same list).
    assert layer in model._no_split_modules
    assert layer in {type(m).__name__ for m in model.modules()}
    if block is not None:
        assert block in {type(m).__name__ for m in model.modules()}


@pytest.mark.parametrize(("name", "changes", "total"), VARIANTS, ids=[v[0] for v in VARIANTS])
def test_variant_count_is_the_expected_integer(name: str, changes: dict[str, Any], total: int) -> None:
    assert count_config({**load(name), **changes}).total == total


@pytest.mark.tools
@pytest.mark.parametrize(("name", "changes", "total"), VARIANTS, ids=[v[0] for v in VARIANTS])
def test_variant_count_equals_transformers(name: str, changes: dict[str, Any], total: int, tmp_path: Path) -> None:
    assert numel(transformers_model({**load(name), **changes}, tmp_path)) == total


@pytest.mark.tools
@pytest.mark.parametrize("family", sorted(families()))
def test_defaults_are_the_configuration_class_defaults(family: str) -> None:
    """A field a config.json leaves out takes the configuration class's default, as in transformers."""
    transformers = require_tool("transformers")
    spec = families()[family]
    cls = getattr(transformers, spec["config_class"])
    built = cls()
    for key, value in spec["defaults"].items():
        if key == "moe_layer_freq":  # DeepSeek's own field, which transformers' class does not read
            continue
        expected = getattr(built, key)
        assert (expected or []) == value if key == "mlp_only_layers" else expected == value, (family, key)
    assert spec["causal_lm"] in dir(transformers)


def test_deepseek_v3_is_no_longer_counted_as_a_llama() -> None:
    # The Llama-shaped formula gave 38.6B; the architecture gives transformers' 671.0B.
    total, active = count_params(load("deepseek-ai--DeepSeek-V3"))
    assert (round(total / 1e9, 1), round(active / 1e9, 1)) == (671.0, 37.6)


def test_unknown_model_type_is_refused_with_the_ways_out() -> None:
    with pytest.raises(ModelSizeError) as caught:
        count_params({**load("meta-llama--Meta-Llama-3-8B"), "model_type": "mamba"})
    message = str(caught.value)
    assert "model_type 'mamba'" in message
    assert "*.safetensors" in message and "Hub id" in message and "7B" in message
    assert "\n" not in message


def test_a_config_without_model_type_takes_its_architecture() -> None:
    config = {k: v for k, v in load("EleutherAI--pythia-12b").items() if k != "model_type"}
    assert count_config(config).total == 11_846_072_320


def test_a_hand_written_config_keeps_the_llama_layout() -> None:
    config = {"hidden_size": 4096, "num_attention_heads": 32, "intermediate_size": 11008}
    config |= {"num_hidden_layers": 32, "vocab_size": 32000}
    assert count_params(config) == (6_738_415_616, 6_738_415_616)


def test_the_shape_carries_what_downstream_reads() -> None:
    shape = shape_from_config(load("deepseek-ai--DeepSeek-V3"))
    assert shape.layer_class == "DeepseekV3DecoderLayer"
    assert shape.moe_block_class == "DeepseekV3MoE"
    assert (shape.experts, shape.experts_per_token, shape.intermediate_size) == (256, 8, 2048)
    assert shape.is_moe and not shape.tied_embeddings
    # The largest single tensor is one layer's fused gate_up_proj: 256 experts x 2 x 2048 x 7168.
    assert shape.largest_param_tensor == 256 * 2 * 2048 * 7168
    # The largest module (DeepSpeed's LL) is the embedding: 129280 x 7168.
    assert shape.largest_layer_params == 129_280 * 7168
    # Outside the layers: embedding, output head and the final norm.
    assert shape.decoder_params == shape.params - 2 * 129_280 * 7168 - 7168
    gemma = shape_from_config(load("google--gemma-2-9b"))
    assert gemma.tied_embeddings and gemma.layer_class == "Gemma2DecoderLayer"
    # Phi-2: the output head's bias and the final LayerNorm's bias are outside the layers too.
    phi = shape_from_config(load("microsoft--phi-2"))
    assert phi.decoder_params == phi.params - 2 * 51200 * 2560 - 51200 - 2 * 2560


def test_qlora_quantizes_only_the_linear_weights_inside_the_layers() -> None:
    shape = shape_from_config(load("Qwen--Qwen2.5-7B"))
    h, layers, inter, kv = 3584, 28, 18944, 4 * 128
    linear = layers * (2 * h * h + 2 * h * kv + 3 * h * inter)
    assert shape.quantizable_params == linear
    # LoRA on q, k, v, o, gate, up and down: rank x (inputs + outputs) each.
    per_layer = (h + h) * 2 + 2 * (h + kv) + 3 * (h + inter)
    assert shape.lora_params(16) == 16 * layers * per_layer


@pytest.mark.tools
def test_quantizable_and_lora_match_the_linear_layers_transformers_builds(tmp_path: Path) -> None:
    torch = require_tool("torch")
    model = transformers_model(load("Qwen--Qwen2.5-7B"), tmp_path)
    linears = [m for name, m in model.named_modules() if isinstance(m, torch.nn.Linear) and ".layers." in name]
    shape = shape_from_config(load("Qwen--Qwen2.5-7B"))
    assert shape.quantizable_params == sum(m.weight.numel() for m in linears)
    assert shape.lora_params(8) == 8 * sum(m.in_features + m.out_features for m in linears)


def run_cli(*argv: str) -> tuple[int, str, str]:
    """The CLI in-process: (exit code, stdout, stderr)."""
    import contextlib
    import io

    from wizard.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


def test_estimate_reads_pythia_by_its_architecture(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(load("EleutherAI--pythia-12b")), encoding="utf-8")
    code, out, _ = run_cli("estimate", "--model", str(tmp_path), "--gpu-memory-gb", "80", "--output", "json")
    assert code == 0 and json.loads(out)["params"] == 11_846_072_320


def test_estimate_refuses_an_unknown_model_type_in_one_line(tmp_path: Path) -> None:
    config = {**load("meta-llama--Meta-Llama-3-8B"), "model_type": "rwkv"}
    (tmp_path / "config.json").write_text(json.dumps(config), encoding="utf-8")
    code, out, err = run_cli("estimate", "--model", str(tmp_path / "config.json"), "--gpu-memory-gb", "80")
    assert code == 2 and out == "" and "Traceback" not in err
    assert "model_type 'rwkv'" in err and "--model" in err
