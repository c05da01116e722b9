"""Parallel layouts: the size questions and their validators, the defaults, the HSDP, N-D and
Megatron-LM rules, the product of the sizes, and the real tools' acceptance of every new kind of
config (accelerate's loader, launch checks and plugins; Axolotl's validator).

The acceptance table's rows for these rules: their decisions are in tests/scenarios/parallel.yaml, what
they write is checked at the end of this file.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import math
from pathlib import Path
from typing import Any

import pytest
import yaml

from helpers import decide, ignored, parsed
from realtools import accelerate_dry_run, axolotl_validate
from scenario_data import answers as scenario_answers
from scenario_data import scenario
from wizard.app import Result
from wizard.checks import check_config
from wizard.cli import main
from wizard.engine.parallel import expert_parallel_default
from wizard.errors import InvalidAnswerError

GPU: dict[str, Any] = {"target": "accelerate", "hardware": "nvidia", "num_nodes": 1, "micro_batch_size": 1}
H100 = {**GPU, "gpu_model": "H100", "gpu_memory_gb": 80}
MIXTRAL = {
    "architectures": ["MixtralForCausalLM"],
    "vocab_size": 32000,
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "num_local_experts": 8,
    "num_experts_per_tok": 2,
}
# A Qwen3-MoE layout (fused experts), which Axolotl's expert-parallel plugin supports.
QWEN3_MOE = {
    "architectures": ["Qwen3MoeForCausalLM"],
    "vocab_size": 151936,
    "hidden_size": 2048,
    "intermediate_size": 6144,
    "moe_intermediate_size": 768,
    "num_hidden_layers": 48,
    "num_attention_heads": 32,
    "num_key_value_heads": 4,
    "head_dim": 128,
    "num_experts": 128,
    "num_experts_per_tok": 8,
}


def sizes_of(result: Result) -> dict[str, int]:
    settings = result.recommendation.settings
    return {
        axis: int(settings.get(f"{axis}_size") or 1) for axis in ("dp_replicate", "dp_shard", "tp", "cp", "sp", "ep")
    }


def config_sizes(result: Result) -> dict[str, int]:
    """The sizes as the written config holds them (1 where absent)."""
    if result.session.answers["target"] == "axolotl":
        cfg = parsed(result, "axolotl.yaml")
        keys = {
            "dp_replicate": "dp_replicate_size",
            "dp_shard": "dp_shard_size",
            "tp": "tensor_parallel_size",
            "cp": "context_parallel_size",
            "ep": "expert_parallel_size",
        }
        return {axis: int(cfg.get(key, 1)) for axis, key in keys.items()}
    block = parsed(result, "accelerate_config.yaml").get("parallelism_config", {})
    axes = ("dp_replicate", "dp_shard", "tp", "cp", "sp")
    return {axis: int(block.get(f"parallelism_config_{axis}_size", 1)) for axis in axes}


# ---------------------------------------------------------------------------------------------
# The product of the sizes is the number of processes, whatever the combination
# ---------------------------------------------------------------------------------------------

COMBINATIONS = list(
    itertools.product(
        ("accelerate", "axolotl"),
        ((8, 1), (4, 2), (8, 2), (6, 1)),  # (GPUs per node, nodes)
        ("8B", "30B-A3B", "70B"),
        ("full", "lora"),
        (4096, 65536, 131072),
        (1, 2),  # tensor parallel, when it divides the machine and leaves FSDP2 room
    )
)


@pytest.mark.parametrize(("target", "topology", "model", "method", "seq", "tp"), COMBINATIONS)
def test_the_sizes_multiply_to_the_process_count(
    tmp_path: Path, target: str, topology: tuple[int, int], model: str, method: str, seq: int, tp: int
) -> None:
    per_node, nodes = topology
    answers = {
        **H100,
        "target": target,
        "gpus_per_node": per_node,
        "num_nodes": nodes,
        "model": model,
        "method": method,
        "sequence_length": seq,
        **({"model_parallel": True, "tensor_parallel_size": tp} if tp > 1 else {}),
    }
    if tp > 1 and model == "30B-A3B" and target == "axolotl":
        answers["expert_parallel_size"] = 1  # Axolotl never combines TP with EP
    try:
        result = decide(answers, tmp_path)
    except InvalidAnswerError as exc:
        # TP 2 after a default CP that took every GPU (or on 6 GPUs with CP 3): refused, with the reason.
        assert tp > 1 and exc.key == "tensor_parallel_size", exc.message
        assert "does not divide" in exc.message or "leaves none for FSDP2" in exc.message
        return
    rec = result.recommendation
    if rec.refused:
        assert rec.because.startswith("Nothing fits"), rec.because
        return
    sizes = sizes_of(result)
    assert config_sizes(result) == {k: v for k, v in sizes.items() if k in config_sizes(result)}
    world = rec.settings["num_processes"]
    if rec.backend == "fsdp2" and any(v > 1 for k, v in sizes.items() if k != "dp_shard"):
        assert math.prod(sizes.values()) == world, (sizes, world)
        # Never DDP with TP/CP (replicate > 1 and shard 1), and always something for FSDP2 to shard.
        assert not (sizes["dp_replicate"] > 1 and sizes["dp_shard"] == 1 and sizes["tp"] * sizes["cp"] > 1)
        assert sizes["dp_shard"] > 1 or sizes["cp"] > 1 or sizes["ep"] > 1
        assert per_node % sizes["tp"] == 0, "tensor parallel stays inside a machine"
    else:
        assert math.prod(sizes.values()) == 1, (rec.backend, sizes)


def test_megatron_sizes_multiply_to_the_process_count(tmp_path: Path) -> None:
    for nodes, pp in itertools.product((1, 2, 4), (None, 1, 2)):
        answers = {**H100, "gpus_per_node": 8, "num_nodes": nodes, "model": "70B", "method": "full", "megatron": True}
        if pp is not None and (8 * nodes // 8) % pp == 0:
            answers["pipeline_parallel_size"] = pp
        settings = decide(answers, tmp_path / f"{nodes}-{pp}").recommendation.settings
        assert settings["tp_size"] * settings["pp_size"] * settings["dp_replicate_size"] == 8 * nodes


# ---------------------------------------------------------------------------------------------
# Validators: each size divides what it must, and the error names the sizes that would work
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("answers", "key", "fragment"),
    [
        # CP divides the world size: 6 GPUs take 2, 3 or 6 (acceptance table row 43).
        ({"gpus_per_node": 6, "sequence_length": 32768, "context_parallel_size": 4}, "context_parallel_size",
         "does not divide the 6 GPUs; use 2, 3 or 6, or 8 GPUs"),
        # TP stays inside a machine, where NVLink carries its all-reduces.
        ({"gpus_per_node": 4, "num_nodes": 2, "model_parallel": True, "tensor_parallel_size": 8},
         "tensor_parallel_size", "does not divide the 4 GPUs of one machine"),
        # TP over every GPU leaves FSDP2 nothing to shard (accelerate 1.15 raises).
        ({"gpus_per_node": 8, "model_parallel": True, "tensor_parallel_size": 8}, "tensor_parallel_size",
         "leaves none for FSDP2 to shard over (accelerate needs dp_shard or context parallel above 1); use 2 or 4"),
        # TP x CP must divide the world: CP 8 of 8 GPUs leaves no room for TP 2.
        ({"gpus_per_node": 8, "sequence_length": 131072, "context_parallel_size": 8, "model_parallel": True,
          "tensor_parallel_size": 2}, "tensor_parallel_size",
         "x the other parallel sizes (8) does not divide the 8 GPUs"),
        # Megatron-LM: TP x PP divides the world.
        ({"gpus_per_node": 8, "megatron": True, "tensor_parallel_size": 8, "pipeline_parallel_size": 3},
         "pipeline_parallel_size",
         "pipeline_parallel_size 3 x the other parallel sizes (8) does not divide the 8 GPUs"),
    ],
)  # fmt: skip
def test_a_size_that_does_not_divide_is_refused_with_the_alternatives(
    tmp_path: Path, answers: dict[str, Any], key: str, fragment: str
) -> None:
    base = {**H100, "model": "8B", "method": "full"}
    with pytest.raises(InvalidAnswerError) as info:
        decide({**base, **answers}, tmp_path)
    assert info.value.key == key and fragment in info.value.message, info.value.message


def test_expert_parallel_divides_the_experts(tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps({**QWEN3_MOE, "num_experts": 6}))
    answers = {**H100, "target": "axolotl", "gpus_per_node": 4, "model": str(config), "method": "lora"}
    with pytest.raises(InvalidAnswerError, match="does not divide the model's 6 experts per layer; use 2"):
        decide({**answers, "expert_parallel_size": 4}, tmp_path / "a")
    # A plain FSDP2 shard fits, so the default is no expert parallel at all.
    assert decide(answers, tmp_path / "b").session.answers["expert_parallel_size"] == 1
    # When a size is needed, the default skips the sizes the experts do not divide: 2, not 4.
    assert expert_parallel_default(4, 4, 6, lambda size: True) == 2


def test_expert_parallel_is_not_asked_for_mixtral_experts(tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps(MIXTRAL))
    answers = {**H100, "target": "axolotl", "gpus_per_node": 8, "model": str(config), "method": "full"}
    result = decide({**answers, "expert_parallel_size": 4}, tmp_path / "out")
    assert "expert_parallel_size" not in result.session.answers
    assert ignored("expert_parallel_size", result.warnings)


# ---------------------------------------------------------------------------------------------
# Defaults and when the questions are asked
# ---------------------------------------------------------------------------------------------


def test_context_parallel_default_is_the_smallest_size_that_fits(tmp_path: Path) -> None:
    base = {**H100, "target": "axolotl", "gpus_per_node": 8, "model": "8B", "method": "full"}
    # 16k tokens fit without CP: the question is asked and its default is 1 (plain FSDP2).
    short = decide({**base, "sequence_length": 16384}, tmp_path / "16k")
    assert short.session.answers["context_parallel_size"] == 1 and short.recommendation.rule.id == "sharded_fsdp2"
    assert "context_parallel_size" not in decide({**base, "sequence_length": 8192}, tmp_path / "8k").session.answers
    # Sizes inside one machine first: on 2 nodes x 4 GPUs, 128k tokens take CP 4, never 8.
    two = decide({**base, "gpus_per_node": 4, "num_nodes": 2, "sequence_length": 131072}, tmp_path / "2x4")
    assert two.session.answers["context_parallel_size"] == 4
    assert sizes_of(two)["dp_shard"] == 2


def test_context_parallel_with_an_offload_answer_is_not_asked(tmp_path: Path) -> None:
    answers = {**H100, "gpus_per_node": 8, "model": "8B", "method": "full", "sequence_length": 131072}
    session = decide({**answers, "offload": "cpu"}, tmp_path).session
    assert "context_parallel_size" not in session.answers and "model_parallel" not in session.answers


def test_megatron_is_asked_only_for_accelerate_on_several_nvidia_gpus(tmp_path: Path) -> None:
    base = {**H100, "model": "7B", "method": "lora", "sequence_length": 2048}
    assert decide({**base, "gpus_per_node": 2}, tmp_path / "a").session.answers["megatron"] is False
    for other in (
        {"gpus_per_node": 1},
        {"gpus_per_node": 2, "target": "axolotl"},
        {"gpus_per_node": 2, "hardware": "amd"},
    ):
        result = decide({**base, **other, "megatron": True}, tmp_path / str(len(other)))
        assert "megatron" not in result.session.answers
        assert ignored("megatron", result.warnings)


def test_megatron_skips_the_deepspeed_and_offload_questions(tmp_path: Path) -> None:
    answers = {**H100, "gpus_per_node": 8, "model": "7B", "method": "full", "megatron": True}
    session = decide(answers, tmp_path).session
    assert not {"deepspeed_config", "offload", "context_parallel_size", "model_parallel"} & set(session.answers)
    # TP defaults to one machine's GPUs; one pipeline stage is enough for 7B on 8 x 80 GB.
    assert (session.answers["tensor_parallel_size"], session.answers["pipeline_parallel_size"]) == (8, 1)
    cfg = parsed(decide(answers, tmp_path / "out"), "accelerate_config.yaml")["megatron_lm_config"]
    assert cfg["megatron_lm_pp_degree"] == 1 and cfg["megatron_lm_num_micro_batches"] == 1
    no_tp = parsed(decide({**answers, "tensor_parallel_size": 1}, tmp_path / "tp1"), "accelerate_config.yaml")
    assert "megatron_lm_sequence_parallelism" not in no_tp["megatron_lm_config"], "only with TP above 1"


def test_expert_parallel_default_is_1_when_a_full_copy_fits(tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    small = {
        **QWEN3_MOE,
        "hidden_size": 512,
        "moe_intermediate_size": 256,
        "num_hidden_layers": 4,
        "num_attention_heads": 8,
    }
    config.write_text(json.dumps(small))
    answers = {**H100, "target": "axolotl", "gpus_per_node": 8, "model": str(config), "method": "full"}
    result = decide(answers, tmp_path / "out")
    assert result.session.answers["expert_parallel_size"] == 1 and result.recommendation.backend == "ddp"


def test_moe_class_names_default_from_the_config(tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps(MIXTRAL))
    ds = tmp_path / "ds.json"
    ds.write_text((Path(__file__).parent / "assets" / "ds_zero3.json").read_text())
    answers = {**H100, "gpus_per_node": 8, "model": str(config), "method": "full", "deepspeed_config": str(ds)}
    result = decide(answers, tmp_path / "out")
    acc = parsed(result, "accelerate_config.yaml")
    assert acc["deepspeed_config"]["deepspeed_moe_layer_cls_names"] == "MixtralSparseMoeBlock"
    both = decide({**answers, "moe_layer_cls_names": " MixtralSparseMoeBlock , MixtralDecoderLayer"}, tmp_path / "b")
    names = parsed(both, "accelerate_config.yaml")["deepspeed_config"]["deepspeed_moe_layer_cls_names"]
    assert names == "MixtralSparseMoeBlock,MixtralDecoderLayer"
    dense = decide({**answers, "model": "7B"}, tmp_path / "dense")
    assert "moe_layer_cls_names" not in dense.session.answers


# ---------------------------------------------------------------------------------------------
# HSDP (T5): shard inside a machine, replicate across machines
# ---------------------------------------------------------------------------------------------


def test_hsdp_when_one_machine_holds_a_shard(tmp_path: Path) -> None:
    answers = {**H100, "gpus_per_node": 8, "num_nodes": 4, "model": "8B", "method": "full", "sequence_length": 4096}
    result = decide(answers, tmp_path / "hsdp")
    assert result.recommendation.rule.id == "hsdp"
    acc = parsed(result, "accelerate_config.yaml")
    assert acc["parallelism_config"] == {
        "parallelism_config_dp_replicate_size": 4,
        "parallelism_config_dp_shard_size": 8,
        "parallelism_config_tp_size": 1,
        "parallelism_config_cp_size": 1,
    }
    # One machine is too small for a shard of 70B (140 GB per GPU) but all 32 GPUs are not: full shard.
    big = decide({**answers, "model": "70B"}, tmp_path / "full").recommendation
    assert big.rule.id == "sharded_fsdp2" and "dp_replicate_size" not in big.settings
    # One machine: nothing to replicate.
    assert decide({**answers, "num_nodes": 1}, tmp_path / "one").recommendation.rule.id == "sharded_fsdp2"


def test_hsdp_offload_needs_a_copy_in_every_machines_ram(tmp_path: Path) -> None:
    answers = REAL_AXOLOTL["hsdp_offload"]
    assert decide({**answers, "cpu_memory_gb": 4096}, tmp_path / "big").recommendation.rule.id == "offload_hsdp"
    # 1.5 TB per machine holds half the offloaded states (full shard) but not a full copy (HSDP).
    small = decide({**answers, "cpu_memory_gb": 1536}, tmp_path / "small").recommendation
    assert small.rule.id == "offload_fsdp2" and "dp_replicate_size" not in small.settings


def test_tensor_parallel_8_x_shard_2_across_two_nodes_fits_a_smaller_model(tmp_path: Path) -> None:
    answers = {
        **H100,
        "gpus_per_node": 8,
        "num_nodes": 2,
        "model": "34B",
        "method": "full",
        "sequence_length": 8192,
        "model_parallel": True,
        "tensor_parallel_size": 8,
    }
    result = decide(answers, tmp_path)
    assert result.recommendation.rule.id == "parallel_fsdp2"
    block = parsed(result, "accelerate_config.yaml")["parallelism_config"]
    assert (block["parallelism_config_tp_size"], block["parallelism_config_dp_shard_size"]) == (8, 2)
    # Tensor parallel over the 8 GPUs inside each machine; FSDP2 shards across the 2 machines.
    settings = result.recommendation.settings
    assert (settings["tp_size"], settings["dp_shard_size"], settings["num_machines"]) == (8, 2, 2)


# ---------------------------------------------------------------------------------------------
# The real tools accept every new kind of config
# ---------------------------------------------------------------------------------------------

REAL_ACCELERATE = {
    "context_parallel": {**H100, "gpus_per_node": 8, "model": "8B", "method": "full", "sequence_length": 131072},
    "tensor_parallel_x_shard": {
        **H100,
        "gpus_per_node": 8,
        "num_nodes": 2,
        "model": "34B",
        "method": "full",
        "sequence_length": 8192,
        "model_parallel": True,
        "tensor_parallel_size": 8,
    },
    "tp_and_cp": {
        **H100,
        "gpus_per_node": 8,
        "model": "8B",
        "method": "full",
        "sequence_length": 131072,
        "context_parallel_size": 4,
        "model_parallel": True,
        "tensor_parallel_size": 2,  # TP 2 x CP 4 = 8: FSDP2 shards over the CP ranks (dp_shard 1)
    },
    "hsdp": {**H100, "gpus_per_node": 8, "num_nodes": 4, "model": "8B", "method": "full", "sequence_length": 4096},
    "megatron": {**H100, "gpus_per_node": 8, "num_nodes": 2, "model": "70B", "method": "full", "megatron": True},
    "deepspeed_sp": {
        **H100,
        "gpus_per_node": 4,
        "model": "8x7B",
        "method": "full",
        "sequence_length": 65536,
        "context_parallel_size": 2,
        "deepspeed_config": "ASSET",
        "moe_layer_cls_names": "MixtralSparseMoeBlock",
    },
}


@pytest.mark.tools
@pytest.mark.parametrize("name", sorted(REAL_ACCELERATE))
def test_accelerate_accepts_the_parallel_configs(tmp_path: Path, name: str) -> None:
    answers = dict(REAL_ACCELERATE[name])
    if answers.get("deepspeed_config") == "ASSET":
        answers["deepspeed_config"] = str(Path(__file__).parent / "assets" / "ds_zero3.json")
    result = decide(answers, tmp_path, write=True)
    data = parsed(result, "accelerate_config.yaml")
    extra = ["--machine_rank", "0", "--main_process_ip", "127.0.0.1"] if data["num_machines"] > 1 else []
    summary = accelerate_dry_run(tmp_path / "accelerate_config.yaml", cwd=tmp_path, extra_args=extra)
    assert summary["num_processes"] == data["num_processes"]
    settings = result.recommendation.settings
    if name == "megatron":
        assert summary["launcher"] == "torchrun"
        megatron = summary["megatron"]
        assert (megatron["tp_degree"], megatron["pp_degree"]) == (settings["tp_size"], settings["pp_size"])
        assert megatron["sequence_parallelism"] is True and megatron["use_distributed_optimizer"] is True
        assert megatron["tp_degree"] * megatron["pp_degree"] * settings["dp_replicate_size"] == data["num_processes"]
        return
    parallel = summary["parallelism"]  # ParallelismConfig() built from the exported variables
    sizes = sizes_of(result)
    assert {axis: parallel[f"{axis}_size"] for axis in ("dp_replicate", "dp_shard", "tp", "cp", "sp")} == {
        axis: sizes[axis] for axis in ("dp_replicate", "dp_shard", "tp", "cp", "sp")
    }
    if name == "deepspeed_sp":
        # DeepSpeed keeps the rest of the world as data parallel: only SP has to divide it.
        assert parallel["sp_backend"] == "deepspeed" and data["num_processes"] % parallel["sp_size"] == 0
        assert parallel["sp_attn_implementation"] == "flash_attention_2"
        assert parallel["sp_seq_length_is_variable"] is True
        ds = summary["deepspeed_config"]
        assert ds["zero_optimization"]["stage"] == 3
        assert summary["env"]["ACCELERATE_DEEPSPEED_MOE_LAYER_CLS_NAMES"] == "MixtralSparseMoeBlock"
        return
    # What only Accelerator() checks: the product is the process count, and FSDP2 has a dimension
    # to shard over.
    assert parallel["total_size"] == data["num_processes"]
    assert parallel["dp_shard_size"] > 1 or parallel["cp_size"] > 1
    assert summary["fsdp"]["version"] == 2
    if parallel["cp_size"] > 1:
        assert parallel["cp_comm_strategy"] == "allgather"


REAL_AXOLOTL = {
    "context_parallel": {
        **H100,
        "target": "axolotl",
        "gpus_per_node": 8,
        "model": "8B",
        "method": "full",
        "sequence_length": 131072,
    },
    "expert_parallel": {
        **H100,
        "target": "axolotl",
        "gpus_per_node": 8,
        "model": "30B-A3B",
        "method": "full",
        "sequence_length": 4096,
        "expert_parallel_size": 4,
    },
    "tensor_parallel": {
        **H100,
        "target": "axolotl",
        "gpus_per_node": 8,
        "model": "13B",
        "method": "full",
        "sequence_length": 8192,
        "model_parallel": True,
        "tensor_parallel_size": 4,
    },
    "hsdp_offload": {
        **H100,
        "target": "axolotl",
        "gpus_per_node": 8,
        "num_nodes": 2,
        "model": "70B",
        "method": "full",
        "offload": "cpu",
        "sequence_length": 4096,
    },
    "hsdp": {
        **H100,
        "target": "axolotl",
        "gpus_per_node": 8,
        "num_nodes": 4,
        "model": "8B",
        "method": "full",
        "sequence_length": 4096,
    },
    "qlora_context_parallel": {
        **H100,
        "target": "axolotl",
        "gpus_per_node": 8,
        "model": "70B",
        "method": "qlora",
        "sequence_length": 131072,
    },
}


@pytest.mark.tools
@pytest.mark.parametrize("name", sorted(REAL_AXOLOTL))
def test_axolotl_accepts_the_parallel_configs(tmp_path: Path, name: str) -> None:
    result = decide(REAL_AXOLOTL[name], tmp_path, write=True)
    world = int(result.recommendation.settings["num_processes"])
    validated = axolotl_validate(tmp_path / "axolotl.yaml", n_gpu=world)
    written = yaml.safe_load((tmp_path / "axolotl.yaml").read_text())
    sizes = config_sizes(result)
    assert math.prod(sizes.values()) == world
    for axis, key in (("tp", "tensor_parallel_size"), ("cp", "context_parallel_size")):
        assert validated.get(key, 1) == sizes[axis], (key, validated.get(key))
    if sizes["ep"] > 1:
        assert validated["expert_parallel_size"] == sizes["ep"]
        assert validated["fsdp_config"]["state_dict_type"] == "FULL_STATE_DICT"
    for key in ("dp_shard_size", "dp_replicate_size"):
        assert validated.get(key) == written[key]


@pytest.mark.tools
@pytest.mark.parametrize(
    ("sizes", "error"),
    [
        ({"dp_shard": 4}, "does not match num_processes"),  # 4 != 8 processes
        ({"tp": 8}, "no dimension for FSDP to shard across"),  # TP takes the world, dp_shard 1
        ({"dp_replicate": 2, "tp": 4}, "cannot be used with pure data parallelism"),  # DDP with TP
    ],
)
def test_the_dry_run_runs_accelerates_own_parallelism_checks(tmp_path: Path, sizes: dict[str, int], error: str) -> None:
    """The harness proves the rules above with accelerate's code: what it rejects, the wizard never writes."""
    result = decide(REAL_ACCELERATE["tp_and_cp"], tmp_path / "wizard", write=True)
    data = parsed(result, "accelerate_config.yaml")
    data["parallelism_config"] = {f"parallelism_config_{axis}_size": size for axis, size in sizes.items()}
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    with pytest.raises(ValueError, match=error):
        accelerate_dry_run(path, cwd=tmp_path)


# ---------------------------------------------------------------------------------------------
# The acceptance table's rows 29-36 and 43 (their decisions: tests/scenarios/parallel.yaml)
# ---------------------------------------------------------------------------------------------


def check_cli(*args: str) -> tuple[int, list[dict[str, Any]]]:
    """`backend-wizard check ARGS --output json`: the exit code and the findings."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["check", *args, "--output", "json"])
    return code, json.loads(out.getvalue())["findings"]


def test_row29_axolotl_context_parallel(tmp_path: Path) -> None:
    result = decide(scenario_answers("axolotl_context_parallel_128k"), tmp_path)
    # Without CP the activations of 128k tokens need about 130 GiB per GPU; CP 4 is the smallest
    # size that fits, and it divides the 8 GPUs (DP = 8 / 4 = 2): the wizard's own choice.
    assert result.session.origins["context_parallel_size"] == "default"
    cfg = parsed(result, "axolotl.yaml")
    assert (cfg["context_parallel_size"], cfg["dp_shard_size"], cfg["tensor_parallel_size"]) == (4, 2, 1)
    assert cfg["dp_replicate_size"] == 1 and "expert_parallel_size" not in cfg
    assert cfg["fsdp_version"] == 2 and "deepspeed" not in cfg
    assert cfg["attn_implementation"] == "flash_attention_2" and cfg["micro_batch_size"] == 1
    # The model's gradient checkpointing (activation offloading, the next lever, needs it); FSDP's own
    # activation checkpointing is off so the layers are not recomputed twice.
    assert cfg["gradient_checkpointing"] is True and cfg["fsdp_config"]["activation_checkpointing"] is False


def test_row30_accelerate_parallelism_config_cp(tmp_path: Path) -> None:
    result = decide(scenario_answers("accelerate_context_parallel_128k"), tmp_path)
    acc = parsed(result, "accelerate_config.yaml")
    assert acc["distributed_type"] == "FSDP" and acc["fsdp_config"]["fsdp_version"] == 2
    assert acc["num_processes"] == 8
    # The full prefixed names: accelerate silently ignores un-prefixed parallelism keys.
    assert acc["parallelism_config"] == {
        "parallelism_config_dp_replicate_size": 1,
        "parallelism_config_dp_shard_size": 2,
        "parallelism_config_tp_size": 1,
        "parallelism_config_cp_size": 4,
        "parallelism_config_cp_comm_strategy": "allgather",
    }


def test_row31_deepspeed_sequence_parallel(tmp_path: Path) -> None:
    given = scenario("brought_zero3_sequence_parallel_4").answers_in(tmp_path / "user")
    result = decide(given, tmp_path / "out")
    acc = parsed(result, "accelerate_config.yaml")
    assert acc["distributed_type"] == "DEEPSPEED" and "mixed_precision" not in acc
    assert acc["deepspeed_config"]["deepspeed_config_file"] == "ds_config.json"  # the copy in the folder
    assert acc["parallelism_config"] == {
        "parallelism_config_sp_size": 4,
        "parallelism_config_sp_backend": "deepspeed",
        "parallelism_config_sp_seq_length_is_variable": True,
        "parallelism_config_sp_attn_implementation": "flash_attention_2",
    }
    # Accelerate's validator calls this "requires FSDP2"; the wizard's check shows it as information only.
    # The JSON is the copy in the folder, named relatively like the wizard's own (launch.sh passes
    # its absolute path, and --mixed_precision for the "auto" precision the YAML cannot carry).
    findings = check_config(acc, "accelerate", load_json=lambda name: parsed(result, name))
    assert [(f.check, f.severity) for f in findings] == [
        ("acc-ds-precision-auto", "warning"),
        ("acc-ds-file-relative", "info"),
        ("acc-parallel-ds-sp", "info"),
    ]
    # On a GPU without FlashAttention the attention is SDPA (never eager or flex_attention).
    t4 = parsed(decide({**given, "gpu_model": "T4", "gpu_memory_gb": 80}, tmp_path / "t4"), "accelerate_config.yaml")
    assert t4["parallelism_config"]["parallelism_config_sp_attn_implementation"] == "sdpa"


def test_row32_axolotl_expert_parallel(tmp_path: Path) -> None:
    # Left to the wizard, a plain FSDP2 shard fits (about 61 of 64 GiB): no expert parallel of its own.
    default = decide(scenario_answers("axolotl_moe_default"), tmp_path / "default")
    assert default.session.answers["expert_parallel_size"] == 1
    result = decide(scenario_answers("axolotl_moe_expert_parallel_8"), tmp_path)
    cfg = parsed(result, "axolotl.yaml")
    sizes = [cfg[k] for k in ("expert_parallel_size", "dp_shard_size", "tensor_parallel_size", "context_parallel_size")]
    assert sizes == [8, 1, 1, 1]  # EP x dp_shard x TP x CP = 8 = world size
    assert cfg["plugins"] == ["axolotl.integrations.expert_parallel.ExpertParallelPlugin"]
    assert "use_sonicmoe" not in cfg
    assert cfg["fsdp_config"]["state_dict_type"] == "FULL_STATE_DICT"  # Axolotl rejects sharded with EP
    findings = check_config(cfg, "axolotl", world_size=8)
    assert not [f for f in findings if f.check.startswith("ax-ep")], findings


def test_row33_deepspeed_moe_class_names(tmp_path: Path) -> None:
    result = decide(scenario("brought_zero3_moe_class_names").answers_in(tmp_path / "user"), tmp_path / "out")
    acc = parsed(result, "accelerate_config.yaml")
    # Allowed next to a JSON file (accelerate's DeepSpeedPlugin reads it beside one); exact,
    # case-sensitive class names.
    assert acc["deepspeed_config"] == {
        "deepspeed_config_file": "ds_config.json",  # the copy of the brought JSON
        "zero3_init_flag": True,
        "deepspeed_moe_layer_cls_names": "MixtralSparseMoeBlock",
    }


def test_row34_tensor_parallel_that_does_not_fit_leaves_the_offload_path(tmp_path: Path) -> None:
    result = decide(scenario_answers("full_70b_two_nodes_tensor_parallel_8"), tmp_path)
    rec = result.recommendation
    # The refusal's way out: without the parallel sizes, DeepSpeed ZeRO-3 with the optimizer on the
    # CPU fits, and it is the runner-up that an earlier rule (the sizes set) kept out.
    assert rec.facts.get("fits_zero3_offload_optimizer") is True
    strategies = {r.backend: r.strategy for r in rec.runner_ups}
    assert strategies["deepspeed"] == "zero3_offload_optimizer"


def test_row35_tensor_parallel_with_derived_shard(tmp_path: Path) -> None:
    result = decide(scenario_answers("axolotl_tensor_parallel_4"), tmp_path / "wizard")
    cfg = parsed(result, "axolotl.yaml")
    assert (cfg["tensor_parallel_size"], cfg["dp_shard_size"], cfg["dp_replicate_size"]) == (4, 2, 1)
    assert cfg["fsdp_version"] == 2 and cfg["fsdp_config"]["cpu_ram_efficient_loading"] is False
    # The user's own YAML from the table: TP 4 with dp_replicate 2 and no dp_shard.
    user = {**cfg, "dp_replicate_size": 2}
    del user["dp_shard_size"]
    path = tmp_path / "user.yaml"
    path.write_text(yaml.safe_dump(user), encoding="utf-8")
    code, findings = check_cli(str(path), "--world-size", "8")
    assert code == 1
    error = next(f for f in findings if f["check"] == "ax-replicate-with-tp-cp")
    assert error["severity"] == "error" and error["path"] == "dp_replicate_size"


def test_row36_megatron(tmp_path: Path) -> None:
    result = decide(scenario_answers("megatron_175b_two_nodes"), tmp_path)
    rec = result.recommendation
    acc = parsed(result, "accelerate_config.yaml")
    assert acc["distributed_type"] == "MEGATRON_LM" and acc["num_processes"] == 16
    assert acc["megatron_lm_config"] == {
        "megatron_lm_tp_degree": 8,
        "megatron_lm_pp_degree": 2,
        "megatron_lm_num_micro_batches": 8,
        "megatron_lm_sequence_parallelism": True,
        "megatron_lm_recompute_activations": True,
        "megatron_lm_use_distributed_optimizer": True,
        "megatron_lm_gradient_clipping": 1.0,
    }
    # A 175B full fine-tune does not fit 16 x 80 GB even so (the explanation warns of it).
    assert rec.facts.get("fits_megatron") is False
    assert "deepspeed_config" not in result.session.answers and "offload" not in result.session.answers


def test_row43_context_parallel_must_divide_the_gpus(tmp_path: Path) -> None:
    # The sizes that divide the 6 GPUs, in the refusal and in `check`'s fix for a user's YAML.
    with pytest.raises(InvalidAnswerError) as info:
        decide(scenario_answers("axolotl_context_parallel_4_on_six_gpus"), tmp_path / "wizard")
    assert "2, 3 or 6" in info.value.message and "8 GPUs" in info.value.message
    answers = {**scenario_answers("axolotl_context_parallel_3_on_six_gpus"), "context_parallel_size": 2}
    cfg = {**parsed(decide(answers, tmp_path / "two"), "axolotl.yaml")}
    cfg.update(context_parallel_size=4, dp_shard_size=1)
    path = tmp_path / "user.yaml"
    path.write_text(yaml.safe_dump(cfg), encoding="utf-8")
    code, findings = check_cli(str(path), "--world-size", "6")
    assert code == 1
    error = next(f for f in findings if f["check"] == "ax-cp-world")
    assert error["severity"] == "error" and "2, 3 or 6" in error["fix"] and "8 GPUs" in error["fix"]
