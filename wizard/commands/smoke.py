"""`backend-wizard smoke DIR`: run a written set for a few steps here and compare with the estimate."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from wizard.commands.common import add_output_argument, path_argument, whole_number

if TYPE_CHECKING:
    from rich.console import Console

DEFAULT_STEPS = 3
DEFAULT_TIMEOUT = 300
# A DeepSpeed CPU offload plan builds DeepSpeed's CPU Adam op on its first run (minutes with a
# C++ compiler, DS_BUILD_CPU_ADAM=1 at install time avoids it): its default limit leaves room.
OFFLOAD_TIMEOUT = 900


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The smoke subcommand's options."""
    parser.epilog = (
        "It launches DIR/launch.sh with a probe script (random weights, random tokens, nothing downloaded)"
        " from a temporary folder, and compares what each process resolved and held with the estimate."
        " Exit codes: 0 matches, inconclusive (the model is too small for the comparison to test the"
        " estimate) or not measured (an Axolotl run that printed no probe lines), 2 the set cannot run"
        " here (not a set, several machines, a missing package), 7 the run failed (out of memory, a hang,"
        " a launch error), 8 the run finished but differs from the plan (the report says what and by how much)."
    )
    parser.add_argument("dir", metavar="DIR", type=path_argument, help="a folder the wizard wrote (with answers.yaml)")
    parser.add_argument(
        "--steps",
        metavar="N",
        help=(
            "training steps to run, 1 to 100; the first is a warm-up left out of the step time"
            f" (default: {DEFAULT_STEPS})"
        ),
    )
    parser.add_argument(
        "--timeout",
        metavar="SECONDS",
        help=(
            f"stop the launch (every process) after this long, 10 to 86400 (default: {DEFAULT_TIMEOUT}, or"
            f" {OFFLOAD_TIMEOUT} for a DeepSpeed CPU offload plan, whose first run builds DeepSpeed's CPU Adam)"
        ),
    )
    parser.add_argument(
        "--memory-limit-gib",
        metavar="X",
        type=float,
        help=(
            "a memory limit per process in GiB (a number above 0): on a GPU PyTorch's per-process memory"
            " fraction, on the CPU a check of the resident memory after each step; going past it is a failed"
            " verdict (default: none)"
        ),
    )
    parser.add_argument(
        "--tiny",
        action="store_true",
        help=(
            "run a scaled-down model of the same architecture (2 layers, hidden size 256 at most) and compare"
            " with its own estimate; needed for a model given as a size such as 7B. It proves what the"
            " processes resolve (world size, backend, stage, precision); its states are too small to test"
            " the memory estimate (default: off, the model's own config.json)"
        ),
    )
    parser.add_argument(
        "--device",
        choices=("auto", "cpu", "gpu"),
        default="auto",
        help=(
            "where the processes run: gpu, cpu (a GPU plan then runs with ACCELERATE_USE_CPU=true, DeepSpeed over"
            " gloo), or auto: gpu when nvidia-smi lists one, else cpu (default: %(default)s)"
        ),
    )
    parser.add_argument(
        "--main-process-port",
        metavar="PORT",
        help="the rendezvous port passed to accelerate launch, 1 to 65535 (default: the config's own)",
    )
    add_output_argument(parser)


def run(args: argparse.Namespace, out: Console, err: Console) -> int:
    """Load the set, run the probe through its launch script, print the comparison."""
    import json

    from wizard.errors import WizardError
    from wizard.smoke import check_can_run, load_plan, run_smoke

    steps = whole_number("--steps", args.steps, 1, 100) or DEFAULT_STEPS
    given_timeout = whole_number("--timeout", args.timeout, 10, 86400)
    port = whole_number("--main-process-port", args.main_process_port, 1, 65535)
    limit = args.memory_limit_gib
    if limit is not None and not (0 < limit < 1e6):
        raise WizardError(f"--memory-limit-gib: {limit} is not allowed; expected a number of GiB above 0")
    plan = load_plan(args.dir, tiny=args.tiny)
    builds_cpu_adam = plan.deepspeed and "cpu" in (plan.offload_optimizer, plan.offload_param)
    timeout = given_timeout or (OFFLOAD_TIMEOUT if builds_cpu_adam else DEFAULT_TIMEOUT)
    device = args.device if args.device != "auto" else _device()
    # What cannot run here is refused before anything announces the run.
    check_can_run(plan, device)
    if args.output != "json":
        from wizard.ui.smoke_view import print_plan

        print_plan(out, plan, device)
    if err.is_terminal:  # to a person only: a script reads the one result line
        from wizard.ui.smoke_view import print_running

        print_running(err, plan, device, steps, timeout)
    result = run_smoke(
        plan, steps=steps, timeout=timeout, memory_limit_gib=limit, device=device, port=port, checked=True
    )
    if args.output == "json":
        from wizard.report import smoke_envelope

        print(json.dumps(smoke_envelope(result), indent=2))
    else:
        from wizard.ui.smoke_view import print_smoke

        print_smoke(out, result)
    if result.verdict == "failed":
        from wizard.ui.console import print_error

        # The reason is in the report above (text) or in the JSON; one short line here, not a repeat.
        # "and the next step" only where the report gives one (its "Next:" line, next_step in the JSON).
        named = bool(result.next_step)
        said = (
            result.reason
            if args.output == "json"
            else f"the reason{' and the next step' if named else ''} {'are' if named else 'is'} above"
        )
        print_error(err, WizardError(f"smoke failed: {said}"))
    return result.exit_code


def _device() -> str:
    """The device to run on: gpu when nvidia-smi lists a GPU here, else cpu."""
    from wizard.detect import run_command

    listed = run_command(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"])
    return "gpu" if listed and listed.strip() else "cpu"
