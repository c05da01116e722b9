"""`backend-wizard estimate`: the memory table for every strategy, under one of three formulas."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from wizard.commands.common import add_answer_arguments, collect_answers
from wizard.engine.estimate_table import FORMULAS, Row, TableInput, deepspeed_rows, wizard_rows, zero_paper_rows
from wizard.engine.facts import derive_facts
from wizard.errors import WizardError
from wizard.ui.estimate_view import EstimateHeader, print_estimate

if TYPE_CHECKING:
    from rich.console import Console

SCHEMA_VERSION = 1
# Flag name -> answers-file key (the flags are a shorthand for --set).
FLAGS = {
    "model": "model",
    "method": "method",
    "gpus_per_node": "gpus_per_node",
    "num_nodes": "num_nodes",
    "gpu_memory_gb": "gpu_memory_gb",
    "cpu_memory_gb": "cpu_memory_gb",
    "sequence_length": "sequence_length",
    "micro_batch_size": "micro_batch_size",
    "gpu_model": "gpu_model",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The estimate subcommand's options."""
    for flag in FLAGS:
        parser.add_argument(f"--{flag.replace('_', '-')}", dest=flag, metavar="VALUE")
    parser.add_argument(
        "--largest-layer-params", type=int, metavar="N", help="parameters of the largest single module (DeepSpeed's LL)"
    )
    parser.add_argument(
        "--formula",
        choices=("default", *FORMULAS),
        default="default",
        help="default/wizard: the full estimate used for decisions; deepspeed: DeepSpeed's "
        "estimators; zero-paper: the ZeRO paper's Table 1 accounting",
    )
    parser.add_argument("--output", choices=("text", "json"), default="text")
    add_answer_arguments(parser)


def run(args: argparse.Namespace, out: Console, err: Console) -> int:
    """Compute and print the table."""
    _, session = collect_answers(args, {key: getattr(args, flag) for flag, key in FLAGS.items()})
    facts = derive_facts(session.answers, session.inputs)
    if not facts.estimates or facts.shape is None:
        raise WizardError(
            f"hardware: {session.answers.get('hardware')!r} has no GPU memory to estimate; "
            "the estimate needs GPUs or accelerator devices with gpu_memory_gb (not cpu or tpu)"
        )
    largest = args.largest_layer_params or facts.shape.largest_layer_params
    if largest <= 0:
        raise WizardError(f"--largest-layer-params: {largest} is not allowed; expected a positive count")
    spec = TableInput(
        params=facts.shape.params,
        largest_layer_params=largest,
        gpus_per_node=int(session.answers.get("gpus_per_node", 1)),
        num_nodes=int(session.answers.get("num_nodes", 1)),
        gpu_memory_gib=float(session.answers["gpu_memory_gb"]),
    )
    formula = "wizard" if args.formula == "default" else args.formula
    rows = {
        "wizard": lambda: wizard_rows(facts.estimates),
        "deepspeed": lambda: deepspeed_rows(spec),
        "zero-paper": lambda: zero_paper_rows(spec),
    }[formula]()
    if args.output == "json":
        print(json.dumps(envelope(spec, formula, rows), indent=2))
        return 0
    header = EstimateHeader(
        params=spec.params,
        largest_layer_params=largest,
        method=str(session.answers["method"]),
        world_size=spec.gpus_per_node * spec.num_nodes,
        num_nodes=spec.num_nodes,
        gpu_memory_gb=spec.gpu_memory_gib,
        sequence_length=int(session.answers["sequence_length"]),
        micro_batch_size=int(session.answers["micro_batch_size"]),
        reference=facts.shape.reference,
    )
    print_estimate(out, header, formula, rows)
    return 0


def envelope(spec: TableInput, formula: str, rows: list[Row]) -> dict[str, Any]:
    """The JSON form: bytes as integers."""
    return {
        "schema_version": SCHEMA_VERSION,
        "params": spec.params,
        "largest_layer_params": spec.largest_layer_params,
        "formula": formula,
        "strategies": [
            {
                "id": row.strategy,
                "gpu_bytes": row.gpu_bytes,
                "cpu_bytes_per_node": row.cpu_bytes_per_node,
                "fits": row.fits,
                "model_states_bytes": row.model_states,
                "activations_bytes": row.activations,
                "overhead_bytes": row.overhead,
            }
            for row in rows
        ],
    }
