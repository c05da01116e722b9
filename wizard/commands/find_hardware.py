"""`backend-wizard estimate ... --find-hardware`: the fewest GPUs of each card that run the job, and the cost."""

from __future__ import annotations

import argparse
import json
import math
from typing import TYPE_CHECKING, Any

from wizard.commands.common import collect_answers, whole_number
from wizard.engine.catalog import GpuInfo, gpu_catalog, lookup_gpu
from wizard.engine.estimate_table import TableInput, wizard_rows
from wizard.engine.hardware_search import (
    COUNT_KEYS,
    HOST_GIB_PER_GPU,
    MACHINE_GPUS,
    MACHINES_CAP,
    SEARCH_KEYS,
    HardwareSearch,
    Result,
    Row,
    gpu_name,
    hardware_of,
    needs,
    not_searched,
    rows,
    searched_gpus,
    size_of,
)
from wizard.errors import WizardError

if TYPE_CHECKING:
    from rich.console import Console

    from wizard.engine.hardware_search import Needs, Verdict

# The estimate's flags the search sets itself at every size.
_SET_BY_SEARCH = ("gpu_model", "gpu_memory_gb", "gpus_per_node", "num_nodes")
_MAX_PRICE = 1_000_000.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """--find-hardware and the options that shape it."""
    parser.add_argument(
        "--find-hardware",
        action="store_true",
        help="instead of the table for one GPU: for each GPU of the catalogue, the fewest GPUs and machines that "
        "run the job without offload and with CPU offload, the backend the decision tree picks there and why, and "
        "the step time (default: off)",
    )
    parser.add_argument(
        "--gpu",
        metavar="NAME",
        action="append",
        default=[],
        help="with --find-hardware: search only this card (a catalogue name, as --gpu-model takes it; repeatable; "
        "default: every NVIDIA and AMD card of the catalogue)",
    )
    parser.add_argument(
        "--gpus",
        metavar="N",
        help=f"with --find-hardware and one --gpu: does the job run on N of them (1-{MACHINE_GPUS} in one machine, "
        f"or a multiple of {MACHINE_GPUS} up to {MACHINE_GPUS * MACHINES_CAP}), and if not, what it needs "
        "(default: none)",
    )
    parser.add_argument(
        "--price",
        metavar="NAME=USD",
        action="append",
        default=[],
        help="with --find-hardware: the price of one GPU-hour of a card, in US dollars, for the cost per hour and "
        "per step (repeatable, such as --price A10G=1.01; default: no cost column)",
    )


def wanted(args: argparse.Namespace) -> bool:
    """Whether the command line asks for the hardware search (or one of its options without it: an error)."""
    used = [flag for flag, value in (("--gpu", args.gpu), ("--gpus", args.gpus), ("--price", args.price)) if value]
    if used and not args.find_hardware:
        # --gpus is read as "my GPU count" by someone who means --gpus-per-node: both meanings, said.
        hint = "; for the GPUs of your own run, give --gpus-per-node (and --num-nodes)" if used[0] == "--gpus" else ""
        raise WizardError(f"{used[0]}: only with --find-hardware, which searches the GPUs; add --find-hardware{hint}")
    return bool(args.find_hardware)


def run(args: argparse.Namespace, out: Console, flags: dict[str, str], flag_help: dict[str, tuple[str, str]]) -> int:
    """Search the catalogue and print the answer (text or JSON)."""
    given_flags = {key: getattr(args, flag) for flag, key in flags.items()}
    for key in _SET_BY_SEARCH:
        if given_flags.get(key) is not None:
            raise WizardError(
                f"--{key.replace('_', '-')}: not used with --find-hardware, which sets the GPUs itself; "
                "name cards with --gpu NAME and a count with --gpus N"
            )
    if args.formula not in ("default", "wizard"):
        raise WizardError(f"--formula {args.formula}: --find-hardware decides with the wizard's own estimate only")
    _refuse_search_keys(args)
    cards = [_card(name) for name in args.gpu]
    count = whole_number("--gpus", args.gpus, 1, MACHINE_GPUS * MACHINES_CAP)
    size = None
    if count is not None:
        if len(cards) != 1:
            raise WizardError(f"--gpus {count}: give exactly one --gpu NAME, the card to count")
        size = size_of(count)
        if size is None:
            raise WizardError(
                f"--gpus {count}: beyond one machine GPUs come in whole machines of {MACHINE_GPUS}; allowed: "
                f"1-{MACHINE_GPUS}, or a multiple of {MACHINE_GPUS} up to {MACHINE_GPUS * MACHINES_CAP}"
            )
    prices = _prices(args.price)
    # Collect and validate the other answers once, on a card the search covers, at 2 machines of
    # 8 (so that the answers for several machines are read too); the search sets the hardware.
    stand_in = next(card for card in (*cards, *gpu_catalog()) if hardware_of(card) is not None)
    representative = {**given_flags, "gpu_model": gpu_name(stand_in), "gpus_per_node": 8, "num_nodes": 2}
    representative["hardware"] = hardware_of(stand_in)
    set_aside = _file_hardware(args)
    tree, session = collect_answers(
        args, {k: v for k, v in representative.items() if v is not None}, file_drops=set_aside
    )
    method = str(session.answers.get("method"))
    for card in cards:
        reason = not_searched(tree, card, method)
        if reason is not None:
            raise WizardError(f"--gpu {gpu_name(card)!r}: {card.name} is not searched for {method}: {reason}")
    cards_searched = searched_gpus(tree, method, cards)
    if not cards_searched:
        raise WizardError(f"method {method}: no card of the catalogue can train it by the decision tree")
    stand_in = cards_searched[0]
    given = {key: session.answers[key] for key in session.given if key not in SEARCH_KEYS}
    host = session.answers.get("cpu_memory_gb") if "cpu_memory_gb" in session.given else None
    network = session.answers.get("network_gbps")
    search = HardwareSearch(
        tree,
        given,
        session.inputs,
        host_memory_gib=float(host) if host is not None else None,
        network_gbps=float(network) if network is not None else None,
    )
    plain = [search.search(card, offload=False) for card in cards_searched]
    offloaded = [search.search(card, offload=True) for card in cards_searched]
    shown = rows(plain, offloaded, prices)
    base = search.verdict(stand_in, search.ladder[0], True)
    question = None
    if size is not None:
        card = cards_searched[0]
        without, with_offload = search.verdict(card, size, False), search.verdict(card, size, True)
        question = (card, size, without, with_offload)
    model = str(session.answers.get("model"))
    job = f"{model} {session.answers.get('method')}"
    assumed = _assumed(base, host, given)
    if set_aside:
        assumed += f"; from the answers file, not used (the search sets them): {', '.join(set_aside)}"
    if given.get("deepspeed_config"):
        # A brought JSON decides the layout on every card (the tree keeps it): offload it does not set is never
        # tried, which a reader planning to change the JSON would otherwise take for "offload does not help".
        assumed += (
            "; your DeepSpeed JSON as written on every card, its ZeRO stage and offload, so layouts it does not set"
            " (offload among them) are not searched: --set deepspeed_config= searches every layout"
        )
    if args.output == "json":
        print(json.dumps(_json(base, shown, question, assumed), indent=2))
        return 0
    from wizard.ui.hardware_view import Question, print_hardware

    asked = None
    if question is not None:
        card, size, without, with_offload = question
        asked = Question(gpu_name(card), size, without, with_offload, needs(without))
    header = _header(base, job, len(cards_searched))
    print_hardware(
        out, header, shown, needs(base), assumed, asked, job, brought_json=bool(given.get("deepspeed_config"))
    )
    return 0


def _refuse_search_keys(args: argparse.Namespace) -> None:
    """An answer the search sets, or one that follows the GPU count, typed in --set: refused."""
    from wizard.inputs import parse_set_values

    for key in parse_set_values(args.set):
        if key in SEARCH_KEYS or key in COUNT_KEYS:
            why = "sets it for every card and size" if key in SEARCH_KEYS else "leaves it to the tree at each size"
            raise WizardError(f"--set {key}: not used with --find-hardware, which {why}")


def _file_hardware(args: argparse.Namespace) -> list[str]:
    """The answers file's keys the search sets itself, in the file's order: left unread, and said so.

    An answers file written for one machine (the wizard's own answers.yaml) names its GPUs; the
    search asks what other hardware would do, so those answers are set aside rather than refused.
    """
    from wizard.inputs import load_answers_file

    if not args.answers:
        return []
    return [key for key in load_answers_file(args.answers) if key in SEARCH_KEYS or key in COUNT_KEYS]


def _card(name: str, option: str = "--gpu") -> GpuInfo:
    """A card named in `option`, matched against the catalogue's patterns."""
    card = lookup_gpu(name)
    if card is None:
        known = ", ".join(dict.fromkeys(gpu_name(gpu) for gpu in gpu_catalog() if gpu.vendor in ("nvidia", "amd")))
        raise WizardError(f"{option}: {name!r} is not a GPU the catalogue knows; allowed: {known}")
    return card


def _prices(values: list[str]) -> dict[GpuInfo, float]:
    """--price NAME=USD, each a known card and a positive price per GPU-hour."""
    prices: dict[GpuInfo, float] = {}
    for value in values:
        name, sep, amount = value.rpartition("=")
        shown = repr(value) if len(value) <= 60 else repr(value[:40] + "...")
        if not sep or not name.strip():
            raise WizardError(f"--price: {shown} is not allowed; expected NAME=USD_PER_GPU_HOUR, such as A10G=1.01")
        try:
            price = float(amount.strip().removeprefix("$"))
        except ValueError:
            price = math.nan
        if not (0 < price <= _MAX_PRICE):
            raise WizardError(
                f"--price: {shown} is not allowed; the price must be a number of US dollars per GPU-hour above 0 and "
                f"at most {_MAX_PRICE:,.0f}, such as {name.strip()}=1.01"
            )
        prices[_card(name.strip(), "--price")] = price
    return prices


def _header(base: Verdict, job: str, cards: int) -> str:
    shape = base.facts.shape
    params = f"{shape.params:,} parameters" if shape is not None else "the model"
    return f"{job}: [bold]{params}[/]; {cards} GPU model(s) searched, 1 to {MACHINES_CAP} machines of {MACHINE_GPUS}"


def _assumed(base: Verdict, host: Any, given: dict[str, Any]) -> str:
    """The one line of what the answers rest on: sequence, micro-batch, precision, host RAM, tool."""
    answers = base.answers
    checkpointing = "on" if answers.get("gradient_checkpointing") else "off"
    host_text = (
        f"{float(host):g} GiB per machine (--cpu-memory-gb)"
        if host is not None
        else f"{HOST_GIB_PER_GPU} GiB per GPU of a machine, {HOST_GIB_PER_GPU * MACHINE_GPUS:,} GiB for "
        f"{MACHINE_GPUS} (--cpu-memory-gb GIB for your machines)"
    )
    tool = "Axolotl" if answers.get("target") == "axolotl" else "Accelerate"
    return (
        f"sequence {answers.get('sequence_length'):,} tokens (--sequence-length), micro-batch "
        f"{answers.get('micro_batch_size')} (--micro-batch-size), gradient checkpointing {checkpointing}, "
        "bf16 mixed precision (fp16 on cards without bf16: V100, T4 and older), "
        f"host RAM {host_text}, {tool} (--set target=accelerate|axolotl)"
    )


def _row_json(row: Row) -> dict[str, Any]:
    result: Result = row.result
    verdict = result.verdict
    gpu = result.gpu
    data: dict[str, Any] = {
        "gpu_model": gpu_name(gpu),
        "gpu_memory_gb": gpu.memory_gib,
        "offload": result.offload,
        "fits": verdict is not None,
        "gpus": None,
        "machines": None,
        "gpus_per_machine": None,
        "backend": None,
        "strategy": None,
        "rule": None,
        "reason": None,
        "gpu_bytes": None,
        "host_bytes_per_machine": None,
        "cpu_memory_gb": None,
        "step_time": None,
        "within_machines": result.machines_cap,
    }
    if verdict is not None and verdict.estimate is not None:
        data.update(
            gpus=verdict.size.gpus,
            machines=verdict.size.machines,
            gpus_per_machine=verdict.size.per_machine,
            backend=verdict.rule.outcome.backend,
            strategy=verdict.strategy,
            rule=verdict.rule.id,
            reason=verdict.reason,
            gpu_bytes=verdict.estimate.total,
            host_bytes_per_machine=verdict.estimate.host_per_node,
            cpu_memory_gb=verdict.answers.get("cpu_memory_gb"),
        )
        if result.step is not None:
            data["step_time"] = {
                "low_seconds": result.step.low,
                "high_seconds": result.step.high,
                # The batch grows with the GPUs: the tokens a step trains make rows of different sizes comparable.
                "tokens_per_step": result.step.tokens,
            }
    if row.price is not None:
        per_step = row.cost_per_step
        data["cost"] = {
            "usd_per_gpu_hour": row.price,
            "usd_per_hour": row.cost_per_hour,
            "usd_per_step": list(per_step) if per_step else None,
        }
    return data


def _json(
    base: Verdict,
    shown: list[Row],
    question: tuple[GpuInfo, Any, Verdict, Verdict] | None,
    assumed: str,
) -> dict[str, Any]:
    """The estimate's JSON with the search's `hardware` rows (and the asked size's table under `strategies`)."""
    from wizard.commands.estimate import SCHEMA_VERSION, envelope

    shape = base.facts.shape
    params = shape.params if shape is not None else 0
    largest = shape.largest_layer_params if shape is not None else 0
    strategies: list[Any] = []
    asked = None
    if question is not None:
        card, size, without, with_offload = question
        spec = TableInput(params, largest, size.per_machine, size.machines, card.memory_gib)
        host_bytes = without.facts.estimates["ddp"].host_memory if without.facts.estimates else None
        strategies = envelope(spec, "wizard", wizard_rows(without.facts.estimates), host_bytes)["strategies"]
        need: Needs | None = needs(without)
        asked = {
            "gpu_model": gpu_name(card),
            "gpus": size.gpus,
            "machines": size.machines,
            "without_offload": _verdict_json(without),
            "with_offload": _verdict_json(with_offload),
            "dominant": need.dominant if need is not None and not without.runs else None,
        }
    data = {
        "schema_version": SCHEMA_VERSION,
        "params": params,
        "largest_layer_params": largest,
        "formula": "wizard",
        "strategies": strategies,
        "model": base.facts.origin.as_json() if base.facts.origin is not None else None,
        "hardware": [_row_json(row) for row in shown],
        "hardware_assumed": assumed,
        "hardware_question": asked,
    }
    return data


def _verdict_json(verdict: Verdict) -> dict[str, Any]:
    return {
        "fits": verdict.runs,
        "backend": None if verdict.rule.outcome.refuse else verdict.rule.outcome.backend,
        "strategy": verdict.strategy,
        "rule": verdict.rule.id,
        "reason": verdict.reason,
    }
