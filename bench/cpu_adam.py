"""Adam's update on the CPU, as ratios measured in one run: what the step-time model's offload rows rest on.

With CPU offload the optimizer step runs on the host. DeepSpeed's offload runs its own CPU Adam
(a C++ op with SIMD loops); FSDP2's offload runs whatever optimizer the script made, and
Axolotl's ``adamw_torch_fused`` (the Transformers Trainer's default too) is PyTorch's fused
AdamW, which runs on the CPU since PyTorch 2.4. DeepSpeed's ZeRO-Offload tutorial calls its CPU
Adam "5X-7X faster than the standard PyTorch implementation": that is PyTorch's unfused loop.

This script times one AdamW step over the same fp32 parameters and gradients with each:
PyTorch's unfused loop (``foreach=False``), its multi-tensor form (``foreach=True``), the fused
kernel (``fused=True``) and DeepSpeed's ``DeepSpeedCPUAdam`` (built on first use: it needs a C++
compiler; skipped with the reason if it cannot be built), interleaved over several rounds, and
prints each one's rate and its time over DeepSpeed's (the median of the rounds' own ratios).
The step-time model gives FSDP2's offload rows DeepSpeed's rate (``wizard/engine/speed.py``,
``CPU_ADAM_PARAMS_PER_SECOND``) because the fused kernel runs within a factor of 1.5 of it.

Needs torch (and deepspeed for its row): ``python bench/cpu_adam.py [--params N] [--threads T]``.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any


def _step_seconds(make: Callable[[list[Any]], Any], params: int, reps: int) -> float:
    """Seconds per optimizer step over one fp32 tensor of `params` parameters (after a warm-up step)."""
    import torch

    weight = torch.nn.Parameter(torch.randn(params))
    weight.grad = torch.randn(params)
    optimizer = make([weight])
    optimizer.step()  # the state (two moments) is created here, not timed
    start = time.perf_counter()
    for _ in range(reps):
        optimizer.step()
    return (time.perf_counter() - start) / reps


def main() -> int:
    """Time each optimizer, interleaved, and print rates and ratios against DeepSpeed's CPU Adam."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--params", type=int, default=50_000_000, help="parameters per step (default 50,000,000)")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (default: torch's own)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    args = parser.parse_args()
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    makers: dict[str, Callable[[list[Any]], Any]] = {
        "AdamW, unfused loop": lambda ps: torch.optim.AdamW(ps, lr=1e-4, foreach=False),
        "AdamW, foreach": lambda ps: torch.optim.AdamW(ps, lr=1e-4, foreach=True),
        "AdamW, fused": lambda ps: torch.optim.AdamW(ps, lr=1e-4, fused=True),
    }
    try:
        from deepspeed.ops.adam import DeepSpeedCPUAdam

        DeepSpeedCPUAdam([torch.nn.Parameter(torch.zeros(8))])  # builds the op, or fails here
        makers["DeepSpeedCPUAdam"] = lambda ps: DeepSpeedCPUAdam(ps, lr=1e-4, adamw_mode=True)
    except Exception as error:  # no deepspeed, or no compiler to build its op: say so, time the rest
        print(f"DeepSpeedCPUAdam skipped: {type(error).__name__}: {str(error)[:200]}")
    times: dict[str, list[float]] = {name: [] for name in makers}
    for _ in range(args.rounds):
        for name, make in makers.items():
            times[name].append(_step_seconds(make, args.params, reps=3))
    print(f"{args.params:,} parameters, {torch.get_num_threads()} threads, {args.rounds} rounds")
    reference = times.get("DeepSpeedCPUAdam")
    for name, seconds in times.items():
        rate = args.params / statistics.median(seconds) / 1e9
        ratio = (
            f"  {statistics.median(s / r for s, r in zip(seconds, reference, strict=True)):.2f}x DeepSpeed's time"
            if reference
            else ""
        )
        print(f"  {name:<20} {rate:5.2f} billion parameters per second{ratio}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
