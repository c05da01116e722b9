"""The memory model against the public vectors of memory-anchors section 8.

Units are stated per test: the ZeRO paper prints GB = 10^9 bytes; DeepSpeed's estimators print
GiB = 2^30 bytes with two decimals.
"""

from __future__ import annotations

import pytest

from wizard.engine.deepspeed_estimator import zero2_model_states, zero3_model_states
from wizard.engine.memory import GIB, STRATEGIES, Workload, estimate, estimate_all
from wizard.engine.model_size import ModelShape, count_params, parse_model_size, shape_for_size

GB = 10**9


def workload(params: int, n: int, method: str = "full", nodes: int = 1) -> Workload:
    return Workload(
        shape=shape_for_size(params),
        method=method,
        world_size=n,
        num_nodes=nodes,
        sequence_length=2048,
        micro_batch_size=1,
        gradient_checkpointing=True,
    )


def sharded_states(params: int, strategy: str, n: int) -> float:
    """Model states in GB (10^9), without the gathered layer that ZeRO-3 adds on top."""
    est = estimate(workload(params, n), strategy, 80, None)
    return (est.model_states - est.gathered) / GB


# memory-anchors section 8, vectors 1-8 (ZeRO paper Table 1, K = 12, Psi = 7.5B), GB = 10^9 bytes.
@pytest.mark.parametrize(
    ("n", "strategy", "expected", "tolerance"),
    [
        (1, "ddp", 120, 0),
        (1, "zero1", 120, 0),
        (1, "zero2", 120, 0),
        (1, "zero3", 120, 0),
        (4, "zero1", 52.5, 0.05),
        (4, "zero2", 41.25, 0.05),
        (4, "zero3", 30, 0),
        (16, "zero1", 35.625, 0.05),
        (16, "zero2", 21.5625, 0.05),
        (16, "zero3", 7.5, 0.05),
        (64, "zero1", 31.40625, 0.05),
        (64, "zero2", 16.640625, 0.05),
        (64, "zero3", 1.875, 0.01),
    ],
)
def test_zero_paper_table1(n: int, strategy: str, expected: float, tolerance: float) -> None:
    assert sharded_states(7_500_000_000, strategy, n) == pytest.approx(expected, abs=tolerance or 1e-9)


def test_fsdp2_full_shard_equals_zero3() -> None:
    w = workload(7_500_000_000, 8)
    assert estimate(w, "fsdp2", 80, None).model_states == estimate(w, "zero3", 80, None).model_states


def test_full_finetune_is_16_bytes_per_param_zero_convention() -> None:
    # memory-anchors vector 46 (ZeRO convention: fp16 gradients).
    est = estimate(workload(1_000_000_000, 1), "ddp", 80, None)
    assert est.model_states == 16 * 1_000_000_000


# memory-anchors vector 23: DeepSpeed ZeRO-3 estimator, Llama-2-7B, 4 GPUs, GiB with 2 decimals.
@pytest.mark.parametrize(
    ("offload_optimizer", "offload_param", "gpu", "cpu"),
    [(False, False, "28.73", "2.93"), (True, False, "3.63", "150.62"), (True, True, "0.49", "169.44")],
)
def test_deepspeed_zero3_estimator_vector(offload_optimizer: bool, offload_param: bool, gpu: str, cpu: str) -> None:
    figure = zero3_model_states(6_738_415_616, 131_072_000, 4, 1, offload_optimizer, offload_param)
    assert f"{figure.gpu_bytes / GIB:.2f}" == gpu
    assert f"{figure.cpu_bytes_per_node / GIB:.2f}" == cpu


def test_deepspeed_zero2_estimator_formulas() -> None:
    p = 6_738_415_616
    assert zero2_model_states(p, 4, 1, False).gpu_bytes == 2 * p + int(18 * p / 4)
    assert zero2_model_states(p, 4, 1, True).gpu_bytes == 2 * p
    assert zero2_model_states(p, 4, 2, True).cpu_bytes_per_node == int(p * 32 * 1.5)


# memory-anchors section 6 and vectors 36 / 44: parameter counts from config.json fields.
LLAMA3_8B = {
    "vocab_size": 128256,
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
}
LLAMA2_7B = {
    "vocab_size": 32000,
    "hidden_size": 4096,
    "intermediate_size": 11008,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
}
LLAMA2_13B = {
    "vocab_size": 32000,
    "hidden_size": 5120,
    "intermediate_size": 13824,
    "num_hidden_layers": 40,
    "num_attention_heads": 40,
}
MIXTRAL = {**LLAMA3_8B, "vocab_size": 32000, "num_local_experts": 8, "num_experts_per_tok": 2}
QWEN25_05B = {
    "model_type": "qwen2",
    "vocab_size": 151936,
    "hidden_size": 896,
    "intermediate_size": 4864,
    "num_hidden_layers": 24,
    "num_attention_heads": 14,
    "num_key_value_heads": 2,
    "tie_word_embeddings": True,
}
GEMMA_7B = {
    "vocab_size": 256000,
    "hidden_size": 3072,
    "intermediate_size": 24576,
    "num_hidden_layers": 28,
    "num_attention_heads": 16,
    "num_key_value_heads": 16,
    "head_dim": 256,
    "tie_word_embeddings": True,
}
PHI3_MINI = {
    "vocab_size": 32064,
    "hidden_size": 3072,
    "intermediate_size": 8192,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
}


@pytest.mark.parametrize(
    ("config", "total"),
    [
        (LLAMA3_8B, 8_030_261_248),
        (LLAMA2_7B, 6_738_415_616),
        (LLAMA2_13B, 13_015_864_320),
        (MIXTRAL, 46_702_792_704),
        (QWEN25_05B, 494_032_768),
        (GEMMA_7B, 8_537_680_896),
        (PHI3_MINI, 3_821_079_552),
    ],
)
def test_parameter_counts(config: dict[str, object], total: int) -> None:
    assert count_params(config)[0] == total


def test_moe_active_parameters() -> None:
    assert count_params(MIXTRAL)[1] == 12_879_925_248


@pytest.mark.parametrize(
    ("text", "params"),
    [
        ("7B", 7_000_000_000),
        ("1.3b", 1_300_000_000),
        ("125M", 125_000_000),
        ("8x7B", 46_702_792_704),
        ("6738415616", 6_738_415_616),
        (7e9, 7_000_000_000),
    ],
)
def test_model_size_strings(text: str | float, params: int) -> None:
    assert parse_model_size(text) == params


@pytest.mark.parametrize("text", ["seven", "7Q", "3x3B", "-7B", "0", "1e30", "nan"])
def test_bad_model_sizes_are_rejected(text: str) -> None:
    from wizard.engine.model_size import ModelSizeError

    with pytest.raises(ModelSizeError):
        parse_model_size(text)


def test_lora_trainable_params_match_peft() -> None:
    # PEFT prints "trainable params: 41,943,040" for Llama-3-8B, r=16 on all linear layers.
    from wizard.engine.model_size import shape_from_config

    assert shape_from_config(LLAMA3_8B).lora_params(16) == 41_943_040


def test_qlora_weights_stay_16bit_outside_the_blocks() -> None:
    from wizard.engine.memory import weight_bytes
    from wizard.engine.model_size import shape_from_config

    shape = shape_from_config(LLAMA3_8B)
    w = Workload(shape, "qlora", 1, 1, 2048, 1, True)
    frozen = weight_bytes(w) - 2 * shape.lora_params(16)
    # memory-anchors 4.4 (derived): about 5.7e9 bytes of weights for Llama-3-8B in QLoRA.
    assert frozen == pytest.approx(5.7e9, rel=0.02)


def test_sharding_and_offload_order_for_a_big_full_finetune() -> None:
    ests = estimate_all(workload(70_000_000_000, 8), 80, None)
    totals = {s: e.total for s, e in ests.items()}
    assert totals["ddp"] > totals["zero1"] > totals["zero2"] > totals["zero3"]
    assert totals["zero3"] > totals["zero3_offload_optimizer"] > totals["zero3_offload_all"]
    assert set(ests) == set(STRATEGIES)


def test_activations_grow_with_sequence_and_shrink_with_checkpointing() -> None:
    shape: ModelShape = shape_for_size(7_000_000_000)
    short = Workload(shape, "lora", 1, 1, 2048, 1, True)
    long = Workload(shape, "lora", 1, 1, 8192, 1, True)
    no_ckpt = Workload(shape, "lora", 1, 1, 2048, 1, False)
    act = {
        name: estimate(w, "ddp", 80, None).activations
        for name, w in {"short": short, "long": long, "no_ckpt": no_ckpt}.items()
    }
    assert act["long"] == 4 * act["short"]
    assert act["no_ckpt"] > 5 * act["short"]


def test_host_ram_check_when_offloading() -> None:
    w = workload(70_000_000_000, 8)
    small, big = estimate(w, "zero3_offload_all", 80, 256), estimate(w, "zero3_offload_all", 80, 4096)
    assert small.host_fits is False and big.host_fits is True
    assert estimate(w, "zero3_offload_all", 80, None).host_fits is None
    assert estimate(w, "zero3", 80, 1).host_fits is True  # nothing offloaded
