"""The memory model against published numbers: the ZeRO paper's Table 1, DeepSpeed's estimators, config.json sizes.

Units are stated per test: the ZeRO paper prints GB = 10^9 bytes; DeepSpeed's estimators print
GiB = 2^30 bytes with two decimals.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from wizard.engine.deepspeed_estimator import zero2_model_states, zero3_model_states
from wizard.engine.memory import GIB, STRATEGIES, Workload, estimate, estimate_all
from wizard.engine.model_size import ModelShape, count_params, parse_model_size, shape_for_model, shape_for_size

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


# The ZeRO paper's Table 1 (https://arxiv.org/abs/1910.02054; K = 12, Psi = 7.5B), GB = 10^9 bytes.
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


def test_fsdp2_and_zero3_shard_the_same_states_and_gather_their_own_units() -> None:
    """The same (W+G+O)/N shard; ZeRO-3 adds DeepSpeed's 4 x largest layer, FSDP2 its wrapped units.

    FSDP2 (as Accelerate wraps it: every decoder layer, then the model) holds the root unit, the
    embeddings, final norm and output head, gathered for the whole step, and two decoder layers
    (the one computing and the one prefetched), all in 16 bit: torchtitan's "unit computing and
    the one prefetched" with the root always among them.
    """
    for params in (1_000_000_000, 7_500_000_000, 70_000_000_000):
        w = workload(params, 8)
        fsdp, zero3 = estimate(w, "fsdp2", 80, None), estimate(w, "zero3", 80, None)
        assert fsdp.model_states - fsdp.gathered == zero3.model_states - zero3.gathered == 16 * params // 8
        shape = w.shape
        root = shape.embedding_params + shape.hidden_size
        assert fsdp.gathered == 2 * root + 2 * (2 * shape.decoder_params // shape.layers)
        assert zero3.gathered == 4 * shape.largest_layer_params


def test_full_finetune_is_16_bytes_per_param_zero_convention() -> None:
    # The ZeRO paper's 16 bytes per parameter (fp16 weights and gradients, K = 12).
    est = estimate(workload(1_000_000_000, 1), "ddp", 80, None)
    assert est.model_states == 16 * 1_000_000_000


# DeepSpeed's estimate_zero3_model_states_mem_needs_all_cold, Llama-2-7B, 4 GPUs, GiB with 2 decimals
# (https://deepspeed.readthedocs.io/en/latest/memory.html).
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


# Parameter counts from config.json fields, against the sizes the model cards publish.
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
# model_type and architectures say Mixtral: transformers builds a config.json that names
# LlamaForCausalLM as Llama, whatever expert fields it holds.
MIXTRAL = {
    **LLAMA3_8B,
    "architectures": ["MixtralForCausalLM"],
    "model_type": "mixtral",
    "vocab_size": 32000,
    "num_local_experts": 8,
    "num_experts_per_tok": 2,
}
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
        ("30B-A3B", 30_000_000_000),
        ("235b-a22b", 235_000_000_000),
        ("6738415616", 6_738_415_616),
        (7e9, 7_000_000_000),
    ],
)
def test_model_size_strings(text: str | float, params: int) -> None:
    assert parse_model_size(text) == params


@pytest.mark.parametrize("text", ["seven", "7Q", "3x3B", "-7B", "0", "1e30", "nan", "3B-A7B", "30B-A", "30-A3"])
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
    # Derived: NF4 with double quantization for the block linears, 16 bit for embeddings and
    # head, about 5.7e9 bytes of weights for Llama-3-8B in QLoRA.
    assert frozen == pytest.approx(5.7e9, rel=0.02)


def test_sharding_and_offload_order_for_a_big_full_finetune() -> None:
    ests = estimate_all(workload(70_000_000_000, 8), 80, None)
    totals = {s: e.total for s, e in ests.items()}
    assert totals["ddp"] > totals["zero1"] > totals["zero2"] > totals["zero3"]
    assert totals["zero3"] > totals["zero3_offload_optimizer"] > totals["zero3_offload_all"]
    # One node, no parallel sizes, no Megatron: every strategy except the parallel layouts, and
    # no layer offloading for a full fine-tune (nothing is frozen).
    assert set(ests) == set(STRATEGIES) - {"fsdp2_nd", "hsdp", "hsdp_offload", "megatron", "ddp_layer_offload"}


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


# ---------------------------------------------------------------------------------------------
# Parallel layouts: tensor, context, sequence, expert and pipeline parallel, hybrid sharding
# ---------------------------------------------------------------------------------------------


def layout(params: int = 8_000_000_000, n: int = 8, nodes: int = 1, seq: int = 8192, **sizes: Any) -> Workload:
    return Workload(
        shape=shape_for_size(params),
        method="full",
        world_size=n,
        num_nodes=nodes,
        sequence_length=seq,
        micro_batch_size=1,
        gradient_checkpointing=False,
        **sizes,
    )


def test_parallel_strategies_exist_only_for_their_layout() -> None:
    assert "fsdp2_nd" not in estimate_all(layout(), 80, None)
    assert "fsdp2_nd" in estimate_all(layout(context_parallel=2), 80, None)
    assert {"hsdp", "hsdp_offload"} <= set(estimate_all(layout(n=16, nodes=2), 80, None))
    assert "hsdp" not in estimate_all(layout(n=2, nodes=2), 80, None), "one GPU per node: nothing to shard"
    megatron = estimate_all(layout(tensor_parallel=8, megatron=True), 80, None)
    assert "megatron" in megatron and "fsdp2_nd" not in megatron


def test_context_parallel_divides_every_activation_term() -> None:
    plain = estimate(layout(), "fsdp2", 80, None)
    for cp in (2, 4, 8):
        split = estimate(layout(context_parallel=cp), "fsdp2_nd", 80, None)
        # The sequence is split: layers and logits both scale with the tokens on each GPU.
        assert split.activations == plain.activations // cp
        assert split.model_states == plain.model_states, "CP ranks shard the states like FSDP ranks"


def test_sequence_parallel_divides_activations_of_the_zero_strategies_only() -> None:
    w = layout(sequence_parallel=4)
    assert estimate(w, "zero3", 80, None).activations == estimate(layout(), "zero3", 80, None).activations // 4
    assert estimate(w, "fsdp2", 80, None).activations == estimate(layout(), "fsdp2", 80, None).activations


def test_tensor_parallel_divides_the_sharded_part_of_each_layer() -> None:
    shape = shape_for_size(8_000_000_000)
    sbh = 8192 * shape.hidden_size
    logits = 4 * 8192 * shape.vocab_size
    for tp in (1, 2, 4, 8):
        est = estimate(layout(tensor_parallel=tp), "fsdp2_nd", 80, None)
        # Korthikanti et al.: (10 + 24/t)·s·b·h per layer; norms and dropout stay replicated.
        assert est.activations == (10 * sbh + 24 * sbh // tp) * shape.layers + logits
        # TP x FSDP over the remaining ranks shards the states over the whole world; every
        # gathered unit is TP-sharded.
        whole = estimate(layout(tensor_parallel=1), "fsdp2", 80, None).gathered
        assert est.model_states == 16 * 8_000_000_000 // 8 + whole // tp


def test_expert_parallel_keeps_the_states_of_a_full_shard() -> None:
    moe = Workload(shape_for_size(46_702_792_704), "full", 8, 1, 4096, 1, True, expert_parallel=8)
    assert moe.shape.experts == 8
    nd, full = estimate(moe, "fsdp2_nd", 80, None), estimate(moe, "fsdp2", 80, None)
    assert nd.model_states - nd.gathered == full.model_states - full.gathered and nd.activations == full.activations
    # A gathered layer holds only this rank's experts: the root is whole, each layer 1/EP.
    root = 2 * (moe.shape.embedding_params + moe.shape.hidden_size)
    layer = 2 * moe.shape.decoder_params // moe.shape.layers
    assert full.gathered == root + 2 * layer and nd.gathered == root + 2 * layer // 8


def test_hsdp_shards_over_one_node_and_offload_keeps_a_copy_per_node() -> None:
    w = layout(params=70_000_000_000, n=16, nodes=2, seq=4096)
    hsdp, full = estimate(w, "hsdp", 80, None), estimate(w, "fsdp2", 80, None)
    assert hsdp.model_states - hsdp.gathered == 16 * 70_000_000_000 // 8  # 8 GPUs per node
    assert full.model_states - full.gathered == 16 * 70_000_000_000 // 16
    offload, sharded = estimate(w, "hsdp_offload", 80, None), estimate(w, "fsdp2_offload", 80, None)
    assert offload.total == sharded.total, "the GPU keeps only the gathered layer either way"
    # Each node's shard group offloads a full copy: 16 bytes/param (the fp32 master is the weight
    # FSDP2 keeps; no 16-bit copy beside it) with the 1.5x buffers.
    assert offload.host_per_node == int(16 * 70_000_000_000 * 1.5)
    assert offload.host_per_node == 2 * sharded.host_per_node


def test_megatron_splits_weights_by_tp_x_pp_and_the_optimizer_over_all_ranks() -> None:
    params = 175_000_000_000
    w = layout(params=params, n=16, nodes=2, seq=4096, tensor_parallel=8, pipeline_parallel=2, megatron=True)
    est = estimate(w, "megatron", 80, None)
    assert est.model_states == 4 * params // 16 + 12 * params // 16 and est.gathered == 0
    # Megatron's sequence parallelism (on with TP) splits every activation term and the logits by TP.
    shape = w.shape
    sbh = 4096 * shape.hidden_size
    assert est.activations == 34 * sbh // 8 * shape.layers + 4 * 4096 * shape.vocab_size // 8
    # Pipeline stages do not change the activations (1F1B keeps PP micro-batches of 1/PP of the layers).
    one_stage = replace(w, pipeline_parallel=1)
    assert estimate(one_stage, "megatron", 80, None).activations == est.activations


def test_active_parameter_sizes_are_mixtures_of_experts() -> None:
    # A known name keeps its own expert layout (Qwen3-30B-A3B: 128 experts, hidden 2048).
    known = shape_for_model("30B-A3B")
    assert (known.params, known.active_params, known.experts, known.hidden_size) == (30 * 10**9, 3 * 10**9, 128, 2048)
    assert known.is_moe
    # Another one borrows the dense shape of its active size for the activations.
    other = shape_for_model("235B-A22B")
    assert (other.params, other.active_params) == (235 * 10**9, 22 * 10**9) and other.is_moe
    assert other.hidden_size == shape_for_size(22 * 10**9).hidden_size
    assert not shape_for_model("7B").is_moe and shape_for_model("8x7B").is_moe


def test_qwen_moe_config_counts_its_experts() -> None:
    from wizard.engine.catalog import models_catalog

    # Qwen3-30B-A3B's published counts: 30.5B total, 3.3B active.
    total, active = count_params(models_catalog()["models"]["qwen3-30b-a3b"])
    assert total == pytest.approx(30.5e9, rel=0.01) and active == pytest.approx(3.3e9, rel=0.02)


@pytest.mark.parametrize("method", ["full", "lora", "qlora"])
@pytest.mark.parametrize("n", [1, 4])
def test_pcie_traffic_per_step_counts_what_an_offload_moves(method: str, n: int) -> None:
    from wizard.engine.memory import (
        OFFLOAD_STRATEGIES,
        frozen_decoder_bytes,
        pcie_bytes_per_step,
        trainable_params,
        weight_bytes,
    )

    w = workload(7_000_000_000, n, method)
    trained, weights = trainable_params(w), weight_bytes(w)
    for strategy in STRATEGIES:
        moved = pcie_bytes_per_step(w, strategy)
        if strategy not in OFFLOAD_STRATEGIES:
            assert moved == 0, strategy  # nothing crosses PCIe without offload
        elif strategy == "ddp_layer_offload":
            # The frozen decoder layers in twice (forward, backward) and out twice; none in a full fine-tune.
            frozen = 0 if method == "full" else frozen_decoder_bytes(w)
            assert moved == 4 * frozen and (frozen == 0) is (method == "full"), strategy
        elif strategy.endswith("optimizer"):
            assert moved == 4 * trained // n, strategy  # 16-bit gradients out, 16-bit weights back
        elif strategy == "zero3_offload_all":  # 16-bit weights fetched for the forward and the backward pass too
            assert moved == (4 * trained + 2 * weights) // n, strategy
        else:
            # FSDP2's offload: its shards in the parameters' own dtype (the trained ones fp32) in for
            # both passes, fp32 gradients out; the optimizer updates them in host RAM.
            shard = n if strategy != "hsdp_offload" else max(n // w.num_nodes, 1)
            per_pass = weights + 2 * trained  # the trained weights at 4 bytes instead of 2
            assert moved == (2 * per_pass + 4 * trained) // shard, strategy
