"""Every path through the decision tree, with representative numbers.

The choice answers (target, hardware, method, offload, gradient checkpointing, an existing
DeepSpeed JSON or not) are enumerated completely; the numbers (model 0.5B to 405B, 1 to 64 GPUs,
16 to 192 GB per GPU, 1 to 8 nodes) rotate through their representative values so that each value
meets many choice combinations, and a second pass crosses all numbers for one common choice set.
A third pass covers the other hardware (TPU with and without torch_xla, Gaudi, XPU, NPU, MLU, MUSA;
one device or several, one machine or two) and the topology and parallelism answers (Ray,
Megatron-LM, context parallel for long sequences with and without a DeepSpeed JSON, a tensor
parallel size, a mixture-of-experts model).
Used by tests/test_paths.py and bench/paths.py.
"""

from __future__ import annotations

import itertools
import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

MODELS = ["0.5B", "1.3B", "7B", "13B", "70B", "405B"]
GPUS = [1, 2, 8, 64]
MEMORY = [16, 24, 80, 192]
NODES = [1, 2, 8]
TARGETS = ["accelerate", "axolotl"]
HARDWARE = ["nvidia", "amd", "cpu", "mps"]
METHODS = ["full", "lora", "qlora"]
OFFLOAD = ["auto", "none", "cpu", "nvme"]


def _json_once(path: Path, data: dict[str, Any]) -> str:
    """Write `data` as JSON at `path` unless it is there already; the path as text."""
    if not path.exists():
        path.write_text(json.dumps(data))
    return str(path)


_AUTO_BATCH = {
    "train_batch_size": "auto",
    "train_micro_batch_size_per_gpu": "auto",
    "gradient_accumulation_steps": "auto",
}


def deepspeed_json(folder: Path) -> str:
    """A small valid ZeRO-3 JSON with "auto" batch sizes, written once."""
    zero = {"stage": 3, "offload_optimizer": {"device": "cpu"}}
    return _json_once(folder / "zero3.json", {**_AUTO_BATCH, "bf16": {"enabled": "auto"}, "zero_optimization": zero})


def enumerate_paths(folder: Path) -> Iterator[dict[str, Any]]:
    """Answers for every path (some are invalid on purpose: cpu for Axolotl, qlora on mps...)."""
    ds = deepspeed_json(folder)
    numbers = itertools.cycle(itertools.product(MODELS, GPUS, MEMORY, NODES))
    for target, hardware, method, offload, checkpointing, with_json in itertools.product(
        TARGETS, HARDWARE, METHODS, OFFLOAD, (True, False), (True, False)
    ):
        model, gpus, memory, nodes = next(numbers)
        answers: dict[str, Any] = {
            "target": target,
            "hardware": hardware,
            "model": model,
            "method": method,
            "sequence_length": 2048,
            "micro_batch_size": 1,
        }
        if hardware in ("nvidia", "amd"):
            answers.update(
                gpus_per_node=gpus,
                num_nodes=nodes,
                gpu_memory_gb=memory,
                offload=offload,
                gradient_checkpointing=checkpointing,
            )
            if with_json:
                answers["deepspeed_config"] = ds
                del answers["offload"]
            if offload == "nvme" and not with_json:
                answers["nvme_path"] = "/local_nvme"
        elif hardware == "mps":
            answers.update(gpu_memory_gb=memory, gradient_checkpointing=checkpointing)
        else:
            answers["cpu_processes"] = 1 if gpus == 1 else 4
        yield answers
    for model, gpus, memory, nodes in itertools.product(MODELS, GPUS, MEMORY, NODES):
        yield {
            "target": "accelerate",
            "hardware": "nvidia",
            "model": model,
            "method": "full",
            "offload": "auto",
            "gpus_per_node": gpus,
            "num_nodes": nodes,
            "gpu_memory_gb": memory,
        }
    yield from _other_hardware()
    yield from _topologies(ds)
    yield from _journeys(folder)
    yield from _offload_and_long_context(ds)
    yield from _moe_zero3(ds)
    yield from _layer_offload()
    yield from _preference()


OTHER_HARDWARE = ["hpu", "xpu", "npu", "mlu", "musa"]


def _other_hardware() -> Iterator[dict[str, Any]]:
    for method, devices in itertools.product(["full", "lora"], [1, 8]):
        for torch_xla in (True, False):
            answers: dict[str, Any] = {"target": "accelerate", "hardware": "tpu", "torch_xla": torch_xla}
            if torch_xla:
                answers["gpus_per_node"] = devices
            yield {**answers, "model": "1B", "method": method, "sequence_length": 2048, "micro_batch_size": 1}
        for hardware, nodes in itertools.product(OTHER_HARDWARE, [1, 2]):
            yield {
                "target": "accelerate",
                "hardware": hardware,
                "gpus_per_node": devices,
                "num_nodes": nodes,
                "gpu_memory_gb": 96,
                "model": "7B",
                "method": method,
                "sequence_length": 2048,
                "micro_batch_size": 1,
            }


def _topologies(ds: str) -> Iterator[dict[str, Any]]:
    gpu = {"hardware": "nvidia", "gpu_model": "H100", "gpu_memory_gb": 80, "micro_batch_size": 1}
    for nodes, model in itertools.product([1, 2, 4], ["8B", "70B"]):
        common = {**gpu, "gpus_per_node": 8, "num_nodes": nodes, "model": model, "method": "full"}
        yield {**common, "target": "axolotl", "use_ray": True, "sequence_length": 4096}
        yield {**common, "target": "accelerate", "megatron": True, "sequence_length": 4096}
        for target, with_json in itertools.product(TARGETS, (False, True)):
            long = {**common, "target": target, "sequence_length": 65536}
            yield {**long, "deepspeed_config": ds} if with_json else long
        for tp in (2, 8):
            yield {
                **common,
                "target": "accelerate",
                "model_parallel": True,
                "tensor_parallel_size": tp,
                "sequence_length": 4096,
            }
    for target in TARGETS:
        yield {
            **gpu,
            "target": target,
            "gpus_per_node": 8,
            "num_nodes": 1,
            "model": "30B-A3B",
            "method": "full",
            "sequence_length": 4096,
        }


def plain_zero3_json(folder: Path) -> str:
    """A ZeRO-3 JSON without offload (bf16 on), written once."""
    data = {**_AUTO_BATCH, "bf16": {"enabled": True}, "zero_optimization": {"stage": 3}}
    return _json_once(folder / "zero3_plain.json", data)


# Journeys users commonly take: one consumer GPU with LoRA, cloud multi-GPU QLoRA of a mixture of
# experts, several machines, a brought JSON that does not fit, a Mac. Each with both targets and
# with the offload answers that change the decision.
def _journeys(folder: Path) -> Iterator[dict[str, Any]]:
    zero3 = plain_zero3_json(folder)
    consumer = {"hardware": "nvidia", "gpu_model": "RTX 4090", "gpus_per_node": 1, "gpu_memory_gb": 24}
    for target, model, method, offload in itertools.product(
        TARGETS, ["7B", "8B", "13B"], METHODS, ["auto", "none", "cpu"]
    ):
        yield {
            **consumer,
            "target": target,
            "cpu_memory_gb": 64,
            "model": model,
            "method": method,
            "offload": offload,
            "sequence_length": 2048,
        }
    # Several consumer cards in one machine, with and without peer-to-peer (RTX 40/50 against 30),
    # and two machines of them.
    for target, card, nodes in itertools.product(TARGETS, ["RTX 4090", "RTX 5090", "RTX 3090"], [1, 2]):
        yield {
            **consumer,
            "target": target,
            "gpu_model": card,
            "gpus_per_node": 2,
            "num_nodes": nodes,
            "gpu_memory_gb": 31 if card == "RTX 5090" else 24,
            "cpu_memory_gb": 128,
            "model": "8B",
            "method": "lora",
            "sequence_length": 2048,
        }
    for target, model, method, gpus in itertools.product(TARGETS, ["8x7B", "30B-A3B"], METHODS, [2, 4, 8]):
        yield {
            "target": target,
            "hardware": "nvidia",
            "gpu_model": "A10G",
            "gpus_per_node": gpus,
            "gpu_memory_gb": 24,
            "cpu_memory_gb": 192,
            "model": model,
            "method": method,
            "sequence_length": 4096,
            "micro_batch_size": 1,
        }
    for target, model, nodes, json_file in itertools.product(
        TARGETS, ["13B", "70B"], [2, 4], [zero3, deepspeed_json(folder)]
    ):
        yield {
            "target": target,
            "hardware": "nvidia",
            "gpu_model": "H100",
            "gpus_per_node": 8,
            "num_nodes": nodes,
            "gpu_memory_gb": 80,
            "model": model,
            "method": "full",
            "cpu_memory_gb": 512,
            "deepspeed_config": json_file,
        }
    for model, method, memory in itertools.product(["1B", "3B", "8B"], ["full", "lora"], [16, 36, 64]):
        yield {"target": "accelerate", "hardware": "mps", "gpu_memory_gb": memory, "model": model, "method": method}


# NVMe offload of big dense and MoE models (DeepSpeed sizes its swap buffers from the largest
# tensor), with little and with plenty of host RAM (pipelined optimizer swapping); and long
# sequences that make the wizard pick context parallelism, on GPUs with and without FlashAttention,
# with lengths that do and do not divide by the CP chunking.
def _offload_and_long_context(ds: str) -> Iterator[dict[str, Any]]:
    for target, model, gpus, host in itertools.product(
        TARGETS, ["13B", "70B", "405B", "8x7B", "30B-A3B"], [1, 8], [64, 2048]
    ):
        yield {
            "target": target,
            "hardware": "nvidia",
            "gpu_model": "RTX 4090" if gpus == 1 else "H100",
            "gpus_per_node": gpus,
            "cpu_memory_gb": host,
            "model": model,
            "method": "full",
            "offload": "nvme",
            "nvme_path": "/mnt/nvme",
            "sequence_length": 2048,
        }
    for target, (hardware, gpu), (model, nodes, length), method in itertools.product(
        TARGETS,
        [("nvidia", "H100"), ("amd", "MI300X")],
        [("8B", 1, 131072), ("8B", 1, 98765), ("70B", 2, 65536)],
        ["full", "qlora"],
    ):
        yield {
            "target": target,
            "hardware": hardware,
            "gpu_model": gpu,
            "gpus_per_node": 8,
            "num_nodes": nodes,
            "model": model,
            "method": method,
            "sequence_length": length,
            "micro_batch_size": 1,
        }
    long = {"hardware": "nvidia", "gpu_model": "H100", "gpus_per_node": 8, "model": "8B", "method": "full"}
    long = {**long, "sequence_length": 131072, "micro_batch_size": 1}
    # A CP size past one machine, with SDPA (AMD): Axolotl's Ulysses split cannot take it.
    yield {**long, "target": "axolotl", "hardware": "amd", "gpu_model": "MI300X", "num_nodes": 2}
    yield {
        **long,
        "target": "axolotl",
        "hardware": "amd",
        "gpu_model": "MI300X",
        "num_nodes": 2,
        "context_parallel_size": 16,
    }
    # A brought DeepSpeed JSON: the split becomes DeepSpeed sequence parallelism.
    yield {**long, "target": "accelerate", "deepspeed_config": ds, "context_parallel_size": 4}


# Mixture-of-experts models under Accelerate + DeepSpeed ZeRO-3, with a brought JSON and with the
# stage the wizard picks: size aliases that name their model (8x7B and 8x22B are Mixtral, 30B-A3B
# is Qwen3-MoE) and a total-active size that names none (235B-A22B: its MoE block class is unknown).
def _moe_zero3(ds: str) -> Iterator[dict[str, Any]]:
    gpu = {"target": "accelerate", "hardware": "nvidia", "gpu_model": "H100", "gpu_memory_gb": 80}
    run = {"method": "full", "sequence_length": 4096, "micro_batch_size": 1}
    for model in ("8x7B", "30B-A3B", "235B-A22B"):
        yield {**gpu, **run, "gpus_per_node": 8, "model": model, "deepspeed_config": ds}
    for model in ("8x22B", "235B-A22B"):
        yield {**gpu, **run, "gpus_per_node": 2, "model": model}


# One GPU just over its memory with LoRA or QLoRA, where Axolotl's layer offloading decides: the
# default (offload auto), offload none and cpu, the answer given either way, host RAM that holds
# the frozen layers or not, and DDP with the answer given.
def _layer_offload() -> Iterator[dict[str, Any]]:
    base = {"hardware": "nvidia", "gpu_model": "A10G", "gpus_per_node": 1, "sequence_length": 8192}
    # Every target, model and offload once; the layer_offloading answer and the host RAM vary
    # along them (a seeded draw) rather than as a full product, which would add 270 paths.
    draw = random.Random(9)
    for target, (model, method), offload in itertools.product(
        TARGETS,
        [("7B", "lora"), ("13B", "lora"), ("13B", "qlora"), ("70B", "qlora"), ("1B", "lora")],
        ["auto", "none", "cpu"],
    ):
        layer, host = draw.choice([None, True, False]), draw.choice([None, 16, 128])
        answers: dict[str, Any] = {**base, "target": target, "model": model, "method": method, "offload": offload}
        if layer is not None:
            answers["layer_offloading"] = layer
        if host is not None:
            answers["cpu_memory_gb"] = host
        yield answers
    for (hardware, gpu), length in itertools.product([("amd", "MI300X"), ("nvidia", "RTX 4090")], [4096, 32768]):
        yield {
            "target": "axolotl",
            "hardware": hardware,
            "gpu_model": gpu,
            "gpus_per_node": 1,
            "model": "70B" if hardware == "amd" else "13B",
            "method": "lora",
            "sequence_length": length,
        }
    # Two consumer cards a whole LoRA copy does not fit: layer offloading beside DDP by default, at a
    # step about as long as FSDP2's; answered no, FSDP2.
    for layer in (None, True, False):
        answers = {
            "target": "axolotl",
            "hardware": "nvidia",
            "gpu_model": "RTX 4090",
            "gpus_per_node": 2,
            "cpu_memory_gb": 62,
            "model": "7B",
            "method": "lora",
            "sequence_length": 12288,
        }
        if layer is not None:
            answers["layer_offloading"] = layer
        yield answers
    for gpus, layer in itertools.product([2, 8], [True, False]):
        yield {
            "target": "axolotl",
            "hardware": "nvidia",
            "gpu_model": "A100",
            "gpus_per_node": gpus,
            "model": "7B",
            "method": "lora",
            "layer_offloading": layer,
            "sequence_length": 2048,
        }


# DPO (preference pairs against a frozen reference model): one consumer GPU, a machine of A100s, two
# of H100s and four A10Gs with host RAM for offload, each method and both targets; an Accelerate
# script that precomputes the reference log-probs; a Mac.
def _preference() -> Iterator[dict[str, Any]]:
    machines = [
        ("RTX 4090", 1, 1, 24, "8B"),
        ("A100", 8, 1, 80, "8B"),
        ("H100", 8, 2, 80, "70B"),
        ("A10G", 4, 1, 24, "13B"),
    ]
    for target, (gpu, gpus, nodes, memory, model), method in itertools.product(TARGETS, machines, METHODS):
        yield {
            "target": target,
            "hardware": "nvidia",
            "gpu_model": gpu,
            "gpus_per_node": gpus,
            "num_nodes": nodes,
            "gpu_memory_gb": memory,
            "cpu_memory_gb": 256,
            "model": model,
            "method": method,
            "objective": "dpo",
            "sequence_length": 2048,
        }
    for gpu, gpus, model in (("A100", 8, "8B"), ("RTX 4090", 1, "1B")):
        yield {
            "target": "accelerate",
            "hardware": "nvidia",
            "gpu_model": gpu,
            "gpus_per_node": gpus,
            "model": model,
            "method": "full",
            "objective": "dpo",
            "reference_log_probs": "precomputed",
            "sequence_length": 2048,
        }
    yield {
        "target": "accelerate",
        "hardware": "mps",
        "gpu_memory_gb": 36,
        "model": "1B",
        "method": "lora",
        "objective": "dpo",
    }
    # QLoRA that must be sharded: Axolotl takes no FSDP2 with a 4-bit base for DPO.
    for target in TARGETS:
        yield {
            "target": target,
            "hardware": "nvidia",
            "gpu_model": "RTX 4090",
            "gpus_per_node": 2,
            "cpu_memory_gb": 128,
            "model": "70B",
            "method": "qlora",
            "objective": "dpo",
        }
