"""Measured against estimated: matches, inconclusive, differs or failed, and the next lever when it failed."""

from __future__ import annotations

from typing import Any

from wizard.engine.memory import GIB
from wizard.smoke.records import PROCESS_FIXED_BYTES, RankResult, SmokePlan, SmokeResult

# The tolerance of "matches": the measurement within 25% of the figure it is compared with, plus 64 MiB
# (the estimated states with the gradient buffers the backend documents, `_buffers`, and on the CPU what
# an offload keeps there).
# * 25%: the wizard calls a layout fitting when its estimate stays within 80% of the memory
#   (wizard.engine.memory.FIT_MARGIN), leaving 1/0.8 - 1 = 25% above the estimate for what it does
#   not count: fragmentation, temporary tensors, the engines' own copies. A run inside that margin
#   behaves as the estimate promised; one beyond it could run out of memory where the wizard said
#   it fits. The same 25% below: an estimate that much too high would have offloaded for nothing.
# * 64 MiB: what a process holds whatever the model: the communication library's buffers and the
#   allocator's pages, which a tiny smoke model would otherwise turn into a large relative error.
TOLERANCE = 0.25
TOLERANCE_BYTES = PROCESS_FIXED_BYTES
# "inconclusive" below this much of estimated states per process: where the fixed 64 MiB is larger
# than the 25% share (states under 64 MiB / 25% = 256 MiB). There the band is wider than half of
# the states themselves, so a process holding half or twice the estimated states (a sharding over
# two processes that did not happen, or one that the estimate missed; an optimizer state counted
# twice) could still "match": agreement says nothing about the estimate, only that the run ran.
CONCLUSIVE_STATES = int(TOLERANCE_BYTES / TOLERANCE)


def held_against(plan: SmokePlan, device: str) -> tuple[int, str]:
    """The estimate the run is held against per process, and what it counts in words (known before the run).

    On a GPU: the model states and activations, the loss's fp32 temporaries at the start of the
    backward pass (the probe's loss is the model's own, so its peak holds them) and the buffers the
    backend documents: what max_memory_allocated sees, the CUDA context left out. On the CPU: the model states with the
    buffers and what the layout offloads, which stays in this memory; activations come and go
    within a step, so the states held after one are compared.
    """
    from wizard.smoke.plan import offloaded_per_process

    est = plan.estimate
    buffers = sum(size for _, size in plan.buffers)
    if device != "cpu":
        what = "the peak memory PyTorch allocated on each GPU (the estimate without the CUDA context)"
        parts = [
            *([("the loss's fp32 temporaries as the backward pass starts", est.transient)] if est.transient else []),
            *plan.buffers,
        ]
        if parts:
            what += ", with " + " and ".join(f"{part}, {_gib(size)}" for part, size in parts)
        return est.model_states + est.activations + est.transient + buffers, what
    # On the CPU what an offload moves "to host RAM" stays in the memory each process is measured in.
    offloaded = offloaded_per_process(est, plan.answers, plan.world_size)
    what = "the model states each CPU process holds after a step (resident memory growth)"
    parts = [
        *plan.buffers,
        *([("what it offloads, which stays in this memory on the CPU", offloaded)] if offloaded else []),
    ]
    if parts:
        what += ", with " + " and ".join(f"{part}, {_gib(size)}" for part, size in parts)
    return est.model_states + buffers + offloaded, what


def judge(result: SmokeResult, code: int, stderr: str, timed_out: bool, timeout: int, limit: int = 0) -> None:
    """The verdict (matches, inconclusive, differs or failed) with its reason in one line, and the next step.

    `limit` is --memory-limit-gib in bytes (0: none); an out of memory names the first of the
    tree's levers whose estimate fits under it, or else under the device's memory on a GPU.
    """
    from wizard.smoke.plan import lever_for

    plan = result.plan
    result.memory_limit = limit
    oom = [r for r in result.ranks if r.get("status") == "oom"]
    errors = [r for r in result.ranks if r.get("status") == "error"]
    device_memory = float(plan.answers.get("gpu_memory_gb") or 0) if result.device == "gpu" else 0.0
    failed_under = limit or int(device_memory * GIB)
    # On the CPU the limit is on resident memory: each lever is held to what its run needs there.
    on_cpu = result.device == "cpu"
    advice = lever_for(plan.levers, failed_under, on_cpu=on_cpu)
    lever = f": {advice.text}" if advice else ""
    # The estimate the run is held against, known before it runs: a failed run's report keeps it too.
    est = plan.estimate
    result.estimate_bytes, result.compared = held_against(plan, result.device)
    if oom:
        result.reason = f"{oom[0].get('error', 'out of memory')}{lever}"
        result.next_step = advice.next_step or "" if advice else ""
        return
    if timed_out and (building := _extension_build(stderr)) is not None:
        # DeepSpeed compiles its CPU Adam (a torch C++ extension) on first use: minutes, silently.
        op, lock = building
        left = (
            f"; the stopped build left {lock}: delete it before the rerun, or the next build waits on it"
            if lock
            else ""
        )
        result.reason = (
            f"no result within the time limit of {timeout} s: DeepSpeed was still building its {op} op (a C++"
            " extension, built on first use; it takes minutes)"
        )
        result.next_step = (
            f"rerun with a longer --timeout, or install DeepSpeed with DS_BUILD_CPU_ADAM=1 to build it once ahead{left}"
        )
        return
    if timed_out:
        # Not a memory problem: no memory lever. A launch that waits forever most often waits on
        # its rendezvous (another job on the port) or on a process that died early.
        said = _tail(stderr) if stderr.strip() else "nothing on stderr"
        if result.plan.world_size > 1:
            result.reason = (
                f"no result within the time limit of {timeout} s (a hang, or a slow machine); the launch was"
                " stopped. Most often the processes wait on each other: another job holds the rendezvous port, or"
                f" one process died early (the last line on stderr: {said}); on a machine with fewer CPU cores than"
                " processes the steps can also just be slow"
            )
            result.next_step = (
                "rerun with --main-process-port and a free port; if it was only slow, with a longer --timeout"
                " (if it hangs again: the stderr line above)"
            )
        else:
            # One process waits on no other: it was slow, or stuck in the script (the stderr line says where).
            result.reason = (
                f"no result within the time limit of {timeout} s; the launch was stopped. One process waits on no"
                f" other, so most often the steps were just slow on this machine (the last line on stderr: {said})"
            )
            result.next_step = (
                "rerun with a longer --timeout (or fewer --steps); a model of billions of parameters may not finish"
                " a step on a CPU at all: there, --tiny proves what the processes resolve, and the memory is tested"
                " on the GPU machine (smoke DIR --device gpu)"
                if result.device == "cpu" and plan.hardware != "cpu" and not plan.tiny
                else "rerun with a longer --timeout (or fewer --steps)"
            )
        return
    if errors:
        result.reason = f"rank {errors[0].get('rank')}: {errors[0].get('error')}"
        return
    if "out of memory" in stderr.lower() or "outofmemoryerror" in stderr.lower():
        result.reason = f"out of memory: {_tail(stderr)}{lever}"
        result.next_step = advice.next_step or "" if advice else ""
        return
    ok = [r for r in result.ranks if r.get("status") == "ok"]
    if code == 0 and not result.ranks and plan.target == "axolotl":
        # The smoke's plugin prints the lines from Axolotl's trainer; a run that finished without
        # them (an axolotl that did not load the plugin) proves the launch, not the estimate.
        result.verdict = "not measured"
        result.reason = (
            "axolotl train finished its steps (exit 0) but printed no probe lines (was the smoke's"
            " plugin loaded?), so what its processes resolved and held is not measured: not a pass"
        )
        result.next_step = "check that axolotl loads plugins (its log lists them), then smoke again"
        return
    if code != 0 or not ok:
        result.reason = f"the launch exited with {code}: {_tail(stderr)}"
        return
    if len(ok) != plan.world_size:
        result.reason = f"{len(ok)} of the {plan.world_size} planned processes reported"
        return
    result.problems = resolved_problems(plan, ok)
    cpu = all(r.get("device") == "cpu" for r in ok)
    expected, result.compared = held_against(plan, "cpu" if cpu else "gpu")
    if cpu:
        # The CPU holds the states (weights, gradients, optimizer state); its activations and the
        # CUDA context are no GPU's, so only the states are compared.
        measured = [int(r.get("states_bytes") or 0) for r in ok]
        term = "model states"
    else:
        measured = [int(r.get("peak_bytes") or 0) for r in ok]
        term = ""
    result.measured_bytes = measured
    result.estimate_bytes = expected
    worst = max(measured, key=lambda m: abs(m - expected))
    # The tolerance is of the figure compared: with offload on the CPU that includes what is offloaded.
    if abs(worst - expected) <= TOLERANCE * expected + TOLERANCE_BYTES:
        result.verdict = "matches" if not result.problems else "differs"
        result.reason = (
            f"measured {_gib(worst)} against {_gib(expected)} estimated"
            f" (within {TOLERANCE:.0%} + {TOLERANCE_BYTES // 2**20} MiB)"
        )
        if est.model_states < CONCLUSIVE_STATES and not result.problems:
            result.verdict = "inconclusive"
            of_all = f" of the {_gib(expected)}" if plan.buffers else ""
            tiny = (
                " --tiny models are always this small: they prove what the processes resolve (world size,"
                " backend, stage, precision), not the memory; run without --tiny on the model's own config.json"
                " for that"
                if plan.tiny
                else " a larger model, or fewer processes to shard it over"
            )
            result.reason += (
                f", but the estimated states ({_gib(est.model_states)}{of_all} per process) are too small next to the"
                f" {TOLERANCE_BYTES // 2**20} MiB any process holds for the comparison to test the estimate:"
                f" a model with at least {CONCLUSIVE_STATES // 2**20} MiB of estimated states per process would make it"
                f" conclusive;{tiny}"
            )
        if result.problems:
            result.reason += "; but " + "; ".join(result.problems)
        result.next_step = next_after_run(result)
        return
    result.verdict = "differs"
    ratio = worst / expected if expected else float("inf")
    if not term:
        states = max(int(r.get("states_bytes") or 0) for r in ok)
        term = (
            "model states"
            if states and abs(states - est.model_states) >= abs(worst - states - est.activations - est.transient)
            else "activations and the loss's temporaries"
        )
    result.reason = (
        f"measured {_gib(worst)} against {_gib(expected)} estimated ({ratio:.2f}x; the difference is in the {term})"
    )
    if result.problems:
        result.reason += "; and " + "; ".join(result.problems)
    result.next_step = next_after_run(result)


# The tool that shows each GPU's memory while a run trains, by the plan's hardware.
GPU_MONITORS = {"nvidia": "nvidia-smi", "amd": "rocm-smi"}


def next_after_run(result: SmokeResult) -> str:
    """The next step after a run that finished: the launch on the real machine and what to watch, or the fix first."""
    plan = result.plan
    script = " YOUR_TRAINING_SCRIPT.py" if plan.target == "accelerate" else ""
    launch = f"{plan.folder}/launch.sh{script}"
    if result.problems:
        return f"fix what differs (above), then smoke {plan.folder} again before running {launch}"
    if plan.hardware == "cpu":
        where, watch = "here", "each process's resident memory (top)"
    else:
        est = plan.planned_estimate or plan.estimate
        monitor = GPU_MONITORS.get(plan.hardware, "the accelerator's monitor")
        where = "on the planned GPUs"
        watch = f"each GPU's memory ({monitor}) against the estimate, about {est.total / GIB:.1f} GiB per GPU"
        if est.transient:
            # The moment the loss's fp32 temporaries add is the highest the monitor will show; a tight
            # plan passes the usable line there, and the reader should know that figure is expected.
            past = f", past the {est.budget / GIB:.1f} GiB usable line as planned" if est.tight else ""
            watch += f" and {est.peak / GIB:.1f} GiB for a moment as the backward pass starts{past}"
    if result.verdict == "inconclusive" and plan.tiny:
        # On the CPU a GPU or Mac plan's run tests the size of the states, not the device's memory.
        what = (
            "the memory estimate"
            if result.device != "cpu" or plan.hardware == "cpu"
            else "the estimated model states (their size in this CPU's memory, not the planned device's memory)"
        )
        return f"smoke {plan.folder} again without --tiny, on the model's own size, to test {what}"
    if result.verdict == "differs" and (
        result.measured_bytes and max(result.measured_bytes) < (result.estimate_bytes or 0)
    ):
        return (
            f"the run held less than estimated (the estimate errs on the safe side in the term named above): run"
            f" {launch} {where}; in its first steps watch {watch}"
        )
    if result.verdict == "differs":
        return (
            f"the estimate is off in the term named above: run {launch} {where} with room for the measured figure,"
            f" watching {watch} in its first steps"
        )
    return f"run {launch} {where}; in its first steps watch {watch}"


def resolved_problems(plan: SmokePlan, ranks: list[dict[str, Any]] | list[RankResult]) -> list[str]:
    """What the processes resolved that the plan did not (world size, stage, precision, offload).

    With a brought DeepSpeed JSON (its copy in the set, `plan.brought_json`), each difference
    that lives in that file names the edit that fixes it ("DeepSpeed Configuration JSON",
    https://www.deepspeed.ai/docs/config-json/).
    """
    problems = []
    first = ranks[0]
    where = f"in {plan.brought_json}" if plan.brought_json else ""
    expected = plan.expected_distributed_type(str(first.get("device") or "cpu"))
    if expected and first.get("backend") and first.get("backend") != expected:
        problems.append(f"Accelerate resolved {first.get('backend')} instead of the planned {expected}")
    if first.get("world_size") != plan.world_size:
        problems.append(f"{first.get('world_size')} processes instead of the planned {plan.world_size}")
    if plan.zero_stage is not None and first.get("zero_stage") != plan.zero_stage:
        text = f"ZeRO stage {first.get('zero_stage')} instead of the planned {plan.zero_stage}"
        if where:
            text += f' (fix: {where} set "zero_optimization": {{"stage": {plan.zero_stage}}})'
        problems.append(text)
    resolved = first.get("engine_precision") or first.get("mixed_precision")
    if plan.deepspeed and resolved != plan.mixed_precision:
        silently = ' (a JSON\'s "auto" left unfilled silently trains in fp32)' if resolved == "no" else ""
        planned = _precision(plan.mixed_precision)
        text = f"DeepSpeed's engine runs in {_precision(resolved)}, not the planned {planned}{silently}"
        if where:
            text += f"; fix: {where} {_precision_edit(plan.mixed_precision)}"
        problems.append(text)
    for key, planned_device in (("offload_optimizer", plan.offload_optimizer), ("offload_param", plan.offload_param)):
        got = first.get(key)
        if got is not None and plan.deepspeed and got != planned_device:
            text = f"{key.replace('_', ' ')} {got} instead of {planned_device}"
            if where:
                text += f' (fix: {where} set "zero_optimization": {{"{key}": {{"device": "{planned_device}"}}}})'
            problems.append(text)
    return problems


def _precision_edit(planned: str) -> str:
    """The JSON edit that makes DeepSpeed's engine train in the planned precision whatever the launch passes."""
    if planned == "bf16":
        return 'set "bf16": {"enabled": true} instead of "auto" (and "fp16": {"enabled": false})'
    if planned == "fp16":
        return 'set "fp16": {"enabled": true} instead of "auto" (and "bf16": {"enabled": false})'
    return 'set "bf16": {"enabled": false} and "fp16": {"enabled": false}'


def _precision(value: Any) -> str:
    return "fp32" if value in ("no", None) else str(value)


def _gib(value: int) -> str:
    """A size as every verdict line says it, so one figure reads alike wherever it appears.

    MiB with one decimal below a tenth of a GiB, else GiB with two (as the "Compared:" line).
    """
    if abs(value) < GIB // 10:
        return f"{value / 2**20:.1f} MiB"
    return f"{value / GIB:.2f} GiB"


def _extension_build(stderr: str) -> tuple[str, str] | None:
    """The torch C++ extension DeepSpeed was building when stopped, and its leftover lock file ("" if none).

    DeepSpeed's op builder goes through torch.utils.cpp_extension, which prints "Using ROOT as
    PyTorch extensions root..." and "Building extension module NAME..."; while one process builds,
    the others wait on ROOT/NAME/lock, a file a killed build leaves behind.
    """
    import re
    from pathlib import Path

    built = re.findall(r"Building extension module (\w+)", stderr)
    root = re.search(r"Using (\S+) as PyTorch extensions root", stderr)
    if not built and not (root and "cpu_adam" in stderr):
        return None
    op = built[-1] if built else "cpu_adam"
    lock = Path(root.group(1)) / op / "lock" if root else None
    return op, str(lock) if lock is not None and lock.exists() else ""


def _tail(stderr: str) -> str:
    """The line of stderr that says what went wrong: the last error line, else its last line.

    A launcher's own CalledProcessError (accelerate launch saying its child failed) only repeats
    the command, so the child's error before it is the one shown.
    """
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    errors = [line for line in lines if "Error" in line or "error:" in line.lower()]
    errors = [line for line in errors if "CalledProcessError" not in line] or errors
    return (errors or lines or ["(no output on stderr)"])[-1][:300]
