"""The pure engine: (tree, answers, inputs) -> next question, or a recommendation with its trace."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from wizard.engine.advice import recommendation_warnings
from wizard.engine.conditions import MISSING, Compare, Lookup, evaluate, failing_compares, iter_compares
from wizard.engine.conditions import describe_compare as describe_answer_compare
from wizard.engine.facts import FACTS, FactSet, Inputs, derive_facts, estimate_context
from wizard.engine.memory import to_gib
from wizard.engine.texts import render_text
from wizard.engine.tree import Question, Ref, Rule, Tree


@dataclass(frozen=True)
class TraceEntry:
    """One rule as the engine tested it."""

    rule_id: str
    guidance: str
    guidance_text: str
    sources: tuple[str, ...]
    held: bool
    sentences: tuple[str, ...]
    because: str | None


@dataclass(frozen=True)
class RunnerUp:
    """A backend that was not chosen, and why."""

    backend: str
    title: str
    reason: str
    strategy: str | None


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


Outcome = Mapping[str, Any]
"""The decision as add-on questions see it: the outcome settings, distributed_type and refused."""


def make_lookup(answers: Mapping[str, Any], facts: FactSet, outcome: Outcome | None = None) -> Lookup:
    """A condition lookup over answers, facts and (once decided) the outcome."""

    def lookup(kind: str, name: str) -> Any:
        if kind == "outcome":
            return MISSING if outcome is None else outcome.get(name, MISSING)
        source = answers if kind == "answer" else facts.values
        return source.get(name, MISSING)

    return lookup


def is_applicable(
    question: Question, answers: Mapping[str, Any], facts: FactSet, outcome: Outcome | None = None
) -> bool:
    """Whether a question is asked, given the answers so far (and the decision, for add-ons)."""
    return question.when is None or evaluate(question.when, make_lookup(answers, facts, outcome))


def decided_outcome(tree: Tree, answers: Mapping[str, Any], inputs: Inputs) -> Outcome:
    """The decision for these answers, as add-on conditions see it.

    Rules never use add-on answers (the linter checks it), so deciding before the add-ons are
    answered gives the same result as deciding after.
    """
    # Only the winning rule and its settings: no explanation text is rendered, since the answers
    # may be incomplete here (a review-screen edit takes an answer back before asking it again).
    facts = derive_facts(answers, inputs)
    lookup = make_lookup(answers, facts)
    winner = next(rule for rule in tree.rules if evaluate(rule.when, lookup))
    backend = tree.backends.get(winner.outcome.backend or "")
    return {
        **_settings(winner, answers, facts),
        "refused": winner.outcome.refuse,
        "distributed_type": backend.distributed_type if backend else None,
    }


def next_question(tree: Tree, answers: Mapping[str, Any], inputs: Inputs) -> Question | None:
    """The first applicable question without an answer, or None when all are answered."""
    facts = derive_facts(answers, inputs)
    outcome: Outcome | None = None
    for question in tree.questions:
        if question.id in tree.addon_ids and outcome is None:
            outcome = decided_outcome(tree, answers, inputs)
        if question.id not in answers and is_applicable(question, answers, facts, outcome):
            return question
    return None


def prune(tree: Tree, answers: Mapping[str, Any], inputs: Inputs) -> dict[str, Any]:
    """Drop answers to questions that no longer apply (after an earlier answer changed)."""
    kept: dict[str, Any] = {}
    outcome: Outcome | None = None
    for question in tree.questions:
        if question.id in tree.addon_ids and outcome is None:
            outcome = decided_outcome(tree, kept, inputs)
        if question.id in answers and is_applicable(question, kept, derive_facts(kept, inputs), outcome):
            kept[question.id] = answers[question.id]
    return kept


def resolve_default(question: Question, answers: Mapping[str, Any], facts: FactSet) -> Any:
    """The question's default for these answers, or None when it has none."""
    default = question.default
    if isinstance(default, Ref):
        source = answers if default.kind == "answer" else facts.values
        return source.get(default.name)
    return default


def text_context(tree: Tree, answers: Mapping[str, Any], facts: FactSet) -> dict[str, Any]:
    """The values explanation texts may use (unanswered questions are None)."""
    context: dict[str, Any] = dict.fromkeys((*tree.question_ids, *FACTS))
    context.update(answers)
    context.update(facts.values)
    context.update(estimate_context(facts))
    params = facts.get("params")
    context["params_b"] = f"{params / 1e9:.1f}B" if params else "?"
    context["num_nodes"] = answers.get("num_nodes", 1)
    return context


def describe_compare(tree: Tree, leaf: Compare, lookup: Lookup, context: Mapping[str, Any]) -> str:
    """A sentence for one comparison with the user's numbers (fact sentences come from the tree)."""
    actual = lookup(leaf.kind, leaf.name)
    text = tree.fact_texts.get(leaf.name) if leaf.kind == "fact" else None
    if text is not None and isinstance(actual, bool):
        return render_text(text.holds if actual else text.fails, context)
    return describe_answer_compare(leaf, actual)


def recommend(tree: Tree, answers: Mapping[str, Any], inputs: Inputs) -> Recommendation:
    """Test the rules in order; the first that holds decides."""
    facts = derive_facts(answers, inputs)
    lookup = make_lookup(answers, facts)
    context = text_context(tree, answers, facts)
    trace: list[TraceEntry] = []
    winner: Rule | None = None
    for rule in tree.rules:
        held = evaluate(rule.when, lookup)
        leaves = iter_compares(rule.when) if held else _informative(failing_compares(rule.when, lookup), lookup)
        sentences = tuple(dict.fromkeys(describe_compare(tree, leaf, lookup, context) for leaf in leaves))
        trace.append(
            TraceEntry(
                rule_id=rule.id,
                guidance=rule.guidance,
                guidance_text=tree.guidance[rule.guidance],
                sources=rule.sources,
                held=held,
                sentences=sentences,
                because=render_text(rule.because, context) if held else None,
            )
        )
        if held:
            winner = rule
            break
    assert winner is not None, "the linter guarantees a rule always applies"
    settings = _settings(winner, answers, facts)
    return Recommendation(
        refused=winner.outcome.refuse,
        backend=winner.outcome.backend,
        rule=winner,
        because=trace[-1].because or "",
        settings=settings,
        trace=tuple(trace),
        runner_ups=_runner_ups(tree, winner, facts, lookup, context),
        facts=facts,
        warnings=tuple(recommendation_warnings(answers, facts, settings)),
    )


def _settings(rule: Rule, answers: Mapping[str, Any], facts: FactSet) -> dict[str, Any]:
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
    tree: Tree, winner: Rule, facts: FactSet, lookup: Lookup, context: Mapping[str, Any]
) -> tuple[RunnerUp, ...]:
    """Why every other backend lost.

    A backend whose memory strategy would fit lost on priority (the winning rule comes first in
    the guidance); otherwise the reason is the unmet part of its closest rule: the one that misses
    the fewest of the user's answers, then the fewest facts, then the earliest.
    """
    result = []
    for backend in tree.backends.values():
        rules = [r for r in tree.rules if r.outcome.backend == backend.id]
        if backend.id == winner.outcome.backend or not rules:
            continue
        if backend.available is not None and not evaluate(backend.available, lookup):
            continue
        estimate = facts.estimates.get(backend.strategy or "")
        if estimate is not None and estimate.fits and not winner.outcome.refuse:
            reason = (
                f"it would fit too (about {to_gib(estimate.total)} GiB per GPU), but the guidance prefers "
                f"this order: {tree.guidance[winner.guidance]}"
            )
        else:
            closest = min(rules, key=lambda r: _miss_score(r, lookup, backend.strategy))
            missing = _informative(failing_compares(closest.when, lookup), lookup)
            here = "; ".join(dict.fromkeys(describe_compare(tree, leaf, lookup, context) for leaf in missing))
            reason = f"{tree.guidance[closest.guidance]} Here: {here}."
        result.append(RunnerUp(backend.id, backend.title, reason, backend.strategy))
    return tuple(result)


def _informative(leaves: list[Compare], lookup: Lookup) -> list[Compare]:
    """The failing comparisons worth saying.

    A fact with no value here (the estimate of a layout that does not apply, say) only explains a
    rule when nothing else does.
    """
    known = [leaf for leaf in leaves if not (leaf.kind == "fact" and lookup(leaf.kind, leaf.name) is MISSING)]
    return known or leaves


def _miss_score(rule: Rule, lookup: Lookup, strategy: str | None) -> tuple[int, int, int]:
    # Among rules that miss as few answers, the one that uses the backend in its usual layout
    # (FSDP2's plain sharding, not an opt-in N-D mesh) explains best why the backend lost.
    missing = failing_compares(rule.when, lookup)
    usual = rule.outcome.settings.get("strategy", strategy) == strategy
    return sum(leaf.kind == "answer" for leaf in missing), int(not usual), len(missing)
