"""The set in DIR re-decided by the engine (nothing written): what the probe runs and its estimate."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from wizard.engine.catalog import models_catalog
from wizard.engine.facts import frozen_base_dtype
from wizard.engine.memory import GIB, Estimate, Workload, cpu_run_bytes, estimate, lora_rank_of
from wizard.engine.model_size import catalog_model
from wizard.errors import WizardError
from wizard.smoke.records import MAX_CONFIG_BYTES, PROCESS_FIXED_BYTES, SmokeError, SmokePlan, copy_command


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
        what = (
            "does not exist"
            if not folder.exists()
            else "is a file, not a folder"
            if not folder.is_dir()
            else "has no answers.yaml, so it is not a set the wizard wrote"
        )
        raise SmokeError(
            f"{shown(folder)} {what}",
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
            hint=copy_command(folder, "num_nodes=1", "one-machine"),
        )
    if answers.get("objective") == "dpo":
        # The probe trains on synthetic token batches; DPO's pairs and reference model need a
        # preference dataset and TRL's trainer, which the probe does not build.
        raise SmokeError(
            f"{shown(folder)} is a DPO set: smoke runs supervised steps on synthetic token batches, not"
            " preference pairs against a reference model",
            hint=copy_command(folder, "objective=sft", "sft"),
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
        tiny_size=tiny_size(config) if tiny else None,
        model_config=config,
        tiny=tiny,
        sequence_length=int(session.answers.get("sequence_length", 512)),
        micro_batch_size=int(session.answers.get("micro_batch_size", 1)),
        gradient_checkpointing=bool(session.answers.get("gradient_checkpointing", False)),
        needs=tuple(needs),
        hardware=hardware,
        deepspeed=bool(rec.traits.deepspeed_json),
        edited=tuple(action.path.name for action in result.conflicts),
        levers=next_levers(tree, session.answers, session.inputs, rec, session.given, config if tiny else None),
        buffers=buffers,
        brought_json=_brought_json(folder, session.answers, rec),
        distributed_type=rec.traits.accelerate_type,
        planned_estimate=rec.facts.estimates.get(strategy) if rec.facts.estimates else None,
        base_dtype=frozen_base_dtype(session.answers, str(settings.get("mixed_precision", "no"))),
        lora_rank=lora_rank_of(session.answers),
    )


def _brought_json(folder: Path, answers: dict[str, Any], rec: Any) -> str | None:
    """The set's copy of the DeepSpeed JSON the user brought (answers.yaml's deepspeed_config), as shown."""
    from wizard.user_files import shown

    path = folder / "ds_config.json"
    if rec.traits.deepspeed_json and answers.get("deepspeed_config") and path.is_file():
        return str(shown(path))
    return None


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
    elif (name := catalog_model(model)) is not None:
        # A bundled catalog model: its config.json values ship with the wizard, nothing to download.
        raw = dict(models_catalog()["models"][name])
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


def tiny_size(config: dict[str, Any]) -> str:
    """The scaled-down model in words: `2 layers, hidden size 256, 12.6M parameters`."""
    from wizard.engine.model_size import shape_from_config

    shape = shape_from_config(config)
    return f"{shape.layers} layers, hidden size {shape.hidden_size}, {shape.params / 1e6:.1f}M parameters"


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
            lora_rank=lora_rank_of(answers),
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
    """The gradient buffers each process of the set in `folder` holds beside its states (`buffers_of`)."""
    zero: Any = {}
    path = folder / "ds_config.json"
    if rec.traits.deepspeed_json and path.is_file():
        from wizard.user_files import read_user_bytes

        try:
            data = json.loads(read_user_bytes(path, MAX_CONFIG_BYTES, "DeepSpeed config", SmokeError))
            zero = data.get("zero_optimization") or {} if isinstance(data, dict) else {}
        except ValueError:
            zero = {}
    return buffers_of(rec, workload, world, config, zero)


def buffers_of(
    rec: Any, workload: Workload, world: int, config: dict[str, Any] | None, zero: Any
) -> tuple[tuple[str, int], ...]:
    """The gradient buffers each process holds beside its states, as the backends document them.

    `zero` is the DeepSpeed JSON's zero_optimization block ({} for the one the wizard writes).

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


@dataclass(frozen=True)
class Lever:
    """One step down the tree's memory levers, with those before it: its --set changes and estimates."""

    changes: tuple[tuple[str, Any], ...]
    title: str
    bytes_per_process: int | None  # the layout's states and activations per process; None: not estimated
    on_gpu: bool
    # One process's peak resident memory when the lever's set runs on the CPU, as the engine counts it
    # (`wizard.engine.memory.cpu_run_bytes`: what it offloads and its buffers stay in that memory).
    cpu_run: int | None = None

    def cpu_need(self) -> int | None:
        """The limit per process a CPU run of the lever needs: its estimate plus the fixed share.

        The estimate counts the peak itself (what is offloaded with its pinned buffers, the working
        copies, activations and the loss peak); PROCESS_FIXED_BYTES is what every process holds
        whatever the model. No fit margin on top: with it the lever read larger than runs measured
        (a ZeRO-2 offload printed at 1.41 GiB held 0.98 GiB), and the walk named none that fits.
        """
        if self.cpu_run is None:
            return None
        return self.cpu_run + PROCESS_FIXED_BYTES

    @property
    def next_step(self) -> str:
        """What to do to take this step: `rerun the wizard with --set K=V ...`, then smoke the new set."""
        sets = " ".join(f"--set {key}={_shown(value)}" for key, value in self.changes)
        return f"rerun the wizard with {sets} into a new folder and smoke that"

    def text(self, *, on_cpu: bool = False) -> str:
        """`the tree's next step is TITLE, about X GiB per GPU` (on the CPU: the limit it needs here)."""
        size = ""
        if on_cpu and (need := self.cpu_need()) is not None:
            size = (
                f", which needs up to {_size_up(need)} per process here (its estimate for a CPU run and the"
                f" {PROCESS_FIXED_BYTES // 2**20} MiB any process holds)"
            )
        elif self.on_gpu and self.bytes_per_process:
            size = f", about {_size(self.bytes_per_process)} per GPU"
        return f"the tree's next step is {self.title}{size}"


@dataclass(frozen=True)
class Advice:
    """The line an out of memory gives about the levers, and the next step it names (None: none)."""

    text: str
    next_step: str | None


def _size(value: int) -> str:
    return f"{value / GIB:.1f} GiB" if value >= GIB // 10 else f"{value / 2**20:.0f} MiB"


def _size_up(value: int) -> str:
    """A size rounded up, never down: a limit read off it is at least the figure."""
    if value >= GIB // 10:
        return f"{math.ceil(value / GIB * 100) / 100:.2f} GiB"
    return f"{math.ceil(value / 2**20)} MiB"


def _shown(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def lever_for(levers: tuple[Lever, ...], limit: int, *, on_cpu: bool = False) -> Advice | None:
    """The first lever whose estimate fits under `limit` bytes per process (0: no limit, the first lever).

    A lever that does not fit the limit the run failed under would fail the same way, so the walk
    goes on down the tree's levers; when none fits, the line says so and names the smallest. On the
    CPU (`on_cpu`) a lever is held to what its run needs there (`Lever.cpu_need`: the limit is on the
    resident memory, which holds what it offloads, its buffers, activations and the fixed share).
    """
    if not levers:
        return None
    if not limit:
        return Advice(levers[0].text(on_cpu=on_cpu), levers[0].next_step)

    def size(lever: Lever) -> int | None:
        return lever.cpu_need() if on_cpu else lever.bytes_per_process

    for lever in levers:
        if (need := size(lever)) is not None and need <= limit:
            return Advice(lever.text(on_cpu=on_cpu), lever.next_step)
    sized = [lever for lever in levers if size(lever) is not None]
    if not sized:
        text = f"none of the tree's levers has an estimate to check against {limit / GIB:.2f} GiB; {levers[0].text()}"
        return Advice(text, levers[0].next_step)
    smallest = min(sized, key=lambda lever: size(lever) or 0)
    where = " here (on the CPU what an offload moves stays in the same memory, so it frees little)" if on_cpu else ""
    said = "needs up to" if on_cpu else "is estimated at"
    return Advice(
        f"none of the tree's levers fits under {limit / GIB:.2f} GiB per process{where}: the smallest,"
        f" {smallest.title} ({' '.join(f'--set {k}={_shown(v)}' for k, v in smallest.changes)}), {said}"
        f" {(_size_up if on_cpu else _size)(size(smallest) or 0)}; give each process more memory (a higher"
        " limit, or GPUs with more) or train a smaller model",
        None,
    )


def next_levers(
    tree: Any,
    answers: dict[str, Any],
    inputs: Any,
    rec: Any,
    given: frozenset[str],
    tiny_config: dict[str, Any] | None = None,
) -> tuple[Lever, ...]:
    """The tree's steps down in memory from this plan, each with the ones before it, and their estimates.

    Each lever of LEVER_CHANGES that lowers the estimate is kept and the walk goes on from it, so
    a later step carries the earlier ones (offload, then LoRA on top, ...). The estimate of each
    is the smoke's own (`_estimate`: the --tiny model's, and the CPU's fp32 formulas on a CPU).
    """
    from wizard.engine.evaluate import recommend, refresh_defaults

    hardware = str(answers.get("hardware", "nvidia"))
    world_now = int(rec.facts.get("world_size", 1) or 1)
    strategy = str(rec.settings.get("strategy") or "ddp")
    try:
        planned, _ = _estimate(rec, answers, strategy, world_now, tiny_config, hardware)
        now: int | None = planned.model_states + planned.activations
    except (WizardError, KeyError, ValueError, TypeError):
        now = None
    current = dict(answers)
    keys = frozenset(given)
    changes: list[tuple[str, Any]] = []
    found: list[Lever] = []
    for key, value in LEVER_CHANGES:
        if current.get(key) == value or (key == "offload" and hardware == "cpu"):
            continue
        if key == "method" and current.get("method") != "full":
            continue
        try:
            changed = refresh_defaults(tree, {**current, key: value}, inputs, keys | {key})
            other = recommend(tree, changed, inputs)
        except WizardError:
            continue
        if other.refused:
            continue
        other_strategy = str(other.settings.get("strategy") or "ddp")
        world = int(other.facts.get("world_size", 1) or 1)
        try:
            mine, workload = _estimate(other, changed, other_strategy, world, tiny_config, hardware)
            size: int | None = mine.model_states + mine.activations
            # Its set is written anew by the wizard, so its DeepSpeed JSON is the wizard's own ({}).
            buffers = buffers_of(other, workload, world, tiny_config, {})
            cpu_run: int | None = cpu_run_bytes(mine, workload, sum(part for _, part in buffers))
        except (WizardError, KeyError, ValueError, TypeError):
            size, cpu_run = None, None
        if size is not None and now is not None and size >= now:
            continue  # no step down in memory
        title = tree.backends[str(other.backend)].title_on(other.hardware_id)
        if other.traits.zero_stages and other.settings.get("zero_stage") is not None:
            off = other.settings.get("offload_optimizer")
            title += f" (ZeRO-{other.settings['zero_stage']}{' with optimizer offload' if off == 'cpu' else ''})"
        if (other.backend, other.settings.get("strategy")) == (rec.backend, rec.settings.get("strategy")):
            title += f", with {key.replace('_', ' ')} {_shown(value)}"
        changes.append((key, value))
        found.append(Lever(tuple(changes), title, size, on_gpu=hardware != "cpu", cpu_run=cpu_run))
        current, keys, now = dict(changed), keys | {key}, size if size is not None else now
    return tuple(found)


def offloaded_per_process(est: Estimate, answers: Mapping[str, Any], world: int) -> int:
    """What a layout offloads per process, with the allowance for pinned buffers (`host_per_node`, spread).

    On a CPU run the offloaded state, and the staging buffers DeepSpeed pins beside it, stay in the
    memory the process is measured in.
    """
    nodes = max(int(answers.get("num_nodes") or 1), 1)
    return int(est.host_per_node * nodes / max(world, 1))
