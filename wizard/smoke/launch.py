"""The probe rendered into a temporary folder and run through the set's launch.sh."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
from pathlib import Path

from wizard.engine.memory import GIB
from wizard.processes import kill_session
from wizard.smoke.records import MARKER, RankResult, SmokeError, SmokePlan, SmokeResult, copy_command
from wizard.smoke.tools import check_tools
from wizard.smoke.verdict import judge


def probe_text(plan: SmokePlan, on_cpu: bool) -> str:
    """The probe script, rendered from templates/smoke_probe.py.j2 (data, never imported)."""
    from wizard.render.renderer import render_template

    values = {
        "marker": MARKER,
        "model_name": plan.model_name,
        "model_config": plan.model_config,
        "method": plan.method,
        "sequence_length": plan.sequence_length,
        "micro_batch_size": plan.micro_batch_size,
        "mixed_precision": plan.mixed_precision,
        "base_dtype": plan.base_dtype,
        "gradient_checkpointing": plan.gradient_checkpointing,
        "lora_rank": plan.lora_rank,
        "on_cpu": on_cpu,
    }
    text = render_template("smoke_probe.py.j2", plan=values)
    compile(text, "smoke_probe.py", "exec")
    return text


def tiny_dataset() -> list[dict[str, str]]:
    """The bundled synthetic dataset an Axolotl smoke trains on (completion format, 64 rows)."""
    return [{"text": f"Smoke row {i}: the quick brown fox jumps over the lazy dog {i} times."} for i in range(64)]


# The smoke's Axolotl plugin: its module name in the work copy's `plugins:` list and on PYTHONPATH.
AXOLOTL_PLUGIN_MODULE = "backend_wizard_smoke_plugin"
AXOLOTL_PLUGIN = f"{AXOLOTL_PLUGIN_MODULE}.SmokePlugin"


def axolotl_plugin_text(on_cpu: bool) -> str:
    """The plugin module, rendered from templates/smoke_axolotl_plugin.py.j2 (data, never imported here)."""
    from wizard.render.renderer import render_template

    text = render_template("smoke_axolotl_plugin.py.j2", plan={"marker": MARKER, "on_cpu": on_cpu})
    compile(text, f"{AXOLOTL_PLUGIN_MODULE}.py", "exec")
    return text


def axolotl_command(plan: SmokePlan, work: Path, steps: int, on_cpu: bool = False) -> list[str]:
    """`axolotl train` on a copy of the set's axolotl.yaml with the tiny dataset, plus step overrides.

    Axolotl's command-line overrides take plain fields only (the options it generates from its
    config schema), so the dataset list goes into the copy; the step limit and the output folder
    are passed as overrides (`--max-steps`, `--output-dir`). The copy also names the smoke's plugin
    under `plugins:` (rendered into WORK/plugin, which the launch puts on PYTHONPATH): Axolotl loads
    it and its callback prints the probe's line from Axolotl's own trainer.
    """
    import yaml

    from wizard.user_files import read_user_bytes

    source = plan.folder / "axolotl.yaml"
    data = yaml.safe_load(read_user_bytes(source, 1_000_000, "axolotl config", SmokeError)) or {}
    rows = work / "smoke_dataset.jsonl"
    with open(rows, "w", encoding="utf-8") as handle:
        handle.writelines(json.dumps(row) + "\n" for row in tiny_dataset())
    data["datasets"] = [{"path": str(rows), "ds_type": "json", "type": "completion"}]
    data["dataset_prepared_path"] = str(work / "prepared")
    deepspeed = data.get("deepspeed")
    if isinstance(deepspeed, str) and not Path(deepspeed).is_absolute():
        data["deepspeed"] = str(plan.folder / deepspeed)
    if on_cpu:
        # A GPU set run on this CPU: FlashAttention is CUDA-only, and sample packing needs its
        # variable-length kernels ("Multipack (Sample Packing)", https://docs.axolotl.ai/docs/multipack.html);
        # TF32 is a CUDA matmul mode. PyTorch's SDPA attention trains the same model on the CPU.
        data["attn_implementation"] = "sdpa"
        for key in ("flash_attention", "sample_packing", "tf32"):
            if data.get(key):
                data[key] = False
        if str(data.get("optimizer", "")).endswith("_fused"):
            data["optimizer"] = "adamw_torch"  # the fused AdamW kernel is a CUDA one
        # Axolotl turns its Triton LoRA kernels on by itself for LoRA (its config's
        # check_auto_enable_lora_kernels); they need CUDA, so the copy turns them off.
        for key in ("lora_mlp_kernel", "lora_qkv_kernel", "lora_o_kernel", "lora_embedding_kernel"):
            data.setdefault(key, False)
    folder = work / "plugin"
    folder.mkdir()
    (folder / f"{AXOLOTL_PLUGIN_MODULE}.py").write_text(axolotl_plugin_text(on_cpu), encoding="utf-8")
    plugins = data.get("plugins")
    data["plugins"] = [*(plugins if isinstance(plugins, list) else []), AXOLOTL_PLUGIN]
    copy = work / "axolotl.yaml"
    with open(copy, "w", encoding="utf-8") as handle:
        yaml.safe_dump(data, handle, sort_keys=False)
    return ["axolotl", "train", str(copy), f"--max-steps={steps}", f"--output-dir={work / 'out'}"]


def check_can_run(plan: SmokePlan, device: str, env: dict[str, str] | None = None) -> None:
    """Refuse in one line what cannot run here: QLoRA on the CPU, a missing launcher or package."""
    if plan.method == "qlora" and device == "cpu":
        raise SmokeError(
            "QLoRA cannot be checked here: its 4-bit base needs bitsandbytes and a CUDA GPU",
            hint="run smoke on the GPU machine, or, to check a LoRA launch here, "
            + copy_command(plan.folder, "method=lora", "lora")
            # No apostrophe here: the hint's command is read back with shlex (a test types it as printed).
            + " (LoRA keeps the base in 16 bits, so the wizard may decide another backend for it, which its summary"
            " names: that copy checks the launch of its own plan, not of this one)",
        )
    check_tools(plan, dict(os.environ if env is None else env), on_gpu=device != "cpu")


def run_smoke(
    plan: SmokePlan,
    *,
    steps: int,
    timeout: int,
    memory_limit_gib: float | None,
    device: str,
    env: dict[str, str] | None = None,
    port: int | None = None,
    checked: bool = False,
) -> SmokeResult:
    """Launch the probe through the set's launch.sh (or axolotl), collect the ranks' lines, judge.

    `checked`: `check_can_run` has already passed (the command checks before it announces the run).
    """
    run_env = dict(os.environ if env is None else env)
    on_cpu = device == "cpu"
    if not checked:
        check_can_run(plan, device, run_env)
    # Large allocations straight from mmap, so that memory freed by the run leaves the resident
    # set at once and the CPU measurement sees what is held (glibc mallopt(3), M_MMAP_THRESHOLD:
    # https://man7.org/linux/man-pages/man3/mallopt.3.html).
    run_env.setdefault("MALLOC_MMAP_THRESHOLD_", "65536")
    run_env.setdefault("PYTHONUNBUFFERED", "1")
    if on_cpu and not plan.deepspeed and plan.hardware != "cpu":
        # A GPU plan on this CPU: Accelerate's switch that runs a MULTI_GPU config on the CPU
        # ("Launching your Accelerate scripts", https://huggingface.co/docs/accelerate/basic_tutorials/launch).
        run_env["ACCELERATE_USE_CPU"] = "true"
    result = SmokeResult(plan=plan, device=device)
    with tempfile.TemporaryDirectory(prefix="backend-wizard-smoke-") as folder:
        work = Path(folder)
        probe = work / "smoke_probe.py"
        with open(probe, "w", encoding="utf-8") as handle:
            handle.write(probe_text(plan, on_cpu))
        limit = int(memory_limit_gib * GIB) if memory_limit_gib else 0
        if plan.target == "axolotl":
            command = axolotl_command(plan, work, steps, on_cpu)
            # The plugin's folder first, for every process the launch starts (accelerate launch keeps the environment).
            run_env["PYTHONPATH"] = os.pathsep.join(p for p in (str(work / "plugin"), run_env.get("PYTHONPATH")) if p)
        else:
            launch = ["bash", str(plan.folder / "launch.sh")]
            if port is not None:
                launch += ["--main_process_port", str(port)]
            command = [*launch, str(probe), "--steps", str(steps), "--memory-limit-bytes", str(limit)]
        result.command = command
        started = time.monotonic()
        code, stdout, stderr, timed_out = _launch(command, run_env, timeout, cwd=work)
        result.seconds = time.monotonic() - started
    for line in stdout.splitlines():
        at = line.find(MARKER)
        if at < 0:
            continue
        try:
            record = json.loads(line[at + len(MARKER) :])
        except ValueError:
            continue
        if isinstance(record, dict):
            result.ranks.append(RankResult(record))
    result.ranks.sort(key=lambda r: int(r.get("rank", 0) or 0))
    judge(result, code, stderr, timed_out, timeout, limit)
    return result


def _launch(command: list[str], env: dict[str, str], timeout: int, cwd: Path) -> tuple[int, str, str, bool]:
    """Run in a new session; on timeout or interrupt stop every process of that session.

    Not only the process group: mpirun's proxy (MPICH's hydra_pmi_proxy, which a MULTI_CPU set's
    launch starts) moves itself and its workers into a group of their own (`kill_session`).
    """
    try:
        proc = subprocess.Popen(
            command,
            cwd=cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
    except OSError as exc:
        return 127, "", f"{command[0]}: {exc.strerror or exc}", False
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
        return proc.returncode, stdout, stderr, False
    except subprocess.TimeoutExpired:
        kill_session(proc.pid)
        stdout, stderr = proc.communicate()
        return -9, stdout, stderr, True
    finally:
        if proc.poll() is None:  # Ctrl-C on the way: the workers go with the launcher
            kill_session(proc.pid)
