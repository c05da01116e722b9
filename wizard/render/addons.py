"""The add-ons (performance features, and the memory levers layer and activation offloading) as plain template values.

The tree asks each add-on only where it applies to the decided backend, so an add-on without an
answer is off. This module turns the answers into the keys the templates print: Accelerate's
``fp8_config`` and ``dynamo_config`` blocks, Axolotl's ``fp8``/``torch_compile``/plugin keys, the
attention backend Axolotl gets for the GPU generation, the Python-side settings of
``train_snippet.py``, and the packages the chosen add-ons need.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wizard.engine.answers import looks_like_path
from wizard.engine.catalog import GpuInfo
from wizard.engine.facts import frozen_base_dtype
from wizard.engine.hub_id import parse_hub_id
from wizard.engine.long_context import RINGMASTER_INSTALL, cp_multiple, padded_length
from wizard.engine.memory import EIGHT_BIT_OPTIMIZERS, lora_rank_of, run_optimizer
from wizard.engine.model_size import catalog_hub_id
from wizard.engine.nvme_offload import LIBAIO_INSTALL
from wizard.engine.traits import BackendTraits

SNIPPET = "train_snippet.py"
# The torch names of the dtypes the snippet loads a base in.
TORCH_DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}

# Accelerate's fp8_config uses the launch-flag spellings, backend upper case: the Accelerator
# compares it with FP8BackendType exactly (src/accelerate/utils/dataclasses.py).
FP8_BACKENDS = {"te": "TE", "ao": "AO", "msamp": "MSAMP"}
COMM_HOOKS = {"fp16": "FP16", "bf16": "BF16", "power_sgd": "POWER_SGD", "batched_power_sgd": "BATCHED_POWER_SGD"}
# PowerSGD's own default rank is 1 too; written out so the snippet shows where the option goes.
POWER_SGD_STATE = {"matrix_approximation_rank": 1}
# Attention backends that handle packed (variable-length) samples (Axolotl's sample_packing,
# https://docs.axolotl.ai/docs/config-reference.html).
VARLEN_ATTENTION = ("flash_attention_2", "xformers")
LIGER_PLUGIN = "axolotl.integrations.liger.LigerPlugin"
CCE_PLUGIN = "axolotl.integrations.cut_cross_entropy.CutCrossEntropyPlugin"
CCE_INSTALL = (
    'pip3 uninstall -y cut-cross-entropy && pip3 install "cut-cross-entropy[transformers] @ '
    'git+https://github.com/axolotl-ai-cloud/ml-cross-entropy.git@v0.1.1"'
)


@dataclass(frozen=True)
class Requirement:
    """A package a chosen add-on needs, and what needs it.

    `modules` are the import names that say it is installed, `commands` the programs any one of
    which does (an MPI's mpirun); neither given: it cannot be told from here (a system library).
    """

    package: str
    needed_for: str
    install: str
    modules: tuple[str, ...] = ()
    commands: tuple[str, ...] = ()

    def line(self) -> str:
        """One comment line: the package, what for, and how to install it."""
        return f"{self.package} ({self.needed_for}): {self.install}"


REQUIREMENTS = {
    "te": Requirement(
        "transformer-engine",
        "FP8 through Transformer Engine",
        'pip install "transformer-engine[pytorch]"',
        modules=("transformer_engine",),
    ),
    "ao": Requirement("torchao", "FP8 through torchao", "pip install torchao", modules=("torchao",)),
    # Accelerate installs without PyTorch's accelerator builds in mind: both come first, and on
    # AMD the ROCm wheel of PyTorch ("Start Locally", https://pytorch.org/get-started/locally/).
    # transformers too: the texts' advice (from_pretrained, gradient_checkpointing_enable) and a
    # Hub model's loading are Transformers' own; a script without it simply does not import it.
    "accelerate": Requirement(
        "torch, accelerate, transformers",
        "accelerate launch, and your training script loading a Hugging Face model",
        "pip install torch accelerate transformers",
        modules=("torch", "accelerate", "transformers"),
    ),
    "accelerate_rocm": Requirement(
        "torch (ROCm build), accelerate, transformers",
        "accelerate launch, and your training script loading a Hugging Face model",
        "the ROCm command from https://pytorch.org/get-started/locally/, then pip install accelerate transformers",
        modules=("torch", "accelerate", "transformers"),
    ),
    "msamp": Requirement(
        "MS-AMP", "FP8 through MS-AMP", "build it from https://github.com/Azure/MS-AMP", modules=("msamp",)
    ),
    "flash_attention_2": Requirement(
        "flash-attn",
        "attn_implementation: flash_attention_2, chosen for this GPU",
        "pip install flash-attn --no-build-isolation (it compiles against the CUDA toolkit, which can take long;"
        " if it will not build, set attn_implementation: sdpa in axolotl.yaml, and sample_packing: false where it"
        " is true: one sample per row, nothing to build)",
        modules=("flash_attn",),
    ),
    "xformers": Requirement("xformers", "attn_implementation: xformers", "pip install xformers", modules=("xformers",)),
    "trl": Requirement(
        "trl", "DPO in your training script, with TRL's DPOTrainer", "pip install trl", modules=("trl",)
    ),
    "peft_dpo": Requirement(
        "peft", "LoRA adapters, passed to DPOTrainer as peft_config", "pip install peft", modules=("peft",)
    ),
    "peft_snippet": Requirement(
        "peft",
        "LoRA adapters, in train_snippet.py's --model run and in your training script",
        "pip install peft",
        modules=("peft",),
    ),
    "peft": Requirement(
        "peft", "LoRA adapters in your training script, with get_peft_model", "pip install peft", modules=("peft",)
    ),
    "liger": Requirement("liger-kernel", "the Liger plugin", "pip install liger-kernel", modules=("liger_kernel",)),
    "liger_loss": Requirement(
        "liger-kernel",
        "the loss in chunks, in train_snippet.py's --model run",
        "pip install liger-kernel",
        modules=("liger_kernel",),
    ),
    "cut_cross_entropy": Requirement(
        "cut-cross-entropy",
        "the Cut Cross Entropy plugin",
        # The plan may rest on it (the estimate counts no logits with it): without it, plan again.
        CCE_INSTALL + " (if it will not install, run the wizard again with --set cut_cross_entropy=no, which plans"
        " for the ordinary loss)",
        modules=("cut_cross_entropy",),
    ),
    "qlora": Requirement(
        "bitsandbytes, peft",
        "QLoRA in train_snippet.py: 4-bit base model and LoRA adapters",
        "pip install bitsandbytes peft",
        modules=("bitsandbytes", "peft"),
    ),
    "lora_8bit": Requirement(
        "bitsandbytes, peft",
        "LoRA on an 8-bit base model in train_snippet.py",
        "pip install bitsandbytes peft",
        modules=("bitsandbytes", "peft"),
    ),
    "bnb_optimizer": Requirement(
        "bitsandbytes", "the 8-bit AdamW optimizer", "pip install bitsandbytes", modules=("bitsandbytes",)
    ),
    "axolotl_8bit": Requirement(
        "bitsandbytes", "load_in_8bit: the 8-bit base model", "pip install bitsandbytes", modules=("bitsandbytes",)
    ),
    "libaio": Requirement("libaio", "NVMe offload: DeepSpeed's async_io op", LIBAIO_INSTALL),
    "ringmaster": Requirement("axolotl-ringmaster", "context_parallel_size > 1", RINGMASTER_INSTALL),
    # accelerate launch starts MULTI_CPU processes with mpirun/mpiexec and stops without one
    # ("mpirun or mpiexec were not found"); it reads Open MPI's or the Hydra (Intel MPI, MVAPICH,
    # MPICH) arguments.
    # Neither tool installs DeepSpeed with itself: Accelerate imports it at launch, Axolotl lists
    # it as the "deepspeed" extra of its package (extras_require in axolotl's setup.py).
    "deepspeed_accelerate": Requirement(
        "deepspeed", "the DeepSpeed backend", "pip install deepspeed", modules=("deepspeed",)
    ),
    "deepspeed_axolotl": Requirement(
        "deepspeed",
        "the DeepSpeed backend (Axolotl's deepspeed extra)",
        'pip install "axolotl[deepspeed]"',
        modules=("deepspeed",),
    ),
    "mpi": Requirement(
        "one MPI: Open MPI, Intel MPI, MVAPICH or MPICH",
        "MULTI_CPU: accelerate launch starts the processes with mpirun",
        "sudo apt-get install openmpi-bin (Debian/Ubuntu), or conda install -c conda-forge openmpi",
        commands=("mpirun", "mpiexec"),
    ),
}
MPI_NOTE = (
    "MULTI_CPU starts its processes through mpirun, so an MPI must be installed on every machine (Open MPI,"
    ' Intel MPI, MVAPICH or MPICH; see "Install first" in the files); without one, accelerate launch stops'
    ' with "mpirun or mpiexec were not found".'
)


def axolotl_attention(hardware: str, gpu: GpuInfo | None) -> str:
    """Axolotl's attn_implementation for the GPU generation.

    FlashAttention-2 has kernels for Ampere and newer NVIDIA GPUs. Turing (T4, RTX 20xx) has none,
    and Axolotl offers xformers for Turing-class GPUs: its memory-efficient attention is also
    varlen-capable, so sample packing stays on. Volta, Pascal and AMD get SDPA, which works
    everywhere (ROCm flash-attn builds depend on the environment). An unknown NVIDIA
    GPU is assumed modern, as the bf16 default already assumes.
    """
    if hardware != "nvidia":
        return "sdpa"
    if gpu is None:
        return "flash_attention_2"
    if gpu.arch == "turing":
        return "xformers"
    return "flash_attention_2" if gpu.flash_attention else "sdpa"


def addon_values(answers: Mapping[str, Any], settings: Mapping[str, Any], context: Mapping[str, Any]) -> dict[str, Any]:
    """Template values for the chosen add-ons, given the answers, the decision and the base context.

    The base context's ``traits`` (the decided backend's) say what the backend hosts and needs.

    The result updates the context: it may replace ``mixed_precision`` (fp8 for Accelerate),
    ``model_checkpointing`` (activation offloading needs the model's own checkpointing under
    FSDP2) and adds ``requirements`` (lines for the generated files' header).
    """
    target = answers["target"]
    traits: BackendTraits = context["traits"]
    values: dict[str, Any] = {}
    fp8 = answers.get("fp8", "none")
    fp8 = None if fp8 == "none" else fp8
    compile_model = answers.get("torch_compile") is True
    gradient_checkpointing = bool(answers.get("gradient_checkpointing", False))
    needs = [fp8] if fp8 else []
    # The optimizer the decided layout runs: the answer, or AdamW where its step moves to the CPU.
    # The workload's optimizer: the answer, or what optimizer: auto resolved to (facts.auto_optimizer).
    optimizer = run_optimizer(str(context.get("workload_optimizer") or "adamw"), settings.get("strategy"))
    values["optimizer"] = optimizer
    values["axolotl_optimizer"] = AXOLOTL_OPTIMIZERS[optimizer]
    if optimizer in EIGHT_BIT_OPTIMIZERS:
        needs.append("bnb_optimizer")
    if target == "accelerate":
        # The other accelerators' PyTorch comes from their vendors' own stacks (torch_xla, Gaudi, ...).
        needs += {
            "amd": ["accelerate_rocm"],
            "nvidia": ["accelerate"],
            "mps": ["accelerate"],
            "cpu": ["accelerate"],
        }.get(str(answers.get("hardware")), [])
        values.update(
            _accelerate(answers, settings, traits, {**context, **values}, fp8, compile_model, gradient_checkpointing)
        )
        if values["snippet"] is not None and values["snippet"]["chunked_loss"]:
            needs.append("liger_loss")  # the snippet's --model run loads the model through Liger Kernel
        if values["snippet"] is not None and values["snippet"]["qlora"]:
            needs.append("qlora" if values["snippet"]["bits"] == 4 else "lora_8bit")
        elif values["snippet"] is not None and values["snippet"]["plain_lora"]:
            needs.append("peft_snippet")
        elif answers.get("method") == "lora":
            # The script wraps the model in LoRA adapters itself, or hands them to DPOTrainer (the warning says how).
            needs.append("peft_dpo" if answers.get("objective") == "dpo" else "peft")
        if answers.get("objective") == "dpo":
            needs.append("trl")  # DPO's trainer (the file header's DPO note says how it keeps the reference)
    else:
        values.update(_axolotl(answers, settings, traits, context, fp8, compile_model))
        values["load_in_8bit"] = _lora_8bit(answers)
        needs += ["axolotl_8bit"] if values["load_in_8bit"] else []
        needs.append(str(context["attn_implementation"]))
        needs += [name for name in ("cut_cross_entropy", "liger") if values[name]]
    if "bnb_optimizer" in needs and {"qlora", "lora_8bit"} & set(needs):
        needs.remove("bnb_optimizer")  # the 4-bit or 8-bit base's line installs bitsandbytes already
    if "nvme" in (settings.get("offload_optimizer"), settings.get("offload_param")):
        needs.append("libaio")
    if target == "axolotl" and traits.device_mesh and int(settings.get("cp_size") or 1) > 1:
        needs.append("ringmaster")
    if context.get("distributed_type") == "MULTI_CPU":
        needs.append("mpi")
    if traits.deepspeed_json:
        needs.append(f"deepspeed_{target}")
    values["requirements"] = [REQUIREMENTS[name].line() for name in needs if name in REQUIREMENTS]
    # The same, with what says each is installed (the summary warns only of what is missing here).
    values["requirement_checks"] = [REQUIREMENTS[name] for name in needs if name in REQUIREMENTS]
    return values


def _accelerate(
    answers: Mapping[str, Any],
    settings: Mapping[str, Any],
    traits: BackendTraits,
    context: Mapping[str, Any],
    fp8: str | None,
    compile_model: bool,
    gradient_checkpointing: bool,
) -> dict[str, Any]:
    values: dict[str, Any] = {"fp8_config": None, "dynamo_config": None, "fsdp_cpu_ram_efficient_loading": True}
    if fp8 is not None:
        values["mixed_precision"] = "fp8"
        block: dict[str, Any] = {"backend": FP8_BACKENDS[fp8]}
        if fp8 == "te":
            # Written with the names Accelerate reads (the questionnaire's amax_history_length and
            # amax_compute_algorithm are read by nothing: TERecipeKwargs in utils/dataclasses.py).
            block.update(fp8_format="HYBRID", amax_history_len=1024, amax_compute_algo="most_recent")
        elif fp8 == "ao":
            # The FP8 all-gather only works with FSDP2 (torchao's float8 FSDP2 support).
            block.update(enable_fsdp_float8_all_gather=traits.fsdp, pad_inner_dim=True)
            # Accelerate 1.15 refuses torchao with FSDP2 and cpu_ram_efficient_loading.
            values["fsdp_cpu_ram_efficient_loading"] = not traits.fsdp
        else:
            block.update(opt_level="O2")
        values["fp8_config"] = block
    dynamo_in_python = None
    if compile_model:
        # Regional compilation compiles each repeated layer once (a much shorter start), but with
        # checkpointing the recompute can hit another compiled graph (pytorch#166926).
        regional = not gradient_checkpointing
        if traits.deepspeed_json:
            # Accelerate 1.15's DeepSpeed launcher exports no ACCELERATE_DYNAMO_* variables, so a
            # dynamo_config block would be ignored: the plugin goes to the Accelerator in Python.
            dynamo_in_python = {
                "backend": "inductor",
                "mode": "default",
                "fullgraph": False,
                "dynamic": False,
                "use_regional_compilation": regional,
            }
        else:
            values["dynamo_config"] = {
                "dynamo_backend": "INDUCTOR",
                "dynamo_mode": "default",
                "dynamo_use_fullgraph": False,
                "dynamo_use_dynamic": False,
                "dynamo_use_regional_compilation": regional,
            }
    values["snippet"] = _snippet(answers, settings, traits, context, dynamo_in_python)
    return values


# Axolotl's names for the optimizers (its config's `optimizer`, Transformers' OptimizerNames:
# https://docs.axolotl.ai/docs/config-reference.html). AdamW stays the fused torch kernel the
# wizard has always written.
AXOLOTL_OPTIMIZERS = {
    "adamw": "adamw_torch_fused",
    "adamw_8bit": "adamw_bnb_8bit",
    "paged_adamw_8bit": "paged_adamw_8bit",
    "adafactor": "adafactor",
}
# The class train_snippet.py builds for each optimizer other than AdamW, and its words.
SNIPPET_OPTIMIZERS = {
    "adamw_8bit": ("bitsandbytes.optim", "AdamW8bit", "bitsandbytes' 8-bit AdamW"),
    "paged_adamw_8bit": (
        "bitsandbytes.optim",
        "PagedAdamW8bit",
        "bitsandbytes' paged 8-bit AdamW, whose state the driver pages to CPU RAM under memory pressure",
    ),
    "adafactor": ("transformers.optimization", "Adafactor", "Transformers' Adafactor"),
}


def _snippet(
    answers: Mapping[str, Any],
    settings: Mapping[str, Any],
    traits: BackendTraits,
    context: Mapping[str, Any],
    dynamo: Mapping[str, Any] | None,
) -> dict[str, Any] | None:
    """train_snippet.py's settings, or None when nothing chosen lives in Python."""
    hook = COMM_HOOKS.get(str(answers.get("ddp_comm_hook", "none")))
    local_sgd = int(answers.get("local_sgd_steps") or 0)
    lora_8bit = _lora_8bit(answers)
    qlora = answers["method"] == "qlora" or lora_8bit  # a quantized base model with LoRA adapters
    # Accelerate's torch context parallel (on FSDP2's device mesh) splits nothing unless each step runs inside
    # accelerator.maybe_context_parallel, which only Python can do.
    cp = int(settings.get("cp_size") or 1) if traits.device_mesh else 1
    # LoRA on a 16-bit (or a Mac's fp32) base: the snippet loads the model with its adapters, as QLoRA's does, so
    # a --model run is the script the estimate describes (DPO's adapters go to TRL's DPOTrainer instead).
    gradient_checkpointing = bool(answers.get("gradient_checkpointing", False))
    plain_lora = answers["method"] == "lora" and not lora_8bit and answers.get("objective") != "dpo" and cp == 1
    adapters = qlora or plain_lora
    optimizer = SNIPPET_OPTIMIZERS.get(str(context.get("optimizer", "adamw")))
    quiet = hook is None and not local_sgd and dynamo is None and optimizer is None
    if quiet and not adapters and cp == 1:
        return None
    features = []
    if optimizer is not None:
        features.append(f"the optimizer: {optimizer[2]} ({optimizer[0]}.{optimizer[1]})")
    if cp > 1:
        features.append(
            f"context parallel over {cp} GPUs: every step inside accelerator.maybe_context_parallel, "
            "with SDPA attention and shift_labels and position_ids split with the tokens"
        )
    if dynamo is not None:
        features.append("torch.compile through TorchDynamoPlugin (the DeepSpeed launcher ignores dynamo_config)")
    if lora_8bit:
        features.append("LoRA on a base model loaded in 8-bit (bitsandbytes) with adapters (PEFT)")
    elif qlora:
        features.append("QLoRA: the base model in 4-bit NF4 (bitsandbytes) with LoRA adapters (PEFT)")
    base_dtype = TORCH_DTYPES[frozen_base_dtype(answers, str(context["mixed_precision"]))]
    if plain_lora:
        features.append(
            f"LoRA: the base model loaded in {base_dtype}, frozen, with adapters of rank {lora_rank_of(answers)} on"
            " every linear layer (PEFT)"
            + (", and gradient checkpointing" if gradient_checkpointing and traits.checkpointing == "script" else "")
        )
    if adapters:
        features.append(
            "with --model, the seconds per optimizer step and the memory the device held, beside the wizard's estimate"
        )
    # chunked_loss: yes counts no logits in the estimate: a --model run computes the loss in chunks (Liger
    # Kernel's AutoLigerKernelForCausalLM patches the model's classes as it loads it), so it holds that memory.
    chunked = answers.get("chunked_loss") is True and (adapters or cp > 1)
    if chunked:
        features.append("the loss computed in chunks (Liger Kernel's fused linear cross entropy), as answered")
    if hook is not None:
        features.append(f"the DDP communication hook {hook} (DistributedDataParallelKwargs)")
    if local_sgd:
        features.append(f"Local SGD, averaging the weights every {local_sgd} optimizer steps (LocalSGD)")
    default_model = snippet_model(answers) if adapters or cp > 1 else None
    return {
        "features": features,
        "comm_hook": hook,
        "comm_state": POWER_SGD_STATE if hook in ("POWER_SGD", "BATCHED_POWER_SGD") else None,
        "local_sgd_steps": local_sgd,
        # (module, class, words) of the optimizer the script builds; None: torch.optim.AdamW.
        "optimizer": optimizer,
        "dynamo": dict(dynamo) if dynamo is not None else None,
        "qlora": qlora,
        # LoRA adapters on the --model run: QLoRA's quantized base, or a plain 16-bit (Mac: fp32) one.
        "lora": adapters,
        "plain_lora": plain_lora,
        # The plain base's torch dtype, as the estimate counts it (mixed precision's 16-bit type, or a Mac's).
        "base_dtype": base_dtype,
        # The model's own checkpointing, where no backend setting turns it on (FSDP2's does).
        "script_checkpointing": gradient_checkpointing and traits.checkpointing == "script",
        # The chosen layout's figures, printed beside what a --model run measures.
        "estimate_gib": context.get("estimate_gib"),
        "chunked_loss": chunked,
        "bits": 8 if lora_8bit else 4,
        # FSDP2 and ZeRO-3 shard the 4-bit weights, so they are stored in the model's dtype and not
        # placed per process (Transformers refuses a device_map under ZeRO-3); with one GPU, DDP or
        # ZeRO-1/2 each process loads its own copy on its own GPU.
        "sharded": traits.shards_everything or settings.get("zero_stage") == 3,
        "compute_dtype": "bfloat16" if context["mixed_precision"] in ("bf16", "fp8") else "float16",
        "default_model": default_model,
        # --model loads a Hugging Face causal LM: with LoRA adapters, or the model CP splits.
        "hf_model": adapters or cp > 1,
        "cp_size": cp,
        "cp_multiple": cp_multiple(cp),
        # A --model run's default length and batch: the planned ones (the length padded to the CP
        # multiple), so a first run meets the memory the plan was made for.
        "sequence_length": padded_length(int(answers["sequence_length"]), cp)
        if cp > 1
        else int(answers["sequence_length"]),
        # DPO: each planned pair is two sequences, so the snippet's plain batches hold twice as many rows.
        "micro_batch_size": int(answers.get("micro_batch_size") or 1) * (2 if answers.get("objective") == "dpo" else 1),
        "dpo": answers.get("objective") == "dpo",
        # A global batch given by the user that needs accumulation: --grad-accum defaults to the plan's.
        "grad_accum": None if local_sgd else _planned_accumulation(context),
        # FSDP2 accumulates sharded only when each micro-batch syncs (wizard.engine.batch.SYNC_EACH_BATCH).
        "sync_each_batch": traits.fsdp,
    }


def snippet_model(answers: Mapping[str, Any]) -> str | None:
    """What train_snippet.py's --model loads by default: the model answered, where from_pretrained can load it.

    A Hub id as its id, a local folder (or its config.json's folder) as that folder, a catalogue name as its
    repository on the Hub; a size (7B) names none.
    """
    model = str(answers.get("model", ""))
    source = model_source(model)
    return source[0] if source is not None else catalog_hub_id(model)


def model_source(model: str) -> tuple[str, str | None] | None:
    """Where from_pretrained (or Axolotl's base_model) loads the model answered, and at which revision.

    None for a size or a catalogue name. A Hub id loads by that id, at the revision given; a local folder, or a
    config.json's folder, by that folder.
    """
    hub = parse_hub_id(model)
    if hub is not None:
        return hub.repo_id, hub.revision
    if looks_like_path(model):
        path = Path(model)
        return str(path.parent if path.name == "config.json" else path), None
    return None


def _planned_accumulation(context: Mapping[str, Any]) -> int | None:
    """The plan's accumulation where the user's global batch sets one above 1 (and not under CP), else None."""
    plan = context.get("batch")
    if plan is None or not plan.custom or plan.accumulation <= 1 or int(context["sizes"]["cp"]) > 1:
        return None
    return int(plan.accumulation)


def _lora_8bit(answers: Mapping[str, Any]) -> bool:
    """LoRA on an 8-bit base (the tree offers it only for LoRA with one GPU or DDP)."""
    return answers["method"] == "lora" and answers.get("load_in_8bit") is True


def _axolotl(
    answers: Mapping[str, Any],
    settings: Mapping[str, Any],
    traits: BackendTraits,
    context: Mapping[str, Any],
    fp8: str | None,
    compile_model: bool,
) -> dict[str, Any]:
    tensor_parallel = int(settings.get("tp_size") or 1) > 1
    cce = answers.get("cut_cross_entropy") is True
    liger: dict[str, bool] | None = None
    if answers.get("liger") is True:
        liger = {
            "liger_rope": True,
            # Axolotl 0.21 rejects Liger's RMSNorm and its losses with tensor parallelism.
            "liger_rms_norm": not tensor_parallel,
            "liger_glu_activation": True,
            # One cross-entropy replacement at a time: Cut Cross Entropy wins when both are on.
            "liger_fused_linear_cross_entropy": not tensor_parallel and not cce,
        }
    plugins = [p for p in (context.get("ep_plugin"),) if p]
    plugins += [plugin for plugin, on in ((LIGER_PLUGIN, liger is not None), (CCE_PLUGIN, cce)) if on]
    activation_offloading = answers.get("activation_offloading", "none")
    activation_offloading = None if activation_offloading == "none" else activation_offloading
    return {
        "fp8": fp8 == "ao",
        # With FSDP2 the weights are gathered in FP8 (half the traffic of bf16).
        "fp8_all_gather": fp8 == "ao" and traits.fsdp,
        "torch_compile": compile_model,
        "plugins": plugins,
        "liger": liger,
        "cut_cross_entropy": cce,
        "profiler_steps": int(answers.get("profiler_steps") or 0),
        "activation_offloading": activation_offloading,
        # Under FSDP2 activation offloading needs Axolotl's own gradient checkpointing.
        "model_checkpointing": bool(context.get("model_checkpointing")) or activation_offloading is not None,
        # Only beside full copies (one GPU, DDP): FSDP2 and ZeRO-3 hold the weights as shards, which
        # Axolotl's layer hooks do not handle; nor where host RAM is too short for the frozen layers
        # (the plan then counts them on the GPU). The summary says so when an answer is dropped here.
        "layer_offloading": answers.get("layer_offloading") is True
        and traits.whole_copy
        and not context.get("layer_offload_host_short"),
    }
