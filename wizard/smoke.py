"""`backend-wizard smoke DIR`: run a written set for a few steps, beside the wizard's estimate.

The set is re-decided with the wizard's own engine (`wizard.app.run`, a dry run: nothing is
written). The training process is a probe rendered from `templates/smoke_probe.py.j2` into a fresh
temporary folder and launched through the set's own launch.sh, so Accelerate reads the set's config
and DeepSpeed JSON exactly as a user's script would. torch, accelerate, deepspeed and transformers
run only in that subprocess: nothing here imports them.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from wizard.engine.memory import GIB, LORA_RANK, Estimate, Workload, estimate
from wizard.errors import ExitCode, WizardError

MARKER = "@@backend-wizard-smoke@@"
MAX_CONFIG_BYTES = 1_000_000
TAIL_LINES = 1

# The tolerance of "matches": the measurement within 25% of the estimated states, plus 64 MiB,
# of the estimate with the gradient buffers the backend documents (`_buffers`) added.
# * 25%: the wizard calls a layout fitting when its estimate stays within 80% of the memory
#   (wizard.engine.memory.FIT_MARGIN), leaving 1/0.8 - 1 = 25% above the estimate for what it does
#   not count: fragmentation, temporary tensors, the engines' own copies. A run inside that margin
#   behaves as the estimate promised; one beyond it could run out of memory where the wizard said
#   it fits. The same 25% below: an estimate that much too high would have offloaded for nothing.
# * 64 MiB: what a process holds whatever the model: the communication library's buffers and the
#   allocator's pages, which a tiny smoke model would otherwise turn into a large relative error.
TOLERANCE = 0.25
TOLERANCE_BYTES = 64 * 2**20

# Where the wizard's own training processes would find their packages (pip names).
NEEDS = {"torch": "torch", "accelerate": "accelerate", "transformers": "transformers"}


class SmokeError(WizardError):
    """The set cannot be smoke-tested here (not a set, several machines, missing tools)."""


@dataclass(frozen=True)
class SmokePlan:
    """What the probe runs and what it is compared with."""

    folder: Path
    answers: dict[str, Any]
    backend: str
    title: str
    strategy: str
    world_size: int
    zero_stage: int | None
    mixed_precision: str
    offload_optimizer: str
    offload_param: str
    target: str
    method: str
    estimate: Estimate
    model_name: str
    model_config: dict[str, Any]
    tiny: bool
    sequence_length: int
    micro_batch_size: int
    gradient_checkpointing: bool
    needs: tuple[str, ...]
    hardware: str
    deepspeed: bool = False  # the backend's traits: its settings live in a DeepSpeed JSON
    # Files of the set that differ from what its answers write now (edited by hand, or an older
    # wizard): the run uses them as they are, so what it proves is theirs.
    edited: tuple[str, ...] = ()
    next_lever: str | None = None
    # Buffers the backend documents and the estimate leaves to its margin: (what, bytes per process).
    buffers: tuple[tuple[str, int], ...] = ()


@dataclass
class RankResult:
    """One rank's JSON line (the probe's record) as it came back."""

    record: dict[str, Any]

    def get(self, key: str, default: Any = None) -> Any:
        """One field of the record."""
        return self.record.get(key, default)


@dataclass
class SmokeResult:
    """The run, the ranks' lines, the comparison and the verdict."""

    plan: SmokePlan
    device: str
    ranks: list[RankResult] = field(default_factory=list)
    verdict: str = "failed"  # matches | differs | failed | ran (Axolotl's own trainer: nothing measured)
    reason: str = ""
    compared: str = ""  # what was compared, in words
    measured_bytes: list[int] = field(default_factory=list)
    estimate_bytes: int = 0
    seconds: float = 0.0
    command: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # what the processes resolved that the plan did not

    @property
    def exit_code(self) -> int:
        """0 for matches and differs (the difference is the report), 7 for a failed run."""
        return int(ExitCode.SMOKE_FAILED) if self.verdict == "failed" else 0


# ---------------------------------------------------------------------------------------------
# The set and its plan
# ---------------------------------------------------------------------------------------------


def load_plan(folder: Path, *, tiny: bool) -> SmokePlan:
    """Read DIR/answers.yaml, re-decide it with the engine (no writing) and say what the probe runs."""
    from wizard.app import load, run
    from wizard.inputs import load_answers_file
    from wizard.render.manifest import read_manifest
    from wizard.session import Sources
    from wizard.user_files import read_user_bytes, shown

    folder = folder.absolute()  # the launch runs from its own temporary folder
    answers_path = folder / "answers.yaml"
    if not folder.is_dir() or not answers_path.is_file():
        raise SmokeError(
            f"{shown(folder)} is not a set the wizard wrote: it has no answers.yaml",
            hint="write one first: backend-wizard --answers FILE --output-dir DIR",
        )
    text = read_user_bytes(answers_path, 1_000_000, "answers file", SmokeError).decode("utf-8", "replace")
    files = read_manifest(text)
    if not files:
        raise SmokeError(f"{shown(answers_path)} does not list the files of a set (no manifest at its head)")
    answers = load_answers_file(answers_path)
    tree = load(None)
    result = run(tree, Sources(file_values=answers), folder, force=False, dry_run=True)
    rec = result.recommendation
    if rec.refused:
        raise SmokeError(f"the answers in {shown(answers_path)} are refused: no backend fits, nothing to run")
    settings = rec.settings
    machines = int(settings.get("num_machines") or answers.get("num_nodes", 1) or 1)
    if machines > 1:
        raise SmokeError(
            f"{shown(folder)} is a set for {machines} machines: running it on each machine is not supported yet",
            hint="write a one-machine copy (--set num_nodes=1 --output-dir OTHER) and smoke that",
        )
    target = str(answers.get("target", "accelerate"))
    launcher = "axolotl.yaml" if target == "axolotl" else "launch.sh"
    if launcher not in files or not (folder / launcher).is_file():
        raise SmokeError(f"{shown(folder)} has no {launcher}: the set is incomplete; write it again")
    session = result.session
    method = str(answers.get("method", "full"))
    shape = rec.facts.shape
    config = _model_config(session.answers, session.inputs, tiny, shape)
    if config is None:
        raise SmokeError(
            f"model {answers.get('model')!r} has no local config.json to build from",
            hint="pass --tiny to run a scaled-down model of its layer shape, or name a config.json in answers.yaml",
        )
    strategy = str(settings.get("strategy") or "ddp")
    world = int(rec.facts.get("world_size", 1) or 1)
    hardware = str(answers.get("hardware", "nvidia"))
    est, workload = _estimate(rec, session.answers, strategy, world, config if tiny else None, hardware)
    buffers = _buffers(folder, rec, workload, world, config)
    needs = ["torch", "accelerate", "transformers"]
    if rec.traits.deepspeed_json:
        needs.append("deepspeed")
    if method != "full":
        needs.append("peft")
    if method == "qlora":
        needs.append("bitsandbytes")
    if target == "axolotl":
        needs.append("axolotl")
    return SmokePlan(
        folder=folder,
        answers=dict(session.answers),
        backend=str(rec.backend),
        title=tree.backends[str(rec.backend)].title_on(rec.hardware_id),
        strategy=strategy,
        world_size=world,
        zero_stage=settings.get("zero_stage") if rec.traits.zero_stages else None,
        mixed_precision=str(settings.get("mixed_precision", "no")),
        offload_optimizer=str(settings.get("offload_optimizer", "none")),
        offload_param=str(settings.get("offload_param", "none")),
        target=target,
        method=method,
        estimate=est,
        model_name=str(answers.get("model")) + (" (scaled down by --tiny)" if tiny else ""),
        model_config=config,
        tiny=tiny,
        sequence_length=int(session.answers.get("sequence_length", 512)),
        micro_batch_size=int(session.answers.get("micro_batch_size", 1)),
        gradient_checkpointing=bool(session.answers.get("gradient_checkpointing", False)),
        needs=tuple(needs),
        hardware=hardware,
        deepspeed=bool(rec.traits.deepspeed_json),
        edited=tuple(action.path.name for action in result.conflicts),
        next_lever=next_lever(tree, session.answers, session.inputs, rec, session.given),
        buffers=buffers,
    )


def _model_config(answers: dict[str, Any], inputs: Any, tiny: bool, shape: Any) -> dict[str, Any] | None:
    """The model's config.json values, from the file the answers name (scaled down with --tiny)."""
    config = inputs.model_config if inputs.model_config else None
    raw: dict[str, Any] | None = None
    model = str(answers.get("model", ""))
    path = Path(model)
    if path.is_dir():
        path = path / "config.json"
    if path.suffix == ".json" and path.is_file():
        from wizard.user_files import read_user_bytes

        try:
            raw = json.loads(read_user_bytes(path, MAX_CONFIG_BYTES, "model config", SmokeError))
        except json.JSONDecodeError as exc:
            raise SmokeError(f"model config {path} is not JSON: {exc}") from None
    elif isinstance(config, dict):
        raw = dict(config)
    if raw is not None and not isinstance(raw.get("model_type"), str):
        raw = None
    if not tiny:
        return raw
    if raw is None:
        if shape is None:
            return None
        # The wizard's own layer shape (the reference it counts a size with), as a Llama.
        raw = {
            "model_type": "llama",
            "hidden_size": shape.hidden_size,
            "intermediate_size": shape.intermediate_size,
            "num_hidden_layers": shape.layers,
            "num_attention_heads": shape.heads,
            "num_key_value_heads": shape.kv_heads,
            "vocab_size": shape.vocab_size,
            "tie_word_embeddings": shape.tied_embeddings,
        }
    return scaled_down(raw)


def scaled_down(config: dict[str, Any]) -> dict[str, Any]:
    """The same architecture at a size a CPU runs in seconds: 2 layers, hidden 256, vocabulary 4,096 at most.

    The proportions stay: the MLP's width to the hidden size, and the heads to the key-value heads.
    """
    small = dict(config)
    hidden = int(config.get("hidden_size", 256))
    heads = max(int(config.get("num_attention_heads", 4)), 1)
    kv = max(int(config.get("num_key_value_heads", heads) or heads), 1)
    new_hidden = min(hidden, 256)
    new_heads = max(min(heads, 4), 1)
    ratio = max(heads // kv, 1)
    small.update(
        hidden_size=new_hidden,
        num_hidden_layers=min(int(config.get("num_hidden_layers", 2)), 2),
        num_attention_heads=new_heads,
        num_key_value_heads=max(new_heads // ratio, 1),
        vocab_size=min(int(config.get("vocab_size", 4096)), 4096),
        max_position_embeddings=max(int(config.get("max_position_embeddings", 4096) or 4096), 4096),
    )
    small.pop("head_dim", None)
    if "intermediate_size" in config:
        small["intermediate_size"] = max(int(int(config["intermediate_size"]) * new_hidden / max(hidden, 1)), 8)
    for key in ("quantization_config", "auto_map", "_name_or_path", "architectures"):
        small.pop(key, None)
    return small


def _estimate(
    rec: Any, answers: dict[str, Any], strategy: str, world: int, tiny_config: dict[str, Any] | None, hardware: str
) -> tuple[Estimate, Workload]:
    """The estimate of the chosen layout; for the CPU (which the wizard does not estimate), its formulas in fp32."""
    from wizard.engine.model_size import shape_from_config

    workload = rec.facts.workload
    shape = rec.facts.shape
    if tiny_config is not None:
        shape = shape_from_config(tiny_config)
    if workload is not None:
        workload = replace(workload, shape=shape)
    else:
        workload = Workload(
            shape=shape,
            method=str(answers.get("method", "full")),
            world_size=world,
            num_nodes=1,
            sequence_length=int(answers.get("sequence_length", 512)),
            micro_batch_size=int(answers.get("micro_batch_size", 1)),
            gradient_checkpointing=bool(answers.get("gradient_checkpointing", False)),
            half_precision=rec.settings.get("mixed_precision", "no") != "no",
        )
    if tiny_config is None and strategy in rec.facts.estimates:
        chosen: Estimate = rec.facts.estimates[strategy]
        return chosen, workload
    gpu = float(answers.get("gpu_memory_gb") or answers.get("cpu_memory_gb") or 0)
    return estimate(workload, strategy if hardware != "cpu" else "ddp", gpu, None), workload


# DeepSpeed's default reduce_bucket_size (elements), from its ZeRO config
# ("DeepSpeed Configuration JSON", https://www.deepspeed.ai/docs/config-json/, zero_optimization).
DEEPSPEED_REDUCE_BUCKET = 500_000_000


def _buffers(
    folder: Path, rec: Any, workload: Workload, world: int, config: dict[str, Any] | None
) -> tuple[tuple[str, int], ...]:
    """The gradient buffers each process holds beside its states, as the backends document them.

    * DDP over several processes: its gradient buckets are a copy of the gradients (fp32 here:
      Accelerate's DDP keeps fp32 weights under autocast) unless gradient_as_bucket_view is set,
      which Accelerate leaves off ("DistributedDataParallel",
      https://docs.pytorch.org/docs/stable/generated/torch.nn.parallel.DistributedDataParallel.html;
      Accelerate's DistributedDataParallelKwargs).
    * DeepSpeed ZeRO-1/2/3: the gradients pass through a reduce bucket of reduce_bucket_size
      elements in the 16-bit dtype; "auto" is hidden_size squared, as Accelerate fills it
      ("DeepSpeed Configuration JSON", https://www.deepspeed.ai/docs/config-json/). The CPU holds
      the part the gradients fill; a GPU's allocator the whole bucket.
    """
    from wizard.engine.memory import trainable_params

    trainable = trainable_params(workload)
    if rec.traits.deepspeed_json:
        zero: Any = {}
        path = folder / "ds_config.json"
        if path.is_file():
            from wizard.user_files import read_user_bytes

            try:
                data = json.loads(read_user_bytes(path, MAX_CONFIG_BYTES, "DeepSpeed config", SmokeError))
                zero = data.get("zero_optimization") or {} if isinstance(data, dict) else {}
            except ValueError:
                zero = {}
        bucket: Any = zero.get("reduce_bucket_size", DEEPSPEED_REDUCE_BUCKET) if isinstance(zero, dict) else None
        if bucket == "auto":
            hidden = int((config or {}).get("hidden_size") or workload.shape.hidden_size)
            bucket = hidden * hidden
        if isinstance(bucket, int | float) and bucket > 0:
            width = 2 if workload.half_precision else 4
            return (("DeepSpeed's reduce bucket (reduce_bucket_size)", int(min(bucket, trainable)) * width),)
        return ()
    if world > 1 and rec.traits.shards == "none":
        return (("DDP's gradient buckets (a copy of the gradients)", trainable * 4),)
    return ()


# The memory levers in the order the tree reaches for them, as --set changes.
LEVER_CHANGES: tuple[tuple[str, Any], ...] = (
    ("offload", "cpu"),
    ("method", "lora"),
    ("gradient_checkpointing", True),
    ("micro_batch_size", 1),
)


def next_lever(tree: Any, answers: dict[str, Any], inputs: Any, rec: Any, given: frozenset[str]) -> str | None:
    """The tree's next step down in memory from this plan: its title and the --set that reaches it."""
    from wizard.engine.evaluate import recommend, refresh_defaults

    strategy = str(rec.settings.get("strategy"))
    now = rec.facts.estimates.get(strategy)
    for key, value in LEVER_CHANGES:
        if answers.get(key) == value or (key == "offload" and answers.get("hardware") == "cpu"):
            continue
        if key == "method" and answers.get("method") != "full":
            continue
        try:
            changed = refresh_defaults(tree, {**answers, key: value}, inputs, given | {key})
            other = recommend(tree, changed, inputs)
        except WizardError:
            continue
        if other.refused:
            continue
        new = other.facts.estimates.get(str(other.settings.get("strategy")))
        if now is not None and new is not None and new.total >= now.total:
            continue
        title = tree.backends[str(other.backend)].title_on(other.hardware_id)
        if other.traits.zero_stages and other.settings.get("zero_stage") is not None:
            off = other.settings.get("offload_optimizer")
            title += f" (ZeRO-{other.settings['zero_stage']}{' with optimizer offload' if off == 'cpu' else ''})"
        if (other.backend, other.settings.get("strategy")) == (rec.backend, rec.settings.get("strategy")):
            title += f", with {key.replace('_', ' ')} {str(value).lower() if isinstance(value, bool) else value}"
        shown_value = str(value).lower() if isinstance(value, bool) else value
        on_gpu = new is not None and answers.get("hardware") != "cpu"
        size = f", about {new.total / GIB:.1f} GiB per GPU" if on_gpu and new is not None else ""
        return f"the tree's next step is {title}{size}; rerun the wizard with --set {key}={shown_value}"
    return None


# ---------------------------------------------------------------------------------------------
# Tools
# ---------------------------------------------------------------------------------------------


def check_tools(plan: SmokePlan, env: dict[str, str], *, on_gpu: bool = False) -> Path:
    """The launcher the set's script runs; refuse in one line when it or a package is missing."""
    exe = "axolotl" if plan.target == "axolotl" else "accelerate"
    found = shutil.which(exe, path=env.get("PATH"))
    install = " ".join(dict.fromkeys(_pip_name(n) for n in plan.needs))
    if found is None:
        raise SmokeError(f"{exe} is not on PATH, so the set cannot run here: pip install {install}")
    interpreter = _interpreter(Path(found))
    if interpreter is None:
        return Path(found)  # not a Python entry point (a wrapper script): it will say itself what it lacks
    probe = (
        "import importlib.util as u, json, sys; print(json.dumps([m for m in sys.argv[1:] if u.find_spec(m) is None]))"
    )
    modules = [n for n in plan.needs if n != "bitsandbytes" or on_gpu]
    if plan.target == "axolotl":
        modules += ["trl"]  # Axolotl's trainer (its schema validator alone lacks it)
    try:
        done = subprocess.run(
            [*interpreter, "-c", probe, *modules], capture_output=True, text=True, timeout=60, env=env, check=False
        )
        missing = json.loads(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 else modules
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        missing = modules
    if missing:
        names = ", ".join(missing)
        what = "axolotl's trainer" if plan.target == "axolotl" and "trl" in missing else names
        pip = " ".join(dict.fromkeys(_pip_name(n) for n in missing))
        if plan.target == "axolotl":
            pip = "'axolotl[deepspeed]'" if plan.deepspeed else "axolotl"
        raise SmokeError(
            f"{what} missing where {exe} runs ({' '.join(interpreter)}): pip install {pip}"
            + ("" if plan.target != "axolotl" else f" (not found: {names})")
        )
    return Path(found)


def _pip_name(module: str) -> str:
    return {"axolotl": "axolotl", "trl": "axolotl"}.get(module, module)


def _interpreter(script: Path) -> list[str] | None:
    """The Python a console script's #! line names (None when it is not a Python script)."""
    from wizard.user_files import read_user_prefix

    try:
        head = read_user_prefix(script, 512, "launcher", SmokeError).split(b"\n", 1)[0].decode("utf-8", "replace")
    except SmokeError:
        return None
    if not head.startswith("#!"):
        return None
    words = head[2:].split()
    if not words:
        return None
    if Path(words[0]).name == "env":
        words = words[1:]
    return words if words and Path(words[0]).name.startswith("python") else None


# ---------------------------------------------------------------------------------------------
# The run
# ---------------------------------------------------------------------------------------------


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
        "gradient_checkpointing": plan.gradient_checkpointing,
        "lora_rank": LORA_RANK,
        "on_cpu": on_cpu,
    }
    text = render_template("smoke_probe.py.j2", plan=values)
    compile(text, "smoke_probe.py", "exec")
    return text


def tiny_dataset() -> list[dict[str, str]]:
    """The bundled synthetic dataset an Axolotl smoke trains on (completion format, 64 rows)."""
    return [{"text": f"Smoke row {i}: the quick brown fox jumps over the lazy dog {i} times."} for i in range(64)]


def axolotl_command(plan: SmokePlan, work: Path, steps: int) -> list[str]:
    """`axolotl train` on a copy of the set's axolotl.yaml with the tiny dataset, plus step overrides.

    Axolotl's command-line overrides take plain fields only (the options it generates from its
    config schema), so the dataset list goes into the copy; the step limit and the output folder
    are passed as overrides (`--max-steps`, `--output-dir`).
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
    copy = work / "axolotl.yaml"
    with open(copy, "w", encoding="utf-8") as handle:
        yaml.safe_dump(data, handle, sort_keys=False)
    return ["axolotl", "train", str(copy), f"--max-steps={steps}", f"--output-dir={work / 'out'}"]


def run_smoke(
    plan: SmokePlan,
    *,
    steps: int,
    timeout: int,
    memory_limit_gib: float | None,
    device: str,
    env: dict[str, str] | None = None,
    port: int | None = None,
) -> SmokeResult:
    """Launch the probe through the set's launch.sh (or axolotl), collect the ranks' lines, judge."""
    run_env = dict(os.environ if env is None else env)
    on_cpu = device == "cpu"
    if plan.method == "qlora" and on_cpu:
        raise SmokeError(
            "QLoRA cannot be checked here: its 4-bit base needs bitsandbytes and a CUDA GPU",
            hint="run smoke on the GPU machine, or smoke a LoRA copy (--set method=lora) to check the launch",
        )
    check_tools(plan, run_env, on_gpu=not on_cpu)
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
            command = axolotl_command(plan, work, steps)
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
    judge(result, code, stderr, timed_out, timeout)
    return result


def _launch(command: list[str], env: dict[str, str], timeout: int, cwd: Path) -> tuple[int, str, str, bool]:
    """Run in a new session; on timeout kill the whole process group (launcher and workers)."""
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
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        stdout, stderr = proc.communicate()
        return -9, stdout, stderr, True
    finally:
        if proc.poll() is None:  # Ctrl-C on the way: the workers go with the launcher
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)


def _tail(stderr: str) -> str:
    """The line of stderr that says what went wrong: the last error line, else its last line."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    errors = [line for line in lines if "Error" in line or "error:" in line.lower()]
    return (errors or lines or ["(no output on stderr)"])[-1][:300]


# ---------------------------------------------------------------------------------------------
# The verdict
# ---------------------------------------------------------------------------------------------


def judge(result: SmokeResult, code: int, stderr: str, timed_out: bool, timeout: int) -> None:
    """The verdict (matches, differs or failed) with its reason in one line."""
    plan = result.plan
    oom = [r for r in result.ranks if r.get("status") == "oom"]
    errors = [r for r in result.ranks if r.get("status") == "error"]
    lever = f": {plan.next_lever}" if plan.next_lever else ""
    if oom:
        result.reason = f"{oom[0].get('error', 'out of memory')}{lever}"
        return
    if timed_out:
        result.reason = f"no result within the time limit of {timeout} s (a hang?); the launch was stopped{lever}"
        return
    if errors:
        result.reason = f"rank {errors[0].get('rank')}: {errors[0].get('error')}"
        return
    if "out of memory" in stderr.lower() or "outofmemoryerror" in stderr.lower():
        result.reason = f"out of memory: {_tail(stderr)}{lever}"
        return
    ok = [r for r in result.ranks if r.get("status") == "ok"]
    if code == 0 and not result.ranks and plan.target == "axolotl":
        # Axolotl's own trainer runs, not the probe: it finished, but prints nothing to measure.
        result.verdict = "ran"
        result.reason = (
            "axolotl train finished its steps (exit 0); Axolotl's trainer prints no probe lines,"
            " so what its processes resolved and held is not measured"
        )
        return
    if code != 0 or not ok:
        result.reason = f"the launch exited with {code}: {_tail(stderr)}"
        return
    if len(ok) != plan.world_size:
        result.reason = f"{len(ok)} of the {plan.world_size} planned processes reported"
        return
    result.problems = resolved_problems(plan, ok)
    est = plan.estimate
    cpu = all(r.get("device") == "cpu" for r in ok)
    if cpu:
        # The CPU holds the states (weights, gradients, optimizer state); its activations and the
        # CUDA context are no GPU's, so only the states are compared.
        measured = [int(r.get("states_bytes") or 0) for r in ok]
        expected = est.model_states + sum(size for _, size in plan.buffers)
        result.compared = "the model states each CPU process holds after a step (resident memory growth)"
        if plan.buffers:
            result.compared += ", with " + " and ".join(f"{what}, {_gib(size)}" for what, size in plan.buffers)
        term = "model states"
    else:
        measured = [int(r.get("peak_bytes") or 0) for r in ok]
        # max_memory_allocated sees no CUDA context
        expected = est.model_states + est.activations + sum(size for _, size in plan.buffers)
        result.compared = "the peak memory PyTorch allocated on each GPU (the estimate without the CUDA context)"
        term = ""
    result.measured_bytes = measured
    result.estimate_bytes = expected
    worst = max(measured, key=lambda m: abs(m - expected))
    if abs(worst - expected) <= TOLERANCE * est.model_states + TOLERANCE_BYTES:
        result.verdict = "matches" if not result.problems else "differs"
        result.reason = (
            f"measured {_gib(worst)} against {_gib(expected)} estimated"
            f" (within {TOLERANCE:.0%} + {TOLERANCE_BYTES // 2**20} MiB)"
        )
        if expected < TOLERANCE_BYTES:
            result.reason += "; the estimate is below what any process holds anyway, so a larger model tests it better"
        if result.problems:
            result.reason += "; but " + "; ".join(result.problems)
        return
    result.verdict = "differs"
    ratio = worst / expected if expected else float("inf")
    if not term:
        states = max(int(r.get("states_bytes") or 0) for r in ok)
        term = (
            "model states"
            if states and abs(states - est.model_states) >= abs(worst - states - est.activations)
            else "activations"
        )
    result.reason = (
        f"measured {_gib(worst)} against {_gib(expected)} estimated ({ratio:.2f}x; the difference is in the {term})"
    )
    if result.problems:
        result.reason += "; and " + "; ".join(result.problems)


def resolved_problems(plan: SmokePlan, ranks: list[dict[str, Any]] | list[RankResult]) -> list[str]:
    """What the processes resolved that the plan did not (world size, stage, precision, offload)."""
    problems = []
    first = ranks[0]
    if first.get("world_size") != plan.world_size:
        problems.append(f"{first.get('world_size')} processes instead of the planned {plan.world_size}")
    if plan.zero_stage is not None and first.get("zero_stage") != plan.zero_stage:
        problems.append(f"ZeRO stage {first.get('zero_stage')} instead of the planned {plan.zero_stage}")
    resolved = first.get("engine_precision") or first.get("mixed_precision")
    if plan.deepspeed and resolved != plan.mixed_precision:
        silently = ' (a JSON\'s "auto" left unfilled silently trains in fp32)' if resolved == "no" else ""
        planned = _precision(plan.mixed_precision)
        problems.append(f"DeepSpeed's engine runs in {_precision(resolved)}, not the planned {planned}{silently}")
    for key, planned_device in (("offload_optimizer", plan.offload_optimizer), ("offload_param", plan.offload_param)):
        got = first.get(key)
        if got is not None and plan.deepspeed and got != planned_device:
            problems.append(f"{key.replace('_', ' ')} {got} instead of {planned_device}")
    return problems


def _precision(value: Any) -> str:
    return "fp32" if value in ("no", None) else str(value)


def _gib(value: int) -> str:
    if abs(value) < GIB // 10:
        return f"{value / 2**20:.0f} MiB"
    return f"{value / GIB:.2f} GiB"


def exit_code_of(result: SmokeResult) -> int:
    """0 for matches and differs (the difference is the report), SMOKE_FAILED for a failed run."""
    return result.exit_code
