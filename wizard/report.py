"""The machine-readable result: one JSON object, versioned (``--output json``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from wizard.app import Result
from wizard.engine.speed import StepTime
from wizard.errors import SavedAnswers, WizardError

if TYPE_CHECKING:
    from wizard.smoke import SmokeResult

SCHEMA_VERSION = 1
# The main run's envelope: 2 added `batch` (the global batch and its split).
RESULT_SCHEMA_VERSION = 2


def result_envelope(result: Result) -> dict[str, Any]:
    """The JSON envelope for a finished run (a refusal has backend null and refused true)."""
    rec = result.recommendation
    settings = rec.settings
    # A ZeRO stage only means something where the backend shards by it.
    zero_stage = settings["zero_stage"] if rec.traits.zero_stages else None
    batch = rec.facts.batch if not rec.refused else None
    return {
        "schema_version": RESULT_SCHEMA_VERSION,
        "recommendation": {
            "backend": rec.backend,
            "refused": rec.refused,
            "rule": rec.rule.id,
            "because": rec.because,
            "zero_stage": zero_stage,
            "offload_optimizer": settings["offload_optimizer"],
            "offload_param": settings["offload_param"],
            "mixed_precision": settings["mixed_precision"],
            "num_processes": settings["num_processes"],
            "num_machines": settings["num_machines"],
            "strategy": settings["strategy"],
        },
        "answers": result.session.answers,
        # Sequences per optimizer step = micro x accumulation x data_parallel, as the files write them.
        "batch": batch.as_json() if batch is not None else None,
        # What the model is and where its count came from (a Hub id, the cache, a folder's headers, ...).
        "model": rec.facts.origin.as_json() if rec.facts.origin is not None else None,
        "trace": [
            {
                "rule": entry.rule_id,
                "guidance": entry.guidance,
                "sources": list(entry.sources),
                "held": entry.held,
                "conditions": list(entry.sentences),
                "because": entry.because,
            }
            for entry in rec.trace
        ],
        "runner_ups": [{"backend": r.backend, "reason": r.reason} for r in rec.runner_ups],
        "estimates": [
            {
                "strategy": est.strategy,
                "title": est.label,
                "model_states_bytes": est.model_states,
                "activations_bytes": est.activations,
                "overhead_bytes": est.overhead,
                "total_bytes": est.total,
                "budget_bytes": est.budget,
                "host_bytes_per_node": est.host_per_node,
                "fits": est.fits,
                "step_time": _step_time(rec.facts.speeds.get(est.strategy)),
            }
            for est in rec.facts.estimates.values()
        ],
        "files": [{"path": str(a.path), "action": a.action} for a in result.actions],
        "warnings": result.warnings,
    }


def _step_time(step: StepTime | None) -> dict[str, Any] | None:
    """One layout's rough step time (null where the card has no throughput figure)."""
    if step is None:
        return None
    return {
        "low_seconds": round(step.low, 3),
        "high_seconds": round(step.high, 3),
        "tokens_per_step": step.tokens,
        "tokens_per_second": [round(value, 1) for value in step.tokens_per_second],
        "micro_batches_per_step": step.accumulation,
        "bound_by": step.bound,
    }


def error_envelope(error: WizardError, saved: SavedAnswers | None = None) -> dict[str, Any]:
    """The JSON envelope for a failure (and what became of the answers typed before it)."""
    body: dict[str, Any] = {
        "type": type(error).__name__,
        "exit_code": int(error.exit_code),
        "message": error.message,
        "hint": saved.hint(error) if saved is not None else error.hint,
    }
    if saved is not None and saved.resume is not None:
        # The answers typed before the run stopped: the file and the command that goes on.
        body["resume"] = {"file": saved.resume[0], "command": saved.resume[1]}
    return {"schema_version": SCHEMA_VERSION, "error": body}


def smoke_envelope(result: SmokeResult) -> dict[str, Any]:
    """The JSON envelope of `backend-wizard smoke`: what the processes resolved, measured against the estimate."""
    ok = [r for r in result.ranks if r.get("status") == "ok"]
    first = ok[0] if ok else (result.ranks[0] if result.ranks else None)

    def value(key: str) -> Any:
        return first.get(key) if first is not None else None

    steps = [r.get("step_seconds") for r in ok if r.get("step_seconds") is not None]
    plan = result.plan
    # One vocabulary per field: `backend` is the wizard's backend id (as `planned.backend` and the
    # main --output json), `distributed_type` Accelerate's DistributedType (as `planned.distributed_type`).
    resolved = value("backend")
    expected = plan.expected_distributed_type(result.device)
    fsdp_ok = plan.backend != "fsdp2" or value("fsdp_version") in (None, 2)
    return {
        "schema_version": SCHEMA_VERSION,
        "world_size": value("world_size"),
        "backend": plan.backend if resolved is not None and resolved == expected and fsdp_ok else None,
        "distributed_type": resolved,
        "zero_stage": value("zero_stage"),
        "fsdp_version": value("fsdp_version"),
        "param_dtype": value("param_dtype"),
        "mixed_precision": value("engine_precision") or value("mixed_precision"),
        "offload_optimizer": value("offload_optimizer"),
        "offload_param": value("offload_param"),
        "device": result.device,
        "peak_bytes": [r.get("peak_bytes") for r in result.ranks],
        "states_bytes": [r.get("states_bytes") for r in result.ranks],
        "step_seconds": max(steps) if steps else None,
        "estimate_bytes": result.estimate_bytes or None,
        "compared": result.compared or None,
        "buffers": [{"what": what, "bytes": size} for what, size in result.plan.buffers],
        "edited_files": list(result.plan.edited),
        "verdict": result.verdict,
        "reason": result.reason,
        "next_step": result.next_step or None,
        "memory_limit_bytes": result.memory_limit or None,
        "planned": {
            "backend": result.plan.backend,
            "distributed_type": expected,
            "strategy": result.plan.strategy,
            "world_size": result.plan.world_size,
            "zero_stage": result.plan.zero_stage,
            "mixed_precision": result.plan.mixed_precision,
            "base_dtype": result.plan.base_dtype if result.plan.method != "full" else None,
            "model_states_bytes": result.plan.estimate.model_states,
            "activations_bytes": result.plan.estimate.activations,
            "transient_bytes": result.plan.estimate.transient,
            "total_bytes": result.plan.estimate.total,
            "tiny_model": result.plan.tiny_size,
        },
    }
