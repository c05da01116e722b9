"""The pure engine: (tree, answers, inputs) -> which questions apply, or a recommendation with its trace."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any, cast

from wizard.engine.advice import OPTIMIZER_TITLES, recommendation_warnings, reference_estimate
from wizard.engine.batch import GLOBAL_BATCH
from wizard.engine.conditions import (
    MISSING,
    Compare,
    Condition,
    Lookup,
    compare,
    describe_plain_compare,
    evaluate,
    failing_compares,
    first_failure,
    held_compares,
)
from wizard.engine.facts import FACTS, LITTLE_TO_SPARE, TIGHT_SHARE, FactSet, Inputs, derive_facts, estimate_context
from wizard.engine.json_fit import SUGGESTED_JSON, suggested_lever
from wizard.engine.memory import (
    FIT_MARGIN,
    GIB,
    OFFLOAD_STRATEGIES,
    PCIE_BYTES_PER_SECOND,
    STRATEGY_TITLES,
    UNDERSHOOT_PERCENT,
    Estimate,
    logits_bytes,
    loss_extra_bytes,
    pcie_bytes_per_step,
    spare_gib,
    sum_gib,
    to_gib,
)
from wizard.engine.memory import estimate as estimate_memory
from wizard.engine.speed import band_text, bound_text, host_traffic, shown_middle, step_time
from wizard.engine.texts import SHARED, render_text
from wizard.engine.traits import NO_BACKEND, BackendTraits
from wizard.engine.tree import Backend, Question, Ref, Rule, Tree

HARDWARE = "hardware"
"""The question that names the hardware: a rule that fails on it is for other hardware."""

TOOL_NAMES = {"accelerate": "Accelerate", "axolotl": "Axolotl"}
METHOD_NAMES = {"full": "full fine-tune", "lora": "LoRA", "qlora": "QLoRA"}


@dataclass(frozen=True)
class TraceEntry:
    """One rule as the engine tested it."""

    rule_id: str
    title: str  # what the rule decides ("QLoRA on several GPUs → FSDP2"); the id when the tree has none
    guidance: str
    guidance_text: str
    sources: tuple[str, ...]
    held: bool
    # The sentences of its conditions, worked out when first read (`sentences`): only an explanation
    # and the JSON report read those of the rules that failed, a score or more in every decision.
    said: Callable[[], tuple[str, ...]] = field(repr=False, compare=False)
    because: str | None
    # True for a rule that could not apply to this hardware (a TPU rule on NVIDIA GPUs): the
    # explanation leaves it out and only counts it.
    other_hardware: bool = False
    # Failed on the tool alone (a rule for Axolotl runs, on an Accelerate run): skipped in a count, as other hardware.
    other_tool: bool = False

    @cached_property
    def sentences(self) -> tuple[str, ...]:
        """What the rule's conditions said: the facts that held, or the first condition that failed."""
        return self.said()


# How a runner-up's reason opens where a brought DeepSpeed JSON decided before any memory rule; a
# list of several says it once above them (`RunnerUp.after_json`).
# Why the brought JSON outranks every memory rule, said as a reason rather than as a bare precedence.
JSON_FIRST = "You gave a DeepSpeed JSON, which only DeepSpeed can run; besides, "


# A runner-up's text marks the clauses the summary's short view leaves out (a second figure for the same
# point, how to run the layout all the same) between these two characters, given to the tree's texts as
# `detail_open` and `detail_close`: `RunnerUp.reason` has the whole text, `RunnerUp.brief` the rest.
DETAIL_OPEN, DETAIL_CLOSE = "\x01", "\x02"
_DETAIL = re.compile(f"{DETAIL_OPEN}[^{DETAIL_CLOSE}]*{DETAIL_CLOSE}")


def _installed(runner: Mapping[str, Any]) -> str:
    """The clause "so about N GiB of RAM installed" for an offload's host RAM, or "" where it is too little to matter.

    A machine that trains on a GPU has 8 GiB of RAM or more: a smaller figure (an adapter's optimizer state)
    says nothing a reader could check.
    """
    installed = runner.get("host_installed_gib")
    if not isinstance(installed, (int, float)) or installed < 8:
        return ""
    return f", so about {installed} GiB of RAM installed (free -g's total; {FIT_MARGIN:.0%} of it is usable)"


def _weighed_above(because: str, title: str) -> bool:
    """Whether the decision has a "Why X over Y:" paragraph that names the backend `title` ("FSDP2 (...)")."""
    name = title.split(" (")[0]
    return any(
        line.startswith("Why ") and " over " in (label := line.split(":", 1)[0]) and name in label
        for line in because.split("\n")
    )


def split_detail(text: str) -> tuple[str, str]:
    """The whole text and its short form (without the marked clauses), neither with a marker left."""
    whole = text.replace(DETAIL_OPEN, "").replace(DETAIL_CLOSE, "")
    short = _DETAIL.sub("", text)
    return whole, "\n".join(" ".join(part.split()) for part in short.split("\n"))


@dataclass(frozen=True)
class RunnerUp:
    """A backend that was not chosen, and why."""

    backend: str
    title: str
    reason: str
    strategy: str | None
    # Paragraphs of `reason` after its first (1 is the second) that the summary's short view keeps
    # beside the first: the one place a figure is weighed (layer offloading on several GPUs).
    brief_keep: tuple[int, ...] = ()
    # `reason` without the clauses only the long form gives, paragraph for paragraph (the same line breaks).
    brief: str = ""

    @property
    def after_json(self) -> bool:
        """Whether the reason opens with `JSON_FIRST` (a brought JSON decided first)."""
        return self.reason.startswith(JSON_FIRST)


@dataclass(frozen=True)
class Recommendation:
    """The decision: a backend with settings (or a refusal), with everything that explains it."""

    refused: bool
    backend: str | None
    rule: Rule
    because: str
    settings: Mapping[str, Any]
    trace: tuple[TraceEntry, ...]
    runner_ups: tuple[RunnerUp, ...]
    facts: FactSet
    warnings: tuple[str, ...] = field(default_factory=tuple)
    hardware: str | None = None  # the hardware as the question's choice names it ("NVIDIA GPUs (CUDA)")
    hardware_id: str | None = None  # the answer itself ("nvidia", "mps"): picks a backend's per-hardware title
    target: str | None = None  # the tool the run launches with ("accelerate", "axolotl")
    # The decided backend's traits (NO_BACKEND for a refusal): what the layers above read instead of
    # its id. Left out of the repr, which shows the decision, not the tree's description of it.
    traits: BackendTraits = field(default=NO_BACKEND, repr=False, compare=False)
    # `because` without the clauses the tree marks as the long form's (detail_open/detail_close): the summary's
    # Why, where a line beside it (Risk, Memory) already says them. Empty where nothing is marked.
    because_brief: str = field(default="", repr=False, compare=False)


DecisionView = Mapping[str, Any]
"""The decision as add-on questions see it: the outcome settings, distributed_type and refused."""


def make_lookup(answers: Mapping[str, Any], facts: FactSet, outcome: DecisionView | None = None) -> Lookup:
    """A condition lookup over answers, facts and (once decided) the outcome."""

    def lookup(kind: str, name: str) -> Any:
        if kind == "outcome":
            return MISSING if outcome is None else outcome.get(name, MISSING)
        source = answers if kind == "answer" else facts.values
        return source.get(name, MISSING)

    return lookup


def is_applicable(
    question: Question, answers: Mapping[str, Any], facts: FactSet, outcome: DecisionView | None = None
) -> bool:
    """Whether a question is asked, given the answers so far (and the decision, for add-ons)."""
    return question.when is None or evaluate(question.when, make_lookup(answers, facts, outcome))


def decided_outcome(tree: Tree, answers: Mapping[str, Any], inputs: Inputs) -> DecisionView:
    """The decision for these answers, as add-on conditions see it.

    Rules never use add-on answers (the linter checks it), so deciding before the add-ons are
    answered gives the same result as deciding after.
    """
    # Only the winning rule and its settings: no explanation text is rendered, since the answers
    # may be incomplete here (a review-screen edit takes an answer back before asking it again).
    facts = derive_facts(answers, inputs)
    winner = winning_rule(tree, answers, facts)
    backend = tree.backends.get(winner.outcome.backend or "")
    return {
        **outcome_settings(winner, answers, facts),
        "refused": winner.outcome.refuse,
        "distributed_type": backend.distributed_type if backend else None,
    }


def winning_rule(tree: Tree, answers: Mapping[str, Any], facts: FactSet) -> Rule:
    """The first rule whose condition holds for these answers and their facts: the one that decides."""
    lookup = make_lookup(answers, facts)
    return next(rule for rule in tree.rules if evaluate(rule.when, lookup))


def default_answers(tree: Tree, given: Mapping[str, Any], inputs: Inputs) -> tuple[dict[str, Any], FactSet]:
    """The answers a run without prompts reaches from `given`, and their facts.

    Every question that applies, in the tree's order, takes its value from `given`, else its
    default, as `wizard.session.collect` stores them with defaults on; the add-on questions are
    left out, since no rule reads them. Nothing is validated here: `given` holds answers that a
    session has validated already. For answering the same questions for many hardware sizes
    (`wizard.engine.hardware_search`), the facts are derived only when a condition or a default
    reads one after the answers grew, not twice per question as a session does.
    """
    answers: dict[str, Any] = {}
    lazy = _TrackedFacts(answers, inputs)
    for question in tree.questions:
        if question.id in tree.addon_ids:
            continue
        if not is_applicable(question, answers, cast(FactSet, lazy)):
            continue
        value = given.get(question.id)
        if value is None:
            value = resolve_default(question, answers, cast(FactSet, lazy))
        if value is not None:
            answers[question.id] = value
    if GLOBAL_BATCH in answers and GLOBAL_BATCH not in given:
        answers[GLOBAL_BATCH] = follow_global_batch(answers, lazy.facts)
        lazy.forget()
    return answers, lazy.facts


class _ReadKeys(Mapping[str, Any]):
    """A read-only view of the answers that records which keys were read (all of them when iterated)."""

    def __init__(self, answers: Mapping[str, Any]) -> None:
        self._answers = answers
        self.read: set[str] = set()
        self.everything = False

    def __getitem__(self, key: str) -> Any:
        self.read.add(key)
        return self._answers[key]

    def __iter__(self) -> Iterator[str]:
        self.everything = True
        return iter(self._answers)

    def __len__(self) -> int:
        self.everything = True
        return len(self._answers)


class _TrackedFacts:
    """The facts of a growing answers mapping, derived again only when an answer they read was added.

    Deriving the facts reads some answers and not others (model_parallel, the add-ons): an answer
    added that the last derivation never read, by key, membership or iteration, cannot change them.
    """

    def __init__(self, answers: Mapping[str, Any], inputs: Inputs) -> None:
        self._answers = answers
        self._inputs = inputs
        self._seen: frozenset[str] = frozenset()
        self._read: set[str] = set()
        self._facts: FactSet | None = None

    @property
    def values(self) -> dict[str, Any]:
        """The facts' values (`facts`)."""
        return self.facts.values

    @property
    def facts(self) -> FactSet:
        """The facts of the answers as they are now, derived again only when a read answer was added."""
        added = self._answers.keys() - self._seen
        if self._facts is None or added & self._read:
            view = _ReadKeys(self._answers)
            self._facts = derive_facts(view, self._inputs)
            self._read = set(self._answers) if view.everything else view.read
        self._seen = frozenset(self._answers)
        return self._facts

    def forget(self) -> None:
        """Derive the facts again on the next read (an answer they read changed its value)."""
        self._facts = None


def prune(tree: Tree, answers: Mapping[str, Any], inputs: Inputs) -> dict[str, Any]:
    """Drop answers to questions that no longer apply (after an earlier answer changed)."""
    kept: dict[str, Any] = {}
    outcome: DecisionView | None = None
    for question in tree.questions:
        if question.id in tree.addon_ids and outcome is None:
            outcome = decided_outcome(tree, kept, inputs)
        if question.id in answers and is_applicable(question, kept, derive_facts(kept, inputs), outcome):
            kept[question.id] = answers[question.id]
    return kept


def refresh_defaults(tree: Tree, answers: Mapping[str, Any], inputs: Inputs, given: frozenset[str]) -> dict[str, Any]:
    """The answers that still apply (`prune`), with the computed defaults recomputed for them.

    A default read from a fact (layer_offloading, context_parallel_size, ...) follows the other
    answers: after a change to one of them, the old default would answer for a run that no longer
    is. Questions that newly apply get theirs; the answers in `given` (the user's own) are kept.
    """
    kept: dict[str, Any] = {}
    outcome: DecisionView | None = None
    lazy = _LazyFacts(kept, inputs)
    for question in tree.questions:
        if question.id in tree.addon_ids and outcome is None:
            outcome = decided_outcome(tree, kept, inputs)
        computed = isinstance(question.default, Ref) and question.default.kind == "fact" and question.id not in given
        if question.id not in answers and not computed:
            continue
        # Facts are derived only when a condition or a default reads one, and again only after
        # the kept answers changed: deriving them for every question made levers slow.
        facts = cast(FactSet, lazy.at(len(kept)))
        if not is_applicable(question, kept, facts, outcome):
            continue
        value = resolve_default(question, kept, facts) if computed else None
        if value is not None:
            kept[question.id] = value
        elif question.id in answers:
            kept[question.id] = answers[question.id]
    if GLOBAL_BATCH in kept and GLOBAL_BATCH not in given:
        kept[GLOBAL_BATCH] = follow_global_batch(kept, derive_facts(kept, inputs))
    return kept


def follow_global_batch(answers: Mapping[str, Any], facts: FactSet) -> Any:
    """A default global batch once every answer is in: the layout asked after it sets its data parallel.

    `facts` are those of `answers` (the whole of them); the answer stays when no default is known.
    """
    return facts.get("global_batch_default", answers[GLOBAL_BATCH])


class _LazyFacts:
    """The facts of a growing answers mapping, derived on first read and kept until it grows."""

    def __init__(self, answers: Mapping[str, Any], inputs: Inputs) -> None:
        self._answers = answers
        self._inputs = inputs
        self._size = -1
        self._facts: FactSet | None = None

    def at(self, size: int) -> _LazyFacts:
        """This view for the answers as they are now (`size` of them: answers are only added)."""
        if size != self._size:
            self._size, self._facts = size, None
        return self

    @property
    def values(self) -> dict[str, Any]:
        """The facts' values, derived now if the answers changed since the last read."""
        return self.facts.values

    @property
    def facts(self) -> FactSet:
        """The whole fact set, derived now if the answers changed since the last read."""
        if self._facts is None:
            self._facts = derive_facts(self._answers, self._inputs)
        return self._facts


def resolve_default(question: Question, answers: Mapping[str, Any], facts: FactSet) -> Any:
    """The question's default for these answers, or None when it has none."""
    default = question.default
    if isinstance(default, Ref):
        source = answers if default.kind == "answer" else facts.values
        return source.get(default.name)
    return default


def text_context(tree: Tree, answers: Mapping[str, Any], facts: FactSet) -> dict[str, Any]:
    """The values explanation texts may use (unanswered questions are None)."""
    # `backend`: the decided one, set by the callers that explain an add-on (None before a decision).
    context: dict[str, Any] = dict.fromkeys((*tree.question_ids, *FACTS, "backend"))
    context.update(answers)
    context.update(facts.values)
    context.update(estimate_context(facts))
    context["est"] = _layout_figures(facts, context.get("est") or {})
    # ZeRO-2's step against FSDP2's, each kind of GPU link on its own (the FSDP2 rule's "why not ZeRO-2").
    zero2, fsdp2 = context["est"].get("zero2"), context["est"].get("fsdp2")
    if zero2 and fsdp2:
        clause, faster, where = _step_comparison(zero2, fsdp2)
        context["zero2_vs_fsdp2"] = {"clause": clause, "faster": faster, "where": where}
    else:
        context["zero2_vs_fsdp2"] = {"clause": "", "faster": False, "where": ""}
    context["gpus_needed"], context["gpus_split_batch"] = _gpus_for_batch(_gpus_needed(facts), answers)
    context["machines_needed"] = _machines_needed(facts, answers)
    # Whether FSDP2 at that count fits only tightly (the loss's moment past the usable line), as its what-if row says.
    needed = (
        context["machines_needed"] * int(answers.get("gpus_per_node") or 1)
        if context["machines_needed"]
        else context["gpus_needed"]
    )
    context["needed_tight"] = bool(needed) and _sharded_tight(facts, int(needed or 0))
    context["host_share"] = f"{FIT_MARGIN:.0%}"
    # Above this share of the usable memory a layout is "close to the usable memory" (the summary warns).
    context["tight_share"] = TIGHT_SHARE
    # Past this share of the usable memory a plan has "little to spare" (the Memory line and In short say so).
    context["little_share"] = LITTLE_TO_SPARE
    # Micro-batches per optimizer step, for texts on what recurs every micro-batch.
    context["accumulation"] = facts.accumulation
    # An NVMe run's drive holds the offloaded states as stored (no pinned buffers' 1.5x on a drive).
    nvme = facts.estimates.get("zero3_offload_all") if facts.estimates else None
    context["nvme_drive_gib"] = to_gib(nvme.host_stored) if nvme is not None else None
    workload = facts.workload
    # The output logits (4 bytes per token per vocabulary entry) dominate long-sequence activations.
    # None with a chunked loss: the activations then count no logits.
    context["logits_gib"] = (
        to_gib(logits_bytes(workload)) if workload is not None and not workload.chunked_loss else None
    )
    # The shape behind the activation figures, named in the long-context explanations.
    context["vocab_size"] = f"{workload.shape.vocab_size:,}" if workload is not None else None
    context["layers"] = workload.shape.layers if workload is not None else None
    host = answers.get("cpu_memory_gb")
    context["host_usable_gib"] = round(float(host) * FIT_MARGIN, 1) if isinstance(host, (int, float)) else None
    params = facts.get("params")
    context["params_b"] = f"{params / 1e9:.1f}B" if params else "?"
    # A ZeRO-3 save gathered into one 16-bit copy on machine 0 (stage3_gather_16bit_weights_on_model_save).
    context["save16_gib"] = to_gib(2 * params) if params else 0.0
    # "an 8.0B", "an 11.0B", "an 80.0B", "a 7.0B": the article as the number is said.
    spoken = str(context["params_b"])
    context["a_params_b"] = ("an " if spoken.startswith(("8", "11", "18")) else "a ") + spoken
    context["num_nodes"] = answers.get("num_nodes", 1)
    # Names as people write them, for prose: "Axolotl", "a 13.0B LoRA run" (not "lora").
    context["tool"] = TOOL_NAMES.get(str(answers.get("target")), "Accelerate")
    context["method_name"] = METHOD_NAMES.get(str(answers.get("method")), answers.get("method"))
    if answers.get("objective") == "dpo":  # "an 8.0B full DPO run", "the 8B LoRA DPO run"
        context["method_name"] = f"{METHOD_NAMES.get(str(answers.get('method')), 'full').replace(' fine-tune', '')} DPO"
    context[SHARED] = tree.texts  # {% include texts.NAME %}: the tree's shared texts
    # A size whose reference model counts otherwise ("1B", Llama 3.2 1B's 1.24B): the one-device
    # figure with that model's own count, for texts whose verdict could change with it.
    own = reference_estimate(facts, "ddp")
    context["own_count"] = (
        {"name": own[0], "params_b": f"{own[1] / 1e9:.2f}B", "total_gib": to_gib(own[2].total)}
        if own is not None and own[2] is not None
        else None
    )
    # A QLoRA run's one-device figure with LoRA on the 16-bit base instead, for the texts that
    # say what the 4-bit base buys here.
    workload = facts.workload
    # The layouts that decide whether a run must offload, at one sequence per GPU: where the
    # micro-batch is larger (picked for the room an offload leaves, or answered), the texts give
    # the figure at 1 too, so the reason for the offload does not rest on a micro-batch it enabled.
    context["micro1"] = {name: to_gib(est.total) for name, est in at_micro_one(facts).items()} or None
    context["lora_gib"] = None
    if answers.get("method") == "qlora" and workload is not None and "ddp" in facts.estimates:
        chosen = facts.estimates["ddp"]
        lora = estimate_memory(replace(workload, method="lora"), "ddp", to_gib(chosen.gpu_memory), None)
        context["lora_gib"] = to_gib(lora.total)
    # A full copy's figure with AdamW instead of the 8-bit or Adafactor answer, for the texts that
    # say what the optimizer buys here (a copy that fits only with it).
    context["adamw_gib"] = context["optimizer_title"] = None
    if workload is not None and workload.optimizer != "adamw" and "ddp" in facts.estimates:
        chosen = facts.estimates["ddp"]
        adamw = estimate_memory(replace(workload, optimizer="adamw"), "ddp", to_gib(chosen.gpu_memory), None)
        context["adamw_gib"] = to_gib(adamw.total)
        context["optimizer_title"] = OPTIMIZER_TITLES.get(workload.optimizer, workload.optimizer)
    # A full copy's figure with the ordinary loss, for a run that counts a chunked loss (Cut Cross Entropy, or the
    # script's own): the texts say where the copy fits only with it, and what to do if it cannot be had.
    context["ordinary_gib"] = None
    if workload is not None and workload.chunked_loss and "ddp" in facts.estimates:
        chosen = facts.estimates["ddp"]
        ordinary = estimate_memory(replace(workload, chunked_loss=False), "ddp", to_gib(chosen.gpu_memory), None)
        context["ordinary_gib"] = to_gib(ordinary.total)
    return context


def at_micro_one(facts: FactSet) -> dict[str, Estimate]:
    """The layouts that decide whether a run must shard or offload (DDP, FSDP2, ZeRO-3), at one sequence per GPU.

    Where the micro-batch is larger (picked for the room an offload leaves, or answered), the texts and the summary's
    In short give the figure at 1 too, so the reason for the offload does not rest on a micro-batch it enabled.
    Empty at a micro-batch of 1, or without a one-device estimate.
    """
    workload = facts.workload
    if workload is None or workload.micro_batch_size <= 1 or "ddp" not in facts.estimates:
        return {}
    one, memory = replace(workload, micro_batch_size=1), to_gib(facts.estimates["ddp"].gpu_memory)
    return {
        name: estimate_memory(one, name, memory, None) for name in ("ddp", "fsdp2", "zero3") if name in facts.estimates
    }


def _layout_figures(facts: FactSet, figures: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each layout's figures for texts, with what a comparison of two layouts needs.

    `name` is the memory table's row label (so a reader finds the row), `other_gib` the overhead
    column, `gathers` whether every layer's weights are gathered in each pass, `offload` and
    `offloads_weights` what leaves the GPU every step, `hybrid` whether sharding stays inside a
    machine, and `host_installed_gib` the RAM to install for `host_gib`, since only a share of it
    counts as usable.
    """
    world_size = facts.get("world_size", 1)
    result: dict[str, dict[str, Any]] = {}
    for layout, figure in figures.items():
        estimate = facts.estimates[layout]
        name = estimate.label
        if layout == "ddp":  # the table's "DDP / 1 GPU" row: one of the two, never both
            name = "DDP" if world_size > 1 else "one GPU"
        result[layout] = {
            **figure,
            "layout": layout,
            "name": name,
            "other_gib": to_gib(estimate.overhead),
            "gathers": estimate.gathered > 0,
            "gathered_gib": to_gib(estimate.gathered),
            # The fp32 loss's temporaries at the start of the backward pass, beyond the logits counted.
            "loss_extra_gib": to_gib(loss_extra_bytes(facts.workload, layout)) if facts.workload else 0.0,
            # The total with that moment, and whether only it keeps the layout from fitting.
            "peak_gib": sum_gib(estimate.total, estimate.transient),
            # What the device keeps at that moment for all the estimate does not count.
            "spare_gib": spare_gib(estimate),
            "peak_short": estimate.peak_short,
            "tight": estimate.tight,
            # Tight, and the real peak may pass the card by the loss-peak note's calibration.
            "close_call": estimate.close_call,
            # How sure: "would likely" where even the calibration's kinder end passes the card, else "may" (the
            # word the Risk line, the title and In short use for the same layout).
            "may": estimate.may,
            # The peak with the long-context allowance, as the close call weighs it against the card ("39% more,
            # about N GiB"): said beside "N GiB below the GPU's memory" so that the room left does not read as safe.
            "calibrated_gib": estimate.real_peak_gib[1],
            "undershoot_percent": UNDERSHOOT_PERCENT,
            "long_context": estimate.long_context,
            "offload": layout in OFFLOAD_STRATEGIES,
            # A full offload keeps nothing but the layer being computed on the GPU.
            "offloads_weights": layout in OFFLOAD_STRATEGIES and estimate.model_states == estimate.gathered,
            "hybrid": layout.startswith("hsdp"),
            # Per GPU and step over PCIe, and the time that takes at least (a floor, not a forecast).
            "pcie_gib": to_gib(pcie) if (pcie := _pcie(facts, layout)) else 0.0,
            "pcie_s": _seconds(pcie / PCIE_BYTES_PER_SECOND) if pcie else 0.0,
            # The same per optimizer step with its gradient accumulation (the step-time model's count), into the GPU
            # and out to host RAM (both directions run at once); the total as a reader adds the two shown.
            **_pcie_step(facts, layout),
            # The rough step time (wizard.engine.speed), where the card has a throughput figure.
            "step_band": band_text(step) if (step := facts.speeds.get(layout)) else None,
            "step_mid": shown_middle(step) if step else None,
            "step_ends": (step.low, step.high) if step else None,
            # What each machine sends to the others per optimizer step, in GB (0 on one machine).
            "net_gb": round(step.network_bytes / 1e9, 1) if step else None,
            "bound": bound_text(step) if step else None,
            "by_link": _by_link(facts, layout) if step else {},
            "fits": estimate.fits,
            # False only where host RAM is known and too small for what this layout offloads.
            "host_short": estimate.host_fits is False,
            "host_installed_gib": round(estimate.host_per_node / FIT_MARGIN / GIB, 1),
            # What is offloaded before the pinned buffers' 1.5 (layer offloading pins once: no factor).
            "host_states_gib": to_gib(estimate.host_stored),
        }
    return result


def _by_link(facts: FactSet, layout: str) -> dict[str, dict[str, Any]]:
    """The layout's step band with each kind of GPU link the card may have, where its boards differ.

    A card sold with NVLink (SXM) and PCIe boards gets one band spanning both links; comparing two
    layouts whose traffic differs then needs each link apart, or a difference that exists only over
    PCIe reads as a difference everywhere. Empty where the link is known.
    """
    links, workload = facts.links, facts.workload
    if links is None or workload is None or not links.each_link:
        return {}
    result: dict[str, dict[str, Any]] = {}
    for rate, said in zip(links.gpu_link, links.each_link, strict=True):
        step = step_time(workload, layout, replace(links, gpu_link=(rate, rate)), facts.accumulation)
        if step is not None:
            result[said] = {"band": band_text(step), "mid": shown_middle(step), "bound": bound_text(step)}
    return result


def _pcie_step(facts: FactSet, layout: str) -> dict[str, float]:
    """GiB one GPU moves over PCIe per optimizer step, in, out, and the two added as shown (0 without offload)."""
    if facts.workload is None:
        return {"pcie_in_gib": 0.0, "pcie_out_gib": 0.0, "pcie_step_gib": 0.0}
    into, out = host_traffic(facts.workload, layout, facts.accumulation)
    return {"pcie_in_gib": to_gib(into), "pcie_out_gib": to_gib(out), "pcie_step_gib": sum_gib(into, out)}


def _pcie(facts: FactSet, layout: str) -> int:
    """Bytes one GPU moves over PCIe per step in this layout (0 without offload or a workload)."""
    return pcie_bytes_per_step(facts.workload, layout) if facts.workload is not None else 0


def _gpus_needed(facts: FactSet) -> int | None:
    """The fewest GPUs in all over which FSDP2 without offload would fit, by this estimate.

    The sharded part of the state shrinks as 1/N; the gathered layer, the activations and the
    overhead stay on every GPU, and so does the loss's moment's peak, which must stay within the
    GPU's whole memory. None when those alone do not fit, or when it fits already.
    """
    split = _split_copy(facts)
    if split is None:
        return None
    states, sharded, fixed = split
    room = min(sharded.budget - fixed, sharded.gpu_memory - fixed - sharded.transient)
    if room <= 0:
        return None
    needed = max(2, -(-states // room))
    return needed if needed > facts.get("world_size", 1) else None


def _gpus_for_batch(needed: int | None, answers: Mapping[str, Any]) -> tuple[int | None, bool]:
    """The GPU count to name for `needed`, and whether it was raised to split the user's global batch.

    A global batch given must divide over the GPUs (times the micro-batch), or the run is refused at that
    count: the fewest GPUs that fit is raised to the next count that splits it, where one does up to twice it.
    """
    batch, micro = answers.get("global_batch_size"), answers.get("micro_batch_size")
    micro = micro if isinstance(micro, int) and micro > 0 else 1
    if needed is None or not isinstance(batch, int) or batch % (needed * micro) == 0:
        return needed, False
    split = next((n for n in range(needed + 1, 2 * needed + 1) if batch % (n * micro) == 0), None)
    return (split, True) if split is not None else (needed, False)


def _sharded_tight(facts: FactSet, gpus: int) -> bool:
    """Whether FSDP2 without offload over `gpus` GPUs fits but goes past the usable line at the loss's moment.

    Counted as `_gpus_needed` counts it: the full copy's states split over the GPUs, beside what every GPU keeps.
    """
    split = _split_copy(facts)
    if split is None or gpus < 1:
        return False
    states, sharded, fixed = split
    total = fixed + -(-states // gpus)
    return total <= sharded.budget < total + sharded.transient <= sharded.gpu_memory


def _split_copy(facts: FactSet) -> tuple[int, Estimate, int] | None:
    """FSDP2 as a full copy split N ways: the copy's model states, FSDP2's estimate, and what every GPU keeps whole.

    What every GPU keeps (the gathered layer, the activations, the overhead) does not shrink with N; the states do.
    None without both a one-GPU and an FSDP2 estimate. `_gpus_needed` and `_sharded_tight` count the same way.
    """
    full, sharded = facts.estimates.get("ddp"), facts.estimates.get("fsdp2")
    if full is None or sharded is None:
        return None
    return full.model_states, sharded, sharded.gathered + sharded.activations + sharded.overhead


def _machines_needed(facts: FactSet, answers: Mapping[str, Any]) -> int | None:
    """`_gpus_needed` as whole machines of this run's size, when the run spans several machines.

    Machines come whole: "about 135 GPUs" on 8-GPU machines means 17 machines, 136 GPUs.
    """
    gpus = _gpus_needed(facts)
    per_node = answers.get("gpus_per_node")
    if gpus is None or answers.get("num_nodes", 1) <= 1 or not isinstance(per_node, int) or per_node < 1:
        return None
    return -(-gpus // per_node)


def describe_compare(
    tree: Tree, leaf: Compare, lookup: Lookup, context: Mapping[str, Any], held: bool | None = None
) -> str:
    """A sentence for one comparison with the user's numbers, from the tree's `facts:` texts.

    A yes/no fact is said as it is, with its numbers, whichever way the rule needed it. Any other
    answer or fact is said by whether the comparison held (`holds`) or not (`fails`); the text
    sees the comparison as `op` and `value`. Subjects without a text get a generic sentence.
    """
    actual = lookup(leaf.kind, leaf.name)
    if held is None:
        held = compare(leaf.op, actual, leaf.value)
    text = tree.fact_texts.get(leaf.name)
    if text is None:
        return describe_plain_compare(leaf, actual, held)
    if leaf.kind == "fact" and actual is False and (short := _moment_text(tree, leaf.name, context, "peak_short")):
        return short
    if leaf.kind == "fact" and actual is True and (tight := _moment_text(tree, leaf.name, context, "tight")):
        return render_text(text.holds, context) + tight  # a fit whose loss moment passes the usable line
    if leaf.kind == "fact" and isinstance(actual, bool):
        return render_text(text.holds if actual else text.fails, context)
    if leaf.op == "set":
        # The texts say whether the answer is given ("this run brings a DeepSpeed JSON"), whichever
        # way the comparison asked: `set: false` failing means it is given, not that it is missing.
        given = compare("set", actual, True)
        return render_text(text.holds if given else text.fails, context)
    value = list(leaf.value) if isinstance(leaf.value, tuple) else leaf.value
    return render_text(text.holds if held else text.fails, {**context, "op": leaf.op, "value": value})


def why_not(tree: Tree, cond: Condition, lookup: Lookup, context: Mapping[str, Any]) -> tuple[Compare | None, str]:
    """The first part of a false condition that failed, and a plain sentence for it.

    An answer that was never asked (Megatron-LM's question on one GPU) explains nothing by
    itself: the reason is then whatever kept its question from being asked.
    """
    leaf = failing_leaf(tree, cond, lookup)
    if leaf is None:
        return None, ""
    return leaf, describe_compare(tree, leaf, lookup, context, held=False)


def failing_leaf(tree: Tree, cond: Condition, lookup: Lookup) -> Compare | None:
    """The part of a false condition `why_not` explains, without its sentence."""
    leaf = _first_failing(cond, lookup)
    seen: set[str] = set()
    while leaf is not None and leaf.kind == "answer" and lookup("answer", leaf.name) is MISSING:
        question = tree.question(leaf.name)
        if question is None or question.when is None or leaf.name in seen:
            break
        seen.add(leaf.name)
        gate = _first_failing(question.when, lookup)
        if gate is None:  # asked but left empty: the answer's own sentence says so
            break
        leaf = gate
    return leaf


def not_asked_because(tree: Tree, qid: str, answers: Mapping[str, Any], inputs: Inputs) -> str:
    """Why a question is not asked for these answers, as a plain sentence ("" when it has no condition)."""
    question = tree.question(qid)
    if question is None or question.when is None:
        return ""
    facts = derive_facts(answers, inputs)
    # An add-on's condition reads the decision too ("asked when a backend was chosen"): without
    # it, the reason would be the decision's absence ("no refused was given").
    outcome = decided_outcome(tree, answers, inputs) if qid in tree.addon_ids else None
    lookup = make_lookup(answers, facts, outcome)
    if evaluate(question.when, lookup):
        return ""
    context = text_context(tree, answers, facts)
    if outcome is not None:
        context["backend"] = lookup("outcome", "backend")
    return why_not(tree, question.when, lookup, context)[1]


def _first_failing(cond: Condition, lookup: Lookup) -> Compare | None:
    leaf = first_failure(cond, lookup, lambda branch: _answers_missed(branch, lookup))
    if leaf is not None and leaf.kind == "fact" and lookup("fact", leaf.name) is MISSING:
        # An estimate that does not exist for this layout explains a rule only when nothing else does.
        leaf = _informative(failing_compares(cond, lookup), lookup)[0]
    return leaf


def _answers_missed(cond: Condition, lookup: Lookup) -> int:
    return sum(leaf.kind == "answer" for leaf in failing_compares(cond, lookup))


def _other_hardware(tree: Tree, rule: Rule, reason: Compare | None, lookup: Lookup) -> bool:
    """Whether a rule that failed was for other hardware (its own condition or its backend's)."""
    if reason is not None and reason.kind == "answer" and reason.name == HARDWARE:
        return True
    backend = tree.backends.get(rule.outcome.backend or "")
    if backend is None or backend.available is None or evaluate(backend.available, lookup):
        return False
    return any(leaf.kind == "answer" and leaf.name == HARDWARE for leaf in failing_compares(backend.available, lookup))


def _held_sentences(tree: Tree, rule: Rule, lookup: Lookup, context: Mapping[str, Any]) -> tuple[str, ...]:
    # Only the facts, with their numbers: the answers that held ("target is accelerate") are
    # what the user just said, and the decision's own text says what they led to.
    leaves = [leaf for leaf in held_compares(rule.when, lookup) if leaf.kind == "fact"]
    return tuple(dict.fromkeys(describe_compare(tree, leaf, lookup, context, held=True) for leaf in leaves))


def _said(sentences: tuple[str, ...]) -> Callable[[], tuple[str, ...]]:
    """Sentences already worked out, as a trace entry reads them."""
    return lambda: sentences


def _failed_sentence(
    tree: Tree, leaf: Compare | None, lookup: Lookup, context: Mapping[str, Any]
) -> Callable[[], tuple[str, ...]]:
    """The sentence of a rule's failed condition, to be worked out when read."""
    return lambda: (describe_compare(tree, leaf, lookup, context, held=False) if leaf is not None else "",)


def recommend(tree: Tree, answers: Mapping[str, Any], inputs: Inputs) -> Recommendation:
    """Test the rules in order; the first that holds decides."""
    # A copy: the sentences of the trace are worked out later, from the answers as they are now.
    answers = dict(answers)
    facts = derive_facts(answers, inputs)
    lookup = make_lookup(answers, facts)
    context = text_context(tree, answers, facts)
    trace: list[TraceEntry] = []
    winner: Rule | None = None
    rendered: str | None = None  # the held rule's reason, with the markers of its long-form clauses
    for rule in tree.rules:
        held = evaluate(rule.when, lookup)
        rendered = _because(rule, context) if held else None
        if held:
            said, other, tool = _said(_held_sentences(tree, rule, lookup, context)), False, False
        else:
            reason = failing_leaf(tree, rule.when, lookup)
            said, other = _failed_sentence(tree, reason, lookup, context), _other_hardware(tree, rule, reason, lookup)
            tool = reason is not None and reason.kind == "answer" and reason.name == "target" and not other
        trace.append(
            TraceEntry(
                rule_id=rule.id,
                title=rule.title or rule.id,
                guidance=rule.guidance,
                guidance_text=tree.guidance[rule.guidance],
                sources=tree.sources_for(rule.sources, lookup("answer", "target")),
                held=held,
                said=said,
                because=split_detail(rendered)[0] if rendered is not None else None,
                other_hardware=other,
                other_tool=tool,
            )
        )
        if held:
            winner = rule
            break
    assert winner is not None, "the linter guarantees a rule always applies"
    settings = outcome_settings(winner, answers, facts)
    backend = tree.backends.get(str(winner.outcome.backend)) if winner.outcome.backend is not None else None
    traits = backend.traits if backend is not None else NO_BACKEND
    brief = split_detail(rendered)[1] if rendered else ""
    return Recommendation(
        refused=winner.outcome.refuse,
        backend=winner.outcome.backend,
        rule=winner,
        because=trace[-1].because or "",
        because_brief=brief if brief != trace[-1].because else "",
        settings=settings,
        trace=tuple(trace),
        runner_ups=_runner_ups(tree, winner, settings, facts, lookup, context, trace[-1].because or ""),
        facts=facts,
        warnings=tuple(recommendation_warnings(answers, facts, settings, traits)),
        hardware=_hardware_title(tree, answers),
        hardware_id=None if answers.get(HARDWARE) is None else str(answers.get(HARDWARE)),
        target=None if answers.get("target") is None else str(answers.get("target")),
        traits=traits,
    )


def _because(rule: Rule, context: Mapping[str, Any]) -> str:
    """A rule's reason as rendered, with the markers of the clauses only the long form gives (`split_detail`)."""
    return render_text(rule.because, {**context, "detail_open": DETAIL_OPEN, "detail_close": DETAIL_CLOSE})


def _hardware_title(tree: Tree, answers: Mapping[str, Any]) -> str | None:
    question = tree.question(HARDWARE)
    choice = question.choice(str(answers.get(HARDWARE))) if question else None
    return choice.title if choice else None


def outcome_settings(rule: Rule, answers: Mapping[str, Any], facts: FactSet) -> dict[str, Any]:
    """What a rule's outcome sets for these answers (backend, layout, ZeRO stage, offload, sizes)."""
    values: dict[str, Any] = {
        "backend": rule.outcome.backend,
        "zero_stage": None,
        "offload_optimizer": "none",
        "offload_param": "none",
        "strategy": None,
        "mixed_precision": facts.get("mixed_precision", "no"),
        "num_processes": facts.get("world_size", 1),
        # num_nodes is only asked where several machines are possible (not for CPU, MPS or TPU).
        "num_machines": answers.get("num_nodes", 1),
    }
    for key, value in rule.outcome.settings.items():
        values[key] = (
            facts.get(value.name)
            if isinstance(value, Ref) and value.kind == "fact"
            else (answers.get(value.name) if isinstance(value, Ref) else value)
        )
    return values


def _runner_ups(
    tree: Tree,
    winner: Rule,
    settings: Mapping[str, Any],
    facts: FactSet,
    lookup: Lookup,
    context: Mapping[str, Any],
    because: str = "",
) -> tuple[RunnerUp, ...]:
    """Why every other backend lost (`because`: the decision's own text, whose comparisons are not repeated).

    Every memory layout of a losing backend counts (its `layouts` in the tree, lightest traffic
    per step first), not only the one its rules happen to test first:

    * the first layout that fits is compared with the winner (memory per GPU, traffic per step,
      what it adds to install and maintain: the backend's `compare` text), followed by the
      winning backend's `preferred` text when the answers decided it (a DeepSpeed JSON, QLoRA);
    * a layout that fits only by offloading, when this run rules offload out, is said as such;
    * when none fits, the layout that comes closest says why (its `fits_`/`host_fits_` sentence);
    * a backend with no estimated layout falls back to the first unmet part of its closest rule.
    """
    chosen = tree.backends.get(winner.outcome.backend or "")
    chosen_layout = str(settings.get("strategy"))
    estimates = context.get("est") or {}
    brought = lookup("answer", "deepspeed_config") not in (None, MISSING)
    if brought and facts.estimates and (lever := suggested_lever(chosen_layout, facts.estimates)) is not None:
        # A brought JSON that does not fit as written: each runner-up is weighed against the edit the
        # wizard suggests for it (ds_config.suggested.json), a layout that can run, as the step table is.
        suggested = estimates.get(lever)
        if suggested is not None:
            chosen_layout = lever
            estimates = {
                **estimates,
                lever: {**suggested, "name": f"{SUGGESTED_JSON}'s {suggested['name']}"},
            }
    compare_context: dict[str, Any] = {
        **context,
        "chosen_backend": chosen.id if chosen else None,
        "chosen_title": chosen.title_on(lookup("answer", HARDWARE)) if chosen else None,
        "chosen": estimates.get(chosen_layout),
        "same": False,
        "detail_open": DETAIL_OPEN,
        "detail_close": DETAIL_CLOSE,
    }
    result = []
    offload_said: list[str] = []
    for backend in tree.backends.values():
        rules = [r for r in tree.rules if r.outcome.backend == backend.id]
        if backend.id == winner.outcome.backend or not rules:
            continue
        if backend.available is not None and not evaluate(backend.available, lookup):
            continue
        verdict, layout = _best_layout(backend, facts, lookup("answer", "offload"))
        brief_keep: tuple[int, ...] = ()
        if verdict == "fits" and backend.compare is not None and chosen is not None:
            # A layout that needs what the winner needs is the one a reader weighs against it
            # (ZeRO-3 against FSDP2), even when a lighter-traffic one fits too; that one gets a sentence.
            tie = _tie_layout(backend, facts, estimates.get(chosen_layout), lookup("answer", "offload"))
            lighter = estimates[layout] if tie is not None and tie != layout else None
            layout = tie or layout
            runner = estimates[layout]
            same = bool(compare_context["chosen"]) and runner["total_gib"] == compare_context["chosen"]["total_gib"]
            # The two steps compared, per GPU link where the card's boards differ (see _step_comparison).
            steps = _step_comparison(runner, compare_context["chosen"])[0] if compare_context["chosen"] else ""
            runner_context = {**compare_context, "runner": runner, "same": same, "steps": steps}
            reason = render_text(backend.compare, runner_context)
            preferred = render_text(chosen.preferred, runner_context) if chosen.preferred else ""
            if preferred and _weighed_above(because, backend.title):
                # The decision's own "Why X over Y" paragraph, which the summary keeps whole, chooses between the two:
                # the short form points there; the long form gives the winner's case here too.
                reason = (
                    f"{reason}. The decision above says how it chooses between the two"
                    f"{DETAIL_OPEN}: {preferred}{DETAIL_CLOSE}"
                )
            elif preferred:
                # What the winner offers in return is a sentence of its own, not a clause run on.
                reason = f"{reason}. {preferred[:1].upper()}{preferred[1:]}"
            # Each further layout is a paragraph of its own (a line break in the reason): one
            # run-on paragraph of four layouts is hard to read at 80 columns.
            if lighter is not None:
                sentence = _lighter_sentence(lighter, compare_context["chosen"])
                opening = sentence.split(",", 1)[0]  # "ZeRO-2 fits too"
                if f"{opening}, at about {lighter['total_gib']} GiB per GPU" in because:
                    # The decision's own text already weighs this layout against the winner.
                    chosen_name = compare_context["chosen"]["name"]
                    sentence = (
                        f"{opening} (about {lighter['total_gib']} GiB per GPU): the decision above gives its memory"
                        f" and step time beside {chosen_name}'s, and why the wizard keeps {chosen_name}"
                    )
                reason += ".\n" + sentence
            mentioned = {layout, lighter["layout"] if lighter is not None else None}
            others = _other_layouts(
                backend,
                facts,
                estimates,
                mentioned,
                compare_context["chosen"],
                int(facts.get("world_size", 1)),
                offload_said,
            )
            if others:
                reason += ".\n" + others
            if layout in OFFLOAD_STRATEGIES and (short := _short_without_offload(backend, facts, estimates, context)):
                # The fitting layout offloads: first say why the backend's layouts without it do not fit;
                # the short view keeps the next paragraph too, how the backend does with offload.
                reason = short + "\n" + reason
                brief_keep = (1,)
        elif verdict == "offload_ruled_out":
            runner = estimates[layout]
            if layout == "ddp_layer_offload":
                # Axolotl's own switch, which offload: none leaves off but does not forbid.
                reason = (
                    "it would fit with Axolotl's layer offloading, which offload: none leaves off unless asked for"
                    f" (set layer_offloading: true): {runner['name']} needs about {runner['total_gib']} GiB per GPU"
                    f" and about {runner['host_gib']} GiB of host RAM per machine{_installed(runner)}"
                )
            else:
                reason = (
                    f"it would fit only with CPU offload, which this run rules out (offload: none): {runner['name']} "
                    f"needs about {runner['total_gib']} GiB per GPU and about {runner['host_gib']} GiB of host RAM per"
                    f" machine{_installed(runner)}"
                )
            chosen_figure = compare_context["chosen"]
            if chosen_figure:
                # Set against the decision, which needs no offload.
                reason += (
                    f", where {chosen_figure['name']} fits without it (about {chosen_figure['total_gib']} GiB per GPU)"
                )
        elif verdict == "short" and (peak_short := _moment_text(tree, f"fits_{layout}", context, "peak_short")):
            reason = peak_short
        elif verdict in ("host_short", "short") and _layout_fact(tree, verdict, layout) is not None:
            reason = render_text(_layout_fact(tree, verdict, layout) or "", context)
            chosen_figure = compare_context["chosen"]
            if verdict == "host_short" and chosen_figure and chosen_figure.get("host_short"):
                # The chosen layout (a brought JSON's, run as written) is short of host RAM too: host RAM
                # alone does not set the two apart, and saying it only of the runner-up reads as circular.
                reason += (
                    f"; {chosen_figure['name']}, which runs here, is short of host RAM as well (the warning below"
                    " says how much), so host RAM does not set the two apart"
                )
            if verdict == "host_short" and (short := _short_without_offload(backend, facts, estimates, context)):
                # Host RAM is what stops the offload layout; first say why the plain ones do not fit.
                reason = short + "\n" + reason[:1].upper() + reason[1:]
                brief_keep = (1,)
        else:
            # A layout that fits is explained by the rule that would choose it (layer offloading
            # turned off, say), not by a rule about another of the backend's layouts.
            own = [r for r in rules if verdict == "fits" and r.outcome.settings.get("strategy") == layout]
            closest = min(own or rules, key=lambda r: _miss_score(r, lookup, backend.strategy, facts))
            _, reason = why_not(tree, closest.when, lookup, context)
            if not reason and winner.outcome.refuse:
                # A refusal stops the run whatever backend takes it: its own reason, above, is why
                # (a condition its rule met would name what holds, not what is wrong).
                reason = "this run is refused for the reason above, which applies first"
            elif not reason:
                # Its rule holds too, but the winner's comes first: say what the winner's rule met.
                met = _met(tree, winner, lookup, context)
                reason = f"it could run here too, but an earlier rule applies first: {met}"
            deepspeed_offload = backend.traits.offload == "zero" and layout in OFFLOAD_STRATEGIES
            if verdict == "fits" and deepspeed_offload and lookup("answer", "target") == "axolotl":
                # Axolotl offloads with FSDP2 in this tree; DeepSpeed's offload runs from a JSON of one's own.
                runner = estimates[layout]
                reason = (
                    f"{runner['name']} would fit (about {runner['total_gib']} GiB per GPU), but for Axolotl the wizard"
                    " offloads with FSDP2, not DeepSpeed; to run it, bring a DeepSpeed JSON of your own with that"
                    " offload (deepspeed_config)"
                )
            elif verdict == "fits" and layout is not None:
                # A refusal (no winner to compare with): the memory fits, so the rule says what else failed.
                runner = estimates[layout]
                # A row named by a number ("1 GPU + layer offload") is named as the table's row.
                name = runner["name"] if str(runner["name"])[:1].isalpha() else f"the {runner['name']} row"
                reason = f"{name} would fit (about {runner['total_gib']} GiB per GPU), but {reason}"
        one_gpu = int(facts.get("world_size", 1) or 1) == 1
        if verdict != "fits" and one_gpu and backend.traits.accelerate_type == "MULTI_GPU":
            # Data parallel on one GPU is no other way to train at all: its memory is the one-GPU
            # figure the decision already weighs, so a memory reason would read as DDP's own fault.
            alone = estimates.get("ddp")
            # At micro-batch 1, where the decision weighed it: a larger micro-batch is one the offload's room bought.
            one = (context.get("micro1") or {}).get("ddp")
            gib, at = (one, " at micro_batch_size 1") if one is not None else (alone and alone["total_gib"], "")
            figure = (
                f" (about {gib} GiB{at}, more than the {context.get('budget_gib')} GiB usable)"
                if alone and not alone["fits"]
                else ""
            )
            reason = (
                "on one GPU, DDP is the same single process with a process group added and no other"
                f" GPU to average gradients with: it needs what one GPU alone needs{figure}, so it does not fit"
                " either, and it would change nothing if it did"
            )
        layer_gib, layer_host = facts.get("layer_offload_gib"), facts.get("layer_offload_host_gib")
        if (
            verdict != "fits"
            and not one_gpu
            and backend.traits.accelerate_type == "MULTI_GPU"
            and layer_gib is not None
            and compare_context["chosen"]
            and not winner.outcome.refuse
        ):
            # Axolotl's layer offloading beside DDP, which the rules offer on several GPUs only where a
            # full copy fits: its own figures, against the layout that won, so the reader can weigh it.
            chosen_figure = compare_context["chosen"]
            step, pcie = facts.get("layer_offload_step"), facts.get("layer_offload_pcie_gib")
            speed = (
                f", and a step of about {step} against {chosen_figure['step_band']}: each GPU process moves"
                f" about {pcie} GiB over PCIe per optimizer step, half each way (each frozen layer in for the"
                " forward and again for the backward pass, and back out after each use; a board that splits its"
                " lanes x8/x8 halves the rate)"
                if step and chosen_figure.get("step_band")
                else ""
            )
            if brought:
                verdict_words = (
                    " With a DeepSpeed JSON of yours the run is DeepSpeed's, which layer offloading does not join"
                )
            elif facts.get("layer_offload_short") == "gpu":
                verdict_words = (
                    f" That does not fit the GPU either (more than the {context.get('budget_gib')} GiB usable, or past"
                    " the whole memory for a moment as the backward pass starts), so it is not offered"
                )
            elif facts.get("layer_offload_short") == "host":
                verdict_words = (
                    f" Its {layer_host} GiB of host RAM is more than the {context.get('host_usable_gib')} GiB usable"
                    f" ({FIT_MARGIN:.0%} of the {lookup('answer', 'cpu_memory_gb')} GiB this run has), so it is not"
                    " offered"
                )
            elif facts.get("layer_offload_beside_ddp"):
                verdict_words = (
                    " It is the wizard's default here, as Axolotl's guide tries it before a sharding backend;"
                    " this run turns it off (layer_offloading: no)"
                )
            elif lookup("answer", "method") != "lora":
                verdict_words = " For QLoRA on several GPUs the wizard shards with FSDP2, as Axolotl's guide pairs them"
            elif lookup("answer", "offload") == "none":
                verdict_words = " This run rules offload out (offload: none), layer offloading included"
            elif lookup("answer", "offload") != "auto":
                verdict_words = (
                    f" This run asks for offload: {lookup('answer', 'offload')}, which the wizard runs with its"
                    " sharded layouts' own offload"
                )
            elif step and chosen_figure.get("step_band"):
                verdict_words = " Its step is the longer, so the wizard shards"
            else:
                verdict_words = " The wizard shards where it cannot weigh the transfer time or host RAM"
            brief_keep = (*brief_keep, reason.count("\n") + 1)
            reason += (
                f".\nWith Axolotl's layer offloading beside DDP it would need about {layer_gib} GiB per GPU and"
                f" {layer_host} GiB of host RAM (every GPU process keeps its own copy of the frozen layers there)"
                f"{speed},"
                f" where {chosen_figure['name']} fits with {chosen_figure['total_gib']} GiB per GPU.{verdict_words}"
            )
        if verdict != "fits" and brought and not winner.outcome.refuse:
            # The brought JSON decided before any memory rule: said first, or a reason about memory
            # reads as the cause where the chosen JSON may not fit either.
            # "fits", not "Fits"; an acronym ("FSDP2 + offload") keeps its capitals.
            rest = reason if reason[1:2].isupper() else reason[:1].lower() + reason[1:]
            rest = f"it {rest}" if rest.startswith("needs ") else rest  # "besides, it needs 2 or more GPUs"
            reason = f"{JSON_FIRST[:1].lower()}{JSON_FIRST[1:]}{rest}"
        reason = reason[:1].upper() + reason[1:] + "."
        if backend.also is not None and (also := render_text(backend.also, compare_context).strip()):
            reason += " " + also
        whole, short = split_detail(reason)
        result.append(
            RunnerUp(
                backend.id,
                backend.title_on(lookup("answer", HARDWARE)),
                whole,
                layout or backend.strategy,
                brief_keep,
                short,
            )
        )
    return tuple(result)


def _short_without_offload(
    backend: Backend,
    facts: FactSet,
    estimates: Mapping[str, Mapping[str, Any]],
    context: Mapping[str, Any],
) -> str:
    """Why the backend's layouts without offload do not fit (their figures against the usable), or "".

    Only where none of them fits: a reader weighing an offload layout asks first why the same
    backend cannot run without it.
    """
    plain = [name for name in backend.layouts if name not in OFFLOAD_STRATEGIES and name in estimates]
    if not plain or any(facts.estimates[name].fits for name in plain):
        return ""
    short = [estimates[name] for name in plain]
    usable, memory = context.get("budget_gib"), context.get("gpu_memory_gb")

    def title(figure: Mapping[str, Any]) -> str:
        # The one-GPU backend's full copy is one GPU's figure, not DDP's (no process group there).
        return "one GPU" if backend.id == "single_gpu" and figure["layout"] == "ddp" else str(figure["name"])

    def named(figure: Mapping[str, Any]) -> str:
        hybrid = " (it shards only within each machine)" if figure["hybrid"] else ""
        # "one GPU needs about 21.2 GiB", not "one GPU about 21.2 GiB per GPU".
        per = "" if title(figure) == "one GPU" else " per GPU"
        return f"{title(figure)} needs about {figure['total_gib']} GiB{per}{hybrid}"

    # Each layout with the limit it passes, said once for those past the usable line; a layout within
    # that line through the step is past the whole GPU only at the fp32 loss peak, which is said apart.
    over = [named(figure) for figure in short if not figure["peak_short"]]
    clauses = []
    if over:
        listed = over[0] if len(over) == 1 else ", ".join(over[:-1]) + " and " + over[-1]
        clauses.append(f"{listed}, {'each ' if len(over) > 1 else ''}more than the {usable} GiB usable per GPU")
    # The failing figure first: "within the usable" ahead of it read as a contradiction of "does not fit".
    clauses += [
        f"{title(figure)}{' (it shards only within each machine)' if figure['hybrid'] else ''}"
        f" about {figure['peak_gib']} GiB per GPU for a moment as the backward pass starts (the fp32"
        f" loss's temporaries), more than the GPU's {memory} GiB, though about {figure['total_gib']} GiB, within the"
        f" {usable} GiB usable, through the rest of the step"
        for figure in short
        if figure["peak_short"]
    ]
    micro = context.get("micro_batch_size")
    # The figures are the memory table's, at the run's own micro-batch: said where it is above 1, since
    # the Why may quote micro-batch 1 beside them.
    at = f" at this micro_batch_size {micro}" if isinstance(micro, int) and micro > 1 else ""
    return f"Without offload it does not fit{at}: {'; '.join(clauses)}."


def _tie_layout(backend: Backend, facts: FactSet, chosen: Mapping[str, Any] | None, offload: Any) -> str | None:
    """The backend's allowed layout a reader weighs against the chosen one, if any.

    One that shards the same way (ZeRO-3 beside FSDP2: both gather each layer's weights, offload
    the same states or none), whose figure differs only in what each holds gathered at once; else
    one that happens to need the same GPU memory.
    """
    if not chosen:
        return None
    same = None
    for name, estimate in _fitting_layouts(backend, facts):
        if offload == "none" and name in OFFLOAD_STRATEGIES:
            continue
        if to_gib(estimate.total) == chosen["total_gib"]:
            same = same or name
        if offload == "none" and name in OFFLOAD_STRATEGIES:
            continue
        offloads = name in OFFLOAD_STRATEGIES
        full = offloads and estimate.model_states == estimate.gathered
        if (
            estimate.gathered > 0
            and chosen.get("layout") in ("fsdp2", "fsdp2_offload")  # the same activations as ZeRO-3's
            and (offloads, full) == (bool(chosen.get("offload")), bool(chosen.get("offloads_weights")))
        ):
            return name
    return same


def _fitting_layouts(backend: Backend, facts: FactSet) -> Iterator[tuple[str, Estimate]]:
    """The backend's layouts, in its order, whose estimate fits the GPU and (when known) the host RAM."""
    for name in backend.layouts:
        estimate = facts.estimates.get(name)
        if estimate is not None and estimate.fits and estimate.host_fits is not False:
            yield name, estimate


def _other_layouts(
    backend: Backend,
    facts: FactSet,
    estimates: Mapping[str, Mapping[str, Any]],
    mentioned: set[Any],
    chosen: Mapping[str, Any] | None,
    world_size: int,
    offload_said: list[str],
) -> str:
    """One sentence on the backend's other layouts that fit without offload, so none goes unnamed.

    When the chosen layout offloads nothing, the backend's leanest offload layout gets a sentence
    too: why it lost although it needs less GPU memory (said in full once, then referred to).

    A reader who sees "ZeRO-3 ... yes" in the table and no word on it asks why it lost: each one
    gets its figure and what it costs against the chosen layout.
    """
    parts = []
    for name, _ in _fitting_layouts(backend, facts):
        if name in mentioned or name in OFFLOAD_STRATEGIES:
            continue
        figure = estimates[name]
        text = f"{figure['name']} (about {figure['total_gib']} GiB per GPU)"
        if world_size == 1:
            pass  # said once for all of them below
        elif chosen is not None and chosen.get("hybrid") and not figure["gathers"]:
            text += (
                " exchanges gradients and weights across all the machines' GPUs every step, like ZeRO-2, and holds"
                " a larger part of the state on each GPU"
            )
        elif chosen is not None and chosen.get("hybrid") and figure["gathers"]:
            text += (
                " shards over every GPU of every machine, so it gathers each layer's weights across the network in"
                " every pass, traffic HSDP keeps inside a machine"
            )
        elif chosen is not None and chosen.get("gathers") and figure["gathers"]:
            text += " has the same all-gather of every layer's weights as the chosen layout"
            zero3_beside_fsdp2 = figure["layout"] == "zero3" and chosen.get("layout") == "fsdp2"
            if figure["gathered_gib"] != chosen.get("gathered_gib") and zero3_beside_fsdp2:
                # The same shard: a reader comparing the two figures asks where the difference is.
                text += (
                    f", and differs from it only in what it holds unsharded at once ({figure['gathered_gib']}"
                    f" GiB against {chosen.get('gathered_gib')} GiB: DeepSpeed's largest layer with a buffer as"
                    " large, as its estimator counts, against FSDP2's embeddings and output head for the whole"
                    " step and two decoder layers)"
                )
        elif chosen is not None and chosen.get("gathers"):
            larger = figure["total_gib"] > chosen["total_gib"]
            text += (
                " does not gather the weights during the forward and backward passes (only the updated shards"
                f" after the optimizer step, as much traffic as DDP's), so less traffic than {chosen['name']}, "
            ) + ("and holds a larger part of the state on each GPU" if larger else "at about the same memory per GPU")
        parts.append(text)
    sentences = []
    if parts and world_size == 1:
        sentences.append(f"Also fitting, with no other GPU to shard over: {', '.join(parts)}")
    elif parts:
        sentences.append("Also fitting: " + "; ".join(parts))
    offload = _leanest_offload(backend, facts, estimates, mentioned, chosen)
    if offload is not None and offload_said:
        sentences.append(
            # "The same trade": less GPU memory for PCIe traffic, as said of the other offload; its own figures follow.
            f"With offload, {offload['name']} trades the same way as {offload_said[0]}, less GPU memory for time"
            f" over PCIe: about {offload['total_gib']} GiB per GPU, {_moved(offload, facts, ' moved over PCIe')}"
        )
    elif offload is not None:
        offload_said.append(str(offload["name"]))
        # The table shows offload rows far below the chosen one; a reader asks why not take them.
        slower = _slower_clause(offload, chosen, f" (at least {offload['pcie_s']} s over PCIe)")
        closing = ": the wizard saves a sharding backend's offload for runs that do not fit without it"
        if slower.startswith(", at about the same step time"):
            # No time to lose, so say what it costs instead, and when it is worth taking all the same.
            closing = (
                ". The wizard saves a sharding backend's offload for runs that do not fit without it: it would hold"
                f" about {offload['host_gib']} GiB of host RAM per machine, pinned, for a run that"
                # A tight fit may yet run out of memory at the loss peak: where the way out is said.
                + (
                    " fits by the estimate but is a close call (the Risk line gives the first fix)"
                    if chosen and chosen.get("close_call")
                    else " already fits, if tightly at its loss peak"
                    if chosen and chosen.get("tight")
                    else " already fits"
                )
            )

        sentences.append(
            f"With offload, {offload['name']} would need less GPU memory (about {offload['total_gib']} GiB per GPU)"
            f" but each GPU would move {_moved(offload, facts, ' between it and host RAM', chosen)}" + slower + closing
        )
    return ".\n".join(sentences)


def _moved(layout: Mapping[str, Any], facts: FactSet, where: str = "", chosen: Mapping[str, Any] | None = None) -> str:
    """An offload's PCIe traffic per GPU, in the unit of the step time said beside it.

    Where step-time bands are compared (the layout's, and the chosen layout's when one is given),
    the traffic is per optimizer step, as the bands are ("about 54.4 GiB ... per optimizer step");
    otherwise per micro-batch, the unit of the PCIe floor said instead ("at least 2.8 s over PCIe").
    """
    if layout.get("step_mid") and (chosen is None or chosen.get("step_mid")):
        return f"about {layout['pcie_step_gib']} GiB{where} per optimizer step"
    return f"about {layout['pcie_gib']} GiB{where} {_every(facts)}"


def _every(facts: FactSet) -> str:
    """How often offload traffic recurs: "every micro-batch" when several make an optimizer step."""
    return "every micro-batch" if facts.accumulation > 1 else "every step"


def _slower_clause(layout: Mapping[str, Any], chosen: Mapping[str, Any] | None, otherwise: str) -> str:
    """The step-time comparison of an offload layout with the chosen one, or `otherwise` without a band.

    ", so its step would take about 5.6x as long (5.4-14 s against 0.75-3.2 s; bound by CPU Adam, ...)".
    """
    if chosen is None or not layout.get("step_mid") or not chosen.get("step_mid"):
        return otherwise
    ratio = layout["step_mid"] / chosen["step_mid"]
    if ratio < 1.1:
        return f", at about the same step time ({layout['step_band']} against {chosen['step_band']})"
    if ratio < 1.25:
        # Said as the figure, not "slightly": a fifth longer is a cost a reader weighs.
        return (
            f", with a step about {round((ratio - 1) * 100)}% longer by the middles of the bands"
            f" ({layout['step_band']} against {chosen['step_band']})"
        )
    (low, high), (base_low, base_high) = layout["step_ends"], chosen["step_ends"]
    least, most = sorted((low / base_low, high / base_high))
    times = f"about {least:.1f}x" if f"{least:.1f}" == f"{most:.1f}" else f"{least:.1f}x to {most:.1f}x"
    return (
        f", and its step would take {times} as long (comparing fast ends and slow ends:"
        f" {layout['step_band']} against {chosen['step_band']}; bound by {layout['bound']}, see the step-time"
        " table)"
    )


def _seconds(value: float) -> float:
    """A short time as printed: one decimal from a second up, two below, never a bare 0.0."""
    return round(value, 1) if value >= 0.95 else max(round(value, 2), 0.01)


def _leanest_offload(
    backend: Backend,
    facts: FactSet,
    estimates: Mapping[str, Mapping[str, Any]],
    mentioned: set[Any],
    chosen: Mapping[str, Any] | None,
) -> Mapping[str, Any] | None:
    """The backend's fitting offload layout with the least GPU memory, when the chosen one offloads nothing."""
    if chosen is None or chosen.get("offload"):
        return None
    fitting = [
        estimates[name]
        for name, _ in _fitting_layouts(backend, facts)
        if name in OFFLOAD_STRATEGIES and name not in mentioned and name in estimates
    ]
    if not fitting:
        return None
    leanest = min(fitting, key=lambda figure: figure["total_gib"])
    # Worth a sentence only when it would free a real part of the GPU (a quarter or more).
    return leanest if leanest["total_gib"] <= 0.75 * chosen["total_gib"] else None


def _lighter_sentence(lighter: Mapping[str, Any], chosen: Mapping[str, Any]) -> str:
    """One sentence on the backend's layout with less traffic per step that fits too (ZeRO-2)."""
    name = lighter["name"]
    if chosen.get("layout") == "ddp_layer_offload" and lighter.get("layout") == "ddp":
        # Beside DDP + layer offload, plain "DDP" reads as the winner itself: say which DDP.
        name = f"{name} without layer offloading"
    sentence = f"{name} fits too, at about {lighter['total_gib']} GiB per GPU"
    if lighter["offload"] and not lighter["offloads_weights"] and chosen["offloads_weights"]:
        # The same backend offloading less: say what that saves and what it costs.
        host = (
            f"the same {lighter['host_gib']} GiB of host RAM per machine"
            if lighter["host_gib"] == chosen["host_gib"]
            else f"about {lighter['host_gib']} GiB of host RAM per machine instead of {chosen['host_gib']} GiB"
        )
        sentence += (
            f", keeping the weights on the GPU, so less traffic to host RAM every step and {host}; a fine"
            " alternative when the GPU has room for the weights and the offload's speed matters"
        )
    elif not lighter["gathers"] and not lighter["offload"] and not chosen["gathers"]:
        # Neither gathers weights (DDP beside a layer-offload row the user asked for): the step
        # times are the whole comparison.
        sentence += _step_comparison(lighter, chosen)[0]
    elif not lighter["gathers"] and not lighter["offload"]:
        comparison, faster, over = _step_comparison(lighter, chosen)
        sentence += ", and it gathers no weights in each pass, so it sends less between the GPUs per step" + comparison
        sentence += (
            f". The wizard still writes {chosen['name']}: it is part of PyTorch (no deepspeed package, no JSON to"
            " keep in step with the config), and in Accelerate and Axolotl it is the base that QLoRA's 4-bit"
            " weights and the tensor and context parallel sizes build on;"
            f" it also holds less on each GPU ({chosen['total_gib']} against {lighter['total_gib']} GiB)."
            + (
                f" If the shorter step matters more to you{over}, run {lighter['name']}"
                if faster
                else f" {lighter['name']} is a fine alternative where the all-gather traffic matters (GPUs linked"
                " only by PCIe, for example); to run it"
            )
            + ": bring a DeepSpeed JSON with that stage (deepspeed_config) and the wizard writes the rest around it"
        )
    return sentence


def _step_comparison(lighter: Mapping[str, Any], chosen: Mapping[str, Any]) -> tuple[str, bool, str]:
    """The step-time comparison of two layouts: (the clause, whether `lighter` is faster, where).

    Where the card's boards have different GPU links, each link is compared on its own: a layout
    with less traffic is faster over PCIe and no faster over NVLink, and one band spanning both
    links would blur that into one percentage that holds on neither board. `where` is " and your
    GPUs are linked by ..." when the lighter layout is faster over one link only.
    """
    if not (lighter.get("step_mid") and chosen.get("step_mid")):
        return "", False, ""
    name = lighter["name"]
    lighter_links, chosen_links = lighter.get("by_link") or {}, chosen.get("by_link") or {}
    if lighter_links and lighter_links.keys() == chosen_links.keys():
        said: dict[str, str] = {}  # per link: the verdict with both bands
        faster_over = []
        for link, mine in lighter_links.items():
            theirs = chosen_links[link]
            if mine["mid"] < theirs["mid"] / 1.05:
                faster_over.append(link)
                verdict = f"{name}'s is about {1 - mine['mid'] / theirs['mid']:.0%} shorter"
            elif theirs["mid"] < mine["mid"] / 1.05:
                verdict = f"{chosen['name']}'s is about {1 - theirs['mid'] / mine['mid']:.0%} shorter"
            else:
                verdict = "the two steps are about as long"
            said[link] = f"{verdict} ({name} {mine['band']}, {chosen['name']} {theirs['band']})"
        if len(set(said.values())) == 1:
            # The same over every link (no traffic between the GPUs decides it): one statement.
            return f". By the step-time model, {next(iter(said.values()))}", bool(faster_over), ""
        parts = [f"over {link} {text}" for link, text in said.items()]
        clause = ". By the step-time model, taking each kind of link on its own: " + "; ".join(parts)
        if not faster_over:
            return clause, False, ""
        if len(faster_over) == len(parts):
            return clause, True, ""
        return clause, True, f" and your GPUs are linked by {faster_over[0]}"
    if lighter["step_mid"] < chosen["step_mid"] / 1.05:
        shorter = f", about {1 - lighter['step_mid'] / chosen['step_mid']:.0%} shorter"
        return (
            f" (a step of about {lighter['step_band']} against {chosen['step_band']} by the step-time table{shorter})",
            True,
            "",
        )
    if lighter["step_band"] == chosen["step_band"]:
        return f" (by the step-time table the steps are alike, about {chosen['step_band']} each)", False, ""
    return f" (a step of about {lighter['step_band']} against {chosen['step_band']} by the step-time table)", False, ""


def _fastest_offload(names: list[str], facts: FactSet) -> str:
    """The first of `names`, or, where it offloads, the offload layout among them with the shortest step.

    Between offloads the order by traffic between GPUs is not the one that matters: HSDP's offload
    runs the optimizer over a full copy on each machine's CPU, so FSDP2's over all the GPUs may
    be the faster and the leaner; the comparison names the one a reader would run. Ties keep the order.
    """
    first = names[0]
    timed = [name for name in names if name in OFFLOAD_STRATEGIES and name in facts.speeds]
    if first not in OFFLOAD_STRATEGIES or len(timed) < 2:
        return first
    return min(timed, key=lambda name: facts.speeds[name].middle)


def _best_layout(backend: Backend, facts: FactSet, offload: Any) -> tuple[str, str | None]:
    """The verdict on a losing backend's memory layouts, and the layout it is about.

    "fits": the first layout (lightest traffic first) that fits the GPU and the host RAM and is
    allowed; "offload_ruled_out": one fits, but only by offloading, which offload: none forbids;
    "host_short": one fits the GPU but not the host RAM (the one needing the least RAM);
    "short": none fits the GPU (the closest one); "unknown": no layout was estimated.
    """
    layouts = [(name, facts.estimates[name]) for name in backend.layouts if name in facts.estimates]
    if not layouts:
        return "unknown", None
    usable = [(name, e) for name, e in layouts if e.fits and e.host_fits is not False]
    allowed = [name for name, _ in usable if offload != "none" or name not in OFFLOAD_STRATEGIES]
    if allowed:
        return "fits", _fastest_offload(allowed, facts)
    if usable:
        return "offload_ruled_out", _fastest_offload([name for name, _ in usable], facts)
    short_of_host = [(name, e) for name, e in layouts if e.fits]
    if short_of_host:
        return "host_short", min(short_of_host, key=lambda item: item[1].host_per_node)[0]
    return "short", min(layouts, key=lambda item: item[1].total)[0]


def _layout_fact(tree: Tree, verdict: str, layout: str | None) -> str | None:
    """The tree's sentence for a layout that does not fit the GPU ("short") or the host RAM."""
    text = tree.fact_texts.get(f"{'host_' if verdict == 'host_short' else ''}fits_{layout}")
    return text.fails if text is not None else None


def _moment_text(tree: Tree, fact: str, context: Mapping[str, Any], flag: str) -> str | None:
    """The tree's shared text `flag` for the layout of a fits_LAYOUT fact whose figure `flag` holds, or None.

    The loss peak at the start of the backward pass: "tight" (the fit passes the usable line,
    within the GPU) adds a note to the fact's sentence; "peak_short" (only the moment is short)
    replaces its "needs X, Y usable", which is untrue there.
    """
    figures = (context.get("est") or {}).get(fact.removeprefix("fits_")) if fact.startswith("fits_") else None
    text = {"tight": "tight_note", "peak_short": "peak_short"}[flag]
    if not figures or not figures.get(flag) or text not in tree.texts:
        return None
    return render_text(f"{{% include texts.{text} %}}", {**context, "o": figures})


def _met(tree: Tree, rule: Rule, lookup: Lookup, context: Mapping[str, Any]) -> str:
    """Everything a rule that held met, answers and facts, as sentences."""
    sentences = (describe_compare(tree, leaf, lookup, context, held=True) for leaf in held_compares(rule.when, lookup))
    return "; ".join(dict.fromkeys(s for s in sentences if s))


def _informative(leaves: list[Compare], lookup: Lookup) -> list[Compare]:
    """The failing comparisons worth saying.

    A fact with no value here (the estimate of a layout that does not apply, say) only explains a
    rule when nothing else does.
    """
    known = [leaf for leaf in leaves if not (leaf.kind == "fact" and lookup(leaf.kind, leaf.name) is MISSING)]
    return known or leaves


def _miss_score(rule: Rule, lookup: Lookup, strategy: str | None, facts: FactSet) -> tuple[int, int, int, float]:
    # Among rules that miss as few answers, the one that uses the backend in its usual layout
    # (FSDP2's plain sharding, not an opt-in N-D mesh) explains best why the backend lost.
    missing = failing_compares(rule.when, lookup)
    layout = rule.outcome.settings.get("strategy", strategy)
    usual = layout == strategy
    estimate = facts.estimates.get(layout) if isinstance(layout, str) else None
    total = float(estimate.total) if estimate is not None else float("inf")
    return sum(leaf.kind == "answer" for leaf in missing), int(not usual), len(missing), total


def backend_title(tree: Tree, rec: Recommendation) -> str:
    """The decided backend's title as this run's hardware reads it (`Backend.title_on`), with its layout."""
    backend = tree.backends[str(rec.backend)]
    return decided_title(backend.title_on(rec.hardware_id), backend.strategy, rec)


def decided_title(title: str, usual: str | None, rec: Recommendation) -> str:
    """The backend's title, with the memory layout when it is not the backend's usual one.

    "FSDP2 ...: HSDP" or "DeepSpeed ZeRO: ZeRO-2 + optim->CPU" name the memory table's row (a
    DeepSpeed run always names its stage), so the title, the file headers and the highlighted
    row say the same plan.
    """
    layout = rec.settings.get("strategy")
    if not isinstance(layout, str) or layout not in STRATEGY_TITLES:
        return title
    # A ZeRO stage is always named ("DeepSpeed ZeRO: ZeRO-3"): the title alone does not say which.
    if layout == usual and rec.settings.get("zero_stage") is None:
        return title
    return f"{title}: {layout_label(rec, layout)}"


def offloads_to_nvme(rec: Recommendation) -> bool:
    """Whether the decided run offloads to an NVMe drive (DeepSpeed ZeRO-3's offload device nvme)."""
    return "nvme" in (rec.settings.get("offload_param"), rec.settings.get("offload_optimizer"))


def layout_label(rec: Recommendation, strategy: str) -> str:
    """A layout's row label; the decided one of an NVMe run says where its states go ("all->NVMe").

    The memory model estimates NVMe offload with the CPU offload rows: the GPU keeps the same, and
    only where the offloaded states wait differs.
    """
    estimate = rec.facts.estimates.get(strategy)
    label = estimate.label if estimate is not None else STRATEGY_TITLES.get(strategy, strategy)
    if offloads_to_nvme(rec) and strategy == rec.settings.get("strategy"):
        label = label.replace("->CPU", "->NVMe")
    return label


def run_layout_label(rec: Recommendation, strategy: str) -> str:
    """`layout_label` for this run: the table's "DDP / 1 GPU" row is one of the two at its GPU count.

    Its memory is the same either way (a full copy per GPU); its processes and step time are this
    run's: DDP on several GPUs, or the one GPU.
    """
    world = int(rec.facts.get("world_size") or rec.settings.get("num_processes") or 1)
    return layout_label(rec, strategy).replace("DDP / 1 GPU", "DDP" if world > 1 else "1 GPU")


def offloaded_host_bytes(rec: Recommendation) -> int | None:
    """Host RAM per machine the decided layout fills with what it offloads; 0 when it offloads nothing.

    An NVMe run keeps only DeepSpeed's pinned swap buffers there (None when the host RAM was not
    given, since their pipelining depends on it); the states themselves wait on the drive.
    """
    if offloads_to_nvme(rec):
        pinned = rec.facts.get("nvme_pinned_gib")
        return int(pinned * GIB) if isinstance(pinned, (int, float)) else None
    estimate = chosen_estimate(rec)
    return estimate.host_per_node if estimate is not None else 0


def chosen_estimate(rec: Recommendation) -> Estimate | None:
    """The decided layout's estimate; None for a refusal or hardware the wizard does not estimate."""
    return rec.facts.estimates.get(str(rec.settings.get("strategy"))) if rec.facts.estimates else None


def runs_past_fit(rec: Recommendation) -> bool:
    """Whether the decided layout does not fit by the estimate: a brought DeepSpeed JSON run as written."""
    estimate = chosen_estimate(rec)
    return estimate is not None and not estimate.fits


def runs_close_call(rec: Recommendation) -> bool:
    """Whether the decided layout is a close call (Estimate.close_call); never for a refusal.

    Within the GPU by the estimate, but past it by the long-context calibration.
    """
    estimate = None if rec.refused else chosen_estimate(rec)
    return estimate is not None and estimate.close_call


def runs_past_host(rec: Recommendation) -> bool:
    """Whether the decided layout fits the GPU but, by the estimate, not the host RAM it offloads to.

    Never for an NVMe run: its states go to the drive, and host RAM holds only DeepSpeed's swap buffers (the
    estimate's host figure is the CPU offload's, which that run does not take).
    """
    estimate = chosen_estimate(rec)
    return estimate is not None and estimate.fits and estimate.host_fits is False and not offloads_to_nvme(rec)


def nvme_drive_bytes(rec: Recommendation) -> int:
    """What an NVMe run's drive holds per machine: the offloaded states as stored.

    Without the pinned buffers' 1.5x that the host RAM figures carry: a file on a drive is not pinned.
    """
    estimate = chosen_estimate(rec)
    return estimate.host_stored if estimate is not None else 0
