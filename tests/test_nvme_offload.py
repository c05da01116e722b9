"""NVMe offload: DeepSpeed's swap buffers hold the model's largest tensor, and the files say what
DeepSpeed needs besides (its async_io op, built against libaio).

The invariants hold over every NVMe path of the tree walk (tests/paths.py). The tools tier feeds
each distinct ds_config.json to DeepSpeed 0.19.8's own config parser and to the parameter
swapper's own buffer check (``AsyncPartitionedParameterSwapper.get_buffer``), built on the CPU:
its async_io op is replaced by a stand-in handle and its pinned pool by a meta tensor, which are
the only parts that need libaio or memory; the configuration and the assertion are DeepSpeed's.
"""

from __future__ import annotations

import contextlib
import json
import math
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import pytest

from helpers import decide, decided_paths, file
from realtools import deepspeed_parse, require_tool
from wizard.app import Result
from wizard.engine.model_size import ModelShape, shape_for_model
from wizard.engine.nvme_offload import (
    ADAM_SWAP_TENSORS,
    AIO,
    PARAM_BUFFER_SIZE_DEFAULT,
    PIPELINE_OPS,
    brought_nvme_warning,
    nvme_swap,
)

REPRO = {
    "target": "accelerate",
    "hardware": "nvidia",
    "gpu_model": "RTX 4090",
    "gpus_per_node": 1,
    "cpu_memory_gb": 64,
    "model": "13B",
    "method": "full",
    "offload": "nvme",
    "nvme_path": "/mnt/nvme",
    "sequence_length": 2048,
}
LLAMA2_13B_EMBEDDING = 32000 * 5120  # 163,840,000: more than DeepSpeed's default buffer of 1e8


@pytest.fixture(scope="module")
def nvme_paths(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[dict[str, Any], Result]]:
    """Every path of the walk whose ds_config.json (written by the wizard) offloads to NVMe."""
    return decided_paths(tmp_path_factory.mktemp("nvme"), lambda a: a.get("offload") == "nvme")


def ds_config(result: Result) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(file(result, "ds_config.json").text)
    return loaded


def test_the_walk_has_big_nvme_paths(nvme_paths: list[tuple[dict[str, Any], Result]]) -> None:
    models = {str(answers["model"]) for answers, _ in nvme_paths}
    assert {"13B", "70B", "8x7B"} <= models
    assert len(nvme_paths) >= 40
    # Every one of them writes NVMe offload for both the weights and the optimizer state.
    for _, result in nvme_paths:
        zero = ds_config(result)["zero_optimization"]
        assert zero["offload_param"]["device"] == zero["offload_optimizer"]["device"] == "nvme"


def test_buffer_size_holds_the_largest_layer_on_every_nvme_path(
    nvme_paths: list[tuple[dict[str, Any], Result]],
) -> None:
    for answers, result in nvme_paths:
        shape = result.recommendation.facts.shape
        assert shape is not None
        data = ds_config(result)
        param = data["zero_optimization"]["offload_param"]
        assert param["buffer_size"] >= shape.largest_layer_params, answers
        assert param["buffer_size"] >= shape.largest_param_tensor, answers
        assert param["buffer_count"] >= 1
        optimizer = data["zero_optimization"]["offload_optimizer"]
        pipelined = optimizer["pipeline_read"] or optimizer["pipeline_write"]
        assert optimizer["buffer_count"] == ADAM_SWAP_TENSORS * (PIPELINE_OPS if pipelined else 1), answers
        assert optimizer["fast_init"] is False
        assert data["aio"] == AIO
        # Pipelining needs the host RAM answered, and plenty of it.
        assert not pipelined or float(answers["cpu_memory_gb"]) >= 1024, answers


def test_every_nvme_path_states_the_libaio_requirement(nvme_paths: list[tuple[dict[str, Any], Result]]) -> None:
    for answers, result in nvme_paths:
        config = "accelerate_config.yaml" if answers["target"] == "accelerate" else "axolotl.yaml"
        header = file(result, config).text.split("\n#\n")[0]
        assert "libaio-dev" in header and "ds_report" in header and "async_io" in header, header
        assert any("buffer_size" in w for w in result.warnings), result.warnings
        # Said once, in the install-first line, not again in the NVMe warning.
        assert sum("async_io" in w for w in result.warnings) == 1, result.warnings


def test_the_reported_repro_gets_a_buffer_for_the_13b_embedding(tmp_path: Path) -> None:
    result = decide(REPRO, tmp_path)
    shape = result.recommendation.facts.shape
    assert shape is not None and shape.largest_layer_params == LLAMA2_13B_EMBEDDING
    param = ds_config(result)["zero_optimization"]["offload_param"]
    assert LLAMA2_13B_EMBEDDING <= param["buffer_size"] < LLAMA2_13B_EMBEDDING + 1_000_000
    warning = next(w for w in result.warnings if "NVMe offload at /mnt/nvme" in w)
    assert "164,000,000" in warning and "pin about" in warning
    # 64 GB of host RAM cannot hold pipelined optimizer swapping for a 13B model.
    assert "not pipelined" in warning


@pytest.mark.parametrize("model", ["1.3B", "13B", "70B", "405B", "8x7B", "8x22B", "30B-A3B"])
def test_nvme_swap_sizes(model: str) -> None:
    shape = shape_for_model(model)
    swap = nvme_swap(shape, world_size=8, processes_per_node=8, cpu_memory_gb=None)
    assert swap.param_buffer_size >= max(shape.largest_param_tensor, PARAM_BUFFER_SIZE_DEFAULT)
    assert swap.param_buffer_size % 1_000_000 == 0
    assert swap.param_buffer_size - shape.largest_param_tensor < 1_000_000 or shape.largest_param_tensor < 1e8
    assert (swap.optimizer_buffer_count, swap.pipeline) == (ADAM_SWAP_TENSORS, False)  # host RAM unknown
    big_host = nvme_swap(shape, world_size=1, processes_per_node=1, cpu_memory_gb=10_000)
    assert (big_host.optimizer_buffer_count, big_host.pipeline) == (ADAM_SWAP_TENSORS * PIPELINE_OPS, True)


def test_moe_experts_count_as_one_fused_tensor() -> None:
    # Transformers 5 stores one layer's experts as gate_up_proj [experts, 2 x intermediate, hidden].
    mixtral = shape_for_model("8x7B")
    assert mixtral.largest_param_tensor == 8 * 2 * 14336 * 4096 > mixtral.largest_layer_params
    dense = shape_for_model("13B")
    assert dense.largest_param_tensor == dense.largest_layer_params == LLAMA2_13B_EMBEDDING


def test_a_brought_json_with_a_small_buffer_is_named() -> None:
    swap = nvme_swap(shape_for_model("13B"), world_size=1, processes_per_node=1, cpu_memory_gb=None)
    nvme = {"device": "nvme", "nvme_path": "/nvme"}
    missing = brought_nvme_warning(swap, {"zero_optimization": {"offload_param": nvme}})
    assert "missing (DeepSpeed's default 100,000,000)" in missing and "at least 163,840,000" in missing
    small = brought_nvme_warning(swap, {"zero_optimization": {"offload_param": {**nvme, "buffer_size": 1e8}}})
    assert "is 100,000,000, below" in small
    enough = {"zero_optimization": {"offload_param": {**nvme, "buffer_size": LLAMA2_13B_EMBEDDING}}}
    assert "buffer_size" not in brought_nvme_warning(swap, enough)
    assert "async_io" in brought_nvme_warning(swap, {"zero_optimization": {"offload_param": {"device": "cpu"}}})


# --- DeepSpeed's own parser and parameter swapper --------------------------------------------------


class _StandInAioHandle:
    """Takes the place of the async_io op's handle (the op needs libaio): pins nothing."""

    def __init__(self, **settings: Any) -> None:
        self.settings = settings

    def new_cpu_locked_tensor(self, numel: int, example: Any) -> Any:
        return example


@contextlib.contextmanager
def param_swapper(ds: dict[str, Any], nvme_dir: Path, world_size: int) -> Iterator[Any]:
    """DeepSpeed 0.19.8's ``AsyncPartitionedParameterSwapper`` for a ds_config, on the CPU.

    The config goes through ``DeepSpeedConfig`` (with ``nvme_path`` pointed at ``nvme_dir``); the
    swapper then reads its buffer size and count from it as at start-up. Rank 0 is reported by
    DeepSpeed's comm module for the duration, the async_io op is the stand-in above, and the
    pinned buffer pool is allocated on the meta device (a 405B model's pool is tens of GB).
    """
    torch = require_tool("torch")
    swapper_module = require_tool("deepspeed.runtime.swap_tensor.partitioned_param_swapper")
    ds = json.loads(json.dumps(ds))
    for section in ("offload_param", "offload_optimizer"):
        block = ds["zero_optimization"].get(section)
        if block and block.get("device") == "nvme":
            block["nvme_path"] = str(nvme_dir)
    config = deepspeed_parse(ds, world_size=world_size)
    real_empty = torch.empty

    def empty_on_meta(*args: Any, **kwargs: Any) -> Any:
        return real_empty(*args, **{**kwargs, "device": "meta"})

    stand_in = types.SimpleNamespace(aio_handle=_StandInAioHandle)
    with (
        mock.patch.object(swapper_module.AsyncIOBuilder, "load", return_value=stand_in),
        mock.patch.object(swapper_module.dist, "get_rank", return_value=0),
    ):
        with mock.patch.object(swapper_module.torch, "empty", empty_on_meta):
            swapper = swapper_module.AsyncPartitionedParameterSwapper(config, torch.bfloat16)
        yield swapper


def partition_numel(numel: int, world_size: int) -> int:
    """What ``Init._partition_param`` passes to ``get_buffer``: the padded tensor / world size."""
    return math.ceil(numel / world_size)


def assign_buffers(swapper: Any, shape: ModelShape, world_size: int) -> None:
    """Put the largest tensor's partition in every swap buffer, as partitioning the model does.

    ``Init._partition_param`` asks for a buffer only for a partition ``swappable_tensor`` accepts
    (at least aio.block_size bytes); smaller ones stay in CPU memory. The whole tensor is the
    partition of a one-process run.
    """
    assert swapper.swappable_tensor(numel=shape.largest_param_tensor)
    sizes = [shape.largest_param_tensor, partition_numel(shape.largest_param_tensor, world_size)]
    ids = iter(range(10**6))
    for numel in (n for n in sizes if swapper.swappable_tensor(numel=n)):
        taken = []
        while swapper.available_swap_in_buffers():
            param = types.SimpleNamespace(ds_id=next(ids), ds_tensor=types.SimpleNamespace())
            buffer = swapper.get_buffer(param, numel)  # DeepSpeed's assertion: numel <= buffer_size
            assert buffer.numel() == numel
            taken.append(param)
        assert len(taken) == swapper.param_buffer_count
        swapper.remove_partition_and_release_buffers(taken)  # as after swapping them out


@pytest.mark.tools
def test_deepspeed_accepts_every_nvme_config_and_its_swapper_holds_the_largest_tensor(
    nvme_paths: list[tuple[dict[str, Any], Result]], tmp_path: Path
) -> None:
    aio_config = require_tool("deepspeed.runtime.swap_tensor.aio_config")
    seen: set[tuple[str, int, int]] = set()
    for _, result in nvme_paths:
        text = file(result, "ds_config.json").text
        world = int(result.recommendation.settings["num_processes"])
        shape = result.recommendation.facts.shape
        assert shape is not None
        key = (text, world, shape.largest_param_tensor)
        if key in seen:
            continue
        seen.add(key)
        data = json.loads(text)
        config = deepspeed_parse(data, world_size=world)
        # Every aio key written is one DeepSpeed reads (it ignores unknown names silently).
        assert set(data["aio"]) <= set(aio_config.AIO_DEFAULT_DICT)
        assert {k: config.aio_config[k] for k in data["aio"]} == data["aio"]
        offload = config.zero_config.offload_optimizer
        assert offload.buffer_count == data["zero_optimization"]["offload_optimizer"]["buffer_count"]
        assert offload.pipeline == data["zero_optimization"]["offload_optimizer"]["pipeline_read"]
        with param_swapper(data, tmp_path / "nvme", world) as swapper:
            assert swapper.elements_per_buffer == data["zero_optimization"]["offload_param"]["buffer_size"]
            assign_buffers(swapper, shape, world)
    assert len(seen) >= 10


@pytest.mark.tools
def test_without_the_buffer_size_deepspeeds_swapper_asserts(tmp_path: Path) -> None:
    """The check above can fail: DeepSpeed's default buffer does not hold the 13B embedding."""
    result = decide(REPRO, tmp_path / "out")
    data = ds_config(result)
    del data["zero_optimization"]["offload_param"]["buffer_size"]
    with param_swapper(data, tmp_path / "nvme", 1) as swapper:
        assert swapper.elements_per_buffer == PARAM_BUFFER_SIZE_DEFAULT
        with pytest.raises(AssertionError, match="More elements 163840000 than buffer size 100000000"):
            swapper.get_buffer(types.SimpleNamespace(ds_id=0), LLAMA2_13B_EMBEDDING)


def test_a_brought_nvme_json_is_warned_end_to_end(tmp_path: Path) -> None:
    nvme = {"device": "nvme", "nvme_path": "/nvme"}
    brought = tmp_path / "zero3_nvme.json"
    brought.write_text(
        json.dumps(
            {
                "train_batch_size": "auto",
                "train_micro_batch_size_per_gpu": "auto",
                "gradient_accumulation_steps": "auto",
                "bf16": {"enabled": True},
                "zero_optimization": {"stage": 3, "offload_param": nvme, "offload_optimizer": nvme},
            }
        )
    )
    answers = {k: v for k, v in REPRO.items() if k not in ("offload", "nvme_path")}
    result = decide({**answers, "deepspeed_config": str(brought)}, tmp_path / "out")
    warning = next(w for w in result.warnings if "async_io" in w)
    assert "buffer_size is missing" in warning and "at least 163,840,000" in warning
    assert "libaio-dev" in file(result, "accelerate_config.yaml").text.split("\n#\n")[0]
