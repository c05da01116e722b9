"""The static config checker (wizard.checks): every check, its twin, and the checker's guarantees.

Each catalogue check has the smallest file that triggers it (severity, path and tag asserted)
and a fixed twin that does not. Beyond the table: the two known false positives of Accelerate's
validator stay silent, every file the wizard writes today has no error finding, findings come
in order, wrong types never crash (hypothesis), the checker imports none of the real tools, and
the key lists in wizard/data/check_keys.yaml match the installed tools.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from check_patterns import PATTERNS, Pattern, write
from helpers import REPO, decide
from realtools import require_tool
from test_scenarios import ANSWERS
from wizard.checks import BY_ID, CHECKS, Finding, check_config, checks_table, detect_format
from wizard.checks._types import SEVERITIES
from wizard.checks.accelerate_deepspeed import FILE_CONFLICTS
from wizard.checks.catalog import SOURCES
from wizard.checks.keys import known_keys

ACC, DS, AX, NONE = "accelerate", "deepspeed", "axolotl", "none"
FSDP2 = {"fsdp_version": 2, "fsdp_config": {"offload_params": False}}  # an Axolotl FSDP2 block
# The micro batch is the one batch key DeepSpeed cannot do without (train_batch_size is its alternative).
ZERO2 = {"zero_optimization": {"stage": 2}, "train_micro_batch_size_per_gpu": "auto"}
SAME = object()  # good_files: the same files as the bad case


def loader(files: Mapping[str, object] | None) -> Callable[[str], object] | None:
    """A load_json over in-memory files: a missing name is FileNotFoundError, an exception is raised."""
    if files is None:
        return None

    def load(path: str) -> object:
        if path not in files:
            raise FileNotFoundError(path)
        value = files[path]
        if isinstance(value, BaseException):
            raise value
        return value

    return load


@dataclass(frozen=True)
class Case:
    check: str
    fmt: str
    bad: object
    good: object
    path: str
    world_size: int | None = None
    files: Mapping[str, object] | None = None
    good_files: object = SAME
    good_world_size: object = SAME
    repeated: tuple[tuple[str, int], ...] = ()  # keys the bad file writes twice (its parser's report)

    def run(self, data: object, files: object = SAME, world_size: object = SAME) -> list[Finding]:
        chosen = self.files if files is SAME else files
        world = self.world_size if world_size is SAME else world_size
        assert (chosen is None or isinstance(chosen, Mapping)) and (world is None or isinstance(world, int))
        fmt = detect_format(data) if self.fmt == "auto" else self.fmt  # "auto": as `check` without --format
        repeated = self.repeated if data is self.bad else ()
        return check_config(data, fmt, world_size=world, load_json=loader(chosen), duplicate_keys=repeated)


def y(text: str) -> Any:
    """YAML text, for cases where the YAML spelling matters (unquoted no)."""
    return yaml.safe_load(textwrap.dedent(text))


def C(check: str, fmt: str, bad: object, good: object, path: str, **kw: Any) -> Case:
    return Case(check, fmt, bad, good, path, **kw)


FSDP_ACC = {"distributed_type": "FSDP", "num_processes": 8, "fsdp_config": {"fsdp_version": 2}}
ABS_DS = {"/ds.json": ZERO2}
DS_FILE_ACC = {"distributed_type": "DEEPSPEED", "deepspeed_config": {"deepspeed_config_file": "/ds.json"}}

CASES: list[Case] = [
    # any format
    C("not-a-config", "auto", {"gpu": "h100"}, {"distributed_type": "NO"}, ""),
    C("duplicate-key", ACC, {"distributed_type": "NO", "debug": True}, {"distributed_type": "NO", "debug": True},
      "debug", repeated=(("debug", 3),)),
    C("top-not-mapping", ACC, ["distributed_type"], {}, ""),
    C("section-not-mapping", ACC, {"fsdp_config": "FSDP"}, {"fsdp_config": {}}, "fsdp_config"),
    C("ds-file-missing", AX, {"deepspeed": "nope.json"}, {"deepspeed": "ds.json"}, "deepspeed",
      files={"ds.json": ZERO2}),
    C("ds-file-invalid", AX, {"deepspeed": "ds.json"}, {"deepspeed": "ds.json"}, "deepspeed",
      files={"ds.json": ValueError("Expecting value: line 1 column 1")}, good_files={"ds.json": ZERO2}),
    C("world-size", AX, {}, {}, "", world_size=0, good_world_size=1),
    # DeepSpeed JSON
    C("ds-unknown-top-key", DS, {**ZERO2, "train_batch_sise": 8}, {**ZERO2, "train_batch_size": 8},
      "train_batch_sise"),
    C("ds-unknown-key", DS, {"zero_optimization": {"stgae": 2}}, ZERO2, "zero_optimization.stgae"),
    C("ds-removed-feature", DS, {**ZERO2, "amp": {"enabled": True}}, ZERO2, "amp"),
    C("ds-alias-duplicate", DS, {"zero_optimization": {"max_live_parameters": 1, "stage3_max_live_parameters": 1}},
      {"zero_optimization": {"stage3_max_live_parameters": 1}}, "zero_optimization.stage3_max_live_parameters"),
    C("ds-legacy-compile", DS, {**ZERO2, "compile": {"disable": False}}, {**ZERO2, "compile": {"deepcompile": True}},
      "compile.disable"),
    C("ds-zero-missing", AX, {"deepspeed": "ds.json"}, {"deepspeed": "ds.json"}, "ds.json:zero_optimization",
      files={"ds.json": {"train_batch_size": 8}}, good_files={"ds.json": {"train_batch_size": 8, **ZERO2}}),
    C("ds-zero-missing-plain", DS, {"train_batch_size": 8}, {"train_batch_size": 8, **ZERO2}, "zero_optimization"),
    C("ds-deprecated-key", DS, {"zero_optimization": {"stage": 3, "stage3_gather_fp16_weights_on_model_save": True}},
      {"zero_optimization": {"stage": 3, "stage3_gather_16bit_weights_on_model_save": True}},
      "zero_optimization.stage3_gather_fp16_weights_on_model_save"),
    C("ds-deprecated-and-new", DS, {"zero_optimization": {"stage": 3, "cpu_offload": True, "offload_optimizer": {}}},
      {"zero_optimization": {"stage": 3, "offload_optimizer": {}}}, "zero_optimization.cpu_offload"),
    C("ds-value-range", DS, {"zero_optimization": {"stage": 3, "reduce_bucket_size": 0}},
      {"zero_optimization": {"stage": 3, "reduce_bucket_size": "auto"}}, "zero_optimization.reduce_bucket_size"),
    C("ds-stage-auto", DS, {"zero_optimization": {"stage": "auto"}}, ZERO2, "zero_optimization.stage"),
    C("ds-stage", DS, {"zero_optimization": {"stage": 7}}, {"zero_optimization": {"stage": 3}},
      "zero_optimization.stage"),
    C("ds-offload-device", DS, {"zero_optimization": {"stage": 3, "offload_param": {"device": "gpu"}}},
      {"zero_optimization": {"stage": 3, "offload_param": {"device": "cpu"}}},
      "zero_optimization.offload_param.device"),
    C("ds-nvme-path-unused", DS,
      {"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu", "nvme_path": "/n"}}},
      {"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "nvme", "nvme_path": "/n"}}},
      "zero_optimization.offload_optimizer.nvme_path"),
    C("ds-nvme-without-path", DS, {"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "nvme"}}},
      {"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "nvme", "nvme_path": "/n"}}},
      "zero_optimization.offload_optimizer.device"),
    C("ds-offload-optimizer-stage", DS, {"zero_optimization": {"stage": 1, "offload_optimizer": {"device": "cpu"}}},
      {"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}},
      "zero_optimization.offload_optimizer.device"),
    C("ds-offload-param-stage", DS, {"zero_optimization": {"stage": 2, "offload_param": {"device": "cpu"}}},
      {"zero_optimization": {"stage": 3, "offload_param": {"device": "cpu"}}},
      "zero_optimization.offload_param.device"),
    C("ds-gather-16bit-stage", DS,
      {"zero_optimization": {"stage": 2, "stage3_gather_16bit_weights_on_model_save": True}},
      {"zero_optimization": {"stage": 3, "stage3_gather_16bit_weights_on_model_save": True}},
      "zero_optimization.stage3_gather_16bit_weights_on_model_save"),
    C("ds-msamp-zero3", DS, {"zero_optimization": {"stage": 3}, "msamp": {"enabled": True}},
      {**ZERO2, "msamp": {"enabled": True}}, "msamp.enabled"),
    C("ds-batch-missing", DS, {"zero_optimization": {"stage": 2}},
      {"zero_optimization": {"stage": 2}, "train_batch_size": 8}, "train_micro_batch_size_per_gpu"),
    C("ds-batch-value", DS, {**ZERO2, "train_batch_size": 0}, {**ZERO2, "train_batch_size": "auto"},
      "train_batch_size"),
    C("ds-batch-identity", DS,
      {**ZERO2, "train_batch_size": 16, "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2},
      {**ZERO2, "train_batch_size": 8, "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2},
      "train_batch_size", world_size=2),
    C("ds-batch-zero", DS,
      {"zero_optimization": {"stage": 1}, "train_batch_size": 4, "train_micro_batch_size_per_gpu": 1},
      {"zero_optimization": {"stage": 1}, "train_batch_size": 8, "train_micro_batch_size_per_gpu": 1},
      "train_batch_size", world_size=8),
    C("ds-fp16-bf16", DS, {**ZERO2, "bf16": {"enabled": True}, "fp16": {"enabled": True}},
      {**ZERO2, "bf16": {"enabled": True}, "fp16": {"enabled": False}}, "fp16.enabled"),
    # Accelerate: top level
    C("acc-compute-environment", ACC, {"compute_environment": "CLOUD"}, {"compute_environment": "LOCAL_MACHINE"},
      "compute_environment"),
    C("acc-sagemaker", ACC, {"compute_environment": "AMAZON_SAGEMAKER"}, {"compute_environment": "LOCAL_MACHINE"},
      "compute_environment"),
    C("acc-deepseed-typo", ACC, {"deepseed_config": {}}, {"deepspeed_config": {}}, "deepseed_config"),
    C("acc-unknown-key", ACC, {"num_gpus": 2}, {"num_processes": 2}, "num_gpus"),
    C("acc-unknown-nested-key", ACC, {"fsdp_config": {"fsdp_made_up": 1}},
      {"fsdp_config": {"fsdp_offload_params": True}}, "fsdp_config.fsdp_made_up"),
    C("acc-distributed-type-missing", ACC, {"num_processes": 1}, {"distributed_type": "NO"}, "distributed_type"),
    C("acc-distributed-type", ACC, {"distributed_type": "MULTI_TPU"}, {"distributed_type": "MULTI_SDAA"},
      "distributed_type"),
    C("acc-distributed-type-case", ACC, {"distributed_type": "fsdp"}, {"distributed_type": "FSDP"},
      "distributed_type"),
    C("acc-unquoted-no-type", ACC, y("distributed_type: NO"), y("distributed_type: 'NO'"), "distributed_type"),
    C("acc-mixed-precision", ACC, {"mixed_precision": "bfloat16"}, {"mixed_precision": "BF16"}, "mixed_precision"),
    C("acc-unquoted-no-precision", ACC, y("mixed_precision: no"), y("mixed_precision: 'no'"), "mixed_precision"),
    C("acc-fp16-bf16", ACC, {"mixed_precision": "bf16", "fp16": True}, {"mixed_precision": "bf16"}, "fp16"),
    C("acc-deepspeed-without-config", ACC, {"distributed_type": "DEEPSPEED", "num_processes": 2},
      {"distributed_type": "DEEPSPEED", "num_processes": 2, "deepspeed_config": {"zero_stage": 2}},
      "distributed_type"),
    C("acc-fsdp-without-config", ACC, {"distributed_type": "FSDP", "num_processes": 2}, FSDP_ACC, "distributed_type"),
    C("acc-deepspeed-config-unused", ACC, {"distributed_type": "MULTI_GPU", "deepspeed_config": {"zero_stage": 2}},
      {"distributed_type": "DEEPSPEED", "deepspeed_config": {"zero_stage": 2}}, "deepspeed_config"),
    C("acc-fsdp-config-unused", ACC, {"distributed_type": "MULTI_GPU", "fsdp_config": {"fsdp_version": 2}},
      {"distributed_type": "FSDP", "fsdp_config": {"fsdp_version": 2}}, "fsdp_config"),
    C("acc-deepspeed-and-fsdp", ACC, {"deepspeed_config": {"zero_stage": 2}, "fsdp_config": {"fsdp_version": 2}},
      {"deepspeed_config": {"zero_stage": 2}}, "fsdp_config"),
    C("acc-num-processes", ACC, {"num_processes": 0}, {"num_processes": 1}, "num_processes"),
    C("acc-num-processes-missing", ACC, {"distributed_type": "MULTI_GPU"},
      {"distributed_type": "MULTI_GPU", "num_processes": 2}, "num_processes"),
    C("acc-tpu-cluster", ACC, {"distributed_type": "MULTI_GPU", "tpu_use_cluster": True},
      {"distributed_type": "XLA", "tpu_use_cluster": True}, "tpu_use_cluster"),
    C("acc-gpu-ids-type", ACC, y("gpu_ids: 0"), y("gpu_ids: '0'"), "gpu_ids"),
    C("acc-gpu-ids-count", ACC, {"distributed_type": "MULTI_GPU", "gpu_ids": "0"},
      {"distributed_type": "MULTI_GPU", "gpu_ids": "0,1"}, "gpu_ids"),
    C("acc-machine-rank", ACC, {"num_machines": 2, "machine_rank": 2}, {"num_machines": 2, "machine_rank": 1},
      "machine_rank"),
    C("acc-processes-per-machine", ACC, {"num_machines": 2, "num_processes": 3},
      {"num_machines": 2, "num_processes": 4}, "num_processes"),
    C("acc-multinode-no-ip", ACC, {"num_machines": 2}, {"num_machines": 2, "main_process_ip": "10.0.0.1"},
      "num_machines"),
    C("acc-dynamo-backend", ACC, {"dynamo_config": {"dynamo_backend": "turbo"}},
      {"dynamo_config": {"dynamo_backend": "INDUCTOR"}}, "dynamo_config.dynamo_backend"),
    # Accelerate: deepspeed_config
    C("acc-ds-file-info", ACC, {"deepspeed_config": {"deepspeed_config_file": "/ds.json"}},
      {"deepspeed_config": {"deepspeed_config_file": "/ds.json"}}, "deepspeed_config.deepspeed_config_file",
      good_files=ABS_DS),
    C("acc-ds-file-relative", ACC, {"deepspeed_config": {"deepspeed_config_file": "ds.json"}},
      {"deepspeed_config": {"deepspeed_config_file": "/ds.json"}}, "deepspeed_config.deepspeed_config_file"),
    C("acc-ds-file-conflict", ACC, {"deepspeed_config": {"deepspeed_config_file": "/ds.json", "zero_stage": 2}},
      {"deepspeed_config": {"deepspeed_config_file": "/ds.json", "zero3_init_flag": False}},
      "deepspeed_config.zero_stage", files=ABS_DS),
    C("acc-ds-precision-auto", ACC, DS_FILE_ACC, DS_FILE_ACC, "/ds.json:bf16.enabled",
      files={"/ds.json": {**ZERO2, "bf16": {"enabled": "auto"}}},
      good_files={"/ds.json": {**ZERO2, "bf16": {"enabled": True}}}),
    C("acc-zero-stage", ACC, {"deepspeed_config": {"zero_stage": 4}}, {"deepspeed_config": {"zero_stage": "3"}},
      "deepspeed_config.zero_stage"),
    C("acc-inline-zero-optimization", ACC, {"deepspeed_config": {"zero_optimization": {"stage": 2}}},
      {"deepspeed_config": {"zero_stage": 2}}, "deepspeed_config.zero_optimization"),
    C("acc-offload-device", ACC, {"deepspeed_config": {"zero_stage": 3, "offload_param_device": "disk"}},
      {"deepspeed_config": {"zero_stage": 3, "offload_param_device": "cpu"}}, "deepspeed_config.offload_param_device"),
    C("acc-offload-optimizer-stage", ACC, {"deepspeed_config": {"zero_stage": 1, "offload_optimizer_device": "cpu"}},
      {"deepspeed_config": {"zero_stage": 2, "offload_optimizer_device": "cpu"}},
      "deepspeed_config.offload_optimizer_device"),
    C("acc-offload-param-stage", ACC, {"deepspeed_config": {"offload_param_device": "cpu"}},
      {"deepspeed_config": {"zero_stage": 3, "offload_param_device": "cpu"}}, "deepspeed_config.offload_param_device"),
    C("acc-zero3-init-stage", ACC, {"deepspeed_config": {"zero_stage": 2, "zero3_init_flag": True}},
      {"deepspeed_config": {"zero_stage": 3, "zero3_init_flag": True}}, "deepspeed_config.zero3_init_flag"),
    C("acc-zero3-save-stage", ACC, {"deepspeed_config": {"zero_stage": 2, "zero3_save_16bit_model": True}},
      {"deepspeed_config": {"zero_stage": 3, "zero3_save_16bit_model": True}},
      "deepspeed_config.zero3_save_16bit_model"),
    C("acc-nvme-without-path", ACC, {"deepspeed_config": {"zero_stage": 3, "offload_param_device": "nvme"}},
      {"deepspeed_config": {"zero_stage": 3, "offload_param_device": "cpu"}}, "deepspeed_config.offload_param_device"),
    C("acc-nvme-path-unused", ACC,
      {"deepspeed_config": {"zero_stage": 3, "offload_param_device": "cpu", "offload_param_nvme_path": "/n"}},
      {"deepspeed_config": {"zero_stage": 3, "offload_param_device": "cpu"}},
      "deepspeed_config.offload_param_nvme_path"),
    C("acc-nvme-path-not-passed", ACC,
      {"deepspeed_config": {"zero_stage": 3, "offload_param_device": "nvme", "offload_param_nvme_path": "/n"}},
      {"deepspeed_config": {"deepspeed_config_file": "/ds.json"}}, "deepspeed_config.offload_param_nvme_path"),
    # Accelerate: fsdp_config
    C("acc-fsdp-version", ACC, {"fsdp_config": {"fsdp_version": 3}}, {"fsdp_config": {"version": 2}},
      "fsdp_config.fsdp_version"),
    C("acc-fsdp-version-missing", ACC, {"fsdp_config": {"fsdp_offload_params": False}},
      {"fsdp_config": {"fsdp_offload_params": False, "fsdp_version": 2}}, "fsdp_config"),
    C("acc-fsdp-state-dict-type", ACC, {"fsdp_config": {"fsdp_version": 2, "fsdp_state_dict_type": "FULL"}},
      {"fsdp_config": {"fsdp_version": 2, "state_dict_type": "sharded_state_dict"}},
      "fsdp_config.fsdp_state_dict_type"),
    C("acc-fsdp2-local-state-dict", ACC,
      {"fsdp_config": {"fsdp_version": 2, "fsdp_state_dict_type": "LOCAL_STATE_DICT"}},
      {"fsdp_config": {"fsdp_version": 1, "fsdp_state_dict_type": "LOCAL_STATE_DICT"}},
      "fsdp_config.fsdp_state_dict_type"),
    C("acc-fsdp-wrap-policy", ACC, {"fsdp_config": {"fsdp_version": 2, "fsdp_auto_wrap_policy": "LAYER_WRAP"}},
      {"fsdp_config": {"fsdp_version": 2, "fsdp_auto_wrap_policy": "no_wrap"}}, "fsdp_config.fsdp_auto_wrap_policy"),
    C("acc-fsdp2-reshard-not-bool", ACC,
      {"fsdp_config": {"fsdp_version": 2, "fsdp_reshard_after_forward": "FULL_SHARD"}},
      {"fsdp_config": {"fsdp_version": 2, "reshard_after_forward": True}}, "fsdp_config.fsdp_reshard_after_forward"),
    C("acc-fsdp2-sharding-strategy", ACC,
      {"fsdp_config": {"fsdp_version": 2, "fsdp_sharding_strategy": "FULL_SHARD"}},
      {"fsdp_config": {"fsdp_version": 1, "fsdp_sharding_strategy": "FULL_SHARD"}},
      "fsdp_config.fsdp_sharding_strategy"),
    C("acc-fsdp2-backward-prefetch", ACC, {"fsdp_config": {"fsdp_version": 2, "backward_prefetch": "BACKWARD_PRE"}},
      {"fsdp_config": {"fsdp_version": 1, "backward_prefetch": "BACKWARD_PRE"}}, "fsdp_config.backward_prefetch"),
    C("acc-fsdp2-obsolete-key", ACC, {"fsdp_config": {"fsdp_version": 2, "fsdp_use_orig_params": True}},
      {"fsdp_config": {"fsdp_version": 1, "fsdp_use_orig_params": True}}, "fsdp_config.fsdp_use_orig_params"),
    C("acc-fsdp1-reshard-bool", ACC, {"fsdp_config": {"fsdp_version": 1, "fsdp_reshard_after_forward": True}},
      {"fsdp_config": {"fsdp_version": 2, "fsdp_reshard_after_forward": True}},
      "fsdp_config.fsdp_reshard_after_forward"),
    C("acc-fsdp1-strategy-ignored", ACC,
      {"fsdp_config": {"fsdp_version": 1, "fsdp_reshard_after_forward": "SHARD_GRAD_OP"}},
      {"fsdp_config": {"fsdp_version": 1, "fsdp_sharding_strategy": "SHARD_GRAD_OP"}},
      "fsdp_config.fsdp_reshard_after_forward"),
    C("acc-fsdp-wrap-no-classes", ACC,
      {"fsdp_config": {"fsdp_version": 2, "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP"}},
      {"fsdp_config": {"fsdp_version": 2, "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
                       "fsdp_transformer_layer_cls_to_wrap": "LlamaDecoderLayer"}},
      "fsdp_config.fsdp_auto_wrap_policy"),
    C("acc-fsdp-wrap-module-path", ACC,
      {"fsdp_config": {"fsdp_version": 2, "transformer_layer_cls_to_wrap": "transformers.LlamaDecoderLayer"}},
      {"fsdp_config": {"fsdp_version": 2, "transformer_layer_cls_to_wrap": "LlamaDecoderLayer,LlamaMLP"}},
      "fsdp_config.transformer_layer_cls_to_wrap"),
    C("acc-fsdp-ram-loading-sync", ACC, {"fsdp_config": {"fsdp_version": 2, "fsdp_sync_module_states": False}},
      {"fsdp_config": {"fsdp_version": 2, "fsdp_sync_module_states": False, "cpu_ram_efficient_loading": False}},
      "fsdp_config.fsdp_sync_module_states"),
    C("acc-fsdp-ac-offload", ACC, {"fsdp_config": {"fsdp_version": 2, "fsdp_activation_checkpointing_offload": True}},
      {"fsdp_config": {"fsdp_version": 2, "activation_checkpointing_offload": True, "activation_checkpointing": True}},
      "fsdp_config.fsdp_activation_checkpointing_offload"),
    # Accelerate: parallelism_config
    C("acc-parallel-size", ACC, {"parallelism_config": {"parallelism_config_tp_size": 0}},
      {"parallelism_config": {"parallelism_config_tp_size": 1}}, "parallelism_config.parallelism_config_tp_size"),
    C("acc-parallel-product-info", ACC,
      {"distributed_type": "FSDP", "fsdp_config": {"fsdp_version": 2}, "parallelism_config": {"dp_shard_size": 4}},
      {**FSDP_ACC, "num_processes": 4, "parallelism_config": {"dp_shard_size": 4}}, "parallelism_config"),
    C("acc-parallel-product", ACC, {**FSDP_ACC, "parallelism_config": {"parallelism_config_dp_shard_size": 4}},
      {**FSDP_ACC, "parallelism_config": {"parallelism_config_dp_shard_size": 8}}, "parallelism_config"),
    C("acc-parallel-needs-fsdp2", ACC,
      {"distributed_type": "MULTI_CPU", "num_processes": 4,
       "parallelism_config": {"parallelism_config_dp_shard_size": 4}},
      {**FSDP_ACC, "num_processes": 4, "parallelism_config": {"parallelism_config_dp_shard_size": 4}},
      "parallelism_config"),
    C("acc-parallel-unused", ACC, {"distributed_type": "NO", "parallelism_config": {"parallelism_config_tp_size": 2}},
      {"distributed_type": "NO"}, "parallelism_config"),
    C("acc-parallel-ds-sp", ACC,
      {"distributed_type": "DEEPSPEED", "num_processes": 4, "deepspeed_config": {"zero_stage": 3},
       "parallelism_config": {"parallelism_config_sp_size": 4}},
      {**FSDP_ACC, "num_processes": 4, "parallelism_config": {"parallelism_config_cp_size": 4}}, "parallelism_config"),
    C("acc-cp-comm-strategy", ACC, {"parallelism_config": {"parallelism_config_cp_comm_strategy": "ring"}},
      {"parallelism_config": {"parallelism_config_cp_comm_strategy": "alltoall"}},
      "parallelism_config.parallelism_config_cp_comm_strategy"),
    C("acc-sp-attn", ACC, {"parallelism_config": {"parallelism_config_sp_attn_implementation": "eager"}},
      {"parallelism_config": {"parallelism_config_sp_attn_implementation": "kernels-community/flash-attn3"}},
      "parallelism_config.parallelism_config_sp_attn_implementation"),
    C("acc-sp-seq-length", ACC, {"parallelism_config": {"parallelism_config_sp_seq_length_is_variable": False}},
      {"parallelism_config": {"parallelism_config_sp_seq_length_is_variable": False,
                              "parallelism_config_sp_seq_length": 4096}},
      "parallelism_config.parallelism_config_sp_seq_length_is_variable"),
    C("acc-cp-and-sp", ACC,
      {"parallelism_config": {"parallelism_config_cp_size": 2, "parallelism_config_sp_size": 2}},
      {"parallelism_config": {"parallelism_config_cp_size": 2}}, "parallelism_config"),
    C("acc-replicate-with-tp-cp", ACC,
      {"parallelism_config": {"parallelism_config_dp_replicate_size": 2, "parallelism_config_tp_size": 2}},
      {"parallelism_config": {"parallelism_config_dp_shard_size": 2, "parallelism_config_tp_size": 2}},
      "parallelism_config"),
    C("acc-fsdp2-parallel-no-shard", ACC, {**FSDP_ACC, "parallelism_config": {"parallelism_config_tp_size": 8}},
      {**FSDP_ACC, "parallelism_config": {"parallelism_config_tp_size": 4, "parallelism_config_dp_shard_size": 2}},
      "parallelism_config"),
    C("acc-tp-cross-node", ACC,
      {"num_machines": 2, "num_processes": 16, "parallelism_config": {"parallelism_config_tp_size": 16}},
      {"num_machines": 2, "num_processes": 16, "parallelism_config": {"parallelism_config_tp_size": 8}},
      "parallelism_config"),
    # Accelerate: fp8_config and quantization
    C("acc-fp8-config-unused", ACC, {"mixed_precision": "bf16", "fp8_config": {"backend": "TE"}},
      {"mixed_precision": "fp8", "fp8_config": {"backend": "TE"}}, "fp8_config"),
    C("acc-fp8-no-config", ACC, {"mixed_precision": "fp8"},
      {"mixed_precision": "fp8", "fp8_config": {"backend": "TE"}}, "mixed_precision"),
    C("acc-fp8-backend", ACC, {"fp8_config": {"backend": "FP8LM"}}, {"fp8_config": {"fp8_backend": "MSAMP"}},
      "fp8_config.backend"),
    C("acc-fp8-backend-case", ACC, {"fp8_config": {"backend": "te"}}, {"fp8_config": {"backend": "TE"}},
      "fp8_config.backend"),
    C("acc-fp8-format", ACC, {"fp8_config": {"fp8_format": "E3M4"}}, {"fp8_config": {"fp8_format": "hybrid"}},
      "fp8_config.fp8_format"),
    C("acc-fp8-amax-algo", ACC, {"fp8_config": {"amax_compute_algo": "mean"}},
      {"fp8_config": {"amax_compute_algo": "max"}}, "fp8_config.amax_compute_algo"),
    C("acc-fp8-opt-level", ACC, {"fp8_config": {"opt_level": "O3"}}, {"fp8_config": {"fp8_opt_level": "o2"}},
      "fp8_config.opt_level"),
    C("acc-fp8-key-spelling", ACC, {"fp8_config": {"amax_history_length": 1024}},
      {"fp8_config": {"amax_history_len": 1024}}, "fp8_config.amax_history_length"),
    C("acc-msamp-zero3", ACC,
      {"distributed_type": "DEEPSPEED", "deepspeed_config": {"zero_stage": 3}, "fp8_config": {"backend": "MSAMP"}},
      {"distributed_type": "DEEPSPEED", "deepspeed_config": {"zero_stage": 2}, "fp8_config": {"backend": "MSAMP"}},
      "fp8_config.backend"),
    C("acc-fp8-all-gather-fsdp2", ACC,
      {"distributed_type": "MULTI_GPU", "fp8_config": {"enable_fsdp_float8_all_gather": True}},
      {**FSDP_ACC, "fp8_config": {"enable_fsdp_float8_all_gather": True}}, "fp8_config.enable_fsdp_float8_all_gather"),
    C("acc-quant-8bit-and-4bit", ACC, {"quantization_config": {"load_in_8bit": True, "load_in_4bit": True}},
      {"quantization_config": {"load_in_8bit": False, "load_in_4bit": True}}, "quantization_config.load_in_4bit"),
    C("acc-quant-type", ACC, {"bnb_quantization_config": {"bnb_4bit_quant_type": "int4"}},
      {"bnb_quantization_config": {"bnb_4bit_quant_type": "nf4"}}, "bnb_quantization_config.bnb_4bit_quant_type"),
    C("acc-quant-compute-dtype", ACC, {"quantization_config": {"bnb_4bit_compute_dtype": "int8"}},
      {"quantization_config": {"bnb_4bit_compute_dtype": "torch.bfloat16"}},
      "quantization_config.bnb_4bit_compute_dtype"),
    # Axolotl: check_distributed_config.py
    C("ax-deepspeed-and-fsdp", AX, {"deepspeed": ZERO2, "fsdp_config": {"offload_params": False}},
      {"deepspeed": ZERO2}, "deepspeed"),
    C("ax-deepspeed-and-legacy-fsdp", AX, {"deepspeed": ZERO2, "fsdp": ["full_shard"]}, {"deepspeed": ZERO2},
      "deepspeed"),
    C("ax-deepspeed-not-checked", AX, {"deepspeed": "ds.json"}, {"deepspeed": "ds.json"}, "deepspeed",
      good_files={"ds.json": ZERO2}),
    C("ax-ds-no-stage", AX, {"deepspeed": "ds.json"}, {"deepspeed": "ds.json"}, "ds.json:zero_optimization",
      files={"ds.json": {"zero_optimization": {}}}, good_files={"ds.json": ZERO2}),
    C("ax-ds-stage-filename", AX, {"deepspeed": "cfg/zero3.json"}, {"deepspeed": "cfg/zero2.json"}, "deepspeed",
      files={"cfg/zero3.json": ZERO2, "cfg/zero2.json": ZERO2}),
    C("ax-ds-offload", AX, {"deepspeed": "ds.json"}, {"deepspeed": "ds.json"},
      "ds.json:zero_optimization.offload_optimizer.device",
      files={"ds.json": {"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}}},
      good_files={"ds.json": {"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "none"}}}}),
    C("ax-inline-ds-no-stage", AX, {"deepspeed": {"zero_optimization": {}}}, {"deepspeed": ZERO2}, "deepspeed"),
    C("ax-deepspeed-type", AX, {"deepspeed": 3}, {"deepspeed": ZERO2}, "deepspeed"),
    C("ax-legacy-fsdp", AX, {"fsdp": ["full_shard", "auto_wrap"]}, FSDP2, "fsdp"),
    C("ax-fsdp-version-without-config", AX, {"fsdp_version": 2}, FSDP2, "fsdp_version"),
    C("ax-fsdp-config-without-version", AX, {"fsdp_config": {"offload_params": False}},
      {"fsdp_config": {"offload_params": False, "version": 2}}, "fsdp_config"),
    C("ax-fp32-norms-no-fsdp", AX, {"fp32_norms": True, "fsdp_version": 2}, {"fp32_norms": True, **FSDP2},
      "fp32_norms"),
    C("ax-fp32-norms-fsdp-version", AX, {"fp32_norms": True, "fsdp_config": {"offload_params": False}},
      {"fp32_norms": True, **FSDP2}, "fp32_norms"),
    C("ax-qlora-fsdp-no-config", AX, {"adapter": "qlora", "load_in_4bit": True, "fsdp_version": 2},
      {"adapter": "qlora", "load_in_4bit": True, **FSDP2}, "adapter"),
    C("ax-offload-no-pin", AX,
      {"fsdp_version": 2, "fsdp_config": {"offload_params": True, "cpu_offload_pin_memory": False}},
      {"fsdp_version": 2, "fsdp_config": {"offload_params": True, "cpu_offload_pin_memory": True}},
      "fsdp_config.cpu_offload_pin_memory"),
    C("ax-attn-legacy-combined", AX, {"flash_attention": True, "attn_implementation": "sdpa"},
      {"flash_attention": False, "attn_implementation": "sdpa"}, "flash_attention"),
    C("ax-attn-legacy", AX, {"flash_attention": True}, {"attn_implementation": "flash_attention_2"},
      "flash_attention"),
    C("ax-attn-type", AX, {"attn_implementation": 2}, {"attn_implementation": "sdpa"}, "attn_implementation"),
    C("ax-attn-value", AX, {"attn_implementation": "fa2"}, {"attn_implementation": "kernels-community/flash-attn3"},
      "attn_implementation"),
    C("ax-packing-attn", AX, {"sample_packing": True, "attn_implementation": "kernels-community/vllm-flash-attn3"},
      {"sample_packing": True, "attn_implementation": "sdpa"}, "sample_packing"),
    C("ax-cp-attn", AX, {"context_parallel_size": 2, "attn_implementation": "xformers"},
      {"context_parallel_size": 2, "attn_implementation": "sdpa"}, "context_parallel_size"),
    C("ax-sequence-parallel-degree", AX, {"sequence_parallel_degree": 2}, {"context_parallel_size": 2},
      "sequence_parallel_degree"),
    C("ax-deepspeed-mesh", AX, {"deepspeed": ZERO2, "dp_shard_size": 2},
      {"deepspeed": ZERO2, "context_parallel_size": 2}, "deepspeed"),
    C("ax-cp-deepspeed-rl", AX, {"deepspeed": ZERO2, "context_parallel_size": 2, "rl": "dpo"},
      {"deepspeed": ZERO2, "context_parallel_size": 2}, "rl"),
    C("ax-replicate-with-tp-cp", AX, {"tensor_parallel_size": 4, "dp_replicate_size": 2},
      {"tensor_parallel_size": 4, "dp_replicate_size": 2, "dp_shard_size": 2, **FSDP2}, "dp_replicate_size"),
    C("ax-shard-no-stack", AX, {"dp_shard_size": 2}, {"dp_shard_size": 2, **FSDP2}, "dp_shard_size"),
    C("ax-ep-no-plugin", AX, {"expert_parallel_size": 2},
      {"expert_parallel_size": 2, "plugins": ["axolotl.integrations.expert_parallel.ExpertParallelPlugin"]},
      "expert_parallel_size"),
    C("ax-ep-sonicmoe", AX, {"expert_parallel_size": 2, "use_sonicmoe": True},
      {"expert_parallel_size": 2, "use_scattermoe": True}, "use_sonicmoe"),
    C("ax-cp-world", AX, {"context_parallel_size": 4}, {"context_parallel_size": 2}, "context_parallel_size",
      world_size=6),
    C("ax-tp-world", AX, {"tensor_parallel_size": 4}, {"tensor_parallel_size": 2}, "tensor_parallel_size",
      world_size=6),
    C("ax-ep-product", AX, {"expert_parallel_size": 4}, {"expert_parallel_size": 4, "dp_shard_size": 2},
      "expert_parallel_size", world_size=8),
    C("ax-mesh-product", AX, {"dp_shard_size": 4, **FSDP2}, {"dp_shard_size": 8, **FSDP2}, "dp_shard_size",
      world_size=8),
    C("ax-cp-micro-batch", AX, {"context_parallel_size": 2, "micro_batch_size": 2},
      {"context_parallel_size": 2, "micro_batch_size": 1}, "micro_batch_size"),
    C("ax-ray-no-workers", AX, {"use_ray": True}, {"use_ray": True, "ray_num_workers": 4}, "use_ray"),
    C("ax-ray-workers", AX, {"use_ray": True, "ray_num_workers": 4}, {"use_ray": True, "ray_num_workers": 8},
      "ray_num_workers", world_size=8),
    C("ax-fp8-all-gather-missing", AX, {"fp8": True, **FSDP2},
      {"fp8": True, "fp8_enable_fsdp_float8_all_gather": False, **FSDP2}, "fp8"),
    C("ax-profiler-steps", AX, {"profiler_steps": 500}, {"profiler_steps": 50}, "profiler_steps"),
    C("ax-liger-rms-tp", AX, {"tensor_parallel_size": 2, "liger_rms_norm": True}, {"liger_rms_norm": True},
      "liger_rms_norm"),
    C("ax-liger-flce-tp", AX, {"tensor_parallel_size": 2, "liger_fused_linear_cross_entropy": True},
      {"liger_fused_linear_cross_entropy": True}, "liger_fused_linear_cross_entropy"),
    # Axolotl: the 0.21.0 schema
    C("ax-unknown-key", AX, {"num_gpus": 8}, {"micro_batch_size": 1}, "num_gpus"),
    C("ax-value-type", AX, {"warmup_steps": 0.1}, {"warmup_steps": 10}, "warmup_steps"),
    C("ax-removed-key", AX, {"max_packed_sequence_len": 2048}, {"sequence_len": 2048}, "max_packed_sequence_len"),
    C("ax-early-stopping", AX, {"early_stopping_patience": 3, "save_steps": 100},
      {"early_stopping_patience": 3, "save_steps": 100, "eval_steps": 50}, "early_stopping_patience"),
    C("ax-save-best-metric", AX, {"save_strategy": "best"},
      {"save_strategy": "best", "metric_for_best_model": "eval_loss"}, "save_strategy"),
    C("ax-ebft-compile", AX,
      {"rl": "ebft", "ebft": {"mode": "strided"}, "torch_compile": True, "gradient_checkpointing": True},
      {"rl": "ebft", "ebft": {"mode": "strided"}, "gradient_checkpointing": True}, "torch_compile"),
    C("ax-ep-needs-fsdp2", AX, {"expert_parallel_size": 2},
      {"expert_parallel_size": 2, **FSDP2}, "expert_parallel_size"),
    C("ax-ep-state-dict", AX,
      {"expert_parallel_size": 2, "fsdp_version": 2, "fsdp_config": {"state_dict_type": "SHARDED_STATE_DICT"}},
      {"expert_parallel_size": 2, "fsdp_version": 2, "fsdp_config": {"state_dict_type": "FULL_STATE_DICT"}},
      "fsdp_config.state_dict_type"),
    C("ax-deepspeed-config-typo", AX, {"deepspeed_config": "ds.json"}, {"deepspeed": "ds.json"}, "deepspeed_config",
      files={"ds.json": ZERO2}),
    C("ax-plugin-key-without-plugin", AX, {"liger_rms_norm": True},
      {"liger_rms_norm": True, "plugins": ["axolotl.integrations.liger.LigerPlugin"]}, "liger_rms_norm"),
    C("ax-fsdp-unknown-key", AX, {"fsdp_version": 2, "fsdp_config": {"reshard_after_forwards": True}},
      {"fsdp_version": 2, "fsdp_config": {"reshard_after_forward": True}}, "fsdp_config.reshard_after_forwards"),
    C("ax-fsdp-prefixed-key", AX, {"fsdp_version": 2, "fsdp_config": {"fsdp_offload_params": True}},
      {"fsdp_version": 2, "fsdp_config": {"offload_params": True, "fsdp_version": 2}},
      "fsdp_config.fsdp_offload_params"),
    C("ax-fsdp1-rejected-key", AX, {"fsdp_version": 2, "fsdp_config": {"fsdp_sharding_strategy": "FULL_SHARD"}},
      {"fsdp_version": 2, "fsdp_config": {"reshard_after_forward": True}}, "fsdp_config.fsdp_sharding_strategy"),
    C("ax-fsdp1-ignored-key", AX, {"fsdp_version": 2, "fsdp_config": {"sync_module_states": True}},
      {"fsdp_version": 2, "fsdp_config": {"cpu_ram_efficient_loading": True}}, "fsdp_config.sync_module_states"),
    C("ax-fsdp-version", AX, {"fsdp_version": 1, "fsdp_config": {"offload_params": False}}, FSDP2, "fsdp_version"),
    C("ax-pin-without-offload", AX, {"fsdp_version": 2, "fsdp_config": {"cpu_offload_pin_memory": False}},
      {"fsdp_version": 2, "fsdp_config": {"cpu_offload_pin_memory": False, "offload_params": True}},
      "fsdp_config.cpu_offload_pin_memory"),
    C("ax-fsdp-quant-rl", AX, {"rl": "dpo", "adapter": "qlora", "load_in_4bit": True, **FSDP2},
      {"rl": "grpo", "adapter": "qlora", "load_in_4bit": True, **FSDP2}, "rl"),
    C("ax-fsdp-8bit-optimizer", AX, {"optimizer": "adamw_bnb_8bit", **FSDP2},
      {"optimizer": "adamw_torch_8bit", **FSDP2}, "optimizer"),
    C("ax-fsdp-min-num-params", AX, {"fsdp_version": 2, "fsdp_config": {"auto_wrap_policy": "SIZE_BASED_WRAP"}},
      {"fsdp_version": 2, "fsdp_config": {"auto_wrap_policy": "SIZE_BASED_WRAP", "min_num_params": 100000000}},
      "fsdp_config.auto_wrap_policy"),
    C("ax-falcon-fsdp", AX, {"base_model": "tiiuae/falcon-7b", **FSDP2},
      {"base_model": "meta-llama/Llama-3.1-8B", **FSDP2}, "base_model"),
    C("ax-fsdp-wrap-policy", AX, {"fsdp_version": 2, "fsdp_config": {"auto_wrap_policy": "NO_WRAP"}},
      {"fsdp_version": 2, "fsdp_config": {"auto_wrap_policy": "TRANSFORMER_BASED_WRAP"}},
      "fsdp_config.auto_wrap_policy"),
    C("ax-fsdp-state-dict-type", AX, {"fsdp_version": 2, "fsdp_config": {"state_dict_type": "sharded"}},
      {"fsdp_version": 2, "fsdp_config": {"state_dict_type": "SHARDED_STATE_DICT"}}, "fsdp_config.state_dict_type"),
    C("ax-fsdp-local-state-dict", AX, {"fsdp_version": 2, "fsdp_config": {"state_dict_type": "LOCAL_STATE_DICT"}},
      {"fsdp_version": 2, "fsdp_config": {"state_dict_type": "FULL_STATE_DICT"}}, "fsdp_config.state_dict_type"),
    C("ax-fsdp-wrap-class-type", AX,
      {"fsdp_version": 2, "fsdp_config": {"transformer_layer_cls_to_wrap": ["LlamaDecoderLayer"]}},
      {"fsdp_version": 2, "fsdp_config": {"transformer_layer_cls_to_wrap": "LlamaDecoderLayer"}},
      "fsdp_config.transformer_layer_cls_to_wrap"),
    C("ax-fsdp-bool", AX, {"fsdp_version": 2, "fsdp_config": {"reshard_after_forward": "FULL_SHARD"}},
      {"fsdp_version": 2, "fsdp_config": {"reshard_after_forward": "true"}}, "fsdp_config.reshard_after_forward"),
    C("ax-fp8-config-without-fp8", AX, {"fp8_config": {"recipe": "rowwise"}},
      {"fp8": True, "fp8_config": {"recipe": "rowwise"}}, "fp8_config"),
    C("ax-fp8-all-gather-without-fsdp", AX, {"fp8": True, "fp8_enable_fsdp_float8_all_gather": True},
      {"fp8": True, "fp8_enable_fsdp_float8_all_gather": True, **FSDP2}, "fp8_enable_fsdp_float8_all_gather"),
    C("ax-tp-8bit-optimizer", AX, {"tensor_parallel_size": 2, "optimizer": "paged_adamw_8bit"},
      {"tensor_parallel_size": 2, "optimizer": "adamw_torch"}, "optimizer"),
    C("ax-tp-with-ep", AX, {"tensor_parallel_size": 2, "expert_parallel_size": 2}, {"tensor_parallel_size": 2},
      "tensor_parallel_size"),
    C("ax-cp-eager", AX, {"context_parallel_size": 2, "attn_implementation": "eager"},
      {"context_parallel_size": 2, "attn_implementation": "flash_attention_2"}, "attn_implementation"),
    C("ax-cp-size-conflict", AX, {"context_parallel_size": 2, "context_parallel": {"size": 4}},
      {"context_parallel_size": 2, "context_parallel": {"size": 2}}, "context_parallel.size"),
    C("ax-optimizer-deepspeed", AX, {"deepspeed": ZERO2, "optimizer": "muon"},
      {"deepspeed": ZERO2, "optimizer": "adamw_torch"}, "optimizer"),
    C("ax-feature-vs-sharding", AX, {"relora": True, **FSDP2}, {"relora": True}, "relora"),
    C("ax-activation-offloading", AX, {"activation_offloading": True},
      {"activation_offloading": True, "gradient_checkpointing": True}, "activation_offloading"),
    C("ax-quant-without-adapter", AX, {"load_in_4bit": True}, {"load_in_4bit": True, "adapter": "qlora"},
      "load_in_4bit"),
    C("ax-qlora-needs-4bit", AX, {"adapter": "qlora"}, {"adapter": "qlora", "load_in_4bit": True}, "adapter"),
    C("ax-8bit-and-4bit", AX, {"adapter": "lora", "load_in_8bit": True, "load_in_4bit": True},
      {"adapter": "lora", "load_in_8bit": True}, "load_in_4bit"),
    C("ax-gas-and-batch-size", AX, {"gradient_accumulation_steps": 4, "batch_size": 32},
      {"micro_batch_size": 4, "batch_size": 32}, "batch_size"),
    C("ax-batch-size-alone", AX, {"batch_size": 32}, {"batch_size": 32, "micro_batch_size": 4}, "batch_size"),
    C("ax-deepcompile-without-deepspeed", AX, {"deepcompile": True}, {"deepcompile": True, "deepspeed": ZERO2},
      "deepcompile"),
    C("ax-max-memory-and-limit", AX, {"max_memory": {"0": "20GiB"}, "gpu_memory_limit": "20GiB"},
      {"max_memory": {"0": "20GiB"}}, "gpu_memory_limit"),
    C("ax-fp16-bf16", AX, {"bf16": True, "fp16": True}, {"bf16": "auto", "fp16": True}, "fp16"),
    C("acc-world-size-mismatch", ACC, {"distributed_type": "MULTI_GPU", "num_processes": 4},
      {"distributed_type": "MULTI_GPU", "num_processes": 8}, "num_processes", world_size=8),
    C("ax-ds-batch-mismatch", AX, {"deepspeed": "ds.json", "micro_batch_size": 2}, {"deepspeed": "ds.json"},
      "ds.json:train_micro_batch_size_per_gpu", files={"ds.json": {**ZERO2, "train_micro_batch_size_per_gpu": 4}},
      good_files={"ds.json": {**ZERO2, "train_micro_batch_size_per_gpu": "auto"}}),
]  # fmt: skip


def test_a_json_under_axolotl_is_held_to_axolotls_own_batch_numbers() -> None:
    """The HF Trainer fills the micro batch and accumulation with Axolotl's (2 x 4 x 8 ranks = 64), so a
    train_batch_size of 32 fails there although the JSON alone (micro 4, accumulation 1) would make it 32."""
    yml = {"deepspeed": "ds.json", "micro_batch_size": 2, "gradient_accumulation_steps": 4}
    for tbs, fails in ((32, True), (64, False)):
        ds = {**ZERO2, "train_micro_batch_size_per_gpu": "auto", "train_batch_size": tbs}
        found = [
            f
            for f in check_config(yml, AX, world_size=8, load_json=loader({"ds.json": ds}))
            if f.check == "ds-batch-identity"
        ]
        assert bool(found) is fails, found
        if fails:
            assert "micro batch 2 x accumulation 4 x 8 data-parallel ranks (64)" in found[0].message


@pytest.mark.parametrize("case", CASES, ids=[c.check for c in CASES])
def test_check_fires_on_its_smallest_file_and_not_on_the_fixed_twin(case: Case) -> None:
    info = BY_ID[case.check]
    found = [f for f in case.run(case.bad) if f.check == case.check]
    assert found, case.run(case.bad)
    assert case.path in [f.path for f in found]
    assert {(f.severity, f.tag) for f in found} == {(info.severity, info.tag)}
    assert all(f.message and f.fix for f in found)
    assert info.tool in ("any", case.fmt)
    assert not [f for f in case.run(case.good, case.good_files, case.good_world_size) if f.check == case.check]


def test_every_check_of_the_catalogue_has_a_case() -> None:
    assert len(BY_ID) == len(CHECKS), "duplicate check id"
    assert sorted({c.check for c in CASES}) == sorted(BY_ID)
    assert all(c.severity in SEVERITIES and c.tool in ("accelerate", "deepspeed", "axolotl", "any") for c in CHECKS)


def test_checks_table_lists_every_check() -> None:
    table = checks_table()
    assert all(f"| `{c.id}` | {c.severity} |" in table for c in CHECKS)
    rows = [line for line in table.splitlines() if line.startswith("| `")]
    assert len(rows) == len(CHECKS)
    # Every check names a source the legend below the table explains, each with a public address.
    assert {c.tag for c in CHECKS} <= set(SOURCES)
    legend = [line for line in table.splitlines() if line.startswith("- `")]
    assert len(legend) == len(SOURCES)
    for key, text in SOURCES.items():
        assert f"- `{key}`: {text}" in legend
        assert key == "wizard" or "https://" in text, key


def checks_of(findings: list[Finding]) -> list[str]:
    return [f.check for f in findings]


# ---------------------------------------------------------------------------------------------
# The two known false positives of Accelerate's validator, and other deliberate silences
# ---------------------------------------------------------------------------------------------


def test_deepspeed_sequence_parallel_is_not_required_to_be_fsdp2() -> None:
    cfg = {
        "distributed_type": "DEEPSPEED",
        "num_processes": 8,  # 4-way sequence parallel x 2 data parallel: not the product of the sizes
        "deepspeed_config": {"deepspeed_config_file": "/ds.json", "zero3_init_flag": True},
        "parallelism_config": {
            "parallelism_config_sp_size": 4,
            "parallelism_config_sp_backend": "deepspeed",
            "parallelism_config_sp_seq_length_is_variable": True,
            "parallelism_config_sp_attn_implementation": "flash_attention_2",
        },
    }
    ds = {"zero_optimization": {"stage": 3}, "train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto"}
    findings = check_config(cfg, ACC, load_json=loader({"/ds.json": {**ds, "gradient_accumulation_steps": "auto"}}))
    # Only the note that Accelerate's own validator would call this an error (its false positive).
    assert [(f.check, f.severity) for f in findings] == [("acc-parallel-ds-sp", "info")]
    # DeepSpeed takes tensor parallel beside it too (AutoTP; Accelerate's launch accepts sp 4 x tp 2).
    cfg["parallelism_config"] = {**cfg["parallelism_config"], "parallelism_config_tp_size": 2}
    found = check_config(cfg, ACC, load_json=loader({"/ds.json": ds}))
    assert not [f for f in found if f.severity == "error"], found


def test_a_json_stage_auto_is_only_the_warning() -> None:
    findings = check_config({"zero_optimization": {"stage": "auto"}, "train_micro_batch_size_per_gpu": "auto"}, DS)
    assert [f.check for f in findings if f.path == "zero_optimization.stage"] == ["ds-stage-auto"]
    assert not [f for f in findings if f.severity == "error"]


def test_a_specific_finding_replaces_the_unknown_key_one_at_the_same_path() -> None:
    ds = checks_of(check_config({**ZERO2, "nebula": {}, "compile": {"backend": "inductor"}}, DS))
    assert "ds-removed-feature" in ds and "ds-legacy-compile" in ds
    assert "ds-unknown-top-key" not in ds and "ds-unknown-key" not in ds
    fp8 = checks_of(check_config({"fp8_config": {"fp8_amax_compute_algorithm": "max"}}, ACC))
    assert "acc-fp8-key-spelling" in fp8 and "acc-unknown-nested-key" not in fp8


@pytest.mark.parametrize("key", [*FILE_CONFLICTS, "mixed_precision"])
def test_every_key_that_breaks_a_deepspeed_config_file_is_an_error(key: str) -> None:
    ds: dict[str, Any] = {"deepspeed_config_file": "/ds.json", "zero3_init_flag": True}
    cfg: dict[str, Any] = {"distributed_type": "DEEPSPEED", "num_processes": 1, "deepspeed_config": ds}
    if key == "mixed_precision":
        cfg |= y("mixed_precision: 'no'")
    else:
        ds[key] = 1
    path = key if key == "mixed_precision" else f"deepspeed_config.{key}"
    found = [f for f in check_config(cfg, ACC, load_json=loader(ABS_DS)) if f.check == "acc-ds-file-conflict"]
    assert [f.path for f in found] == [path] and found[0].severity == "error"


def test_the_json_stage_decides_the_zero3_flags_beside_a_file() -> None:
    cfg = {
        "distributed_type": "DEEPSPEED",
        "num_processes": 1,
        "deepspeed_config": {"deepspeed_config_file": "/ds.json"},
    }
    cfg["deepspeed_config"]["zero3_init_flag"] = True
    assert "acc-zero3-init-stage" in checks_of(check_config(cfg, ACC, load_json=loader(ABS_DS)))
    zero3 = {"/ds.json": {"zero_optimization": {"stage": 3}}}
    assert "acc-zero3-init-stage" not in checks_of(check_config(cfg, ACC, load_json=loader(zero3)))


@pytest.mark.parametrize(
    ("data", "fmt", "path", "suggestion"),
    [
        ({"deepspeed_config": {"zero_stag": 3}}, ACC, "deepspeed_config.zero_stag", "zero_stage"),
        ({"parallelism_config": {"dp_shard_size": 2}}, ACC, "parallelism_config.dp_shard_size",
         "parallelism_config_dp_shard_size"),
        ({"fsdp_config": {"fsdp_backward_prefetch_policy": "BACKWARD_PRE"}}, ACC,
         "fsdp_config.fsdp_backward_prefetch_policy", "fsdp_backward_prefetch"),
        ({"mixed_precison": "bf16"}, ACC, "mixed_precison", "mixed_precision"),
        ({"zero_optimization": {"stage": 3, "offload_parm": {}}}, DS, "zero_optimization.offload_parm",
         "offload_param"),
        ({"zero_optimization": {"stage": 3, "offload_param": {"devic": "cpu"}}}, DS,
         "zero_optimization.offload_param.devic", "device"),
        ({"gradient_acumulation_steps": 4}, AX, "gradient_acumulation_steps", "gradient_accumulation_steps"),
        ({"fsdp_config": {"ofload_params": True}}, AX, "fsdp_config.ofload_params", "offload_params"),
    ],
)  # fmt: skip
def test_unknown_keys_at_any_depth_get_a_did_you_mean(data: Any, fmt: str, path: str, suggestion: str) -> None:
    found = [f for f in check_config(data, fmt) if f.path == path]
    assert found and f"did you mean '{suggestion}'" in found[0].fix


def test_accelerate_reads_fsdp_fp8_and_dynamo_keys_without_their_prefix() -> None:
    cfg = {
        "fsdp_config": {"version": 2, "offload_params": True, "activation_checkpointing": True},
        "fp8_config": {"backend": "TE", "amax_history_len": 16, "use_mxfp8_block_scaling": False},
        "dynamo_config": {"backend": "INDUCTOR", "mode": "max-autotune"},
    }
    assert "acc-unknown-nested-key" not in checks_of(check_config(cfg, ACC))
    misplaced = check_config({"zero_stage": 2, "deepspeed_config": {"train_micro_batch_size_per_gpu": 1}}, ACC)
    fixes = {f.path: f.fix for f in misplaced}
    assert "deepspeed_config" in fixes["zero_stage"]
    assert "deepspeed_config_file" in fixes["deepspeed_config.train_micro_batch_size_per_gpu"]


# ---------------------------------------------------------------------------------------------
# Referenced files, ordering, formats
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("error", "check"),
    [
        (FileNotFoundError("x"), "ds-file-missing"),
        (ValueError("duplicate key 'stage'"), "ds-file-invalid"),
        (PermissionError("denied"), "ds-file-invalid"),
        (["not", "an", "object"], "ds-file-invalid"),
    ],
)
def test_a_referenced_json_that_cannot_be_used_is_one_error(error: object, check: str) -> None:
    for fmt, cfg, at in (
        (AX, {"deepspeed": "ds.json"}, "deepspeed"),
        (
            ACC,
            {
                "distributed_type": "DEEPSPEED",
                "num_processes": 1,
                "deepspeed_config": {"deepspeed_config_file": "ds.json"},
            },
            "deepspeed_config.deepspeed_config_file",
        ),
    ):
        found = [f for f in check_config(cfg, fmt, load_json=loader({"ds.json": error})) if f.severity == "error"]
        assert [(f.check, f.path) for f in found] == [(check, at)]


def test_findings_are_errors_then_warnings_then_info_each_in_file_order() -> None:
    cfg = {
        "distributed_type": "DEEPSPEED",
        "num_processes": 2,
        "deepspeed_config": {"deepspeed_config_file": "ds.json", "zero_stage": 3},
        "tpu_use_cluster": True,
        "gpu_ids": 0,
    }
    ds = {**ZERO2, "zero_optimization": {"stage": 1, "offload_optimizer": {"device": "cpu"}}, "amp": {}}
    findings = check_config(cfg, ACC, load_json=loader({"ds.json": ds}))
    ranks = [SEVERITIES.index(f.severity) for f in findings]
    assert ranks == sorted(ranks)
    # A referenced file's findings sit at the key that names the file.
    errors = [f.path for f in findings if f.severity == "error"]
    assert errors == ["ds.json:amp", "deepspeed_config.zero_stage", "gpu_ids"]
    warnings = [f.path for f in findings if f.severity == "warning"]
    assert warnings.index("ds.json:zero_optimization.offload_optimizer.device") < warnings.index("tpu_use_cluster")
    assert [f.path for f in findings if f.severity == "info"] == ["deepspeed_config.deepspeed_config_file"]


@pytest.mark.parametrize(
    ("data", "fmt"),
    [
        ({"zero_optimization": {"stage": 2}, "base_model": "x"}, DS),
        ({"distributed_type": "NO"}, ACC),
        ({"compute_environment": "LOCAL_MACHINE"}, ACC),
        ({"base_model": "m", "fsdp_config": {}}, AX),
        ({"deepspeed": "zero2.json"}, AX),
        ({"fsdp_version": 2, "fsdp_config": {}}, AX),
        ({"micro_batch_size": 1, "fp8_config": {}}, AX),
        ({"fsdp_config": {"fsdp_version": 2}}, ACC),
        ({"fp8_config": {"backend": "TE"}}, ACC),
        ({"fsdp_sharding_strategy": "FULL_SHARD"}, ACC),
        ({"parallelism_config_tp_size": 2}, ACC),
        ({"train_batch_size": 8, "bf16": {"enabled": True}}, DS),
        ({}, NONE),
        ([1, 2], ACC),
        ("text", ACC),
        # A cloud launcher's YAML (gpu, gpu_count, branch ...) is none of the three formats.
        ({"provider": "modal", "gpu": "h100", "gpu_count": 8, "branch": "main", "volumes": []}, NONE),
        # A TRL CLI config shares learning_rate and attn_implementation with Axolotl, nothing more.
        ({"model_name_or_path": "m", "dataset_name": "d", "learning_rate": 1e-4, "attn_implementation": "sdpa",
          "lr_scheduler_type": "cosine"}, NONE),
        # Mostly Axolotl keys, one of them its own: Axolotl, even with some unknown keys.
        ({"base_model": "m", "learning_rate": 1e-4, "my_note": "x"}, AX),
    ],
)  # fmt: skip
def test_detect_format(data: object, fmt: str) -> None:
    assert detect_format(data) == fmt


@pytest.mark.parametrize(
    ("data", "fmt"),
    [
        # A DeepSpeed JSON without zero_optimization and with a key DeepSpeed no longer knows.
        ({"train_batch_size": 8, "fp16": {"enabled": True}, "sparse_attention": {"mode": "fixed"}}, DS),
        ({"train_batch_size": 8, "my_own_key": 1}, DS),
        ({"distributed_type": "NO"}, ACC),  # accelerate reads a JSON config file too
        ({"name": "pkg", "version": "1.0"}, NONE),  # some other JSON
        ({"base_model": "m", "datasets": []}, NONE),  # Axolotl reads YAML only
        ([1, 2], DS),
    ],
)  # fmt: skip
def test_a_json_file_is_deepspeed_or_none_of_the_formats(data: object, fmt: str) -> None:
    assert detect_format(data, ".json") == fmt


def test_a_file_of_none_of_the_formats_gets_one_info_and_nothing_else() -> None:
    findings = check_config({"gpu": "h100", "gpu_count": 8, "distributed": True}, NONE)
    assert [(f.check, f.severity) for f in findings] == [("not-a-config", "info")]
    assert "'gpu'" in findings[0].message and "--format" in findings[0].fix


def test_an_unknown_format_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="unknown format"):
        check_config({}, "megatron")


# ---------------------------------------------------------------------------------------------
# Patterns of the upstream projects' configs (tests/check_patterns.py; the real tools' verdicts
# on the same files are in tests/test_real_tools.py)
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("pattern", PATTERNS, ids=[p.name for p in PATTERNS])
def test_upstream_patterns_get_the_findings_the_real_tool_stands_for(
    pattern: Pattern, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from wizard.cli import main

    path = write(pattern, tmp_path)
    monkeypatch.chdir(tmp_path)
    world = ["--world-size", str(pattern.world_size)] if pattern.world_size else []
    code = main(["check", "--output", "json", path.name, *world])
    findings = json.loads(capsys.readouterr().out)["findings"]
    assert {f["format"] for f in findings} <= {pattern.fmt}
    errors = {f["check"] for f in findings if f["severity"] == "error"}
    warnings = {f["check"] for f in findings if f["severity"] == "warning"}
    assert errors == pattern.errors, findings
    assert pattern.warnings <= warnings, findings
    assert not pattern.absent & {f["check"] for f in findings}, findings
    assert code == (1 if pattern.errors else 0)
    # An error where the real tool refuses the file (tests/test_real_tools.py checks its reason); a
    # file of none of the formats is refused by the tool it was mistaken for, and has no error here.
    assert bool(pattern.errors) == bool(pattern.rejects) or pattern.fmt == "none"


# ---------------------------------------------------------------------------------------------
# The wizard's own outputs
# ---------------------------------------------------------------------------------------------


def wizard_outputs(tmp_path: Path) -> list[tuple[str, str, object, dict[str, str], int]]:
    """(case, file name, parsed data, all files of that run, processes): scenario rows, extra cases, examples."""
    from test_real_tools import extra_cases

    cases = {f"row{row}": answers for row, answers in ANSWERS.items()} | extra_cases(tmp_path)
    cases |= {path.stem: yaml.safe_load(path.read_text()) for path in sorted((REPO / "examples").glob("*.yaml"))}
    out = []
    for name, answers in cases.items():
        result = decide(answers, tmp_path / name, write=False)
        files = {f.name: f.text for f in result.files}
        for file_name, text in files.items():
            if file_name.endswith((".yaml", ".json")) and file_name != "answers.yaml":
                data = json.loads(text) if file_name.endswith(".json") else yaml.safe_load(text)
                out.append((name, file_name, data, files, result.recommendation.settings["num_processes"]))
    return out


def test_no_file_the_wizard_writes_has_an_error_finding(tmp_path: Path) -> None:
    outputs = wizard_outputs(tmp_path)
    formats = {(file_name, detect_format(data)) for _, file_name, data, _, _ in outputs}
    assert formats == {("accelerate_config.yaml", ACC), ("axolotl.yaml", AX), ("ds_config.json", DS)}
    for name, file_name, data, files, processes in outputs:

        def load_json(path: str, files: dict[str, str] = files) -> object:
            return json.loads(files[path] if path in files else Path(path).read_text(encoding="utf-8"))

        findings = check_config(data, detect_format(data), world_size=processes, load_json=load_json)
        assert not [f for f in findings if f.severity == "error"], (name, file_name, findings)
        # The referenced JSON was read and checked, not skipped.
        assert "acc-ds-file-info" not in checks_of(findings) and "ax-deepspeed-not-checked" not in checks_of(findings)


# ---------------------------------------------------------------------------------------------
# Robustness and isolation
# ---------------------------------------------------------------------------------------------

_KEYS = known_keys()
_KEY_POOL = sorted(
    _KEYS.accelerate_top
    | _KEYS.deepspeed_top
    | _KEYS.axolotl_top
    | _KEYS.axolotl_fsdp
    | frozenset().union(*_KEYS.accelerate_nested.values(), *_KEYS.deepspeed_sections.values())
    | {"deepseed_config", "deepspeed_config", "zero_optimization", "amp", "fsdp", "quantization_config"}
)
_WORDS = ["auto", "cpu", "nvme", "none", "NO", "FSDP", "DEEPSPEED", "MULTI_GPU", "TRANSFORMER_BASED_WRAP",
          "LOCAL_STATE_DICT", "fp8", "bf16", "no", "qlora", "2", "zero3.json", "ds.json", "TE", "msamp", "eager",
          "flash_attention_2", "a/b", "SIZE_BASED_WRAP", "true", "false", "O3"]  # fmt: skip
_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-3, max_value=20)
    | st.integers()
    | st.floats()
    | st.text(max_size=6)
    | st.sampled_from(_WORDS)
)
_keys = st.sampled_from(_KEY_POOL) | st.text(max_size=6) | st.integers(-1, 3) | st.booleans() | st.none()
_values = st.recursive(
    _scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_keys, inner, max_size=6), max_leaves=25
)
_documents = st.dictionaries(_keys, _values, max_size=10) | _values


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    data=_documents,
    fmt=st.sampled_from([ACC, DS, AX]),
    world_size=st.none() | st.integers(min_value=-2, max_value=64),
    referenced=_documents | st.sampled_from([FileNotFoundError("x"), ValueError("bad"), OSError("io")]),
)
def test_any_data_gives_findings_never_an_exception(
    data: object, fmt: str, world_size: int | None, referenced: object
) -> None:
    def load_json(path: str) -> object:
        if isinstance(referenced, BaseException):
            raise referenced
        return referenced

    findings = check_config(data, fmt, world_size=world_size, load_json=load_json)
    assert isinstance(findings, list)
    for finding in findings:
        assert isinstance(finding, Finding)
        info = BY_ID[finding.check]
        assert (finding.severity, finding.tag) == (info.severity, info.tag)
        assert isinstance(finding.path, str) and finding.message and finding.fix
    assert isinstance(detect_format(data), str)


def test_the_checker_imports_none_of_the_real_tools() -> None:
    code = textwrap.dedent(
        """
        import json, sys
        from wizard.checks import check_config
        check_config({"distributed_type": "DEEPSPEED", "deepspeed_config": {"deepspeed_config_file": "d.json"},
                      "fsdp_config": {"fsdp_version": 2}, "parallelism_config": {"parallelism_config_tp_size": 2},
                      "fp8_config": {"backend": "TE"}}, "accelerate", load_json=lambda p: {"zero_optimization": {}})
        check_config({"zero_optimization": {"stage": 3}, "bf16": {"enabled": True}}, "deepspeed", world_size=8)
        check_config({"base_model": "m", "deepspeed": {"zero_optimization": {"stage": 2}}, "fsdp_version": 2,
                      "fsdp_config": {"offload_params": True}}, "axolotl", world_size=8)
        sys.stdout.write(json.dumps(sorted({m.split(".")[0] for m in sys.modules})))
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    loaded = set(json.loads(proc.stdout))
    assert "wizard" in loaded
    assert not loaded & {"accelerate", "deepspeed", "axolotl", "torch", "transformers", "pydantic"}


# ---------------------------------------------------------------------------------------------
# wizard/data/check_keys.yaml against the installed tools (pinned in requirements/tools.txt)
# ---------------------------------------------------------------------------------------------


def raw_keys() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(
        resources.files("wizard.data").joinpath("check_keys.yaml").read_text(encoding="utf-8")
    )
    return data


def field_names(model: Any) -> set[str]:
    """A pydantic model's field names plus every alias it accepts."""
    names = set()
    for name, info in model.model_fields.items():
        names.add(name)
        for alias in (info.alias, info.validation_alias):
            if isinstance(alias, str):
                names.add(alias)
            elif alias is not None:
                names.update(c for c in getattr(alias, "choices", ()) if isinstance(c, str))
    return names


@pytest.mark.tools
def test_accelerate_key_lists_match_the_installed_accelerate() -> None:
    config_args = require_tool("accelerate.commands.config.config_args")
    launch = require_tool("accelerate.commands.launch")
    acc = raw_keys()["accelerate"]
    assert acc["version"] == require_tool("accelerate").__version__
    assert set(acc["top_level"]) == {f.name for f in dataclasses.fields(config_args.ClusterConfig)}
    groups = {g.title: {a.dest for a in g._group_actions} for g in launch.launch_command_parser()._action_groups}
    flags = {
        "deepspeed_config": groups["DeepSpeed Arguments"],
        "fsdp_config": groups["FSDP Arguments"],
        "parallelism_config": groups["ParallelismConfig Arguments"],
        "fp8_config": groups["FP8 Arguments"],
        "dynamo_config": {d for d in groups["Resource Selection Arguments"] if d.startswith("dynamo_")},
        "megatron_lm_config": groups["Megatron-LM Arguments"],
        "mpirun_config": groups["MPI Arguments"],
    }
    # Read by the launcher from the copied namespace although no flag declares them.
    read_without_flag = {"fsdp_config": {"fsdp_ignored_modules"}, "fp8_config": {"fp8_use_mxfp8_block_scaling"}}
    assert set(acc["nested"]) == set(flags)
    for section, keys in flags.items():
        assert set(acc["nested"][section]) == keys | read_without_flag.get(section, set()), section


def _deepspeed_top_level_keys(ds_config: Any) -> set[str]:
    """The top-level keys DeepSpeedConfig reads, recorded while it parses a few sample configs."""
    seen: set[str] = set()

    class Keys(list[Any]):
        def __contains__(self, key: object) -> bool:
            seen.add(str(key))
            return list.__contains__(self, key)

    class Recording(dict[str, Any]):
        def get(self, key: Any, *default: Any) -> Any:
            seen.add(key)
            return super().get(key, *default)

        def __contains__(self, key: object) -> bool:
            seen.add(str(key))
            return super().__contains__(key)

        def __getitem__(self, key: str) -> Any:
            seen.add(key)
            return super().__getitem__(key)

        def keys(self) -> Any:
            return Keys(super().keys())

    samples: list[dict[str, Any]] = [
        {"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 0}},
        {"train_batch_size": 8, "fp16": {"enabled": True}, "optimizer": {"type": "AdamW", "params": {}},
         "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 1}}, "zero_optimization": {"stage": 3}},
        {"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True}, "zero_optimization": {"stage": 2}},
    ]  # fmt: skip
    for sample in samples:
        with (
            mock.patch.object(ds_config.dist, "get_rank", return_value=0),
            mock.patch.object(ds_config.dist, "get_world_size", return_value=1),
        ):
            ds_config.DeepSpeedConfig(Recording(sample))
    return seen


@pytest.mark.tools
def test_deepspeed_key_lists_match_the_installed_deepspeed() -> None:
    ds_config = require_tool("deepspeed.runtime.config")
    zero = require_tool("deepspeed.runtime.zero.config").DeepSpeedZeroConfig
    offload = require_tool("deepspeed.runtime.zero.offload_config")
    precision = require_tool("deepspeed.runtime.precision_config")
    compile_config = require_tool("deepspeed.compile.config").CompileConfig
    ds = raw_keys()["deepspeed"]
    assert ds["version"] == require_tool("deepspeed").__version__
    removed = set(ds_config._REMOVED_TOP_LEVEL_CONFIG_KEYS)
    assert set(ds["removed_top_level"]) == removed
    assert set(ds["removed_zero_optimization"]) == set(ds_config._REMOVED_ZERO_CONFIG_KEYS)
    assert set(ds["top_level"]) == _deepspeed_top_level_keys(ds_config) - removed
    assert ds["sections"] == {
        "zero_optimization": sorted(field_names(zero)),
        "zero_optimization.offload_optimizer": sorted(field_names(offload.DeepSpeedZeroOffloadOptimizerConfig)),
        "zero_optimization.offload_param": sorted(field_names(offload.DeepSpeedZeroOffloadParamConfig)),
        "bf16": sorted(field_names(precision.DeepSpeedBF16Config)),
        "fp16": sorted(field_names(precision.DeepSpeedFP16Config)),
        "compile": sorted(field_names(compile_config)),
    }
    assert ds["zero_optimization_aliases"] == {n: f.alias for n, f in zero.model_fields.items() if f.alias}
    bounds: dict[str, dict[str, dict[str, float]]] = {}
    for section, model in (
        ("zero_optimization", zero),
        ("zero_optimization.offload_optimizer", offload.DeepSpeedZeroOffloadOptimizerConfig),
        ("zero_optimization.offload_param", offload.DeepSpeedZeroOffloadParamConfig),
    ):
        bounds[section] = {}
        for name, info in model.model_fields.items():
            limits = {op: getattr(m, op) for m in info.metadata for op in ("gt", "ge", "lt", "le") if hasattr(m, op)}
            bounds[section].update({key: limits for key in {name, info.alias} - {None} if limits})
    assert ds["bounds"] == bounds
    deprecated = {
        n: f.json_schema_extra for n, f in zero.model_fields.items() if (f.json_schema_extra or {}).get("deprecated")
    }
    assert ds["zero_optimization_deprecated"] == {
        n: "" if extra.get("set_new_param") is False else extra["new_param"] for n, extra in deprecated.items()
    }


def value_kinds(annotation: Any) -> set[str] | None:
    """The JSON kinds a pydantic field annotation takes (int, float, str, bool, list, dict, null).

    None when the annotation admits anything the checker cannot tell apart (Any, a custom type).
    """
    import enum
    import types
    import typing

    from pydantic import BaseModel

    origin = typing.get_origin(annotation)
    if annotation is type(None):
        return {"null"}
    if origin is typing.Annotated:
        return value_kinds(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        kinds: set[str] = set()
        for member in typing.get_args(annotation):
            found = value_kinds(member)
            if found is None:
                return None
            kinds |= found
        return kinds
    simple = {bool: "bool", int: "int", float: "float", str: "str"}
    if annotation in simple:
        return {simple[annotation]}
    if origin in (list, tuple, set, frozenset) or annotation in (list, tuple, set, frozenset):
        return {"list"}
    if origin is dict or annotation is dict or (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
        return {"dict"}
    if origin is typing.Literal:
        literal_kinds: set[str] = set()
        for value in typing.get_args(annotation):
            found = {"null"} if value is None else value_kinds(type(value))
            if found is None:
                return None
            literal_kinds |= found
        return literal_kinds
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum) and issubclass(annotation, str):
        return {"str"}
    return None


def field_kinds(model: Any) -> dict[str, list[str]]:
    """Every field (and alias) of a pydantic model whose kinds `value_kinds` can tell, sorted."""
    table: dict[str, list[str]] = {}
    for name, info in model.model_fields.items():
        kinds = value_kinds(info.annotation)
        if kinds is None:
            continue
        for key in field_names(type("One", (), {"model_fields": {name: info}})):
            table[key] = sorted(kinds)
    return table


def removed_keys(model: Any) -> dict[str, str]:
    """The fields whose validators raise DeprecationWarning: "set" for any value, "true" for a true one."""
    samples = {"bool": True, "int": 1, "float": 1.0, "str": "x"}
    removed = {}
    for name, info in model.model_fields.items():
        kinds = sorted((value_kinds(info.annotation) or {"dict"}) - {"null"})
        for when, value in (("set", False if kinds == ["bool"] else 0), ("true", samples.get(kinds[0], {"a": 1}))):
            try:
                model(**{name: value})
            except DeprecationWarning:
                removed[name] = when
                break
            except Exception:  # another type: not this sample
                continue
    return removed


def plugin_args(plugin: str) -> Any:
    """The pydantic class of a plugin's config keys (``get_input_args`` names it)."""
    module, name = plugin.rsplit(".", 1)
    args_module, args_name = getattr(importlib.import_module(module), name)().get_input_args().rsplit(".", 1)
    return getattr(importlib.import_module(args_module), args_name)


@pytest.mark.tools
def test_axolotl_key_lists_match_the_installed_axolotl() -> None:
    schema = require_tool("axolotl.utils.schemas.config")
    fsdp = require_tool("axolotl.utils.schemas.fsdp")
    base = require_tool("axolotl.integrations.base")
    ax = raw_keys()["axolotl"]
    assert ax["version"] == require_tool("axolotl").__version__
    assert set(ax["top_level"]) == field_names(schema.AxolotlInputConfig)
    assert set(ax["fsdp_config"]) == field_names(fsdp.FSDPConfig)
    assert (
        set(ax["attn_supporting_packing"]) == require_tool("axolotl.utils.schemas.enums").ATTN_IMPLS_SUPPORTING_PACKING
    )
    assert ax["builtin_plugins"] == list(base.BUILTIN_PLUGINS)
    builtin: set[str] = set()
    for plugin in base.BUILTIN_PLUGINS:
        builtin |= field_names(plugin_args(plugin))
    assert set(ax["builtin_plugin_fields"]) == builtin
    # Other bundled integrations: compare those whose optional dependencies are installed here.
    compared = 0
    for plugin, keys in ax["plugin_fields"].items():
        try:
            args = plugin_args(plugin)
        except Exception:  # an integration whose optional dependency is not installed
            continue
        assert set(keys) == field_names(args), plugin
        compared += 1
    assert compared >= 5


def test_the_wrap_policy_warning_says_what_to_do(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # An FSDP2 run writes TRANSFORMER_BASED_WRAP without layer classes; the warning it prints must
    # tell a reader whether to act (not for a Transformers model) and what to set otherwise.
    from wizard.cli import main

    answers = tmp_path / "answers.yaml"
    answers.write_text(
        yaml.safe_dump(
            {"target": "accelerate", "hardware": "nvidia", "gpu_model": "A100 80GB", "gpus_per_node": 4}
            | {"model": "7B", "method": "full"}
        )
    )
    monkeypatch.setenv("COLUMNS", "80")
    code = main(["--answers", str(answers), "--dry-run", "--output-dir", str(tmp_path / "out")])
    out = " ".join(capsys.readouterr().out.split())
    assert code == 0
    # The action first, for those who need it; a Transformers model needs nothing, and it says so.
    assert "right for a Transformers model, which names them" in out and "no action needed" not in out
    assert "A model class of your own may name none: then set fsdp_transformer_layer_cls_to_wrap" in out
