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
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from helpers import decide
from realtools import require_tool, tool_env
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


def smoke(folder: Path, *args: str, path: str | None = None, timeout: int = 300) -> subprocess.CompletedProcess[str]:
    """`backend-wizard smoke FOLDER ARGS` in a fresh process, as a user runs it."""
    command = [sys.executable, "-m", "wizard", "smoke", str(folder), *args]
    env = environment(path)
    env["PYTHONPATH"] = str(REPO)
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
    decide(cpu_plan(model_config, 1), tmp_path / "set", write=True)
    report = launched(tmp_path / "set")
    assert (report["world_size"], report["distributed_type"], report["zero_stage"]) == (1, "NO", None)
    assert (report["param_dtype"], report["mixed_precision"]) == ("float32", "no")
    assert report["step_seconds"] > 0 and len(report["peak_bytes"]) == 1
    assert report["planned"]["model_states_bytes"] == report["estimate_bytes"]  # one process: no buffers
    assert_states_match(report)
    assert report["edited_files"] == []
    written = sorted(p.name for p in (tmp_path / "set").iterdir())
    assert written == ["accelerate_config.yaml", "answers.yaml", "launch.sh"]  # nothing added to the set


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
    report = launched(tmp_path / "set")
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


@pytest.mark.launch
def test_deepspeed_zero3_two_processes(tmp_path: Path, model_config: Path) -> None:
    answers = gpu_plan(model_config, deepspeed_config=brought_json(tmp_path, 3, True))
    decide(answers, tmp_path / "set", write=True)
    report = launched(tmp_path / "set")
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
    # Its states are too small next to the 64 MiB allowance: within the tolerance, but inconclusive.
    assert_states_match(report, verdict="inconclusive")
    assert f"at least {CONCLUSIVE_STATES // 2**20} MiB of estimated states per process" in report["reason"]
    # A --tiny run is always this small: the verdict says what it proves and how to test the memory.
    assert "--tiny models are always this small" in report["reason"]
    assert "run without --tiny on the model's own config.json" in report["reason"]


@pytest.mark.launch
def test_an_impossible_memory_limit_fails_with_the_next_lever(tmp_path: Path, model_config: Path) -> None:
    decide(cpu_plan(model_config, 1), tmp_path / "set", write=True)
    port = require_tool("accelerate.utils.other").get_free_port()
    # 0.3 GiB: the full fine-tune (about 0.52 GiB of states) runs out; LoRA's estimate (0.15 GiB) fits.
    proc = smoke(tmp_path / "set", "--memory-limit-gib", "0.3", "--steps", "2", "--main-process-port", str(port))
    assert proc.returncode == 7, proc.stderr[-2000:]
    assert "failed: out of memory at" in proc.stdout
    assert "rerun the wizard with --set method=lora" in " ".join(proc.stdout.split())
    assert proc.stderr.strip().splitlines() == ["error: smoke failed: the reason and the next step are above"]
    # 0.02 GiB: no lever of the tree fits, and the line says so instead of offering one that fails too.
    proc = smoke(tmp_path / "set", "--memory-limit-gib", "0.02", "--steps", "2", "--main-process-port", str(port))
    assert proc.returncode == 7, proc.stderr[-2000:]
    assert "Traceback" not in proc.stdout + proc.stderr
    assert "failed: out of memory at" in proc.stdout
    said = " ".join(proc.stdout.split())
    assert "none of the tree's levers fits under 0.02 GiB per process" in said
    assert "rerun the wizard" not in said
    # The reason is printed once, in the report; stderr has one short line pointing at it, which
    # promises a next step only where the report gives one.
    [line] = proc.stderr.strip().splitlines()
    assert line == "error: smoke failed: the reason is above"
    # The JSON report carries the figure the line gives: the peak the process had reached.
    proc = smoke(tmp_path / "set", "--memory-limit-gib", "0.3", "--steps", "2", "--main-process-port", str(port),
                 "--output", "json")  # fmt: skip
    report = json.loads(proc.stdout)
    [peak] = [p for p in report["peak_bytes"] if p is not None]
    assert f"out of memory at {peak / 2**30:.2f} GiB" in report["reason"] and report["estimate_bytes"]
    assert proc.stdout.count("out of memory at") == 1


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
    assert lever_for(levers, 0) == offload.text()  # no limit: the next step
    assert lever_for(levers, 16 * gib) == offload.text()
    assert lever_for(levers, 8 * gib) == lora.text()
    assert lora.text().endswith("rerun the wizard with --set offload=cpu --set method=lora")
    assert "about 6.0 GiB per GPU" in lora.text()
    none = lever_for(levers, 4 * gib)
    assert none is not None and none.startswith("none of the tree's levers fits under 4.00 GiB per process")
    assert "the smallest, DeepSpeed ZeRO, with method lora" in none and "rerun" not in none
    assert lever_for((), 4 * gib) is None
    # What every process holds beside the estimate counts against the limit too (the CPU's resident memory).
    assert lever_for(levers, 14 * gib + 2**20, fixed=0) == offload.text()
    assert lever_for(levers, 14 * gib + 2**20, fixed=64 * 2**20) == lora.text()


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
    proc = smoke(tmp_path / "set", path=str(bare))
    assert proc.returncode == 2, proc.stderr
    [line] = proc.stderr.strip().splitlines()
    assert "accelerate is not on PATH" in line and "pip install torch accelerate transformers deepspeed" in line
    # An `accelerate` whose Python has none of the packages.
    other = tmp_path / "other"
    other.mkdir()
    python = next(p for p in ("/usr/bin/python3", "/usr/local/bin/python3") if Path(p).exists())
    fake = other / "accelerate"
    fake.write_text(f"#!{python}\nraise SystemExit(3)\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    proc = smoke(tmp_path / "set", path=os.pathsep.join([str(other), "/usr/bin", "/bin"]))
    assert proc.returncode == 2, proc.stderr
    [line] = proc.stderr.strip().splitlines()
    assert "missing where accelerate runs" in line and "pip install" in line and "deepspeed" in line


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
    folder.mkdir()
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
    # A hang is no memory problem: it is pointed at the port, never at a memory lever.
    said = " ".join(proc.stdout.split())
    assert "--main-process-port" in said and "--set" not in said, said
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


def test_qlora_cannot_be_checked_on_the_cpu(tmp_path: Path, model_config: Path) -> None:
    answers = gpu_plan(model_config, method="qlora", gpus_per_node=1)
    decide(answers, tmp_path / "set", write=True)
    proc = smoke(tmp_path / "set", "--device", "cpu")
    assert proc.returncode == 2
    [line] = proc.stderr.strip().splitlines()
    assert "QLoRA cannot be checked here" in line and "bitsandbytes and a CUDA GPU" in line


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
    gpu_states = est.model_states + bucket
    on_gpu = verdict("cuda", gpu_states, gpu_states + est.activations + 2**31)
    assert on_gpu.verdict == "differs" and "the difference is in the activations" in on_gpu.reason
    assert on_gpu.compared.startswith("the peak memory PyTorch allocated on each GPU")


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
    said = " ".join(result.reason.split())
    assert "DeepSpeed was still building its cpu_adam op" in said and "DS_BUILD_CPU_ADAM=1" in said
    assert f"left {root / 'cpu_adam' / 'lock'}" in said and "rendezvous" not in said
    # Without a build on stderr, the hang is the rendezvous one.
    other = SmokeResult(plan=plan, device="cpu", ranks=[])
    judge(other, -9, "W1203 torch/distributed/run.py:874] ****\n", True, 300)
    assert "rendezvous" in other.reason and "cpu_adam" not in other.reason


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
    assert offload and all(lever.host_per_process > 0 for lever in offload)
    first = offload[0]
    assert first.bytes_per_process is not None
    limit = first.bytes_per_process + 1  # enough for its GPU share, not for what it offloads
    said = lever_for(levers[: levers.index(first) + 1], limit, on_cpu=True) or ""
    assert "--set offload=cpu" not in said.split(":")[0] and "frees nothing" in said, said
    assert "--set offload=cpu" in (lever_for(levers[: levers.index(first) + 1], limit) or "")
