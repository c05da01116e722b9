"""Run generated config files through the real tools (accelerate, DeepSpeed, axolotl) on a CPU box.

Every check calls the tools' own code and lets their exceptions propagate: a rejected config shows
up as the tool's ``ValueError``/``KeyError``/``AssertionError``/``pydantic.ValidationError``.
The versions are pinned in ``requirements/tools.txt`` because some helpers used here are private
(``_validate_launch_command``).

Tool imports go through :func:`require_tool`: when a tool cannot be imported the calling test is
skipped, or fails when ``BACKEND_WIZARD_REQUIRE_TOOLS=1`` (CI sets it so that a broken install
cannot turn the whole tier into skips).
"""

import contextlib
import copy
import importlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any
from unittest import mock

import pytest
import yaml

from wizard.processes import kill_session

REPO_ROOT = Path(__file__).resolve().parent.parent
TINY_TRAIN = Path(__file__).resolve().parent / "assets" / "tiny_train.py"
# Start of the JSON line tiny_train.py prints once per rank (json.dumps keeps key order).
TINY_TRAIN_MARKER = '{"tiny_train": true'
# The torch version axolotl validates against (the target machine's, not necessarily this one's).
TARGET_TORCH_VERSION = "2.13.0"

# Offline, no telemetry. Applied to this process before any tool is imported and to every launch.
TOOL_ENV = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "AXOLOTL_DO_NOT_TRACK": "1", "WANDB_MODE": "disabled"}
# DeepSpeed JIT-compiles ops on first launch; keep them inside the git-ignored workspace cache.
DEFAULT_TORCH_EXTENSIONS_DIR = REPO_ROOT / ".cache" / "torch_extensions"

# Variables accelerate's launcher exports. Stale ones from the calling shell would leak into the
# plugins, so they are removed before a dry run or a launch.
_LAUNCHER_ENV_PREFIXES = ("ACCELERATE_", "FSDP_", "PARALLELISM_CONFIG_", "MEGATRON_LM_")
_WRAP_POLICY_NAMES = {
    "transformer_auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
    "size_based_auto_wrap_policy": "SIZE_BASED_WRAP",
}


def tool_env() -> dict[str, str]:
    """Return the variables every real-tool run needs: ``TOOL_ENV`` plus ``TORCH_EXTENSIONS_DIR``.

    An explicitly set ``TORCH_EXTENSIONS_DIR`` (e.g. a CI cache) is kept.
    """
    extensions_dir = os.environ.get("TORCH_EXTENSIONS_DIR", str(DEFAULT_TORCH_EXTENSIONS_DIR))
    return {**TOOL_ENV, "TORCH_EXTENSIONS_DIR": extensions_dir}


def require_tool(module: str) -> ModuleType:
    """Import a real-tool module, or skip the calling test (fail if ``BACKEND_WIZARD_REQUIRE_TOOLS=1``).

    The variables from :func:`tool_env` are exported first: axolotl and the HF libraries read them
    at import time.
    """
    os.environ.update(tool_env())
    try:
        return importlib.import_module(module)
    except Exception as exc:  # a broken install raises more than ImportError (e.g. torch ABI errors)
        message = f"real tool {module!r} is not importable: {type(exc).__name__}: {exc}"
        if os.environ.get("BACKEND_WIZARD_REQUIRE_TOOLS") == "1":
            pytest.fail(message, pytrace=False)
        pytest.skip(message)


def _clean_environ() -> dict[str, str]:
    """Return ``os.environ`` without launcher variables, plus :func:`tool_env`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(_LAUNCHER_ENV_PREFIXES)}
    return {**env, **tool_env()}


@contextlib.contextmanager
def _isolated(cwd: Path | None, launch_utils: ModuleType) -> Iterator[None]:
    """Clean environment (restored on exit), optional temporary chdir, and no port probing."""
    with contextlib.ExitStack() as stack:
        stack.enter_context(mock.patch.dict(os.environ, _clean_environ(), clear=True))
        stack.enter_context(mock.patch.object(launch_utils, "is_port_in_use", return_value=False))
        if cwd is not None:
            stack.enter_context(contextlib.chdir(cwd))
        yield


def _fsdp_summary(plugin: Any) -> dict[str, Any]:
    """Summarise a built ``FullyShardedDataParallelPlugin`` with plain values."""
    from torch.distributed.fsdp import CPUOffloadPolicy

    offload = plugin.cpu_offload
    policy_name = getattr(plugin.auto_wrap_policy, "__name__", None)
    return {
        "version": plugin.fsdp_version,
        "reshard_after_forward": plugin.reshard_after_forward,
        "sharding_strategy": getattr(plugin.sharding_strategy, "name", None),
        "state_dict_type": plugin.state_dict_type.name,
        "offload": isinstance(offload, CPUOffloadPolicy) or bool(getattr(offload, "offload_params", False)),
        "auto_wrap_policy": _WRAP_POLICY_NAMES.get(policy_name or "", "NO_WRAP"),
        "transformer_cls_names_to_wrap": plugin.transformer_cls_names_to_wrap,
        "activation_checkpointing": plugin.activation_checkpointing,
        "cpu_ram_efficient_loading": plugin.cpu_ram_efficient_loading,
    }


def accelerate_dry_run(
    config_path: Path, *, cwd: Path | None = None, extra_args: list[str] | None = None
) -> dict[str, Any]:
    """Run accelerate 1.15.0's ``accelerate launch`` code path for a config without starting processes.

    Steps, as in ``accelerate.commands.launch.launch_command``: parse
    ``--config_file PATH *extra_args train.py``; ``_validate_launch_command`` (which calls
    ``load_config_from_file``: unknown top-level keys, bad enums); ``prepare_deepspeed_cmd_env``,
    ``prepare_multi_gpu_env`` or ``prepare_simple_launcher_cmd_env`` as the launcher would pick
    (mixed precision, dynamo backend, FSDP1 loading/sync conflict, exported variables); then, with
    the exported variables, build ``FullyShardedDataParallelPlugin()`` / ``DeepSpeedPlugin()``, whose
    ``__post_init__`` holds most of the nested validation (FSDP enums and policies, the
    ``deepspeed_config_file`` vs other settings rule, a missing JSON file).

    Not checked here: unknown nested keys (silently ignored by accelerate) and DeepSpeed values
    such as ``stage: 7`` (see :func:`deepspeed_parse`). Known CPU false positive: an FSDP1 config
    with ``fsdp_sync_module_states: true`` (or ``cpu_ram_efficient_loading``, which forces it)
    fails plugin construction with "no available devices"; the wizard only writes FSDP2.

    Accelerators a CPU cannot stand in for: an ``XLA`` config (TPU) goes through the loader, the
    launch checks and ``prepare_tpu``, the TPU launcher's environment step, which exports the
    bf16 variables only where torch_xla sees a TPU; what ``tpu_launcher`` does next (import
    torch_xla, import the script and look up ``main_training_function``, ``xmp.spawn``) needs
    a TPU runtime and is not run, and a TPU pod (``tpu_use_cluster``) is refused. ``MULTI_HPU``
    and the other ``MULTI_*`` device types take the torchrun route like ``MULTI_GPU``: the file and
    the launch arguments are proven, the device runtime (habana_frameworks, torch_npu, ...) is not.

    Args:
        config_path: The accelerate YAML (or JSON) file.
        cwd: Working directory for the run; relative paths such as ``deepspeed_config_file``
            resolve from it, as they do from the launch directory. Defaults to the current one.
        extra_args: Extra ``accelerate launch`` flags placed before the script name.

    Returns:
        ``distributed_type``, ``num_processes``, ``num_machines``, ``mixed_precision``, ``launcher``
        (``deepspeed``/``torchrun``/``simple``/``xla``), ``command`` (the launcher's command line,
        or ``None`` when torchrun or the TPU launcher runs in-process), ``env`` (the variables the
        launcher adds or changes), plus ``fsdp`` or ``deepspeed_config`` (the plugin's resolved
        dict) when they apply, and ``main_training_function``/``downcast_bf16`` for XLA; ``megatron``
        (the built ``MegatronLMPlugin``'s fields) for Megatron-LM and ``parallelism`` (the built
        ``ParallelismConfig``'s sizes and handlers, after the checks ``Accelerator()`` runs on it:
        the product of the sizes against the process count, a dimension for FSDP2 to shard over)
        for a ``parallelism_config`` block.

    Raises:
        Exception: Whatever the tool raises for a rejected config.
    """
    launch = require_tool("accelerate.commands.launch")
    launch_utils = require_tool("accelerate.utils.launch")
    accelerate_utils = require_tool("accelerate.utils")
    argv = ["--config_file", str(config_path), *(extra_args or []), "train.py"]
    with _isolated(cwd, launch_utils):
        base_env = dict(os.environ)
        args, defaults, mixed_precision_from_config = launch._validate_launch_command(
            launch.launch_command_parser().parse_args(argv)
        )
        if args.tpu and args.tpu_use_cluster:
            raise NotImplementedError(
                "the dry run covers the DeepSpeed, torchrun, single-host TPU and simple launchers"
            )
        command = None
        if args.use_deepspeed and not args.cpu:
            fields = [*defaults.deepspeed_config, *(["mixed_precision"] if mixed_precision_from_config else [])]
            args.deepspeed_fields_from_accelerate_config = ",".join(fields)
            launcher = "deepspeed"
            command, env = launch_utils.prepare_deepspeed_cmd_env(args)
        elif (args.use_fsdp or args.multi_gpu or args.use_megatron_lm) and not args.cpu:
            launcher = "torchrun"  # launch_command sends Megatron-LM to the same multi-GPU launcher
            env = launch_utils.prepare_multi_gpu_env(args)
        elif args.tpu and not args.cpu:
            # tpu_launcher's environment step; the rest of it needs torch_xla (see above).
            launcher = "xla"
            args, env = launch_utils.prepare_tpu(args, {})
        else:
            launcher = "simple"
            command, env = launch_utils.prepare_simple_launcher_cmd_env(args)
        exported = {k: v for k, v in env.items() if base_env.get(k) != v}
        summary: dict[str, Any] = {
            "distributed_type": defaults.distributed_type.value,
            "num_processes": args.num_processes,
            "num_machines": args.num_machines,
            "mixed_precision": args.mixed_precision,
            "launcher": launcher,
            "command": command,
            "env": exported,
        }
        if launcher == "xla":
            summary["main_training_function"] = args.main_training_function
            summary["downcast_bf16"] = args.downcast_bf16
        with accelerate_utils.patch_environment(**exported):
            if exported.get("ACCELERATE_USE_FSDP") == "true":
                summary["fsdp"] = _fsdp_summary(accelerate_utils.FullyShardedDataParallelPlugin())
            if exported.get("ACCELERATE_USE_DEEPSPEED") == "true":
                require_tool("deepspeed")
                require_tool("transformers")  # DeepSpeedPlugin checks its version
                summary["deepspeed_config"] = copy.deepcopy(accelerate_utils.DeepSpeedPlugin().deepspeed_config)
            if exported.get("ACCELERATE_USE_MEGATRON_LM") == "true":
                summary["megatron"] = _megatron_summary(accelerate_utils.MegatronLMPlugin())
            if exported.get("ACCELERATE_USE_PARALLELISM_CONFIG") == "true":
                parallelism = require_tool("accelerate.parallelism_config")
                config = parallelism.ParallelismConfig()
                # The checks Accelerator() runs on it (the product is the process count; FSDP2 needs a
                # dimension to shard over), with a stand-in for the Accelerator of this launch.
                accelerator = SimpleNamespace(
                    multi_device=True,
                    num_processes=int(args.num_processes),
                    is_fsdp2=exported.get("ACCELERATE_USE_FSDP") == "true" and exported.get("FSDP_VERSION") == "2",
                    distributed_type=defaults.distributed_type,
                    is_main_process=True,
                )
                config._validate_accelerator(accelerator)
                summary["parallelism"] = _parallelism_summary(config)
    return summary


def _megatron_summary(plugin: Any) -> dict[str, Any]:
    """Summarise a built ``MegatronLMPlugin`` (its ``__post_init__`` reads the MEGATRON_LM_* variables)."""
    fields = ("tp_degree", "pp_degree", "num_micro_batches", "sequence_parallelism", "recompute_activations")
    return {name: getattr(plugin, name) for name in (*fields, "use_distributed_optimizer", "gradient_clipping")}


def _parallelism_summary(config: Any) -> dict[str, Any]:
    """Summarise a built ``ParallelismConfig``: its sizes (its ``__post_init__`` checks them and the
    TP/CP-with-pure-replication rule), their product and the CP / DeepSpeed SP handler settings."""
    summary: dict[str, Any] = {f"{dim}_size": getattr(config, f"{dim}_size") for dim in ("dp_replicate", "dp_shard")}
    summary.update({f"{dim}_size": getattr(config, f"{dim}_size") for dim in ("tp", "cp", "sp")})
    summary["total_size"] = config.total_size
    summary["sp_backend"] = config.sp_backend
    if config.cp_handler is not None:
        summary["cp_comm_strategy"] = config.cp_handler.cp_comm_strategy
    if config.sp_handler is not None:
        summary["sp_seq_length_is_variable"] = config.sp_handler.sp_seq_length_is_variable
        summary["sp_attn_implementation"] = config.sp_handler.sp_attn_implementation
    return summary


def _drop_auto(value: Any) -> Any:
    """Remove every ``"auto"`` value from nested dicts and lists."""
    if isinstance(value, dict):
        return {k: _drop_auto(v) for k, v in value.items() if v != "auto"}
    if isinstance(value, list):
        return [_drop_auto(v) for v in value if v != "auto"]
    return value


def resolve_deepspeed_auto(
    ds: dict[str, Any], *, world_size: int, micro_batch_size: int = 1, gradient_accumulation_steps: int = 1
) -> dict[str, Any]:
    """Replace ``"auto"`` in a DeepSpeed dict the way HF Trainer / accelerate do before DeepSpeed sees it.

    Micro batch and accumulation come from the arguments, ``train_batch_size`` is their product
    with ``world_size``, ``gradient_clipping`` becomes 1.0, ``bf16``/``fp16`` ``enabled: auto``
    becomes false, and every other ``"auto"`` is dropped (DeepSpeed then uses its default). Values
    written as numbers are kept, so DeepSpeed still checks the batch identity.
    """
    cfg = copy.deepcopy(ds)
    if cfg.get("train_micro_batch_size_per_gpu") == "auto":
        cfg["train_micro_batch_size_per_gpu"] = micro_batch_size
    if cfg.get("gradient_accumulation_steps") == "auto":
        cfg["gradient_accumulation_steps"] = gradient_accumulation_steps
    if cfg.get("train_batch_size") == "auto":
        cfg["train_batch_size"] = (
            cfg.get("train_micro_batch_size_per_gpu", micro_batch_size)
            * cfg.get("gradient_accumulation_steps", gradient_accumulation_steps)
            * world_size
        )
    if cfg.get("gradient_clipping") == "auto":
        cfg["gradient_clipping"] = 1.0
    for block in ("bf16", "fp16"):
        if isinstance(cfg.get(block), dict) and cfg[block].get("enabled") == "auto":
            cfg[block]["enabled"] = False
    resolved: dict[str, Any] = _drop_auto(cfg)
    return resolved


def deepspeed_parse(
    ds: dict[str, Any] | Path, *, world_size: int, micro_batch_size: int = 1, gradient_accumulation_steps: int = 1
) -> Any:
    """Parse a DeepSpeed config with DeepSpeed 0.19.8's own ``DeepSpeedConfig`` for ``world_size`` ranks.

    A path is read the way DeepSpeed reads it (hjson, duplicate keys rejected). ``"auto"`` values
    are resolved with :func:`resolve_deepspeed_auto`. DeepSpeed's rank and world-size getters are
    patched for the call, so the batch identity is checked for ``world_size`` without any process
    group. Catches nested errors accelerate lets through: bad ``stage``, unknown keys inside
    ``zero_optimization``/offload blocks, fp16 together with bf16, batch mismatches, removed keys.
    Silently accepted by DeepSpeed: unknown top-level keys and ``offload_param`` below stage 3.

    Returns:
        The ``deepspeed.runtime.config.DeepSpeedConfig`` object.
    """
    ds_config = require_tool("deepspeed.runtime.config")
    if isinstance(ds, Path):
        hjson = require_tool("hjson")
        config_utils = require_tool("deepspeed.runtime.config_utils")
        raw = hjson.loads(ds.read_text(), object_pairs_hook=config_utils.dict_raise_error_on_duplicate_keys)
    else:
        raw = ds
    resolved = resolve_deepspeed_auto(
        raw,
        world_size=world_size,
        micro_batch_size=micro_batch_size,
        gradient_accumulation_steps=gradient_accumulation_steps,
    )
    with (
        mock.patch.object(ds_config.dist, "get_rank", return_value=0),
        mock.patch.object(ds_config.dist, "get_world_size", return_value=world_size),
    ):
        return ds_config.DeepSpeedConfig(resolved)


def engine_precision(ds_config: Any) -> str:
    """ "bf16", "fp16" or "no": what a parsed ``DeepSpeedConfig`` gives the engine (its
    ``bfloat16_enabled()`` / ``fp16_enabled()`` read these two switches)."""
    if ds_config.bfloat16_config.enabled:
        return "bf16"
    return "fp16" if ds_config.float16_config.enabled else "no"


def accelerate_deepspeed_precision(
    config_path: Path, *, cwd: Path | None = None, extra_args: list[str] | None = None
) -> dict[str, Any]:
    """The precision DeepSpeed's engine gets when ``accelerate launch`` runs a DeepSpeed config (no process).

    :func:`accelerate_dry_run` builds the launch environment (``ACCELERATE_MIXED_PRECISION`` from
    ``--mixed_precision`` or the YAML, else "no"). With that environment a ``DeepSpeedPlugin()`` is
    built and given that mixed precision as ``AcceleratorState.__init__`` does:
    ``DeepSpeedPlugin.set_mixed_precision`` fills the JSON's "auto" bf16/fp16 switches, adds a
    missing block of that precision, keeps a switch written true or false and raises when the
    other precision is written true. DeepSpeed's ``DeepSpeedConfig`` then parses the result.

    Returns:
        ``mixed_precision`` (what the launch passed on) and ``precision`` (the engine's: "bf16",
        "fp16" or "no").
    """
    summary = accelerate_dry_run(config_path, cwd=cwd, extra_args=extra_args)
    launch_utils = require_tool("accelerate.utils.launch")
    accelerate_utils = require_tool("accelerate.utils")
    mixed = summary["env"].get("ACCELERATE_MIXED_PRECISION", "no")
    with _isolated(cwd, launch_utils), accelerate_utils.patch_environment(**summary["env"]):
        plugin = accelerate_utils.DeepSpeedPlugin()
        plugin.set_mixed_precision(mixed)
        config = copy.deepcopy(plugin.deepspeed_config)
    parsed = deepspeed_parse(config, world_size=int(summary["num_processes"]))
    return {"mixed_precision": mixed, "precision": engine_precision(parsed)}


def trainer_deepspeed_precision(ds: dict[str, Any], *, bf16: bool, fp16: bool, world_size: int) -> dict[str, Any]:
    """The precision DeepSpeed's engine gets under Transformers' Trainer (Axolotl's route) with these flags.

    As ``TrainingArguments.__post_init__`` does: Transformers' ``HfTrainerDeepSpeedConfig``
    ``trainer_config_process`` fills "auto" from the bf16/fp16 flags and records a mismatch where
    the JSON writes another value (the Trainer raises on them later); the Trainer's mixed precision
    (fp16, else bf16, else "no") then goes through ``DeepSpeedPlugin(hf_ds_config=...)`` and
    ``set_mixed_precision``; DeepSpeed's ``DeepSpeedConfig`` parses the result.

    Returns:
        ``mismatches`` (Transformers' list, empty when the flags agree with the JSON) and
        ``precision`` (the engine's: "bf16", "fp16" or "no").
    """
    hf_deepspeed = require_tool("transformers.integrations.deepspeed")
    accelerate_utils = require_tool("accelerate.utils")
    config = hf_deepspeed.HfTrainerDeepSpeedConfig(copy.deepcopy(ds))
    args = SimpleNamespace(
        world_size=world_size,
        per_device_train_batch_size=1,
        gradient_accumulation_steps=1,
        max_grad_norm=1.0,
        learning_rate=2e-5,
        adam_beta1=0.9,
        adam_beta2=0.999,
        adam_epsilon=1e-8,
        weight_decay=0.0,
        save_on_each_node=False,
        fp16=fp16,
        fp16_full_eval=False,
        bf16=bf16,
        bf16_full_eval=False,
    )
    config.trainer_config_process(args)
    mixed = "fp16" if fp16 else ("bf16" if bf16 else "no")
    with mock.patch.dict(os.environ, _clean_environ(), clear=True):
        plugin = accelerate_utils.DeepSpeedPlugin(hf_ds_config=config)
        plugin.set_mixed_precision(mixed)
        resolved = copy.deepcopy(plugin.deepspeed_config)
    parsed = deepspeed_parse(resolved, world_size=world_size)
    return {"mismatches": list(config.mismatches), "precision": engine_precision(parsed)}


def gpu_capabilities(n_gpu: int) -> dict[str, Any]:
    """Return axolotl ``capabilities`` for ``n_gpu`` bf16-capable sm_90 GPUs (H100-class)."""
    return {"bf16": True, "fp8": False, "tf32": True, "n_gpu": n_gpu, "compute_capability": "sm_90"}


def axolotl_validate(
    config_path: Path, *, capabilities: dict[str, Any] | None = None, n_gpu: int = 1
) -> dict[str, Any]:
    """Validate an axolotl YAML with axolotl 0.21.0's ``validate_config``, offline and without a GPU.

    ``capabilities`` describe the target hardware (default: :func:`gpu_capabilities` with
    ``n_gpu``); axolotl requires ``env_capabilities`` alongside, so the target torch version is
    passed too. Unknown top-level keys are dropped silently by axolotl; relative paths such as
    ``deepspeed`` are not opened.

    Returns:
        The validated config (defaults filled in) as plain nested dicts.
    """
    config = require_tool("axolotl.utils.config")
    axolotl_dict = require_tool("axolotl.utils.dict")
    raw = yaml.safe_load(config_path.read_text())
    validated = config.validate_config(
        axolotl_dict.DictDefault(raw),
        capabilities=capabilities if capabilities is not None else gpu_capabilities(n_gpu),
        env_capabilities={"torch_version": TARGET_TORCH_VERSION},
    )
    return dict(validated.to_dict())


def _error_excerpt(stderr: str, tail: int = 2000) -> str:
    """Return the distinct ``...Error:`` lines of a launch's stderr followed by its tail.

    torchrun ends with a ``ChildFailedError`` summary, so the workers' own error can be far above
    the tail.
    """
    errors = dict.fromkeys(line.strip() for line in stderr.splitlines() if "Error:" in line)
    return "\n".join([*list(errors)[:10], "--- stderr tail ---", stderr[-tail:]])


def accelerate_launch(
    config_path: Path,
    *,
    cwd: Path,
    nproc_expected: int,
    extra_args: list[str] | None = None,
    env: dict[str, str] | None = None,
    timeout: int = 240,
) -> list[dict[str, Any]]:
    """Really run ``accelerate launch --config_file CONFIG tests/assets/tiny_train.py`` and check the ranks.

    The venv's ``bin`` goes first on ``PATH`` (mpirun, ``accelerate-launch``), launcher variables
    from the calling environment are dropped, and ``env`` is applied last (e.g.
    ``ACCELERATE_USE_CPU=true``). Unless ``extra_args`` sets ``--main_process_port``, a free port is
    picked with accelerate's own ``get_free_port`` (what ``--main_process_port 0`` does on the
    torchrun and DeepSpeed routes); ``0`` itself is not passed because the simple launcher exports
    it verbatim as ``MASTER_PORT`` and an mpirun ``MULTI_CPU`` launch then hangs in rendezvous.

    Returns:
        The JSON record printed by each rank, sorted by rank.

    Raises:
        AssertionError: The launch failed or timed out, or the ranks did not form one
            ``nproc_expected``-rank process group (checked by rank ids, the world size seen
            inside the script and an all-reduce of the ranks).
    """
    other = require_tool("accelerate.utils.other")
    bin_dir = Path(sys.executable).parent
    extra = list(extra_args or [])
    if not any(arg.startswith(("--main_process_port", "--main-process-port")) for arg in extra):
        extra = ["--main_process_port", str(other.get_free_port()), *extra]
    cmd = [str(bin_dir / "accelerate"), "launch", "--config_file", str(config_path), *extra, str(TINY_TRAIN)]
    run_env = {**_clean_environ(), **(env or {})}
    run_env["PATH"] = os.pathsep.join([str(bin_dir), run_env.get("PATH", "")])
    proc = subprocess.Popen(
        cmd, cwd=cwd, env=run_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_session(proc.pid)  # the launcher and its workers, whatever process group they moved to
        stdout, stderr = proc.communicate()
        raise AssertionError(f"launch timed out after {timeout}s: {cmd}\n{_error_excerpt(stderr)}") from None
    assert proc.returncode == 0, f"launch exited {proc.returncode}: {cmd}\n{_error_excerpt(stderr)}"

    records = sorted(
        (json.loads(line) for line in stdout.splitlines() if line.startswith(TINY_TRAIN_MARKER)),
        key=lambda record: record["rank"],
    )
    n = nproc_expected
    assert [r["rank"] for r in records] == list(range(n)), f"expected ranks 0..{n - 1}, got {records}"
    for record in records:
        group = (record["world_size"], record["dist_world_size"], record["rank_sum"])
        assert group == (n, n, n * (n - 1) // 2), f"rank {record['rank']} is not in one {n}-rank group: {record}"
    return records
