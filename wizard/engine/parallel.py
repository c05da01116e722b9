"""Parallel layouts: the sizes of tensor, context, sequence, expert and pipeline parallelism.

Pure arithmetic for the facts (`wizard.engine.facts`) and the answer validators
(`wizard.engine.answers`); the decisions that use them stay in decision_tree.yaml.

The rules it encodes (guidelines B1, B4 and T5 of decision_tree.yaml; Accelerate's
ParallelismConfig in src/accelerate/parallelism_config.py; Axolotl's N-D parallelism docs,
https://docs.axolotl.ai/docs/nd_parallelism.html):

* every size divides the world size, and their product is the number of processes: for FSDP2,
  dp_replicate x dp_shard x TP x CP (x EP in Axolotl) = world; for Megatron-LM, TP x PP x DP =
  world; DeepSpeed sequence parallelism (SP) only has to divide the world, DeepSpeed keeps the
  rest as data parallel;
* tensor parallelism stays inside one machine, where NVLink carries its per-layer all-reduces:
  TP divides the GPUs per node;
* FSDP2 with a parallelism config needs a dimension to shard over: dp_shard > 1 or CP > 1
  (accelerate 1.15 raises otherwise), so TP alone may not take the whole world;
* the wizard never writes dp_replicate > 1 with TP/CP and dp_shard = 1 (DDP with TP/CP, which
  both tools reject): it derives dp_shard itself.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from wizard.engine.conditions import MISSING, Lookup

# The answers that hold a parallel size, in the order the tree asks them.
SIZE_QUESTIONS = ("context_parallel_size", "tensor_parallel_size", "pipeline_parallel_size", "expert_parallel_size")


@dataclass(frozen=True)
class Layout:
    """The parallel sizes of one run (1 = not used)."""

    world: int
    tp: int = 1
    cp: int = 1
    sp: int = 1
    ep: int = 1
    pp: int = 1
    megatron: bool = False

    @property
    def dp_shard(self) -> int:
        """FSDP2's shard group (Megatron: the data-parallel size): what the other axes leave."""
        used = self.tp * self.pp if self.megatron else self.tp * self.cp * self.ep
        return max(self.world // max(used, 1), 1)

    @property
    def nd(self) -> bool:
        """Whether FSDP2 runs with N-D parallelism (TP, CP or EP above 1)."""
        return not self.megatron and self.tp * self.cp * self.ep > 1


def divisors(n: int) -> list[int]:
    """The divisors of n, ascending."""
    n = max(n, 1)
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return sorted({*small, *(n // d for d in small)})


def layout_from_answers(answers: Mapping[str, Any], world: int, *, deepspeed_json: bool) -> Layout:
    """The layout the answers describe; with a DeepSpeed JSON, the long-context size is SP, not CP."""
    megatron = answers.get("megatron") is True
    size = answers.get("context_parallel_size", 1)
    return Layout(
        world=world,
        tp=int(answers.get("tensor_parallel_size", 1)),
        cp=1 if deepspeed_json else int(size),
        sp=int(size) if deepspeed_json else 1,
        ep=int(answers.get("expert_parallel_size", 1)),
        pp=int(answers.get("pipeline_parallel_size", 1)) if megatron else 1,
        megatron=megatron,
    )


def spread(values: list[int]) -> str:
    """'2, 3 or 6' (an English list of numbers)."""
    text = [str(v) for v in values]
    return text[0] if len(text) == 1 else ", ".join(text[:-1]) + " or " + text[-1]


def _answer(lookup: Lookup, name: str, default: Any = None) -> Any:
    value = lookup("answer", name)
    return default if value is MISSING else value


def check_size(qid: str, rule: str, value: int, lookup: Lookup) -> str | None:
    """Why `value` is not a valid size for question `qid` under validator `rule`, or None.

    `lookup` sees the answers and facts so far (the sizes asked before this one). Every message
    names the values that would work, so the user can pick one.
    """
    world = lookup("fact", "world_size")
    if not isinstance(world, int) or value == 1:
        return None
    per_node = int(_answer(lookup, "gpus_per_node", 1))
    others = math.prod(int(_answer(lookup, q, 1)) for q in SIZE_QUESTIONS if q != qid)
    room = world // others if world % others == 0 else 1
    if rule == "divides_gpus_per_node" and per_node % value:
        fits = [d for d in divisors(per_node) if d > 1]
        alternatives = f"use {spread(fits)}" if fits else "use 1 (one GPU per machine leaves no room for it)"
        return (
            f"{qid} {value} does not divide the {per_node} GPUs of one machine: it exchanges activations in"
            f" every layer, so it stays on the fast links inside a machine; {alternatives}"
        )
    if world % (value * others):
        fits = [d for d in divisors(room) if d > 1 and (rule != "divides_gpus_per_node" or per_node % d == 0)]
        more = -(-world // (value * others)) * value * others  # the next world size it divides
        times = f" x the other parallel sizes ({others})" if others > 1 else ""
        choices = f"use {spread(fits)}, or " if fits else "use 1, or "
        return f"{qid} {value}{times} does not divide the {world} GPUs; {choices}{more} GPUs"
    fsdp2 = _answer(lookup, "megatron") is not True and _answer(lookup, "deepspeed_config") is None
    cp = int(_answer(lookup, "context_parallel_size", 1))
    if qid == "tensor_parallel_size" and fsdp2 and cp == 1 and value * others == world:
        fits = [d for d in divisors(room) if 1 < d < room and per_node % d == 0]
        choices = f"use {spread(fits)}" if fits else "use 1"
        return (
            f"{qid} {value} takes all {world} GPUs and leaves none for FSDP2 to shard over (accelerate needs"
            f" dp_shard or context parallel above 1); {choices}, or more GPUs"
        )
    if qid == "expert_parallel_size":
        experts = lookup("fact", "moe_experts")
        if isinstance(experts, int) and experts > 1 and experts % value:
            fits = [d for d in divisors(room) if d > 1 and experts % d == 0]
            choices = f"use {spread(fits)}" if fits else "use 1"
            return f"{qid} {value} does not divide the model's {experts} experts per layer; {choices}"
    return None


def context_parallel_default(world: int, per_node: int, fits: Callable[[int], bool]) -> int:
    """The smallest CP (or SP) size that makes the run fit: 1 when it fits without one.

    Sizes that divide one machine's GPUs come first, so the ring exchange stays on the fast
    links inside a machine; then the other divisors of the world size. 1 when none fits: CP does
    not rescue the run, and the later rules say what does.
    """
    if fits(1):
        return 1
    inside = [d for d in divisors(per_node) if d > 1 and world % d == 0]
    beyond = [d for d in divisors(world) if d > 1 and d not in inside]
    return next((size for size in (*inside, *beyond) if fits(size)), 1)


def expert_parallel_default(room: int, per_node: int, experts: int, fits: Callable[[int], bool]) -> int:
    """The largest EP size inside one machine that divides the experts and fits; 1 when none does.

    `room` is what TP and CP leave of the world. The largest size keeps the fewest experts on
    each GPU, and inside a machine the token all-to-all runs over NVLink (Axolotl puts EP on the
    innermost mesh axis).
    """
    sizes = [d for d in divisors(math.gcd(room, per_node)) if d > 1 and (experts <= 1 or experts % d == 0)]
    return next((size for size in reversed(sizes) if fits(size)), 1)


def pipeline_parallel_default(room: int, num_nodes: int, fits: Callable[[int], bool]) -> int:
    """The fewest pipeline stages that make a Megatron-LM run fit.

    `room` is the world divided by TP. When no stage count fits, one stage per machine (the
    usual layout: TP inside a machine, PP across machines), or 1.
    """
    fitting = next((p for p in divisors(room) if fits(p)), None)
    if fitting is not None:
        return fitting
    return num_nodes if room % max(num_nodes, 1) == 0 else 1
