"""The batch answers once every other answer is in: the default global batch, or a micro-batch to fit one.

global_batch_size is asked right after the micro-batch, before the parallel layout whose sizes
decide how many GPUs share their sequences. Its default therefore follows the final answers
here, and a global batch given without a micro-batch answer gets the largest power-of-two
micro-batch that divides it over the data-parallel GPUs and still fits the decided layout
(`wizard.engine.batch` has the arithmetic).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from wizard.engine.batch import GLOBAL_BATCH, BatchPlan, powers_of_two_dividing
from wizard.engine.deepspeed_json import BATCH_KEYS, batch_number
from wizard.engine.evaluate import Recommendation, follow_global_batch, recommend
from wizard.engine.facts import TIGHT_SHARE, FactSet, Inputs, derive_facts
from wizard.engine.memory import GIB, estimate
from wizard.engine.tree import Tree
from wizard.errors import InvalidAnswerError

MICRO = "micro_batch_size"
MAX_MICRO = 4096  # the micro_batch_size question's own maximum


def settle_batch(tree: Tree, answers: Mapping[str, Any], inputs: Inputs, given: frozenset[str]) -> dict[str, Any]:
    """The answers with the batch settled, once every other answer is in.

    A default global batch follows the final layout; a given one without a given micro-batch gets
    the largest power-of-two micro-batch that divides it and fits.
    """
    out = dict(answers)
    if GLOBAL_BATCH not in out:
        return out
    if GLOBAL_BATCH not in given:
        out[GLOBAL_BATCH] = follow_global_batch(out, derive_facts(out, inputs))
        return out
    if MICRO not in given:
        out[MICRO] = chosen_micro(tree, out, inputs)
    return out


def chosen_micro(tree: Tree, answers: Mapping[str, Any], inputs: Inputs) -> int:
    """The largest power of two dividing global / data-parallel GPUs whose micro-batch keeps the decision.

    The decision is made with the answered (default) micro-batch; a larger one counts when the
    decided layout's memory estimate still fits (GPU and known host RAM) and the rules still pick
    the same backend and layout for it. Without an estimate (CPU, TPU) or with a brought
    DeepSpeed JSON that numbers its batch, the micro-batch stays as answered.
    """
    micro = int(answers[MICRO])
    base = recommend(tree, answers, inputs)
    plan = base.facts.batch
    numbered = inputs.deepspeed is not None and any(batch_number(inputs.deepspeed.batch, key) for key in BATCH_KEYS)
    if plan is None or base.refused or numbered or plan.micro != micro:
        return micro  # Axolotl's CP writes one sequence per GPU whatever the micro-batch
    total = int(answers[GLOBAL_BATCH])
    if total % plan.data_parallel:
        return micro  # refused with the nearest valid values by `check_plan`
    for candidate in reversed(powers_of_two_dividing(total // plan.data_parallel, MAX_MICRO)):
        if candidate == micro or (
            fits(base, candidate, answers) and _same_decision(tree, answers, inputs, base, candidate)
        ):
            return candidate
    return micro if total % (micro * plan.data_parallel) == 0 else 1


def fits(rec: Recommendation, micro: int, answers: Mapping[str, Any]) -> bool:
    """Whether the decided layout's estimate fits with this micro-batch with room to spare (None: no estimate).

    With room: the peak, the loss's temporaries included, within `TIGHT_SHARE` of the usable memory,
    where the wizard does not warn that the run is close to the limit. A micro-batch the wizard picks
    should not be one it then warns about; a larger one stays a lever the summary names.
    """
    strategy = rec.settings.get("strategy")
    fitted = rec.facts.estimates.get(str(strategy)) if strategy else None
    workload = rec.facts.workload
    if fitted is None or workload is None:
        return False
    # An NVMe run keeps the offloaded states on the drive, not in host RAM.
    host = None if fitted.host_memory is None or answers.get("offload") == "nvme" else fitted.host_memory / GIB
    trial = estimate(replace(workload, micro_batch_size=micro), fitted.strategy, fitted.gpu_memory / GIB, host)
    return trial.fits and trial.peak <= TIGHT_SHARE * trial.budget and trial.host_fits is not False


def _same_decision(tree: Tree, answers: Mapping[str, Any], inputs: Inputs, base: Recommendation, micro: int) -> bool:
    other = recommend(tree, {**answers, MICRO: micro}, inputs)
    return (other.backend, other.settings.get("strategy")) == (base.backend, base.settings.get("strategy"))


def check_plan(facts: FactSet, source: str | None = None, micro_source: str | None = None) -> BatchPlan | None:
    """The batch plan, or an InvalidAnswerError (exit 2) naming the numbers when it cannot be exact.

    `micro_source`: where a given micro-batch came from. When it is not where the global batch
    came from (`--set micro_batch_size=3` beside a file's global_batch_size), the message names
    it, so the value the user just typed is not left out of a message about the other one.
    """
    plan = facts.batch
    if plan is not None and plan.problem is not None:
        problem = plan.problem
        if micro_source is not None and micro_source != source:
            problem += f" (micro_batch_size {plan.micro} is from {micro_source}: change either)"
        raise InvalidAnswerError(GLOBAL_BATCH, plan.global_batch, problem, source=source)
    return plan
