"""Tiny training script used by the real-launch tests (run through ``accelerate launch``).

It trains a Linear-ReLU-Linear MLP with AdamW for 3 steps and prints exactly one JSON line per
rank (the object carries ``"tiny_train": true`` so the caller can find it among the tools' logs).
``rank_sum`` is an all-reduce of the ranks: it equals ``n * (n - 1) / 2`` only if the ranks really
formed one process group. Under DeepSpeed the record also carries the precision the engine
resolved: ``engine_dtype`` (its parameters' dtype), ``engine_bf16`` and ``engine_fp16``, and the optimizer
it steps with: ``engine_optimizer`` (its class) and ``adam_w_mode`` (DeepSpeed's CPU Adam's AdamW switch).

CPU-only adaptations (test-only, they do not change what the config file asks for):

* DeepSpeed: ``InitProcessGroupKwargs(backend="gloo")``; without it accelerate records 1 process
  while DeepSpeed forms a 2-rank group, and the batch-size check fails. Under bf16 the inputs are
  cast to the engine's dtype.
* DeepSpeed fp16: set ``TINY_TRAIN_FP16_ON_CPU=1``. DeepSpeed's CPU accelerator reports fp16 as
  unsupported where oneDNN has no fp16 kernels, and the engine then refuses to start; the flag
  makes it report support (torch runs fp16 on the CPU anyway, slowly).
* FSDP: set ``TINY_TRAIN_FSDP_ON_CPU=1``. accelerate only enables FSDP on GPU-like distributed
  types, so the shared ``PartialState`` is created with gloo and relabelled ``MULTI_GPU`` before
  ``Accelerator()`` reads it.

The script ends with ``os._exit(0)``: DeepSpeed ZeRO-3 on CPU sometimes aborts during interpreter
teardown after training has finished.
"""

import json
import os
import sys

import torch
from accelerate import Accelerator
from accelerate.state import PartialState
from accelerate.utils import DistributedType, InitProcessGroupKwargs
from torch.utils.data import DataLoader, TensorDataset

STEPS = 3


def make_accelerator() -> Accelerator:
    """Create the Accelerator, applying the CPU-only adaptations described in the module docstring."""
    if os.environ.get("TINY_TRAIN_FSDP_ON_CPU") == "1":
        PartialState(backend="gloo").distributed_type = DistributedType.MULTI_GPU
        return Accelerator()
    if os.environ.get("ACCELERATE_USE_DEEPSPEED") == "true":
        if os.environ.get("TINY_TRAIN_FP16_ON_CPU") == "1":
            from deepspeed.accelerator import get_accelerator

            type(get_accelerator()).is_fp16_supported = lambda self: True
        return Accelerator(kwargs_handlers=[InitProcessGroupKwargs(backend="gloo")])
    return Accelerator()


def main() -> None:
    """Train for a few steps and print this rank's JSON summary line."""
    accelerator = make_accelerator()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    data = TensorDataset(torch.randn(64, 16), torch.randn(64, 1))
    loader = DataLoader(data, batch_size=4)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    dtype = model.get_data_types()[0] if accelerator.distributed_type == DistributedType.DEEPSPEED else None

    losses = []
    for step, (x, y) in enumerate(loader):
        if step == STEPS:
            break
        if dtype is not None:
            x, y = x.to(dtype), y.to(dtype)
        loss = torch.nn.functional.mse_loss(model(x), y)
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(round(loss.item(), 6))

    rank_sum = accelerator.reduce(torch.tensor(float(accelerator.process_index)), reduction="sum")
    dist = torch.distributed
    record = {
        "tiny_train": True,
        "rank": accelerator.process_index,
        "world_size": accelerator.num_processes,
        "dist_world_size": dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1,
        "rank_sum": int(rank_sum.item()),
        "distributed_type": str(accelerator.distributed_type),
        "backend": accelerator.state.backend,
        "model": type(model).__name__,
        "losses": losses,
    }
    if dtype is not None:
        record.update(engine_dtype=str(dtype), engine_bf16=model.bfloat16_enabled(), engine_fp16=model.fp16_enabled())
        # The optimizer the engine steps with, inside ZeRO's wrapper: with offload, Accelerate's swap for
        # DeepSpeed's CPU Adam, and whether that runs as AdamW (decoupled weight decay) or as Adam.
        inner = getattr(model.optimizer, "optimizer", model.optimizer)
        record.update(engine_optimizer=type(inner).__name__, adam_w_mode=getattr(inner, "adam_w_mode", None))
    sys.stdout.write(json.dumps(record) + "\n")
    accelerator.end_training()
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
