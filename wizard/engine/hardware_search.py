"""Which GPUs, and how many, run a job: for each card of the catalogue, the fewest, with and without offload.

For every card the decision tree can train the method on, the search walks the usual sizes (1, 2,
4 or 8 GPUs in one machine, then whole machines of 8, up to a cap) and asks the tree itself at
each size: the answers a run without prompts reaches there (`evaluate.default_answers`), the rule
that decides (`evaluate.winning_rule`), and whether the layout that rule picks fits by the memory
estimate, in GPU memory and in host RAM. It searches twice: with offload ruled out (offload: none)
and with it allowed (offload: auto), host RAM per machine as given or as assumed
(`HOST_GIB_PER_GPU`).

Cost: the tree's answers for one size derive the facts (every layout's estimate and step time)
a few times, a few milliseconds; the search asks it at as few sizes as it can. The memory model
alone first guesses the smallest size at which any layout could fit (microseconds per size); the
tree is asked there, then one size below to confirm that size does not run (a binary search over
the tree's answers only where the guess was wrong). Cards with the same memory share their answers:
the decision depends on the card through its memory (and bf16, for the precision), never its
speed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from wizard.engine.answers import disabled_reason
from wizard.engine.catalog import GpuInfo, gpu_catalog
from wizard.engine.evaluate import default_answers, make_lookup, outcome_settings, winning_rule
from wizard.engine.facts import GPU_HARDWARE, FactSet, Inputs
from wizard.engine.memory import OFFLOAD_STRATEGIES, Estimate, Workload, applicable_strategies, estimate
from wizard.engine.speed import StepTime, links_for, step_time
from wizard.engine.tree import Rule, Tree

# GPUs in one machine: the usual board sizes, and whole machines of MACHINE_GPUS beyond them.
BOARD_SIZES = (1, 2, 4, 8)
MACHINE_GPUS = 8
MACHINES_CAP = 64  # the search stops here: "does not fit within 64 machines"
# Host RAM assumed per GPU of a machine when --cpu-memory-gb is not given: 1 TiB for a machine of
# 8, about what the 8-GPU cloud machines have per GPU (from 96 GiB on an A10G's to 256 on an H100's).
HOST_GIB_PER_GPU = 128
# The answers the search sets at each size, and those that follow the GPU count there (the tree's
# defaults, or a validation against the count): neither can be given for a search.
SEARCH_KEYS = ("hardware", "gpu_model", "gpu_memory_gb", "gpus_per_node", "num_nodes", "offload")
COUNT_KEYS = (
    "gpu_link",
    "use_ray",
    "main_process_ip",
    "main_process_port",
    "same_network",
    "cpu_processes",
    "torch_xla",
    "megatron",
    "nvme_path",
    "layer_offloading",
    "context_parallel_size",
    "model_parallel",
    "tensor_parallel_size",
    "pipeline_parallel_size",
    "expert_parallel_size",
)


@dataclass(frozen=True, order=True)
class Size:
    """GPUs in all, as `per_machine` GPUs in each of `machines` machines."""

    gpus: int
    per_machine: int

    @property
    def machines(self) -> int:
        """Machines of `per_machine` GPUs each."""
        return self.gpus // self.per_machine


def sizes(machines_cap: int = MACHINES_CAP) -> tuple[Size, ...]:
    """The sizes searched, smallest first: 1, 2, 4, 8 GPUs in one machine, then 2 to `machines_cap` machines of 8."""
    one = tuple(Size(n, n) for n in BOARD_SIZES)
    return one + tuple(Size(MACHINE_GPUS * m, MACHINE_GPUS) for m in range(2, machines_cap + 1))


def size_of(gpus: int) -> Size | None:
    """The size `gpus` GPUs come as: one machine up to 8, else whole machines of 8 (None otherwise)."""
    if 1 <= gpus <= MACHINE_GPUS:
        return Size(gpus, gpus)
    if gpus % MACHINE_GPUS == 0:
        return Size(gpus, MACHINE_GPUS)
    return None


def gpu_name(gpu: GpuInfo) -> str:
    """The name that selects this catalogue entry (--gpu-model, gpu_model): its short name."""
    return gpu.short_name


def hardware_of(gpu: GpuInfo) -> str | None:
    """The `hardware` answer of a card the search covers (NVIDIA or AMD GPUs), None for any other."""
    return gpu.vendor if gpu.vendor in GPU_HARDWARE else None


def not_searched(tree: Tree, gpu: GpuInfo, method: str) -> str | None:
    """Why the search leaves this card out for `method` (None: it is searched), by the tree's own choices.

    Only NVIDIA and AMD GPUs: the tree shards and offloads there alone. A method the tree's method
    question disables for the card's hardware (QLoRA's 4-bit kernels need CUDA or ROCm) is left out
    with the tree's reason.
    """
    hardware = hardware_of(gpu)
    if hardware is None:
        return "the search covers NVIDIA and AMD GPUs, where the tree shards and offloads"
    question = tree.question("method")
    if question is None:
        return None
    return disabled_reason(question, method, make_lookup({"hardware": hardware}, FactSet()))


def searched_gpus(tree: Tree, method: str, chosen: Sequence[GpuInfo] = ()) -> tuple[GpuInfo, ...]:
    """The cards searched: `chosen` (in that order, once each), else every card of the catalogue the tree can use."""
    cards = tuple(dict.fromkeys(chosen)) if chosen else gpu_catalog()
    return tuple(gpu for gpu in cards if not_searched(tree, gpu, method) is None)


def host_gib(size: Size, given: float | None) -> float:
    """Host RAM per machine: the given cpu_memory_gb, else `HOST_GIB_PER_GPU` for each of its GPUs."""
    return float(given) if given is not None else float(HOST_GIB_PER_GPU * size.per_machine)


@dataclass(frozen=True)
class Verdict:
    """What the tree decides for one card at one size, offload allowed or not."""

    size: Size
    offload: bool  # offload allowed (offload: auto) or ruled out (offload: none)
    answers: Mapping[str, Any]
    facts: FactSet
    rule: Rule
    settings: Mapping[str, Any]

    @property
    def strategy(self) -> str | None:
        """The memory layout the rule picks (a row of the estimate table), None for a refusal."""
        value = self.settings.get("strategy")
        return value if isinstance(value, str) and not self.rule.outcome.refuse else None

    @property
    def estimate(self) -> Estimate | None:
        """The picked layout's estimate."""
        return self.facts.estimates.get(self.strategy) if self.strategy is not None else None

    @property
    def runs(self) -> bool:
        """The tree picks a backend, and its layout fits in GPU memory and host RAM by the estimate."""
        chosen = self.estimate
        return chosen is not None and chosen.fits and chosen.host_fits is not False

    @property
    def offloads(self) -> bool:
        """The picked layout moves state to host RAM."""
        return self.strategy in OFFLOAD_STRATEGIES

    @property
    def reason(self) -> str:
        """The tree's reason in a few words: its rule's title before the arrow to the outcome."""
        return (self.rule.title or self.rule.id).split(" → ")[0]


@dataclass(frozen=True)
class Result:
    """The search for one card, offload allowed or not: the fewest GPUs that run, or None within the cap."""

    gpu: GpuInfo
    offload: bool
    verdict: Verdict | None
    step: StepTime | None = None
    machines_cap: int = MACHINES_CAP

    @property
    def fits(self) -> bool:
        """Whether any size within the cap runs."""
        return self.verdict is not None


@dataclass
class HardwareSearch:
    """The tree's answers for every card and size asked, each computed once.

    `given` holds the validated answers that do not depend on the hardware (model, method,
    sequence length, target, ...); `host_memory_gib` is cpu_memory_gb per machine, None to assume
    `HOST_GIB_PER_GPU` per GPU.
    """

    tree: Tree
    given: Mapping[str, Any]
    inputs: Inputs
    host_memory_gib: float | None = None
    machines_cap: int = MACHINES_CAP
    network_gbps: float | None = None
    evaluations: int = 0  # the tree's answers computed (not those from the cache), for measuring
    _verdicts: dict[tuple[Any, ...], Verdict] = field(default_factory=dict)
    _base: tuple[Workload | None] | None = None
    _layouts: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        self._layouts = tree_layouts(self.tree)

    @property
    def ladder(self) -> tuple[Size, ...]:
        """The sizes searched, smallest first."""
        return sizes(self.machines_cap)

    def verdict(self, gpu: GpuInfo, size: Size, offload: bool) -> Verdict:
        """The tree's decision for `size` of this card; cards of one memory and precision share it."""
        key = (gpu.vendor, gpu.memory_mib, gpu.bf16, size, offload)
        found = self._verdicts.get(key)
        if found is None:
            answers = {
                **{k: v for k, v in self.given.items() if k not in SEARCH_KEYS},
                "hardware": hardware_of(gpu),
                "gpu_model": gpu_name(gpu),
                "gpu_memory_gb": gpu.memory_gib,
                "gpus_per_node": size.per_machine,
                "num_nodes": size.machines,
                "offload": "auto" if offload else "none",
                "cpu_memory_gb": host_gib(size, self.host_memory_gib),
            }
            walked, facts = default_answers(self.tree, answers, self.inputs)
            rule = winning_rule(self.tree, walked, facts)
            found = Verdict(size, offload, walked, facts, rule, outcome_settings(rule, walked, facts))
            self._verdicts[key] = found
            self.evaluations += 1
        return found

    def search(self, gpu: GpuInfo, offload: bool) -> Result:
        """The fewest GPUs of this card that run the job (by the tree), offload allowed or not.

        A bisection over the sizes, on the tree's own answers, that asks first at the sizes the
        memory model points to: where any layout could fit; after the tree's answer at a size,
        where the layout it picked there would fit. Where no layout fits at any size without a
        parallel layout (activations that only context parallelism splits), the sizes are probed
        from the smallest up, doubling the step. Each size is asked once; the answer is the
        smallest size that runs, and the size below it was asked and does not.
        """
        ladder = self.ladder
        last = len(ladder) - 1
        low, high = 0, None  # sizes below `low` do not run; `high` runs (None: none found yet)
        guess = _first(len(ladder), self._guide(gpu, offload, None))
        if guess is None and "fsdp2_nd" in self._layouts:
            guess = _first(len(ladder), self._guide(gpu, offload, None, split=True))
        probing, step = guess is None, 1
        target = last if guess is None else guess  # probing: whether any size runs, before probing up
        while True:
            top = last if high is None else high - 1
            if low > top:
                break
            index = target if low <= target <= top else (low + top) // 2
            verdict = self.verdict(gpu, ladder[index], offload)
            if verdict.runs and probing and index == last:
                high, target = index, low  # some size runs: probe from the smallest up
            elif verdict.runs:
                high, probing = index, False
                jump = self._jump(gpu, offload, verdict, low)
                target = jump if jump < index else index - 1  # else the size below, to confirm
            else:
                low = index + 1
                if probing:
                    target, step = index + step, step * 2
                elif verdict.strategy is not None:
                    target = self._jump(gpu, offload, verdict, low)
                else:  # a refusal names no layout: the largest size says whether any runs at all
                    target = last if high is None else (low + top) // 2
        if high is None:
            return Result(gpu, offload, None, machines_cap=self.machines_cap)
        found = self.verdict(gpu, ladder[high], offload)
        return Result(gpu, offload, found, self.step(gpu, found), self.machines_cap)

    def _jump(self, gpu: GpuInfo, offload: bool, verdict: Verdict, start: int) -> int:
        """The first size from `start` at which the layout the tree picked in `verdict` fits, by the memory model."""
        index = _first(len(self.ladder) - start, self._guide(gpu, offload, verdict, start))
        return len(self.ladder) - 1 if index is None else start + index

    def step(self, gpu: GpuInfo, verdict: Verdict) -> StepTime | None:
        """The picked layout's step-time band on this card (its own throughput and links)."""
        links = links_for(gpu, None, self.network_gbps)
        workload, strategy = verdict.facts.workload, verdict.strategy
        if links is None or workload is None or strategy is None:
            return None
        return step_time(workload, strategy, links, verdict.facts.accumulation)

    def _base_workload(self, gpu: GpuInfo) -> Workload | None:
        """The job as the memory model sees it on one GPU, without a parallel layout: the guide's start.

        The same for every card (the shape, the method, the sequence, the micro-batch and
        checkpointing do not depend on it), so it is computed once, for the first card asked.
        """
        if self._base is None:
            workload = self.verdict(gpu, self.ladder[0], True).facts.workload
            self._base = (workload,)
        return self._base[0]

    def _guide(
        self, gpu: GpuInfo, offload: bool, verdict: Verdict | None, start: int = 0, split: bool = False
    ) -> Callable[[int], bool]:
        """Whether a layout fits at the ladder's `start + index` by the memory model: a guess, never the answer.

        Without a verdict: any layout a rule of the tree names, for the job without a parallel
        layout (offload layouts only where offload is allowed); with `split`, FSDP2 with each
        sequence split over all the GPUs instead (for activations that only that splits). With a
        verdict: the layout the tree picked there, with its parallel sizes.
        """
        base = self._base_workload(gpu) if verdict is None else verdict.facts.workload
        strategies = (verdict.strategy,) if verdict is not None and verdict.strategy else self._layouts
        ladder = self.ladder

        def could_fit(index: int) -> bool:
            if base is None:
                return True
            size = ladder[start + index]
            workload = replace(base, world_size=size.gpus, num_nodes=size.machines)
            host = host_gib(size, self.host_memory_gib)
            if split:
                # Context parallelism over every GPU, the most it can split a sequence (the tree's
                # default is the smallest size that fits, where one does).
                whole = replace(workload, context_parallel=size.gpus)
                return size.gpus > 1 and _fits(estimate(whole, "fsdp2_nd", gpu.memory_gib, host))
            return any(
                _fits(estimate(workload, strategy, gpu.memory_gib, host))
                for strategy in applicable_strategies(workload)
                if strategy in strategies and (offload or strategy not in OFFLOAD_STRATEGIES)
            )

        return could_fit


def tree_layouts(tree: Tree) -> frozenset[str]:
    """The memory layouts the tree's rules name as their outcome (a brought DeepSpeed JSON's aside)."""
    named = (rule.outcome.settings.get("strategy") for rule in tree.rules)
    return frozenset(value for value in named if isinstance(value, str))


def _fits(chosen: Estimate) -> bool:
    return chosen.fits and chosen.host_fits is not False


def _first(count: int, holds: Callable[[int], bool]) -> int | None:
    """The first index below `count` where `holds` (taken as monotone), None when none does."""
    low, high = 0, count
    while low < high:
        middle = (low + high) // 2
        if holds(middle):
            high = middle
        else:
            low = middle + 1
    return low if low < count else None


@dataclass(frozen=True)
class Row:
    """One line of the answer: a card, its fewest GPUs (or none within the cap), and its offload search."""

    result: Result
    price: float | None = None  # USD per GPU-hour, where given

    @property
    def gpus(self) -> int | None:
        """GPUs in all, None when nothing runs within the cap."""
        return self.result.verdict.size.gpus if self.result.verdict else None

    @property
    def cost_per_hour(self) -> float | None:
        """USD per hour for all the GPUs, where a price is given."""
        return None if self.price is None or self.gpus is None else self.price * self.gpus

    @property
    def cost_per_step(self) -> tuple[float, float] | None:
        """USD per optimizer step at the band's two ends, where a price and a band are known."""
        hourly, step = self.cost_per_hour, self.result.step
        if hourly is None or step is None:
            return None
        return hourly * step.low / 3600, hourly * step.high / 3600


def rows(
    without: Iterable[Result], with_offload: Iterable[Result], prices: Mapping[GpuInfo, float] | None = None
) -> list[Row]:
    """The rows to show, fewest GPUs first, then the smaller memory (what does not fit at the end).

    Every card has its row without offload; its row with offload only where allowing offload
    changes the answer: fewer GPUs, or no fit within the cap either way.
    """
    prices = prices or {}
    shown: list[Row] = []
    for plain, offloaded in zip(without, with_offload, strict=True):
        shown.append(Row(plain, prices.get(plain.gpu)))
        if _adds(plain, offloaded):
            shown.append(Row(offloaded, prices.get(offloaded.gpu)))
    return sorted(shown, key=_order)


def _adds(plain: Result, offloaded: Result) -> bool:
    """Whether the search with offload allowed says more than the one without it."""
    if plain.verdict is None:
        return True
    return offloaded.verdict is not None and offloaded.verdict.size.gpus < plain.verdict.size.gpus


def _order(row: Row) -> tuple[int, int, int, str]:
    gpus = row.gpus if row.gpus is not None else 10**9
    return gpus, row.result.gpu.memory_mib, int(row.result.offload), row.result.gpu.short_name


@dataclass(frozen=True)
class Needs:
    """What one GPU-count answer is up against: the model states of a full copy, and what stays per GPU.

    `states` is the whole run's model states (weights, gradients and optimizer state) as one copy
    holds them; `per_gpu` what every GPU keeps whatever the sharding (activations, overhead and
    the layers gathered whole), from FSDP2's estimate where it applies; `memory` and `usable` the
    GPUs' memory in all and its usable share.
    """

    gpus: int
    states: int
    per_gpu: int
    activations: int
    memory: int
    usable: int
    budget: int  # usable bytes per GPU
    sharded_total: int  # FSDP2's total per GPU at this size (the full copy's on one GPU)

    @property
    def dominant(self) -> str:
        """What keeps the run from fitting without offload: model_states, activations, or sharded.

        model_states: the states of one copy are more than all the GPUs' usable memory together;
        activations: what every GPU keeps whatever the sharding is already more than one GPU's
        usable memory (more GPUs cannot help); sharded: neither alone, but the GPU's share of the
        states with what it keeps is (more GPUs help).
        """
        if self.states > self.usable:
            return "model_states"
        if self.per_gpu > self.budget:
            return "activations"
        return "sharded"


def needs(verdict: Verdict) -> Needs | None:
    """The figures that decide whether the job fits on `verdict`'s GPUs without offload."""
    estimates = verdict.facts.estimates
    whole = estimates.get("ddp")
    if whole is None:
        return None
    sharded = estimates.get("fsdp2", whole)
    gpus = verdict.size.gpus
    return Needs(
        gpus=gpus,
        states=whole.model_states,
        per_gpu=sharded.activations + sharded.overhead + sharded.gathered,
        activations=sharded.activations,
        memory=whole.gpu_memory * gpus,
        usable=whole.budget * gpus,
        budget=whole.budget,
        sharded_total=sharded.total,
    )
