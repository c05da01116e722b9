"""`backend-wizard estimate`: the memory table for every strategy, under one of three formulas."""

from __future__ import annotations

import argparse
import json
import shlex
from typing import TYPE_CHECKING, Any

from wizard.commands import find_hardware
from wizard.commands.common import add_answer_arguments, add_output_argument, collect_answers, whole_number
from wizard.engine.advice import brought_buffers
from wizard.engine.batch_choice import settle_batch
from wizard.engine.catalog import gpu_catalog, lookup_gpu
from wizard.engine.device import device_of
from wizard.engine.estimate_table import FORMULAS, Row, TableInput, deepspeed_rows, wizard_rows, zero_paper_rows
from wizard.engine.facts import GPU_HARDWARE, derive_facts
from wizard.engine.memory import GIB, STRATEGY_TITLES, to_gib
from wizard.engine.model_size import MAX_PARAMS
from wizard.errors import MissingAnswerError, WizardError
from wizard.session import settle_given
from wizard.ui.estimate_view import EstimateHeader, host_short, print_estimate

if TYPE_CHECKING:
    from rich.console import Console

    from wizard.engine.tree import Question, Tree
    from wizard.session import Session

# 2: `hardware` (the --find-hardware rows, null without it), `hardware_assumed` and `hardware_question`.
SCHEMA_VERSION = 2
# A layer holds at most a whole model: the bound a model's size has (100T).
MAX_LAYER_PARAMS = int(MAX_PARAMS)
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


# Help for each flag: what it is, its allowed values and what is assumed without it (the shipped
# decision tree's defaults; tests/test_terminal_output.py checks they agree).
_FLAG_HELP = {
    "model": (
        "SIZE|CONFIG|ORG/NAME",
        "model size (7B, 1.3b, 8x7B, 30B-A3B), a parameter count, a catalog name (llama-3-8b), a Hugging Face "
        "Hub id (org/name[@revision]; the local cache first), or the path to the model's config.json or its "
        "folder (required unless the answers file has it; default: none)",
    ),
    "method": ("{full,lora,qlora}", "training method (default: lora)"),
    "gpus_per_node": ("N", "GPUs per machine, 1-64 (default: 1)"),
    "num_nodes": ("N", "machines, 1-1024 (default: 1)"),
    "gpu_memory_gb": (
        "GIB",
        "memory of one GPU in GiB as nvidia-smi reports it (default: the --gpu-model's catalogue value; "
        "one of the two is needed)",
    ),
    "cpu_memory_gb": (
        "GIB",
        "host RAM per machine in GiB as `free -g` prints it (the total column), to check what offloading puts"
        " there (default: unknown, not checked)",
    ),
    "sequence_length": ("TOKENS", "tokens per training sample, 16-1048576 (default: 2048)"),
    "micro_batch_size": (
        "N",
        "samples per GPU per step, 1-4096 (default: 1, or a DeepSpeed JSON's train_micro_batch_size_per_gpu)",
    ),
    "gpu_model": (
        "NAME",
        "a GPU name: sets --gpu-memory-gb from the catalogue (A100 is the 80GB card, 'A100 40GB' the 40GB one; "
        "H100, H200, L4, A10G, RTX 4090, MI300X, Gaudi 2, ...); the output names the entry used (default: none)",
    ),
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The estimate subcommand's options."""
    for flag in FLAGS:
        metavar, text = _FLAG_HELP[flag]
        parser.add_argument(f"--{flag.replace('_', '-')}", dest=flag, metavar=metavar, help=text)
    parser.add_argument(
        "--largest-layer-params",
        metavar="N",
        help="parameters of the largest single module, DeepSpeed's LL, 1 to 100T (default: from the model's "
        "config.json, or the reference shape of its size)",
    )
    parser.add_argument(
        "--formula",
        choices=("default", *FORMULAS),
        default="default",
        help="default/wizard: the full estimate used for decisions; deepspeed: DeepSpeed's "
        "estimators; zero-paper: the ZeRO paper's Table 1 accounting (default: %(default)s, which is wizard)",
    )
    find_hardware.add_arguments(parser)
    add_output_argument(parser)
    add_answer_arguments(parser)
    # Accepted as the main command and explain take it, so one habit works everywhere; estimate
    # fills what is missing with defaults in any case and prints each one it assumed.
    parser.add_argument(
        "--defaults",
        action="store_true",
        help="accepted for the same command line as the main command; estimate always uses each "
        "question's default for what is missing and prints what it assumed (default: on; what has no "
        "default, such as the GPU's memory, must still be given)",
    )


def run(args: argparse.Namespace, out: Console, err: Console) -> int:
    """Compute and print the table (or, with --find-hardware, search the GPUs)."""
    if find_hardware.wanted(args):
        return find_hardware.run(args, out, FLAGS, _FLAG_HELP)
    given_largest = whole_number("--largest-layer-params", args.largest_layer_params, 1, MAX_LAYER_PARAMS)
    try:
        tree, session = collect_answers(args, {key: getattr(args, flag) for flag, key in FLAGS.items()})
    except MissingAnswerError as exc:
        # The generic hint talks about answers files and --defaults; here a flag is the answer.
        if exc.key in FLAGS:
            hint = f"pass --{exc.key.replace('_', '-')} {_FLAG_HELP[exc.key][0]}"
            if exc.key == "gpu_memory_gb":
                hint += " or a known --gpu-model NAME (A100, H100, L4, ...)"
            raise exc.with_hint(hint) from None
        raise
    # The micro-batch a given global batch settles on, as the main run picks it: the same figures.
    session.answers = settle_batch(tree, session.answers, session.inputs, settle_given(session))
    facts = derive_facts(session.answers, session.inputs)
    if not facts.estimates or facts.shape is None:
        raise WizardError(
            f"hardware: {session.answers.get('hardware')!r} has no GPU memory to estimate; "
            "the estimate needs GPUs or accelerator devices with gpu_memory_gb (not cpu or tpu)"
        )
    largest = given_largest or facts.shape.largest_layer_params
    spec = TableInput(
        params=facts.shape.params,
        largest_layer_params=largest,
        gpus_per_node=int(session.answers.get("gpus_per_node", 1)),
        num_nodes=int(session.answers.get("num_nodes", 1)),
        gpu_memory_gib=float(session.answers["gpu_memory_gb"]),
    )
    formula = "wizard" if args.formula == "default" else args.formula
    if formula != "wizard" and len(facts.estimates) == 1:
        # Apple MPS and the other single-device accelerators run no ZeRO stage: its formulas do not apply.
        raise WizardError(
            f"--formula {formula}: hardware {session.answers.get('hardware')!r} runs one process per device,"
            " with no DeepSpeed ZeRO stage to estimate; use --formula wizard (the default)"
        )
    rows = {
        "wizard": lambda: wizard_rows(facts.estimates),
        # DeepSpeed has no ZeRO-1 estimator: its ZeRO-1 figure would be the ZeRO-2 one relabelled.
        "deepspeed": lambda: [r for r in deepspeed_rows(spec) if r.strategy != "zero1"],
        "zero-paper": lambda: zero_paper_rows(spec),
    }[formula]()
    # The same host-RAM rule the wizard decides by, so the table never offers what it refuses.
    host_gib = session.answers.get("cpu_memory_gb")
    host_memory = None if host_gib is None else int(float(host_gib) * GIB)
    if args.output == "json":
        data = envelope(spec, formula, rows, host_memory)
        data["model"] = facts.origin.as_json() if facts.origin is not None else None
        data.update(hardware=None, hardware_assumed=None, hardware_question=None)
        print(json.dumps(data, indent=2))
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
        source=facts.origin.describe() if facts.origin is not None and facts.origin.source != "size" else None,
        assumptions=assumptions(tree, session, formula),
        device=device_of(session.answers.get("hardware")),
    )
    print_estimate(out, header, formula, rows, host_memory)
    if formula == "wizard" and (buffers := brought_buffers(facts)):
        # The main run counts a brought JSON's overlap_comm buffers on its ZeRO-1/2 rows (fits 'buffers'); this
        # table is the states' estimate alone, so it says what it leaves out rather than disagree in silence.
        shown = [STRATEGY_TITLES[key] for key in buffers if key in facts.estimates]
        out.print(
            "Not in this table: your DeepSpeed JSON's overlap_comm buffers at its bucket sizes (DeepSpeed's defaults"
            " where it sets none), about"
            f" {to_gib(max(buffers.values()))} GiB per GPU more on the {', '.join(shown)} rows; the main run"
            " (backend-wizard --answers) counts them, and marks a row they take past the usable line 'buffers'."
        )
    return 0


# The answers the figures depend on, in the order they are listed when they were assumed.
_MEMORY_KEYS = (
    "target",  # Axolotl adds the layer-offload row (its layer_offloading) that Accelerate has no switch for
    "hardware",
    "method",
    "gpus_per_node",
    "num_nodes",
    "sequence_length",
    "micro_batch_size",
    "gradient_checkpointing",
    "context_parallel_size",
    "tensor_parallel_size",
    "pipeline_parallel_size",
    "expert_parallel_size",
)


def assumptions(tree: Tree, session: Session, formula: str) -> tuple[str, ...]:
    """One line per figure-changing answer that nobody gave, with the option that changes it.

    "method: lora (default; --method full|lora|qlora)"; the GPU memory names the catalogue entry
    it came from. DeepSpeed's and the paper's formulas use only the model and the GPU counts.
    """
    keys = _MEMORY_KEYS if formula == "wizard" else ("gpus_per_node", "num_nodes")
    lines = []
    for key in keys:
        question = tree.question(key)
        if question is None or session.origins.get(key) != "default":
            continue
        picked = key == "micro_batch_size" and session.origins.get("global_batch_size") not in (None, "default")
        # A given global batch settles the micro-batch (as the main run does): not the question's default.
        # 1 is also what is left when no larger one has room (or nothing fits): said as the smallest then.
        how = (
            f"the largest power of two that divides global_batch_size {session.answers.get('global_batch_size')}"
            " and fits with room"
            if picked and session.answers[key] != 1
            else f"the smallest; no larger power of two that divides global_batch_size"
            f" {session.answers.get('global_batch_size')} fits with room"
            if picked
            # Its default follows the model's size and the sequence length, as the main run's summary says.
            else "worked out from model and sequence_length"
            if key == "gradient_checkpointing"
            else "default"
        )
        lines.append(f"{key}: {_shown(session.answers[key])} ({how}; {_how_to_set(question)})")
    if session.origins.get("gpu_memory_gb") == "default":
        lines.append(_gpu_line(session.answers))
    offloadable = session.answers.get("hardware") in GPU_HARDWARE
    if (
        formula == "wizard"
        and offloadable
        and "cpu_memory_gb" not in session.answers
        and "cpu_memory_gb" in tree.question_ids
    ):
        lines.append("cpu_memory_gb: not given, so host RAM for offloading is not checked (--cpu-memory-gb GIB)")
    return tuple(lines)


def _shown(value: Any) -> str:
    """An answer as it is written in an answers file (true, not True)."""
    return str(value).lower() if isinstance(value, bool) else str(value)


def _how_to_set(question: Question) -> str:
    """The option that sets an answer, with its allowed values: "--method full|lora|qlora"."""
    flag = next((f"--{f.replace('_', '-')}" for f, key in FLAGS.items() if key == question.id), None)
    if question.choices:
        values = "|".join(c.id for c in question.choices)
    elif question.type == "yesno":
        values = "true|false"
    elif question.minimum is not None and question.maximum is not None:
        values = f"N, {_number(question.minimum)}-{_number(question.maximum)}"
    else:
        values = "N"
    if flag is None:
        return f"--set {question.id}={values}"
    return f"{flag} {values}"


def _gpu_line(answers: dict[str, Any]) -> str:
    """Which catalogue entry gave the GPU memory, and how to pick another card or the exact size."""
    name = str(answers.get("gpu_model"))
    gpu = lookup_gpu(name)
    memory = answers["gpu_memory_gb"]
    if gpu is None:  # a derived default always has a catalogue entry; stay truthful if not
        return f"gpu_memory_gb: {memory} (default; --gpu-memory-gb GIB)"
    how = f"as {gpu.memory_from} reports it" if gpu.memory_from != "datasheet" else "the datasheet's nominal size"
    words = {p.split()[0] for p in gpu.patterns}
    others = [
        (other.name, other.patterns[0])
        for other in gpu_catalog()
        if other != gpu and any(p.split()[0] in words for p in other.patterns)
    ]
    line = (
        f"gpu_memory_gb: {memory} GiB per GPU, from --gpu-model {name!r}: the catalogue's {gpu.name} "
        f"({gpu.memory_mib} MiB, {how})"
    )
    if others:
        line += "; " + ", ".join(f"{title}: --gpu-model {shlex.quote(pattern)}" for title, pattern in others)
    return line + "; any size: --gpu-memory-gb GIB"


def _number(value: float) -> str:
    """A bound as people write it: 1048576, not 1.04858e+06."""
    return str(int(value)) if float(value).is_integer() else str(value)


def envelope(spec: TableInput, formula: str, rows: list[Row], host_memory: int | None = None) -> dict[str, Any]:
    """The JSON form: bytes as integers.

    fits is the GPU's verdict; host_fits says whether the host RAM holds the offload (null when
    cpu_memory_gb was not given), by the rule the text's "host" mark uses.
    """
    return {
        "schema_version": SCHEMA_VERSION,
        "params": spec.params,
        "largest_layer_params": spec.largest_layer_params,
        "formula": formula,
        "strategies": [
            {
                "id": row.strategy,
                # The row's label as printed: the run's sizes for the N-D row, "1 GPU" for one GPU.
                "title": row.title or STRATEGY_TITLES[row.strategy],
                "gpu_bytes": row.gpu_bytes,
                "cpu_bytes_per_node": row.cpu_bytes_per_node,
                "fits": row.fits,
                "host_fits": None
                if host_memory is None
                else not host_short(row.strategy, row.cpu_bytes_per_node, host_memory),
                "model_states_bytes": row.model_states,
                "activations_bytes": row.activations,
                "overhead_bytes": row.overhead,
            }
            for row in rows
        ],
    }
