"""Acceptance table rows of the parallelism rules: B1 (Megatron-LM), B4 (tensor, context and expert
parallel on FSDP2, or DeepSpeed's sequence parallelism), T5 (HSDP) and TP inside a node.

Rows 29-36 and 43. Row 25 (HSDP with offload) is in tests/test_scenarios.py with the other
generic rows. The real tools' acceptance of these configs is tests/test_parallel.py.
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from helpers import decide, parsed
from scenario_table import row
from wizard.checks import check_config
from wizard.cli import main
from wizard.errors import InvalidAnswerError

GPU: dict[str, Any] = {"target": "accelerate", "hardware": "nvidia", "num_nodes": 1, "micro_batch_size": 1}

# 8 x H100 80GB, full fine-tune of an 8B model on 128k-token sequences.
ROW29: dict[str, Any] = {
    **GPU,
    "target": "axolotl",
    "gpu_model": "H100",
    "gpus_per_node": 8,
    "gpu_memory_gb": 80,
    "model": "8B",
    "method": "full",
    "sequence_length": 131072,
}
ROW30: dict[str, Any] = {**ROW29, "target": "accelerate"}
ROW32: dict[str, Any] = {**ROW29, "model": "30B-A3B", "sequence_length": 4096}
ROW34: dict[str, Any] = {
    **GPU,
    "gpu_model": "H100",
    "gpus_per_node": 8,
    "num_nodes": 2,
    "gpu_memory_gb": 80,
    "model": "70B",
    "method": "full",
    "sequence_length": 8192,
}
ROW35: dict[str, Any] = {
    **GPU,
    "target": "axolotl",
    "gpu_model": "A100",
    "gpus_per_node": 8,
    "gpu_memory_gb": 80,
    "model": "13B",
    "method": "full",
    "sequence_length": 8192,
    "model_parallel": True,
    "tensor_parallel_size": 4,
}
ROW36: dict[str, Any] = {
    **GPU,
    "gpu_model": "A100",
    "gpus_per_node": 8,
    "num_nodes": 2,
    "gpu_memory_gb": 80,
    "model": "175B",
    "method": "full",
    "sequence_length": 4096,
    "megatron": True,
}
ROW43: dict[str, Any] = {
    **GPU,
    "target": "axolotl",
    "gpu_model": "A100",
    "gpus_per_node": 6,
    "gpu_memory_gb": 80,
    "model": "8B",
    "method": "full",
    "sequence_length": 32768,
}


def zero3_json(folder: Path) -> str:
    """The user's ZeRO-3 JSON with "auto" batch sizes and precision (rows 31 and 33)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "ds_zero3.json"
    data = {
        "train_batch_size": "auto",
        "train_micro_batch_size_per_gpu": "auto",
        "gradient_accumulation_steps": "auto",
        "bf16": {"enabled": "auto"},
        "zero_optimization": {"stage": 3},
    }
    path.write_text(json.dumps(data), encoding="utf-8")
    return str(path)


def check_cli(*args: str) -> tuple[int, list[dict[str, Any]]]:
    """`backend-wizard check ARGS --output json`: the exit code and the findings."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["check", *args, "--output", "json"])
    return code, json.loads(out.getvalue())["findings"]


@row(29)
def _row29_axolotl_context_parallel(tmp_path: Path) -> None:
    result = decide(ROW29, tmp_path)
    rec = result.recommendation
    assert (rec.backend, rec.rule.id) == ("fsdp2", "parallel_fsdp2"), rec.because
    # Without CP the activations of 128k tokens need about 130 GiB per GPU; CP 4 is the smallest
    # size that fits, and it divides the 8 GPUs (DP = 8 / 4 = 2).
    assert result.session.answers["context_parallel_size"] == 4
    assert result.session.origins["context_parallel_size"] == "default"
    cfg = parsed(result, "axolotl.yaml")
    assert (cfg["context_parallel_size"], cfg["dp_shard_size"], cfg["tensor_parallel_size"]) == (4, 2, 1)
    assert cfg["dp_replicate_size"] == 1 and "expert_parallel_size" not in cfg
    assert cfg["fsdp_version"] == 2 and "deepspeed" not in cfg
    assert cfg["attn_implementation"] == "flash_attention_2" and cfg["micro_batch_size"] == 1
    # The model's gradient checkpointing (activation offloading, the next lever, needs it); FSDP's own
    # activation checkpointing is off so the layers are not recomputed twice.
    assert cfg["gradient_checkpointing"] is True and cfg["fsdp_config"]["activation_checkpointing"] is False


@row(30)
def _row30_accelerate_parallelism_config_cp(tmp_path: Path) -> None:
    result = decide(ROW30, tmp_path)
    assert result.recommendation.rule.id == "parallel_fsdp2"
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


@row(31)
def _row31_deepspeed_sequence_parallel(tmp_path: Path) -> None:
    answers = {
        **GPU,
        "gpu_model": "H100",
        "gpus_per_node": 4,
        "gpu_memory_gb": 80,
        "model": "8B",
        "method": "full",
        "sequence_length": 65536,
        "deepspeed_config": zero3_json(tmp_path / "user"),
        "context_parallel_size": 4,  # the table's choice; the default is the smallest that fits (2)
    }
    result = decide(answers, tmp_path / "out")
    rec = result.recommendation
    assert (rec.backend, rec.rule.id, rec.settings["sp_size"]) == ("deepspeed", "existing_deepspeed_json", 4)
    assert "sequence parallelism" in rec.because
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
    t4 = parsed(decide({**answers, "gpu_model": "T4", "gpu_memory_gb": 80}, tmp_path / "t4"), "accelerate_config.yaml")
    assert t4["parallelism_config"]["parallelism_config_sp_attn_implementation"] == "sdpa"
    # Left to the wizard, SP is the smallest size with which the user's ZeRO-3 estimate fits.
    default = decide({k: v for k, v in answers.items() if k != "context_parallel_size"}, tmp_path / "default")
    assert default.session.answers["context_parallel_size"] == 2 and default.recommendation.settings["sp_size"] == 2


@row(32)
def _row32_axolotl_expert_parallel(tmp_path: Path) -> None:
    # The row's user runs a DeepEP-capable stack and asks for expert parallel; left to the wizard,
    # a plain FSDP2 shard fits (about 61 of 64 GiB), so it adds no expert parallel of its own.
    default = decide(ROW32, tmp_path / "default")
    assert (default.recommendation.rule.id, default.session.answers["expert_parallel_size"]) == ("sharded_fsdp2", 1)
    result = decide({**ROW32, "expert_parallel_size": 8}, tmp_path)
    rec = result.recommendation
    assert (rec.backend, rec.rule.id) == ("fsdp2", "parallel_fsdp2"), rec.because
    cfg = parsed(result, "axolotl.yaml")
    sizes = [cfg[k] for k in ("expert_parallel_size", "dp_shard_size", "tensor_parallel_size", "context_parallel_size")]
    assert sizes == [8, 1, 1, 1]  # EP x dp_shard x TP x CP = 8 = world size
    assert cfg["plugins"] == ["axolotl.integrations.expert_parallel.ExpertParallelPlugin"]
    assert "use_sonicmoe" not in cfg
    assert cfg["fsdp_config"]["state_dict_type"] == "FULL_STATE_DICT"  # Axolotl rejects sharded with EP
    findings = check_config(cfg, "axolotl", world_size=8)
    assert not [f for f in findings if f.check.startswith("ax-ep")], findings


@row(33)
def _row33_deepspeed_moe_class_names(tmp_path: Path) -> None:
    answers = {
        **GPU,
        "gpu_model": "H100",
        "gpus_per_node": 8,
        "gpu_memory_gb": 80,
        "model": "8x7B",
        "method": "full",
        "sequence_length": 4096,
        "deepspeed_config": zero3_json(tmp_path / "user"),
        "moe_layer_cls_names": "MixtralSparseMoeBlock",
    }
    result = decide(answers, tmp_path / "out")
    assert result.recommendation.backend == "deepspeed"
    acc = parsed(result, "accelerate_config.yaml")
    # Allowed next to a JSON file (accelerate's DeepSpeedPlugin reads it beside one); exact,
    # case-sensitive class names.
    assert acc["deepspeed_config"] == {
        "deepspeed_config_file": "ds_config.json",  # the copy of the brought JSON
        "zero3_init_flag": True,
        "deepspeed_moe_layer_cls_names": "MixtralSparseMoeBlock",
    }
    with pytest.raises(InvalidAnswerError, match="class names"):
        decide({**answers, "moe_layer_cls_names": "transformers.models.mixtral.MixtralSparseMoeBlock"}, tmp_path / "x")


@row(
    34,
    note="the table lists FSDP2 + TP 8 x dp_shard 2, but 70B x 16 B / 16 ranks = 70 GB per GPU (81 GiB with"
    " activations), over the 0.8 x 80 GB margin, like row 24; following row 24's note (add CPU offload or more"
    " GPUs), the wizard offloads with DeepSpeed ZeRO-3, and with TP 8 set it refuses and names that path",
)
def _row34_tensor_parallel_inside_a_node(tmp_path: Path) -> None:
    rec = decide(ROW34, tmp_path / "auto").recommendation
    assert (rec.backend, rec.settings["zero_stage"], rec.settings["offload_optimizer"]) == ("deepspeed", 3, "cpu")
    assert rec.settings["num_processes"] == 16 and rec.settings["num_machines"] == 2
    with_tp = decide({**ROW34, "model_parallel": True, "tensor_parallel_size": 8}, tmp_path / "tp").recommendation
    assert with_tp.refused and with_tp.rule.id == "parallel_does_not_fit"
    assert "tensor parallel 8 x FSDP2 shard 2" in with_tp.because
    assert "DeepSpeed ZeRO-3 with the optimizer on the CPU fits" in with_tp.because
    # TP larger than one machine's 8 GPUs is refused with the reason.
    with pytest.raises(InvalidAnswerError, match="stays on the fast links inside a machine; use 2, 4 or 8"):
        decide({**ROW34, "model_parallel": True, "tensor_parallel_size": 16}, tmp_path / "cross")


@row(35)
def _row35_tensor_parallel_with_derived_shard(tmp_path: Path) -> None:
    result = decide(ROW35, tmp_path / "wizard")
    rec = result.recommendation
    # The wizard derives dp_shard itself (8 GPUs / TP 4 = 2) and never writes replicate > 1 with TP.
    assert (rec.settings["tp_size"], rec.settings["dp_shard_size"], rec.settings["dp_replicate_size"]) == (4, 2, 1)
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
    assert "dp_shard_size > 1" in error["fix"] and "drop TP/CP" in error["fix"]


@row(36)
def _row36_megatron(tmp_path: Path) -> None:
    result = decide(ROW36, tmp_path)
    rec = result.recommendation
    assert (rec.backend, rec.rule.id) == ("megatron_lm", "megatron_lm")
    assert "never a drop-in" in rec.because
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
    # A 175B full fine-tune does not fit 16 x 80 GB even so; the explanation says it and what helps.
    assert "Warning: by the wizard's estimate" in rec.because and "add machines" in rec.because
    assert "deepspeed_config" not in result.session.answers and "offload" not in result.session.answers


@row(43)
def _row43_context_parallel_must_divide_the_gpus(tmp_path: Path) -> None:
    with pytest.raises(InvalidAnswerError) as info:
        decide({**ROW43, "context_parallel_size": 4}, tmp_path / "wizard")
    assert info.value.key == "context_parallel_size"
    assert "does not divide the 6 GPUs; use 2, 3 or 6, or 8 GPUs" in info.value.message
    assert decide({**ROW43, "context_parallel_size": 3}, tmp_path / "ok").recommendation.settings["cp_size"] == 3
    # `backend-wizard check` on a user's YAML with --world-size 6, with the same fix.
    cfg = {**parsed(decide({**ROW43, "context_parallel_size": 2}, tmp_path / "two"), "axolotl.yaml")}
    cfg.update(context_parallel_size=4, dp_shard_size=1)
    path = tmp_path / "user.yaml"
    path.write_text(yaml.safe_dump(cfg), encoding="utf-8")
    code, findings = check_cli(str(path), "--world-size", "6")
    assert code == 1
    error = next(f for f in findings if f["check"] == "ax-cp-world")
    assert error["severity"] == "error" and "2, 3 or 6" in error["fix"] and "8 GPUs" in error["fix"]
