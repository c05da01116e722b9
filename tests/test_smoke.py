"""`backend-wizard smoke DIR`: the set's own launch.sh really runs a probe on this CPU.

A tiny random Llama (config.json only, nothing downloaded) is trained for 3 steps through sets the
wizard wrote: one CPU process, MULTI_CPU with 2 processes (mpirun), DeepSpeed ZeRO-2 and ZeRO-3 with
2 processes over gloo from a brought DeepSpeed JSON (the ZeRO-2 one with bf16 "auto"), and FSDP2 with
2 processes of a 7B plan scaled down by --tiny; and the ZeRO-2 set with --mixed_precision taken out of its
launch.sh, whose "auto" then really trains in fp32 and must be reported. Each test
reads what the processes resolved (world size, ZeRO stage, precision) and the resident memory of
the states they hold, against the estimate within the smoke's tolerance. The refusals (not a set,
several machines, a model without a config.json, missing packages, Axolotl without its trainer)
run no training; the Axolotl command is checked with a stand-in `axolotl` that records its argv.
"""

from __future__ import annotations

import json
import os
import shlex
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from helpers import decide
from realtools import require_tool, tool_env
from wizard.engine.model_size import shape_from_config
from wizard.errors import ExitCode
from wizard.smoke import (
    CONCLUSIVE_STATES,
    MARKER,
    TOLERANCE,
    TOLERANCE_BYTES,
    SmokeError,
    load_plan,
    resolved_problems,
)

REPO = Path(__file__).resolve().parent.parent
BIN = str(Path(sys.executable).parent)

# A tiny Llama: 4 layers of hidden size 384, vocabulary 36,000 (about 35M parameters): its estimated
# states pass CONCLUSIVE_STATES (256 MiB per process) in every launched set, ZeRO-2 and ZeRO-3 over
# two processes included (about 300 MiB each), so "matches" tests the estimate; the parameters are
# in the vocabulary (embedding and output head), which costs a step on the CPU the least.
TINY_LLAMA = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 384,
    "intermediate_size": 1024,
    "num_hidden_layers": 4,
    "num_attention_heads": 6,
    "num_key_value_heads": 6,
    "vocab_size": 36000,
    "max_position_embeddings": 256,
    "tie_word_embeddings": False,
}
BASE = {"target": "accelerate", "method": "full", "sequence_length": 64, "micro_batch_size": 1}


@pytest.fixture(scope="module")
def model_config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("model") / "config.json"
    path.write_text(json.dumps(TINY_LLAMA), encoding="utf-8")
    return path


def brought_json(folder: Path, stage: int, bf16: Any) -> str:
    data = {
        "train_batch_size": "auto",
        "train_micro_batch_size_per_gpu": "auto",
        "gradient_accumulation_steps": "auto",
        "bf16": {"enabled": bf16},
        "zero_optimization": {"stage": stage},
    }
    path = folder / f"ds_zero{stage}.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return str(path)


def gpu_plan(model: Path, **more: Any) -> dict[str, Any]:
    return {**BASE, "hardware": "nvidia", "gpu_model": "A100", "gpus_per_node": 2, "model": str(model), **more}


def cpu_plan(model: Path, processes: int) -> dict[str, Any]:
    return {**BASE, "hardware": "cpu", "cpu_processes": processes, "model": str(model)}


def environment(path: str | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACCELERATE_", "FSDP_"))}
    env.update(tool_env())
    env["PATH"] = path if path is not None else os.pathsep.join([BIN, env.get("PATH", "")])
    env["COLUMNS"] = "100"
    return env


def smoke(
    folder: Path, *args: str, path: str | None = None, timeout: int = 300, **env_more: str
) -> subprocess.CompletedProcess[str]:
    """`backend-wizard smoke FOLDER ARGS` in a fresh process, as a user runs it (`env_more`: more variables)."""
    command = [sys.executable, "-m", "wizard", "smoke", str(folder), *args]
    env = environment(path)
    env["PYTHONPATH"] = str(REPO)
    env.update(env_more)
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=timeout, cwd=folder.parent)


def launched(folder: Path, *args: str) -> dict[str, Any]:
    """A smoke launch with --output json on the CPU and a free port; its JSON report."""
    port = require_tool("accelerate.utils.other").get_free_port()
    proc = smoke(folder, "--output", "json", "--device", "cpu", "--main-process-port", str(port), *args)
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    assert report["schema_version"] == 1
    report["exit_code"] = proc.returncode
    report["stderr"] = proc.stderr
    return report


def assert_states_match(report: dict[str, Any], verdict: str = "matches") -> None:
    """Every rank's measured states within the smoke's tolerance of the estimate, and the verdict says so.

    "matches" only where the states are large enough for the comparison to test the estimate.
    """
    estimate = report["estimate_bytes"]  # the states, plus the buffers the backend documents
    states = report["planned"]["model_states_bytes"]
    assert report["compared"].startswith("the model states"), report
    for measured in report["states_bytes"]:
        assert abs(measured - estimate) <= TOLERANCE * states + TOLERANCE_BYTES, (measured, estimate)
    assert (states >= CONCLUSIVE_STATES) == (verdict == "matches"), states
    assert report["verdict"] == verdict, report["reason"]
    assert report["exit_code"] == 0
    # Printed for the record of what was measured (pytest -s shows it).
    print(f"\nstates measured {report['states_bytes']} against {estimate} estimated: {report['reason']}")


@pytest.mark.launch
def test_one_cpu_process(tmp_path: Path, model_config: Path) -> None:
    """Also: a limit the run stays under is in the JSON report, with the next step after a pass."""
    decide(cpu_plan(model_config, 1), tmp_path / "set", write=True)
    report = launched(tmp_path / "set", "--memory-limit-gib", "4")
    assert report["memory_limit_bytes"] == 4 * 2**30 and max(report["peak_bytes"]) < 4 * 2**30
    assert report["next_step"] == f"run {tmp_path / 'set'}/launch.sh YOUR_TRAINING_SCRIPT.py here; in its first" \
        " steps watch each process's resident memory (top)"  # fmt: skip
    assert (report["world_size"], report["distributed_type"], report["zero_stage"]) == (1, "NO", None)
    assert (report["param_dtype"], report["mixed_precision"]) == ("float32", "no")
    assert report["step_seconds"] > 0 and len(report["peak_bytes"]) == 1
    assert report["planned"]["model_states_bytes"] == report["estimate_bytes"]  # one process: no buffers
    assert_states_match(report)
    assert report["edited_files"] == []
    written = sorted(p.name for p in (tmp_path / "set").iterdir())
    assert written == ["accelerate_config.yaml", "answers.yaml", "launch.sh"]  # nothing added to the set


@pytest.mark.launch
def test_a_mac_lora_base_in_bf16_is_built_in_bf16(tmp_path: Path) -> None:
    """base_dtype: bf16 on a Mac: the probe builds the frozen base in 2 bytes per weight, as the estimate counts.

    Built in fp32, the states would hold twice the base: outside the band (the model is sized so).
    """
    config = tmp_path / "config.json"
    config.write_text(json.dumps({**TINY_LLAMA, "vocab_size": 100_000}), encoding="utf-8")
    # Short sequences: the states measured do not depend on them, and bf16 matmuls are slow on a CPU.
    answers = {**BASE, "hardware": "mps", "gpu_memory_gb": 64, "model": str(config), "method": "lora"}
    answers["sequence_length"] = 16
    decide({**answers, "base_dtype": "bf16"}, tmp_path / "set", write=True)
    # Two steps (a warm-up and one measured): the states are in place after the first; bf16 is slow on the CPU.
    report = launched(tmp_path / "set", "--steps", "2")
    assert report["planned"]["base_dtype"] == "bf16" and report["planned"]["mixed_precision"] == "no"
    estimate = report["estimate_bytes"]
    # The base is nearly all of the states: built in fp32 they would be about twice the estimate,
    # outside the band, so a measurement inside it shows the 2-byte base.
    assert 2 * estimate > estimate + TOLERANCE * estimate + TOLERANCE_BYTES
    for measured in report["states_bytes"]:
        assert abs(measured - estimate) <= TOLERANCE * estimate + TOLERANCE_BYTES, (measured, estimate)
    # Under 256 MiB of states: inconclusive for the estimate as a whole, yet the band above rules out fp32.
    assert report["verdict"] == "inconclusive", report["reason"]
    # The plan line a person reads says so too (printed before the launch, from the same plan).
    from rich.console import Console

    from wizard.smoke.plan import load_plan
    from wizard.ui.smoke_view import print_plan

    console = Console(record=True, width=200)
    print_plan(console, load_plan(tmp_path / "set", tiny=False), "cpu")
    assert "bf16 base (no autocast)" in console.export_text(), console.export_text()


@pytest.mark.launch
def test_multi_cpu_two_processes_through_mpirun(tmp_path: Path, model_config: Path) -> None:
    """Also what the run writes into the set: launch.sh's mpirun hostfile only, as docs/usage.md says."""
    decide(cpu_plan(model_config, 2), tmp_path / "set", write=True)
    before = {p.name: p.read_bytes() for p in (tmp_path / "set").iterdir()}
    report = launched(tmp_path / "set")
    after = {p.name: p.read_bytes() for p in (tmp_path / "set").iterdir()}
    assert set(after) - set(before) == {"hostfile"} and after["hostfile"] == b"localhost:2\n"
    assert {name: after[name] for name in before} == before  # the set's own files untouched
    # One vocabulary per field: the wizard's backend id, and Accelerate's DistributedType.
    assert report["backend"] == report["planned"]["backend"] == "multi_cpu"
    assert report["distributed_type"] == report["planned"]["distributed_type"] == "MULTI_CPU"
    assert report["world_size"] == 2
    assert report["param_dtype"] == "float32" and len(report["states_bytes"]) == 2
    assert_states_match(report)


@pytest.mark.launch
def test_deepspeed_zero2_with_an_auto_precision_json_trains_in_bf16(tmp_path: Path, model_config: Path) -> None:
    """The brought JSON's bf16 "auto" is filled by launch.sh's --mixed_precision: bf16, not a silent fp32."""
    answers = gpu_plan(model_config, deepspeed_config=brought_json(tmp_path, 2, "auto"))
    result = decide(answers, tmp_path / "set", write=True)
    assert result.recommendation.settings["zero_stage"] == 2
    report = launched(tmp_path / "set", "--steps", "2")  # a warm-up and one measured step: the states are in place
    assert (report["world_size"], report["distributed_type"], report["zero_stage"]) == (2, "DEEPSPEED", 2)
    assert report["backend"] == report["planned"]["backend"] == "deepspeed"
    assert (report["mixed_precision"], report["param_dtype"]) == ("bf16", "bfloat16")
    assert (report["offload_optimizer"], report["offload_param"]) == ("none", "none")
    assert_states_match(report)


@pytest.mark.launch
def test_an_auto_precision_the_launch_leaves_unfilled_is_caught_as_fp32(tmp_path: Path, model_config: Path) -> None:
    """launch.sh edited to drop --mixed_precision: DeepSpeed's engine really trains in fp32, and the smoke says so."""
    answers = gpu_plan(model_config, deepspeed_config=brought_json(tmp_path, 2, "auto"))
    decide(answers, tmp_path / "set", write=True)
    launch = tmp_path / "set" / "launch.sh"
    lines = launch.read_text().splitlines(True)
    launch.write_text("".join(line for line in lines if line != "  --mixed_precision bf16 \\\n"))
    report = launched(tmp_path / "set", "--steps", "1")
    assert report["edited_files"] == ["launch.sh"]
    assert (report["zero_stage"], report["mixed_precision"], report["param_dtype"]) == (2, "no", "float32")
    assert report["verdict"] == "differs" and "silently trains in fp32" in report["reason"], report["reason"]
    # A run that differs from the plan has an exit code of its own: not a pass, not a failed run, not bad input.
    assert report["exit_code"] == ExitCode.SMOKE_DIFFERS
    assert report["next_step"].startswith("fix what differs (above), then smoke")


@pytest.mark.launch
def test_deepspeed_zero3_two_processes(tmp_path: Path, model_config: Path) -> None:
    answers = gpu_plan(model_config, deepspeed_config=brought_json(tmp_path, 3, True))
    decide(answers, tmp_path / "set", write=True)
    report = launched(tmp_path / "set", "--steps", "2")  # a warm-up and one measured step: the states are in place
    assert (report["world_size"], report["distributed_type"], report["zero_stage"]) == (2, "DEEPSPEED", 3)
    assert (report["mixed_precision"], report["param_dtype"]) == ("bf16", "bfloat16")
    assert_states_match(report)


@pytest.mark.launch
def test_fsdp2_two_processes_of_a_size_scaled_down_by_tiny(tmp_path: Path) -> None:
    """A 7B plan (a size, no config.json) that FSDP2 shards, run as --tiny's two-layer Llama of its shape."""
    answers = {**BASE, "hardware": "nvidia", "gpu_model": "A100", "gpus_per_node": 2, "gpu_memory_gb": 80}
    result = decide({**answers, "model": "7B", "offload": "none", "sequence_length": 128}, tmp_path / "set", write=True)
    assert result.recommendation.backend == "fsdp2"
    report = launched(tmp_path / "set", "--tiny")
    assert (report["world_size"], report["distributed_type"], report["fsdp_version"]) == (2, "FSDP", 2)
    assert report["backend"] == "fsdp2"
    # FSDP2 keeps the sharded parameters in fp32 and computes in bf16 (its MixedPrecisionPolicy).
    assert (report["param_dtype"], report["mixed_precision"]) == ("float32", "bf16")
    assert (report["offload_optimizer"], report["offload_param"]) == ("none", "none")
    assert report["planned"]["model_states_bytes"] < 2**26  # the tiny model's own estimate, not 7B's
    # The scaled-down model's size, as its own config counts it.
    shape = shape_from_config(load_plan(tmp_path / "set", tiny=True).model_config)
    assert report["planned"]["tiny_model"] == (
        f"{shape.layers} layers, hidden size {shape.hidden_size}, {shape.params / 1e6:.1f}M parameters"
    )
    # Its states are too small next to the 64 MiB allowance: within the tolerance, but inconclusive.
    assert_states_match(report, verdict="inconclusive")
    assert f"at least {CONCLUSIVE_STATES // 2**20} MiB of estimated states per process" in report["reason"]
    # A --tiny run is always this small: the verdict says what it proves and how to test the memory.
    assert "--tiny models are always this small" in report["reason"]
    assert "run without --tiny on the model's own config.json" in report["reason"]
    # Run on the CPU, a GPU plan's next smoke tests the states' size, not the GPUs' memory: said so.
    assert report["next_step"].endswith("(their size in this CPU's memory, not the planned device's memory)")


def said_size(text: str, before: str) -> int:
    """The size (`0.28 GiB`, `96 MiB`) printed just before `before` in text, in bytes."""
    import re

    match = re.search(r"([0-9.]+) (GiB|MiB)" + re.escape(before), text)
    assert match is not None, (before, text)
    return int(float(match.group(1)) * (2**30 if match.group(2) == "GiB" else 2**20))


@pytest.mark.launch
def test_an_impossible_memory_limit_fails_with_the_next_lever(tmp_path: Path, model_config: Path) -> None:
    """The lever an out of memory proposes on the CPU fits when it is run: what its run measures stays under the
    figure the report prints for it. Also: the figure the run is held against is printed before the run, the limit
    is echoed by a pass (and in --output json: test_one_cpu_process), and a pass and a failure both end with a
    "Next:" line. Where no lever fits: test_when_no_lever_fits_the_line_says_so_and_names_no_next_step."""
    decide(cpu_plan(model_config, 1), tmp_path / "set", write=True)
    port = require_tool("accelerate.utils.other").get_free_port()
    # 0.3 GiB: the full fine-tune (about 0.52 GiB of states) runs out; LoRA's need (about 0.28 GiB) fits.
    proc = smoke(tmp_path / "set", "--memory-limit-gib", "0.3", "--steps", "2", "--main-process-port", str(port))
    assert proc.returncode == 7, proc.stderr[-2000:]
    said = " ".join(proc.stdout.split())
    assert "failed: out of memory at" in said
    assert "the tree's next step is One CPU process, with method lora, which needs up to" in said, said
    need = said_size(said, " per process here")
    assert need <= int(0.3 * 2**30)
    assert "Next: rerun the wizard with --set method=lora" in said
    # The figure the run is held against is in the plan lines, before the verdict, once.
    plan = load_plan(tmp_path / "set", tiny=False)
    assert said.count("Compared: the model states") == 1
    assert said.index("Compared:") < said.index("failed:")
    assert f"estimated {plan.estimate.model_states / 2**30:.2f} GiB per process" in said
    assert proc.stderr.strip().splitlines() == ["error: smoke failed: the reason and the next step are above"]
    # The lever run as the line says: it fits, the peak it measures is within the figure printed for it.
    answers = {**cpu_plan(model_config, 1), "method": "lora"}
    decide(answers, tmp_path / "lora", write=True)
    proc = smoke(tmp_path / "lora", "--memory-limit-gib", "0.3", "--steps", "2", "--main-process-port", str(port),
                 COLUMNS="80")  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr[-2000:]
    said = " ".join(proc.stdout.split())
    assert "Memory limit: 0.30 GiB per process, not reached (the highest peak" in said, said
    measured = said_size(said, ").")
    print(f"\nLoRA lever: measured peak {measured} against the {need} printed for it")
    assert 0 < measured + 2**30 // 200 <= need  # the peak as printed, rounded to 0.01 GiB: at most half of it
    # A path longer than the line is folded inside itself: compared without the spaces the fold adds.
    squeezed = "".join(said.split())
    assert f"Next:run{tmp_path / 'lora'}/launch.shYOUR_TRAINING_SCRIPT.pyhere" in squeezed
    lines = proc.stdout.splitlines()
    assert all(len(line) <= 80 for line in lines), lines
    assert "stage: ZeRO/FSDP version; dtype/prec: weights/compute; offload: optim/weights" in lines
    assert "CPU s" in lines[next(i for i, line in enumerate(lines) if line.startswith("rank"))]


def test_an_auto_precision_left_unfilled_is_reported_as_fp32(tmp_path: Path, model_config: Path) -> None:
    """Had DeepSpeed's engine resolved the JSON's "auto" to fp32, the smoke would say so."""
    answers = gpu_plan(model_config, deepspeed_config=brought_json(tmp_path, 2, "auto"))
    decide(answers, tmp_path / "set", write=True)
    plan = load_plan(tmp_path / "set", tiny=False)
    assert plan.mixed_precision == "bf16" and plan.edited == ()
    launch = tmp_path / "set" / "launch.sh"
    launch.write_text(launch.read_text().replace("--mixed_precision bf16", "--mixed_precision no"))
    assert load_plan(tmp_path / "set", tiny=False).edited == ("launch.sh",)
    record = {"world_size": 2, "zero_stage": 2, "engine_precision": "no", "mixed_precision": "no"}
    [problem] = resolved_problems(plan, [record])
    assert "runs in fp32, not the planned bf16" in problem and "silently" in problem
    # The brought JSON's copy in the set is where it is fixed, and the line names the edit.
    copy = str(tmp_path / "set" / "ds_config.json")
    assert f'fix: in {copy} set "bf16": {{"enabled": true}} instead of "auto"' in problem
    assert resolved_problems(plan, [{**record, "engine_precision": "bf16"}]) == []
    stage, offload = resolved_problems(
        plan, [{**record, "engine_precision": "bf16", "zero_stage": 3, "offload_optimizer": "cpu"}]
    )
    assert stage.endswith(f'(fix: in {copy} set "zero_optimization": {{"stage": 2}})')
    assert offload.endswith(f'(fix: in {copy} set "zero_optimization": {{"offload_optimizer": {{"device": "none"}}}})')


def test_a_json_the_wizard_wrote_names_no_edit(tmp_path: Path, model_config: Path) -> None:
    """Only a brought JSON gets an edit to make: the wizard's own is fixed by writing the set again."""
    answers = gpu_plan(model_config, gpus_per_node=8, gpu_memory_gb=16, offload="cpu")
    result = decide(answers, tmp_path / "set", write=True)
    assert result.recommendation.backend == "deepspeed"
    plan = load_plan(tmp_path / "set", tiny=False)
    assert plan.brought_json is None
    record = {"world_size": 8, "zero_stage": plan.zero_stage, "engine_precision": "no"}
    [problem] = resolved_problems(plan, [record])
    assert "not the planned" in problem and "fix:" not in problem


def test_the_lever_fits_the_limit_the_run_failed_under() -> None:
    """lever_for walks past a lever whose estimate does not fit, and says so when none does."""
    from wizard.smoke.plan import Lever, lever_for

    gib = 2**30
    offload = Lever((("offload", "cpu"),), "DeepSpeed ZeRO (ZeRO-2 with optimizer offload)", 14 * gib, on_gpu=True)
    lora = Lever((("offload", "cpu"), ("method", "lora")), "DeepSpeed ZeRO, with method lora", 6 * gib, on_gpu=True)
    levers = (offload, lora)

    def chosen(limit: int, on_cpu: bool = False) -> tuple[str, str | None] | None:
        advice = lever_for(levers, limit, on_cpu=on_cpu)
        return None if advice is None else (advice.text, advice.next_step)

    assert chosen(0) == (offload.text(), offload.next_step)  # no limit: the next step
    assert chosen(16 * gib) == (offload.text(), offload.next_step)
    assert chosen(8 * gib) == (lora.text(), lora.next_step)
    # The next step is the lever's own field, the command that takes it.
    assert lora.next_step.startswith("rerun the wizard with --set offload=cpu --set method=lora")
    assert "about 6.0 GiB per GPU" in lora.text()
    none = lever_for(levers, 4 * gib)
    assert none is not None and none.text.startswith("none of the tree's levers fits under 4.00 GiB per process")
    assert "the smallest, DeepSpeed ZeRO, with method lora" in none.text and none.next_step is None
    assert lever_for((), 4 * gib) is None
    # On the CPU each lever is held to what its run needs there: its CPU estimate plus the 64 MiB
    # every process holds; that figure is the one printed, rounded up.
    on_cpu = tuple(
        Lever(lever.changes, lever.title, lever.bytes_per_process, on_gpu=True, cpu_run=size)
        for lever, size in zip(levers, (20 * gib, 10 * gib), strict=True)
    )
    first, second = on_cpu
    for lever in on_cpu:
        need = lever.cpu_need()
        assert need is not None and lever.cpu_run is not None
        assert need == lever.cpu_run + TOLERANCE_BYTES
        assert said_size(lever.text(on_cpu=True), " per process here") >= need
    need = first.cpu_need() or 0
    assert lever_for(on_cpu, need, on_cpu=True).text == first.text(on_cpu=True)  # type: ignore[union-attr]
    assert lever_for(on_cpu, need - 1, on_cpu=True).text == second.text(on_cpu=True)  # type: ignore[union-attr]


def test_a_cpu_runs_estimate_counts_what_the_run_holds_beside_the_states(tmp_path: Path, model_config: Path) -> None:
    """For every layout of these plans, the CPU run's estimate is at least the figure that run is held against after a
    step (states, buffers, what it offloads), plus its activations and the loss peak: the limit is on the peak.
    An offload layout counts what it offloads with the allowance for pinned buffers, and a mixed-precision layout
    that makes one counts a 16-bit copy of the trained weights."""
    from wizard.engine.memory import (
        HOST_BUFFER_FACTOR,
        WORKING_COPY_STRATEGIES,
        applicable_strategies,
        cpu_run_bytes,
        estimate,
        trainable_params,
    )

    seen = set()
    big = {**BASE, "hardware": "nvidia", "gpu_model": "A100", "gpus_per_node": 8, "model": "70B"}
    plans = [
        gpu_plan(model_config, gpu_memory_gb=80),
        gpu_plan(model_config, gpu_memory_gb=80, method="lora"),
        gpu_plan(model_config, gpu_memory_gb=80, offload="cpu"),
        {**big, "gpu_memory_gb": 80, "num_nodes": 2, "main_process_ip": "10.0.0.1"},
        {**big, "method": "lora", "gpu_memory_gb": 24},
        cpu_plan(model_config, 2),
    ]
    for answers in plans:
        result = decide(answers, tmp_path / "set")
        workload = result.recommendation.facts.workload
        if workload is None:
            continue
        world = max(workload.world_size, 1) / max(workload.num_nodes, 1)
        for strategy in applicable_strategies(workload):
            est = estimate(workload, strategy, 80, None)
            buffers = 2**20
            held = est.model_states + buffers + est.host_stored / world
            run = cpu_run_bytes(est, workload, buffers)
            assert run >= held + est.activations + est.transient - 1, strategy
            if est.host_per_node and strategy != "ddp_layer_offload":
                assert run - held >= est.host_stored * (HOST_BUFFER_FACTOR - 1) / world - 2, strategy
                seen.add("offload")
            if strategy in WORKING_COPY_STRATEGIES and workload.half_precision:
                assert run >= held + est.activations + est.transient + 2 * trainable_params(workload) - 1, strategy
                seen.add("copy")
    assert seen == {"offload", "copy"}


def test_when_no_lever_fits_the_line_says_so_and_names_no_next_step(tmp_path: Path, model_config: Path) -> None:
    """An out of memory under a limit no lever of the tree fits: the reason says so, names no lever to rerun with,
    and the JSON report carries the limit and the peak the process had reached, the figure the line gives."""
    from wizard.report import smoke_envelope
    from wizard.smoke import RankResult, SmokeResult, judge

    decide(cpu_plan(model_config, 1), tmp_path / "set", write=True)
    plan = load_plan(tmp_path / "set", tiny=False)
    limit = int(0.02 * 2**30)
    peak = 3 * limit
    error = f"out of memory at {peak / 2**30:.2f} GiB building the model (limit {limit / 2**30:.2f} GiB)"
    rank = {"status": "oom", "rank": 0, "world_size": 1, "peak_bytes": peak, "error": error}
    result = SmokeResult(plan=plan, device="cpu", ranks=[RankResult(rank)])
    judge(result, 1, "", False, 60, limit)
    assert result.verdict == "failed" and result.exit_code == ExitCode.SMOKE_FAILED
    assert "none of the tree's levers fits under 0.02 GiB per process" in result.reason
    assert "rerun the wizard" not in result.reason and result.next_step == ""
    report = smoke_envelope(result)
    assert report["memory_limit_bytes"] == limit and report["next_step"] is None
    assert report["peak_bytes"] == [peak] and f"out of memory at {peak / 2**30:.2f} GiB" in report["reason"]
    # Under a limit the first lever fits, its next step is the lever's own field.
    result = SmokeResult(plan=plan, device="cpu", ranks=[RankResult(rank)])
    judge(result, 1, "", False, 60, int(0.3 * 2**30))
    [lever] = [lever for lever in plan.levers if ("method", "lora") in lever.changes][:1]
    assert result.next_step == lever.next_step and lever.text(on_cpu=True) in result.reason


def test_a_small_estimate_is_inconclusive_not_a_match(tmp_path: Path) -> None:
    """States under CONCLUSIVE_STATES: a measurement at half the estimate would still be inside the band."""
    from wizard.smoke import RankResult, SmokeResult, judge

    config = tmp_path / "config.json"
    config.write_text(json.dumps({**TINY_LLAMA, "vocab_size": 8000}), encoding="utf-8")
    decide(cpu_plan(config, 1), tmp_path / "set", write=True)
    plan = load_plan(tmp_path / "set", tiny=False)
    states = plan.estimate.model_states
    assert states < CONCLUSIVE_STATES
    for measured in (states, states // 2):
        record = {"status": "ok", "rank": 0, "world_size": 1, "device": "cpu", "backend": "NO"}
        result = SmokeResult(plan=plan, device="cpu", ranks=[RankResult({**record, "states_bytes": measured})])
        judge(result, 0, "", False, 60)
        assert result.verdict == "inconclusive" and result.exit_code == 0, result.reason
        assert f"at least {CONCLUSIVE_STATES // 2**20} MiB of estimated states per process" in result.reason
        assert "--tiny" not in result.reason  # the model's own config: a larger one is the way out
    # A failed run keeps the estimate it was held against (a report without it explains nothing).
    failed = SmokeResult(plan=plan, device="cpu", ranks=[])
    judge(failed, 1, "boom", False, 60)
    assert failed.verdict == "failed" and failed.estimate_bytes == states + sum(s for _, s in plan.buffers)


def test_refusals_are_one_line(tmp_path: Path, model_config: Path) -> None:
    (tmp_path / "empty").mkdir()
    proc = smoke(tmp_path / "empty")
    assert proc.returncode == 2 and "has no answers.yaml, so it is not a set the wizard wrote" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and not proc.stdout
    for missing, said in ((tmp_path / "nowhere", "does not exist"), (model_config, "is a file, not a folder")):
        proc = smoke(missing)
        assert proc.returncode == 2 and said in proc.stderr and len(proc.stderr.strip().splitlines()) == 1

    two = gpu_plan(model_config, gpus_per_node=8, num_nodes=2, main_process_ip="10.0.0.1", gpu_memory_gb=80)
    decide(two, tmp_path / "two", write=True)
    proc = smoke(tmp_path / "two")
    assert proc.returncode == 2 and "running it on each machine is not supported yet" in proc.stderr
    assert "num_nodes=1" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1

    decide({**cpu_plan(model_config, 1), "model": "7B"}, tmp_path / "size", write=True)
    proc = smoke(tmp_path / "size")
    assert proc.returncode == 2 and "no local config.json" in proc.stderr and "--tiny" in proc.stderr


def test_tiny_scales_a_size_down_to_the_wizards_layer_shape(tmp_path: Path) -> None:
    decide({**BASE, "hardware": "cpu", "cpu_processes": 1, "model": "7B"}, tmp_path / "set", write=True)
    with pytest.raises(SmokeError, match=r"no local config\.json") as raised:
        load_plan(tmp_path / "set", tiny=False)
    assert "--tiny" in str(raised.value.hint)
    plan = load_plan(tmp_path / "set", tiny=True)
    config = plan.model_config
    assert config["model_type"] == "llama" and config["num_hidden_layers"] == 2 and config["hidden_size"] == 256
    assert plan.estimate.model_states < 2**30  # the tiny model's own estimate, not 7B's


def test_missing_packages_say_what_to_install(tmp_path: Path, model_config: Path) -> None:
    decide(gpu_plan(model_config, deepspeed_config=brought_json(tmp_path, 2, "auto")), tmp_path / "set", write=True)
    # No accelerate on PATH at all.
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "bash").symlink_to("/bin/bash")
    # A terminal (FORCE_COLOR) is told what runs before the wait: a refusal comes before that line and
    # before the plan's lines, so nothing announces a run that cannot start.
    proc = smoke(tmp_path / "set", path=str(bare), FORCE_COLOR="1", NO_COLOR="1")
    assert proc.returncode == 2, proc.stderr
    [line] = proc.stderr.strip().splitlines()
    assert "accelerate is not on PATH" in line and "pip install torch accelerate transformers deepspeed" in line
    assert not proc.stdout and "running" not in proc.stderr
    # An `accelerate` whose Python has none of the packages.
    other = tmp_path / "other"
    other.mkdir()
    python = next(p for p in ("/usr/bin/python3", "/usr/local/bin/python3") if Path(p).exists())
    fake = other / "accelerate"
    fake.write_text(f"#!{python}\nraise SystemExit(3)\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    proc = smoke(tmp_path / "set", path=os.pathsep.join([str(other), "/usr/bin", "/bin"]), FORCE_COLOR="1")
    assert proc.returncode == 2, proc.stderr
    [line] = proc.stderr.strip().splitlines()
    assert "missing where accelerate runs" in line and "pip install" in line and "deepspeed" in line
    assert not proc.stdout and "running" not in proc.stderr


def axolotl_set(tmp_path: Path, model_config: Path) -> Path:
    answers = {**BASE, "target": "axolotl", "hardware": "nvidia", "gpu_model": "A100", "gpus_per_node": 1}
    decide({**answers, "model": str(model_config), "method": "lora"}, tmp_path / "set", write=True)
    return tmp_path / "set"


def test_axolotl_without_its_trainer_says_what_to_install(tmp_path: Path, model_config: Path) -> None:
    folder = axolotl_set(tmp_path, model_config)
    proc = smoke(folder)  # this venv has Axolotl's schema validator only (installed without trl)
    assert proc.returncode == 2, proc.stderr
    [line] = proc.stderr.strip().splitlines()
    assert "axolotl's trainer missing" in line and "pip install axolotl" in line


def test_axolotl_command_with_a_stand_in(tmp_path: Path, model_config: Path) -> None:
    folder = axolotl_set(tmp_path, model_config)
    stand_in = tmp_path / "bin"
    stand_in.mkdir()
    argv_file = tmp_path / "argv.json"
    record = {
        "rank": 0,
        "world_size": 1,
        "status": "ok",
        "backend": "NO",
        "device": "cpu",
        "param_dtype": "bfloat16",
        "mixed_precision": "bf16",
        "peak_bytes": 1,
        "states_bytes": 1,
        "step_seconds": 0.1,
    }
    script = stand_in / "axolotl"
    script.write_text(
        "#!/bin/bash\n"
        f'{sys.executable} -c \'import json, sys; json.dump(sys.argv[1:], open("{argv_file}", "w"))\' "$@"\n'
        f'cp "$2" {tmp_path}/copied.yaml\n'
        f'echo "$PYTHONPATH" > {tmp_path}/pythonpath\n'
        # The smoke's plugin module, where the launch's PYTHONPATH puts it (Axolotl imports it from there).
        f'cp "${{PYTHONPATH%%:*}}/backend_wizard_smoke_plugin.py" {tmp_path}/plugin.py\n'
        f"echo '{MARKER}{json.dumps(record)}'\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    path = os.pathsep.join([str(stand_in), BIN, "/usr/bin", "/bin"])
    proc = smoke(folder, "--steps", "4", "--output", "json", path=path)
    argv = json.loads(argv_file.read_text())
    assert argv[0] == "train" and argv[1].endswith("/axolotl.yaml") and not argv[1].startswith(str(folder))
    assert argv[2] == "--max-steps=4" and argv[3].startswith("--output-dir=")
    copied = yaml.safe_load((tmp_path / "copied.yaml").read_text())
    original = yaml.safe_load((folder / "axolotl.yaml").read_text())
    [dataset] = copied["datasets"]
    assert dataset["path"].endswith("smoke_dataset.jsonl") and dataset["type"] == "completion"
    assert copied["base_model"] == original["base_model"] and copied["adapter"] == original["adapter"]
    # The copy names the smoke's plugin (the set's own file does not), rendered where PYTHONPATH starts.
    assert copied["plugins"] == ["backend_wizard_smoke_plugin.SmokePlugin"] and "plugins" not in original
    plugin = (tmp_path / "plugin.py").read_text()
    compile(plugin, "plugin.py", "exec")
    assert "class SmokePlugin(BasePlugin)" in plugin and "def add_callbacks_post_trainer" in plugin
    assert repr(MARKER) in plugin
    report = json.loads(proc.stdout)
    assert report["world_size"] == 1 and report["mixed_precision"] == "bf16"
    assert not Path(argv[1]).exists()  # the temporary folder is gone, the set untouched
    # An axolotl that finished without loading the plugin prints no lines: "not measured", never a pass.
    script.write_text("#!/bin/bash\nexit 0\n")
    proc = smoke(folder, "--output", "json", path=path)
    report = json.loads(proc.stdout)
    assert proc.returncode == 0 and report["verdict"] == "not measured", report
    assert "printed no probe lines" in report["reason"] and "not a pass" in report["reason"]


def stand_in_accelerate(tmp_path: Path, body: str) -> str:
    """A PATH whose `accelerate` is a bash stand-in running `body` (a plain script: no package check)."""
    folder = tmp_path / "stand-in"
    folder.mkdir(parents=True)
    script = folder / "accelerate"
    script.write_text("#!/bin/bash\n" + body)
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return os.pathsep.join([str(folder), "/usr/bin", "/bin"])


def test_a_hang_is_stopped_with_every_process_it_started(tmp_path: Path, model_config: Path) -> None:
    """A worker in the launch's group, and one under a helper that moved to a group of its own.

    The second is what mpirun's proxy (MPICH's hydra_pmi_proxy) does: a kill of the launch's
    process group alone leaves it and its worker running.
    """
    decide(cpu_plan(model_config, 1), tmp_path / "set", write=True)
    pid_file, helper_file, moved_file = (tmp_path / f"{name}.pid" for name in ("worker", "helper", "moved"))
    moved = (
        f"{sys.executable} -c 'import os, subprocess; os.setpgid(0, 0);"
        f' open("{helper_file}", "w").write(str(os.getpid()));'
        f' w = subprocess.Popen(["sleep", "300"]); open("{moved_file}", "w").write(str(w.pid)); w.wait()\' &\n'
    )
    path = stand_in_accelerate(tmp_path, f"sleep 300 &\necho $! > {pid_file}\n{moved}wait\n")
    proc = smoke(tmp_path / "set", "--timeout", "10", path=path)
    assert proc.returncode == 7, proc.stderr
    assert "no result within the time limit of 10 s" in proc.stdout and "Traceback" not in proc.stderr
    # A hang is no memory problem: never a memory lever. One process waits on no other, so it is
    # pointed at the time limit, not at the rendezvous port.
    said = " ".join(proc.stdout.split())
    assert "--timeout" in said and "--set" not in said and "rendezvous" not in said, said
    pids = [int(path.read_text()) for path in (pid_file, helper_file, moved_file)]
    assert len(set(pids)) == 3 and all(pid > 0 for pid in pids)
    for pid in pids:
        assert not alive(pid), pid  # the workers went with the launcher, the moved group too


def alive(pid: int, wait: float = 5.0) -> bool:
    """Whether a process still runs after `wait` seconds (a killed one may stay a zombie until reaped)."""
    import time

    stat_file = Path(f"/proc/{pid}/stat")
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        try:
            state = stat_file.read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return False
        if state in ("Z", "X"):
            return False
        time.sleep(0.1)
    return True


def test_a_launch_error_is_one_line_with_the_tail_of_stderr(tmp_path: Path, model_config: Path) -> None:
    decide(cpu_plan(model_config, 1), tmp_path / "set", write=True)
    failing = "echo 'launching' >&2\necho 'RuntimeError: the rendezvous failed' >&2\n"
    # accelerate launch's own line after its child's error: it repeats the command, not the cause.
    failing += "echo \"subprocess.CalledProcessError: Command '[python, x.py]' returned 1.\" >&2\nexit 1\n"
    path = stand_in_accelerate(tmp_path, failing)
    proc = smoke(tmp_path / "set", "--output", "json", path=path)
    assert proc.returncode == 7
    report = json.loads(proc.stdout)
    assert report["verdict"] == "failed" and report["reason"].endswith("RuntimeError: the rendezvous failed")
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith("error: smoke failed: the launch exited with 1")
    assert report["next_step"] is None
    # As text, the closing line points at the report; it promises a next step only where the report
    # has one (its "Next:" line), whatever words the error itself uses ("rerun" here).
    path = stand_in_accelerate(tmp_path / "again", "echo 'RuntimeError: rerun with more memory' >&2\nexit 1\n")
    proc = smoke(tmp_path / "set", path=path)
    assert proc.returncode == 7 and "rerun with more memory" in proc.stdout and "Next:" not in proc.stdout
    assert proc.stderr.strip().splitlines() == ["error: smoke failed: the reason is above"]


def test_tiny_prints_the_scaled_down_models_size_once_before_the_run(tmp_path: Path) -> None:
    """--tiny: the plan's lines name the model that really runs (layers, width, parameters), once."""
    answers = {**BASE, "hardware": "nvidia", "gpu_model": "A100", "gpus_per_node": 1, "gpu_memory_gb": 80}
    decide({**answers, "model": "7B"}, tmp_path / "set", write=True)
    shape = shape_from_config(load_plan(tmp_path / "set", tiny=True).model_config)
    size = f"{shape.layers} layers, hidden size {shape.hidden_size}, {shape.params / 1e6:.1f}M parameters"
    path = stand_in_accelerate(tmp_path, "exit 1\n")  # no training: the lines before the run are the point
    proc = smoke(tmp_path / "set", "--tiny", "--device", "cpu", path=path, COLUMNS="80")
    said = " ".join(proc.stdout.split())
    assert proc.returncode == 7 and said.count(size) == 1, said
    assert said.index(size) < said.index("failed:")
    assert shape.layers == 2 and 0 < shape.params < 7e9 / 100


def test_qlora_cannot_be_checked_on_the_cpu(tmp_path: Path, model_config: Path) -> None:
    answers = gpu_plan(model_config, method="qlora", gpus_per_node=1)
    decide(answers, tmp_path / "set", write=True)
    proc = smoke(tmp_path / "set", "--device", "cpu")
    assert proc.returncode == 2
    [line] = proc.stderr.strip().splitlines()
    assert "QLoRA cannot be checked here" in line and "bitsandbytes and a CUDA GPU" in line
    # smoke takes no --set: the hint names the wizard run that writes a LoRA copy, and that run,
    # typed as printed, writes a set that smoke then takes (it gets past the QLoRA refusal).
    command = line.split("write a copy with ", 1)[1].split(", then run ", 1)[0]
    assert command.startswith("backend-wizard --answers ") and "--set method=lora" in command, line
    argv = [sys.executable, "-m", "wizard", *shlex.split(command)[1:]]
    env = {**environment(), "PYTHONPATH": str(REPO)}
    wrote = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120, cwd=tmp_path)
    assert wrote.returncode == 0, wrote.stderr
    other = Path(shlex.split(line.split(", then run backend-wizard smoke ", 1)[1].rstrip(")"))[0])
    assert yaml.safe_load((other / "answers.yaml").read_text(encoding="utf-8"))["answers"]["method"] == "lora"
    again = smoke(other, "--device", "cpu", "--steps", "1", path="/nonexistent")
    assert "QLoRA cannot be checked" not in again.stderr, again.stderr


def test_a_catalog_model_is_built_from_its_bundled_config(tmp_path: Path) -> None:
    # A name from the bundled catalog carries its config.json values: smoke builds its probe from
    # them (scaled down with --tiny) rather than asking for a config.json.
    decide({**BASE, "hardware": "cpu", "cpu_processes": 1, "model": "llama-3.2-1b"}, tmp_path / "set", write=True)
    config = load_plan(tmp_path / "set", tiny=True).model_config
    assert config["model_type"] == "llama" and config["num_hidden_layers"] == 2, config
    assert load_plan(tmp_path / "set", tiny=False).model_config["vocab_size"] == 128256


def test_the_verdict_names_the_term_that_differs(tmp_path: Path, model_config: Path) -> None:
    """judge() on records as the probe prints them: within the tolerance, states off, activations off."""
    from wizard.smoke import RankResult, SmokeResult, judge

    decide(gpu_plan(model_config, deepspeed_config=brought_json(tmp_path, 2, "auto")), tmp_path / "set", write=True)
    plan = load_plan(tmp_path / "set", tiny=False)
    est = plan.estimate
    bucket = sum(size for _, size in plan.buffers)
    base = {"status": "ok", "world_size": 2, "zero_stage": 2, "engine_precision": "bf16"}
    base |= {"offload_optimizer": "none", "offload_param": "none"}

    def verdict(device: str, states: int, peak: int) -> SmokeResult:
        measured = {"device": device, "states_bytes": states, "peak_bytes": peak}
        ranks = [RankResult({**base, **measured, "rank": rank}) for rank in (0, 1)]
        result = SmokeResult(plan=plan, device=device, ranks=ranks)
        judge(result, 0, "", False, 60)
        return result

    states = est.model_states + bucket
    assert verdict("cpu", states, 2 * states).verdict == "matches"
    far = verdict("cpu", 3 * states + 2**30, 4 * states)
    assert far.verdict == "differs" and "the difference is in the model states" in far.reason
    # "differs" has an exit code of its own, apart from a pass, a failed run and every error.
    codes = {code for code in ExitCode if code != ExitCode.SMOKE_DIFFERS}
    assert far.exit_code == ExitCode.SMOKE_DIFFERS and far.exit_code not in codes
    assert verdict("cpu", states, 2 * states).exit_code == 0
    assert far.next_step.startswith("the estimate is off in the term named above")
    gpu_states = est.model_states + bucket
    on_gpu = verdict("cuda", gpu_states, gpu_states + est.activations + est.transient + 2**31)
    assert on_gpu.verdict == "differs" and "the difference is in the activations" in on_gpu.reason
    assert on_gpu.compared.startswith("the peak memory PyTorch allocated on each GPU")
    # The probe's loss is the model's own, so a GPU's peak holds the loss's fp32 temporaries: a peak
    # of states, activations and those temporaries matches, and the line says they were counted.
    assert est.transient > 0
    with_loss = verdict("cuda", gpu_states, gpu_states + est.activations + est.transient)
    assert with_loss.verdict == "matches", with_loss.reason
    assert with_loss.estimate_bytes == gpu_states + est.activations + est.transient
    assert "the loss's fp32 temporaries" in with_loss.compared


def test_a_cpu_run_of_a_gpu_plan_says_what_it_proves_and_the_gpu_fit_it_leaves_to_the_estimate(
    tmp_path: Path, model_config: Path
) -> None:
    """ "matches" on the CPU is about the state layout: the planned GPUs' fit is the estimate's, said beside it."""
    from wizard.smoke import SmokeResult
    from wizard.ui.smoke_view import cpu_scope

    for memory, fits in ((24, True), (0.05, False)):
        folder = tmp_path / f"set{memory}"
        # A brought DeepSpeed JSON is run as written, so a plan that does not fit is still written.
        brought = brought_json(tmp_path, 2, "auto")
        decide(gpu_plan(model_config, gpu_memory_gb=memory, deepspeed_config=brought), folder, write=True)
        plan = load_plan(folder, tiny=False)
        assert plan.estimate.fits is fits
        scope = cpu_scope(SmokeResult(plan=plan, device="cpu", verdict="matches"))
        assert scope is not None and f"so it {'fits' if fits else 'does NOT fit'}" in scope, scope
        assert f"about {plan.estimate.total / 2**30:.1f} GiB per GPU of {plan.estimate.budget / 2**30:.1f}" in scope
        assert cpu_scope(SmokeResult(plan=plan, device="gpu", verdict="matches")) is None
    decide(cpu_plan(model_config, 2), tmp_path / "cpu", write=True)
    assert cpu_scope(SmokeResult(plan=load_plan(tmp_path / "cpu", tiny=False), device="cpu", verdict="matches")) is None
    # --tiny runs a scaled-down model; the fit it states is still the planned model's on the planned GPUs.
    answers = {**BASE, "hardware": "nvidia", "gpu_model": "A100", "gpus_per_node": 2, "gpu_memory_gb": 80}
    result = decide({**answers, "model": "7B", "offload": "none"}, tmp_path / "seven", write=True)
    planned = result.recommendation.facts.estimates[str(result.recommendation.settings["strategy"])]
    tiny = load_plan(tmp_path / "seven", tiny=True)
    assert tiny.estimate.model_states < planned.model_states / 100  # the scaled-down model's own estimate
    scope = cpu_scope(SmokeResult(plan=tiny, device="cpu", verdict="inconclusive"))
    assert scope is not None and f"about {planned.total / 2**30:.1f} GiB per GPU" in scope, scope


def axolotl_trainer_bin() -> Path | None:
    """The bin folder of a Python with Axolotl's full trainer (BACKEND_WIZARD_AXOLOTL_BIN, else this venv's)."""
    for folder in (os.environ.get("BACKEND_WIZARD_AXOLOTL_BIN"), BIN):
        if not folder or not (Path(folder) / "axolotl").is_file():
            continue
        python = Path(folder) / "python"
        # Found, not imported (importing Axolotl takes seconds): trl marks the full trainer, as smoke's own check.
        names = ("axolotl", "trl", "peft", "tokenizers")
        code = f"import importlib.util as u, sys; sys.exit(any(u.find_spec(n) is None for n in {names!r}))"
        check = [str(python), "-c", code]
        if subprocess.run(check, capture_output=True, timeout=300, check=False).returncode == 0:
            return Path(folder)
    return None


MAKE_MODEL = """
import json, sys
import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import AutoConfig, AutoModelForCausalLM, PreTrainedTokenizerFast

out, fields = sys.argv[1], json.loads(sys.argv[2])
words = ["<unk>", "<s>", "</s>", "<pad>", "Smoke", "row", "the", "quick", "brown", "fox", "jumps", "over", "lazy"]
words += ["dog", "times."] + [f"{i}:" for i in range(64)] + [str(i) for i in range(64)]
tokenizer = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
fast = PreTrainedTokenizerFast(
    tokenizer_object=tokenizer, unk_token="<unk>", bos_token="<s>", eos_token="</s>", pad_token="<pad>"
)
kind = fields.pop("model_type")
fields.pop("architectures", None)
config = AutoConfig.for_model(kind, bos_token_id=1, eos_token_id=2, pad_token_id=3, **fields)
torch.manual_seed(0)
AutoModelForCausalLM.from_config(config).save_pretrained(out)
fast.save_pretrained(out)
"""


@pytest.mark.launch
def test_a_real_axolotl_smoke_is_measured(tmp_path: Path) -> None:
    """Axolotl's own trainer, with the smoke's plugin: one probe line from its callback, judged.

    Needs Axolotl's full trainer (torch, trl, peft), which CI does not install (minutes of its
    budget); point BACKEND_WIZARD_AXOLOTL_BIN at the bin folder of a venv that has it. The model
    is the tiny Llama with random weights and a word-level tokenizer, saved here (nothing
    downloaded); Axolotl trains on the CPU as one process (smoke --device cpu).
    """
    folder = axolotl_trainer_bin()
    if folder is None:
        pytest.skip("Axolotl's trainer is not installed (pip install axolotl; or set BACKEND_WIZARD_AXOLOTL_BIN)")
    model = tmp_path / "model"
    make = [str(folder / "python"), "-c", MAKE_MODEL, str(model), json.dumps(TINY_LLAMA)]
    subprocess.run(make, check=True, capture_output=True, timeout=300, env=environment())
    answers = {**BASE, "target": "axolotl", "hardware": "nvidia", "gpu_model": "A100", "gpus_per_node": 1}
    decide({**answers, "model": str(model), "method": "lora"}, tmp_path / "set", write=True)
    original = (tmp_path / "set" / "axolotl.yaml").read_bytes()
    path = os.pathsep.join([str(folder), BIN, "/usr/bin", "/bin"])
    proc = smoke(tmp_path / "set", "--device", "cpu", "--steps", "3", "--output", "json", path=path, timeout=600)
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    print(f"\nreal Axolotl smoke: {json.dumps(report, indent=2)}")
    assert proc.returncode == 0, report["reason"]
    assert (report["world_size"], report["distributed_type"], report["mixed_precision"]) == (1, "NO", "bf16")
    assert report["backend"] == report["planned"]["backend"]
    assert len(report["states_bytes"]) == 1 and report["states_bytes"][0] > 0 and report["step_seconds"] > 0
    # LoRA on a 35M-parameter model: states far below CONCLUSIVE_STATES, so measured but inconclusive.
    assert report["verdict"] in ("matches", "inconclusive", "differs"), report["reason"]
    assert report["compared"].startswith("the model states")
    assert (tmp_path / "set" / "axolotl.yaml").read_bytes() == original  # the user's file untouched


def test_the_step_time_legend_says_when_one_step_includes_the_warm_up(tmp_path: Path, model_config: Path) -> None:
    """With --steps 1 there is no step after the warm-up: the legend says the column times the warm-up itself."""
    from io import StringIO

    from rich.console import Console

    from wizard.smoke import RankResult, SmokeResult
    from wizard.ui.smoke_view import print_smoke

    decide(cpu_plan(model_config, 1), tmp_path / "set", write=True)
    plan = load_plan(tmp_path / "set", tiny=False)
    for steps, said in ((1, True), (3, False)):
        rank = RankResult({"status": "ok", "rank": 0, "steps": steps, "step_seconds": 0.5, "device": "cpu"})
        out = StringIO()
        print_smoke(Console(file=out, width=80), SmokeResult(plan=plan, device="cpu", ranks=[rank], verdict="matches"))
        text = " ".join(out.getvalue().split())
        assert "mean seconds per step after the first, a warm-up" in text
        assert ("with one step, that step itself, warm-up included" in text) is said, text


def test_the_table_says_what_its_columns_mean_and_whose_step_time_it_shows(tmp_path: Path, model_config: Path) -> None:
    """One legend line for stage, dtype/prec and offload at 80 columns; on the CPU the step column is the CPU
    run's own time, and beside a GPU plan it says it is no forecast of the GPU step."""
    from io import StringIO

    from rich.console import Console

    from wizard.smoke import RankResult, SmokeResult
    from wizard.ui.smoke_view import print_smoke

    decide(cpu_plan(model_config, 1), tmp_path / "cpu", write=True)
    decide(gpu_plan(model_config, gpu_memory_gb=80), tmp_path / "gpu", write=True)
    for folder, device in (("cpu", "cpu"), ("gpu", "cpu"), ("gpu", "gpu")):
        plan = load_plan(tmp_path / folder, tiny=False)
        rank = RankResult({"status": "ok", "rank": 0, "steps": 3, "step_seconds": 0.5, "device": device})
        out = StringIO()
        print_smoke(Console(file=out, width=80), SmokeResult(plan=plan, device=device, ranks=[rank], verdict="matches"))
        lines = out.getvalue().splitlines()
        [legend] = [line for line in lines if line.startswith("stage:")]
        assert all(f"{column}:" in legend for column in ("stage", "dtype/prec", "offload")) and len(legend) <= 80
        header = next(line for line in lines if line.startswith("rank")).split()
        text = " ".join(out.getvalue().split())
        assert header[-2:] == (["CPU", "s"] if device == "cpu" else ["step", "s"]), header
        assert ("CPU s: this CPU smoke run's own mean seconds per step" in text) is (device == "cpu")
        assert ("not a forecast of the plan's GPU step" in text) is (device == "cpu" and plan.hardware != "cpu")


def test_a_terminal_is_told_what_runs_before_the_wait(tmp_path: Path, model_config: Path) -> None:
    """The line a person sees while the launch runs: the script, the device, processes, steps, limit."""
    import io

    from rich.console import Console

    from wizard.ui.smoke_view import print_running

    decide(cpu_plan(model_config, 2), tmp_path / "set", write=True)
    plan = load_plan(tmp_path / "set", tiny=False)
    out = io.StringIO()
    print_running(Console(file=out, width=200), plan, "cpu", 3, 300)
    line = out.getvalue().strip()
    assert line == f"running {plan.folder}/launch.sh on the CPU: 2 processes, 3 steps, stopped after 300 s at most..."


def test_a_time_limit_hit_while_deepspeed_builds_cpu_adam_says_so_and_names_the_lock(
    tmp_path: Path, model_config: Path
) -> None:
    """The first DeepSpeed CPU offload run compiles CPU Adam: stopped there, the verdict names the build,
    the ways out and the lock a killed build leaves (which makes the next build wait forever)."""
    from wizard.smoke import SmokeResult, judge

    decide(cpu_plan(model_config, 1), tmp_path / "set", write=True)
    plan = load_plan(tmp_path / "set", tiny=False)
    root = tmp_path / "ext"
    (root / "cpu_adam").mkdir(parents=True)
    (root / "cpu_adam" / "lock").write_text("")
    stderr = f"Using {root} as PyTorch extensions root...\nBuilding extension module cpu_adam...\n"
    result = SmokeResult(plan=plan, device="cpu", ranks=[])
    judge(result, -9, stderr, True, 300)
    assert result.verdict == "failed"
    said = " ".join(f"{result.reason}; {result.next_step}".split())
    assert "DeepSpeed was still building its cpu_adam op" in result.reason and "DS_BUILD_CPU_ADAM=1" in result.next_step
    assert f"left {root / 'cpu_adam' / 'lock'}" in said and "rendezvous" not in said
    # Without a build on stderr, several processes most often wait on the rendezvous; one waits on none.
    from dataclasses import replace

    other = SmokeResult(plan=replace(plan, world_size=2), device="cpu", ranks=[])
    judge(other, -9, "W1203 torch/distributed/run.py:874] ****\n", True, 300)
    assert "rendezvous" in other.reason and "cpu_adam" not in other.reason
    assert "--main-process-port" in other.next_step and "--timeout" in other.next_step
    alone = SmokeResult(plan=plan, device="cpu", ranks=[])
    judge(alone, -9, "W1203 torch/distributed/run.py:874] ****\n", True, 300)
    assert plan.world_size == 1 and "rendezvous" not in alone.reason and "--timeout" in alone.next_step


def test_on_the_cpu_an_offload_plan_counts_what_it_offloads_and_offload_is_no_lever(
    tmp_path: Path, model_config: Path
) -> None:
    """Invariant: on a CPU run the host RAM is the memory measured, so (1) an offload plan's estimate
    adds what it offloads (measured there, it matches), and (2) an out of memory never names an
    offload as the way out, since moving state to host RAM frees nothing there."""
    from wizard.smoke import RankResult, SmokeResult, judge
    from wizard.smoke.plan import lever_for, offloaded_per_process

    decide(gpu_plan(model_config, gpu_memory_gb=80, offload="cpu"), tmp_path / "off", write=True)
    plan = load_plan(tmp_path / "off", tiny=False)
    assert plan.deepspeed and plan.offload_optimizer == "cpu", plan
    offloaded = offloaded_per_process(plan.estimate, plan.answers, plan.world_size)
    assert offloaded > 0
    held = plan.estimate.model_states + sum(size for _, size in plan.buffers) + offloaded
    record = {"status": "ok", "world_size": 2, "device": "cpu", "backend": "DEEPSPEED", "states_bytes": held}
    ranks = [RankResult({**record, "rank": rank}) for rank in (0, 1)]
    result = SmokeResult(plan=plan, device="cpu", ranks=ranks)
    judge(result, 0, "", False, 60)
    assert result.estimate_bytes == held and "stays in this memory on the CPU" in result.compared
    assert result.reason.startswith("measured") and "estimated (within 25%" in result.reason, result.reason
    # The plain DDP plan's levers on the CPU: the offload one is sized with what it offloads.
    decide(gpu_plan(model_config, gpu_memory_gb=80), tmp_path / "ddp", write=True)
    levers = load_plan(tmp_path / "ddp", tiny=False).levers
    offload = [lever for lever in levers if ("offload", "cpu") in lever.changes]
    assert offload and all((lever.cpu_run or 0) > (lever.bytes_per_process or 0) for lever in offload)
    first = offload[0]
    assert first.bytes_per_process is not None
    limit = first.bytes_per_process + 1  # enough for its GPU share, not for what it offloads
    advice = lever_for(levers[: levers.index(first) + 1], limit, on_cpu=True)
    assert advice is not None and advice.next_step is None, advice
    assert "--set offload=cpu" not in advice.text.split(":")[0] and "frees little" in advice.text, advice
    gpu = lever_for(levers[: levers.index(first) + 1], limit)
    assert gpu is not None and "--set offload=cpu" in (gpu.next_step or "")


def test_the_next_step_on_a_gpu_names_the_moments_peak_and_a_tight_plans_line(
    tmp_path: Path, model_config: Path
) -> None:
    """What to watch in the first steps includes the loss's moment, and a tight plan says it passes the usable line."""
    from wizard.smoke import SmokeResult
    from wizard.smoke.verdict import next_after_run

    brought = brought_json(tmp_path, 2, True)
    decide(gpu_plan(model_config, deepspeed_config=brought), tmp_path / "probe", write=True)
    est = load_plan(tmp_path / "probe", tiny=False).estimate
    assert est.transient > 0
    # A card on which the plan is tight: the total within 80%, the moment's peak past it, within the card.
    memory = max(est.total / 0.8, est.peak) * 1.01 / 2**30
    assert memory * 0.8 * 2**30 < est.peak
    tight = gpu_plan(model_config, deepspeed_config=brought, gpu_memory_gb=round(memory, 4))
    decide(tight, tmp_path / "set", write=True)
    plan = load_plan(tmp_path / "set", tiny=False)
    assert plan.estimate.tight, (plan.estimate.total, plan.estimate.peak, plan.estimate.budget)
    said = next_after_run(SmokeResult(plan=plan, device="gpu", verdict="matches"))
    assert f"and {plan.estimate.peak / 2**30:.1f} GiB for a moment as the backward pass starts" in said, said
    assert f"past the {plan.estimate.budget / 2**30:.1f} GiB usable line as planned" in said, said
    roomy = tmp_path / "roomy"
    decide(gpu_plan(model_config, deepspeed_config=brought, gpu_memory_gb=80), roomy, write=True)
    relaxed = next_after_run(SmokeResult(plan=load_plan(roomy, tiny=False), device="gpu", verdict="matches"))
    assert "for a moment as the backward pass starts" in relaxed and "usable line" not in relaxed, relaxed


def test_a_one_process_timeout_of_a_gpu_plan_on_the_cpu_points_to_tiny_and_the_gpu(
    tmp_path: Path, model_config: Path
) -> None:
    """A model's own size may never finish a step on a CPU: the next step says what --tiny and the GPU prove."""
    from wizard.smoke import SmokeResult, judge

    decide(gpu_plan(model_config, gpus_per_node=1), tmp_path / "set", write=True)
    for tiny in (False, True):
        result = SmokeResult(plan=load_plan(tmp_path / "set", tiny=tiny), device="cpu", ranks=[])
        judge(result, 124, "", True, 300)
        assert result.verdict == "failed" and "no result within the time limit of 300 s" in result.reason
        assert result.next_step.startswith("rerun with a longer --timeout"), result.next_step
        assert ("--tiny proves what the processes resolve" in result.next_step) is not tiny, result.next_step
        assert ("smoke DIR --device gpu" in result.next_step) is not tiny, result.next_step
        assert "read the stderr" not in result.next_step  # the launch's stderr is not kept to read
