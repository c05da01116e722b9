"""Everything the templates need, as plain values, computed from a recommendation.

The templates stay free of decisions: this module turns the engine's outcome into concrete
settings (file names, precision flags, the FSDP block, the Axolotl starter values).
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from wizard.engine.advice import (
    bucket_lowering,
    buckets_only_edit,
    final_save_short,
    layer_offload_host_short,
    model_assumption,
    own_buckets,
    zero3_moe_layer_classes,
)
from wizard.engine.batch import batch_line, batch_where
from wizard.engine.catalog import lookup_gpu
from wizard.engine.evaluate import (
    Recommendation,
    backend_title,
    chosen_estimate,
    offloaded_host_bytes,
    offloads_to_nvme,
    runs_past_fit,
)
from wizard.engine.facts import GPU_HARDWARE
from wizard.engine.json_fit import SUGGESTED_JSON, buckets_json, suggested_json, suggested_lever
from wizard.engine.long_context import long_context_notes
from wizard.engine.memory import FIT_MARGIN, GIB, lora_rank_of, to_gib
from wizard.engine.model_size import catalog_hub_id, catalog_model
from wizard.engine.note import Note
from wizard.engine.nvme_offload import brought_nvme_warning, nvme_swap, nvme_warning
from wizard.engine.script_needs import script_notes
from wizard.engine.traits import BackendTraits
from wizard.engine.tree import Tree
from wizard.render.addons import MPI_NOTE, SNIPPET, VARLEN_ATTENTION, addon_values, axolotl_attention, model_source

ACCELERATE_CONFIG = "accelerate_config.yaml"
AXOLOTL_CONFIG = "axolotl.yaml"
DEEPSPEED_CONFIG = "ds_config.json"
LAUNCH_SCRIPT = "launch.sh"
SLURM_SCRIPT = "slurm.sbatch"
ANSWERS_FILE = "answers.yaml"
BASE_MODEL_PLACEHOLDER = "REPLACE-ME/base-model"
DATASET_PLACEHOLDER = "REPLACE-ME/your-dataset"
MAIN_PROCESS_PORT = 29500
URL = re.compile(r"[(\[<'\"]?[a-z][a-z0-9+.-]*://", re.IGNORECASE)  # a word that is (or opens with) a URL
# What one device is called in comments, per hardware answer.
DEVICE_NAMES = {
    "nvidia": "GPUs",
    "amd": "GPUs",
    "tpu": "TPU cores",
    "hpu": "Gaudi cards (HPUs)",
    "xpu": "Intel GPUs (XPUs)",
    "npu": "Ascend NPUs",
    "mlu": "Cambricon MLUs",
    "musa": "Moore Threads GPUs",
}


@dataclass(frozen=True)
class RenderPlan:
    """Which files to render, in order, and the context they share.

    A file whose template name is None is not rendered from a template: its text is
    ``documents[name]`` serialized (the copy of a DeepSpeed JSON the user brought).
    """

    files: tuple[tuple[str, str | None], ...]  # (output name, template name or None)
    context: Mapping[str, Any]
    documents: Mapping[str, Any] = field(default_factory=dict)
    # What the user must do beyond the files (NVMe's libaio, context parallel in Python): they are
    # in every header's warnings and the summary shows them.
    notes: tuple[str, ...] = ()


def plan_render(
    tree: Tree, rec: Recommendation, answers: Mapping[str, Any], user_deepspeed: Mapping[str, Any] | None
) -> RenderPlan:
    """Decide the output files and build the template context for them.

    ``user_deepspeed`` is the parsed DeepSpeed JSON the user brought, if any. Like the wizard's own
    JSON it becomes ``ds_config.json`` in the output folder, referenced by that relative name, so
    the folder copied to every machine is complete and no config points back to this machine.
    """
    settings = rec.settings
    backend = str(rec.backend)
    target = answers["target"]
    traits = tree.backends[backend].traits
    # Written with a DeepSpeed JSON (ds_config.json): the backend's trait, not its name.
    uses_deepspeed = traits.deepspeed_json
    # The brought JSON where DeepSpeed runs it (copied into the folder as ds_config.json), else None.
    brought_json = user_deepspeed if uses_deepspeed else None
    ds_path = DEEPSPEED_CONFIG if uses_deepspeed else None
    config_name = ACCELERATE_CONFIG if target == "accelerate" else AXOLOTL_CONFIG
    # Ray places the workers from the head node: no per-machine launcher, no rendezvous.
    use_ray = target == "axolotl" and answers.get("use_ray") is True
    launch = f"./{LAUNCH_SCRIPT}" + (" YOUR_TRAINING_SCRIPT.py" if target == "accelerate" else "")
    distributed_type = tree.backends[backend].distributed_type
    num_machines = int(settings["num_machines"])
    if use_ray:
        launch += " (on the Ray cluster's head node)"
    elif num_machines > 1:
        # Every machine runs it with its own rank: a bare command would start two rank-0s.
        rank = "MACHINE_RANK" if target == "accelerate" else "NODE_RANK"
        address = "" if answers.get("main_process_ip") else " MAIN_PROCESS_IP=<machine 0's address>"
        launch = f"{rank}=<0..{num_machines - 1}>{address} {launch} on each machine (see Usage in launch.sh)"
    context: dict[str, Any] = {
        "target": target,
        "backend": backend,
        # What the templates test ({% if traits.deepspeed_json %}), never the backend's id.
        "traits": traits,
        "backend_title": backend_title(tree, rec),
        "rule_id": rec.rule.id,
        # The rule's guideline and its public sources, in words (tags mean nothing in a file).
        "guideline": tree.guidance[rec.rule.guidance],
        "sources": [tree.sources[tag] for tag in tree.sources_for(rec.rule.sources, answers.get("target"))],
        "because": rec.because,
        "distributed_type": distributed_type,
        "hardware": answers["hardware"],
        "gpu_hardware": answers["hardware"] in GPU_HARDWARE,
        "device_name": DEVICE_NAMES.get(answers["hardware"], "devices"),
        # Data parallel over several devices (MULTI_GPU, MULTI_HPU, ...): accelerate reads gpu_ids.
        "multi_device": str(distributed_type).startswith("MULTI_") and distributed_type != "MULTI_CPU",
        "mixed_precision": settings["mixed_precision"],
        "num_processes": settings["num_processes"],
        "num_machines": num_machines,
        "gpus_per_node": answers.get("gpus_per_node", 1),
        "main_process_port": answers.get("main_process_port", MAIN_PROCESS_PORT),
        "main_process_ip": answers.get("main_process_ip"),
        "same_network": answers.get("same_network", True),
        "use_ray": use_ray,
        "zero_stage": settings["zero_stage"],
        "gather_16bit_on_save": _gather_fits(rec, answers),
        "offload_optimizer": settings["offload_optimizer"],
        # Smaller reduce and allgather buckets where DeepSpeed's defaults would crowd the GPU (the warning says so).
        "bucket_size": own_buckets(str(settings.get("strategy")), rec.facts),
        # The optimizer step runs on the host's CPU (offloaded to RAM or NVMe) of a GPU run: the
        # launch script gives its processes the machine's cores (OMP_NUM_THREADS).
        "cpu_optimizer": answers["hardware"] in GPU_HARDWARE and settings["offload_optimizer"] in ("cpu", "nvme"),
        "offload_param": settings["offload_param"],
        "nvme_path": answers.get("nvme_path"),
        "deepspeed_path": ds_path,
        "user_deepspeed": user_deepspeed is not None,
        "gradient_checkpointing": bool(answers.get("gradient_checkpointing", False)),
        "layer_class": rec.facts.shape.layer_class if rec.facts.shape else None,
        "sequence_length": answers["sequence_length"],
        "micro_batch_size": answers["micro_batch_size"],
        "method": answers["method"],
        # The adapters' rank (lora_alpha is written as twice it, as Axolotl's examples set it).
        "lora_rank": lora_rank_of(answers),
        "config_name": config_name,
        "launch_command": launch,
        # What the estimate assumed about a model given as a size, said where the reason is.
        "assumed": model_assumption(answers, rec.facts, rec.settings.get("strategy")),
        # The optimizer the estimate counted: the answer, or what optimizer: auto resolved to.
        "workload_optimizer": rec.facts.workload.optimizer if rec.facts.workload else answers.get("optimizer"),
        "warnings": list(rec.warnings),
        "nccl_p2p_card": nccl_p2p_card(answers),
        # A full final save that would not fit beside the offload in host RAM is saved in shards.
        "final_state_dict_type": (
            "SHARDED_STATE_DICT"
            if final_save_short(rec.settings.get("strategy"), rec.facts, answers)
            else "FULL_STATE_DICT"
        ),
    }
    context.update(parallel_values(settings, answers, traits))
    # The chosen layout's figures, for train_snippet.py to print beside what a --model run measures.
    est = chosen_estimate(rec)
    context["estimate_gib"] = (
        {"total": to_gib(est.total), "peak": to_gib(est.peak), "usable": to_gib(est.budget)} if est else None
    )
    # A brought JSON that needs more than the GPU itself (the summary says "Do not run launch.sh on these
    # GPUs"): on NVIDIA GPUs, launch.sh reads each card's memory and stops short of an out-of-memory start,
    # at the size the summary names (its total within the usable share).
    context["memory_guard"] = (
        {
            "total_gib": to_gib(est.total),
            "card_gib": to_gib(est.gpu_memory),
            "need_gib": est.card_needed_gib,
            "share": f"{est.share:.0%}",
            # ds_config.suggested.json is written where an edit of the zero_optimization block fits.
            "suggested": suggested_lever(str(settings.get("strategy")), rec.facts.estimates) is not None,
        }
        if est is not None
        and brought_json is not None
        and answers["hardware"] == "nvidia"
        and runs_past_fit(rec)
        and est.past_device
        else None
    )
    context["layer_offload_host_short"] = layer_offload_host_short(answers, rec.facts, settings)
    context["moe_layer_cls_names"] = zero3_moe_layer_classes(answers, rec.facts, settings, traits)
    # A brought JSON's bf16/fp16 "auto" takes Accelerate's mixed precision, which defaults to "no"
    # and cannot sit beside a deepspeed_config_file in the YAML: launch.sh passes it instead.
    brought = brought_json is not None and target == "accelerate"
    context["launch_mixed_precision"] = settings["mixed_precision"] if brought else None
    # Whether that JSON leaves its precision to the launcher ("auto"), or sets it itself (true):
    # the files' comments say which, since only "auto" means fp32 without the flag.
    blocks = [brought_json.get(key) for key in ("bf16", "bfloat16", "fp16")] if brought_json else []
    context["json_precision_auto"] = any(isinstance(b, dict) and b.get("enabled") == "auto" for b in blocks)
    context.update(batch_values(rec, answers))
    if target == "axolotl":
        context.update(_axolotl_values(answers))
    # The add-ons asked after the decision: they may adjust the values above.
    context.update(addon_values(answers, settings, context))
    context["nvme"] = _nvme_values(rec, answers, user_deepspeed)
    notes = _notes(rec, traits, answers, context)
    context["warnings"] = [*context["warnings"], *notes]
    if target == "accelerate":
        context["batch_note"] = None  # said among the warnings (`_notes`), not twice in the header
    files: list[tuple[str, str | None]] = [(config_name, f"{config_name}.j2")]
    documents: dict[str, Any] = {}
    if brought_json is not None:
        files.append((DEEPSPEED_CONFIG, None))  # the brought JSON, copied (serialized again)
        documents[DEEPSPEED_CONFIG] = brought_json
        # Where it does not fit, the fit warning's edit made: the user's keys, the proposed ZeRO settings.
        lever = suggested_lever(str(settings.get("strategy")), rec.facts.estimates)
        if lever is not None:
            files.append((SUGGESTED_JSON, None))
            documents[SUGGESTED_JSON] = suggested_json(brought_json, lever, bucket_lowering(rec.facts, lever))
        elif (bucket := buckets_only_edit(rec.facts, str(settings.get("strategy")))) is not None:
            # It fits, but its overlap_comm buffers take it past the usable line: the edit is the buckets alone.
            files.append((SUGGESTED_JSON, None))
            documents[SUGGESTED_JSON] = buckets_json(brought_json, bucket)
    elif uses_deepspeed:
        files.append((DEEPSPEED_CONFIG, f"{DEEPSPEED_CONFIG}.j2"))
    if context.get("snippet") is not None:
        files.append((SNIPPET, f"{SNIPPET}.j2"))  # the add-ons that live in Python
    files.append((LAUNCH_SCRIPT, f"launch_{target}.sh.j2"))
    # A SLURM job starts launch.sh once per machine; with Ray the head node starts every worker.
    if num_machines > 1 and not use_ray:
        files.append((SLURM_SCRIPT, f"{SLURM_SCRIPT}.j2"))
    return RenderPlan(tuple(files), context, documents, tuple(notes))


# With the optimizer state offloaded and no "optimizer" block in ds_config.json, Accelerate swaps the
# script's optimizer for DeepSpeed's CPU one when it prepares it (map_pytorch_optim_to_deepspeed in
# accelerate/utils/deepspeed.py, under zero_force_ds_cpu_optimizer, true by default): said before the
# launch, since a script's SGD or 8-bit optimizer silently becomes Adam.
CPU_ADAM_NOTE = Note(
    "Your script's optimizer is replaced when accelerator.prepare runs: with the optimizer state in host RAM,"
    " Accelerate swaps it for DeepSpeed's CPU Adam over the same parameter groups (their learning rate and weight"
    " decay, and the betas and eps of an Adam-type optimizer). torch.optim.AdamW runs as AdamW; Adam, SGD, an 8-bit"
    " optimizer or any other runs as plain Adam (torch.optim.Adagrad and bitsandbytes' 32-bit Lion have CPU versions"
    " of their own: Accelerate's map_pytorch_optim_to_deepspeed, in accelerate/utils/deepspeed.py). The CPU Adam's"
    " C++ op is built the first time a run starts, which needs a C++ compiler and ninja on every machine; install"
    " DeepSpeed with DS_BUILD_CPU_ADAM=1 to build it once ahead.",
    "Your script's optimizer becomes DeepSpeed's CPU Adam when accelerator.prepare runs (an optimizer other than"
    " Adam, AdamW, Adagrad or a 32-bit Lion runs as Adam). Its C++ op builds at the first start: a C++ compiler and"
    " ninja on every machine.",
)


def nccl_p2p_card(answers: Mapping[str, Any]) -> str | None:
    """The card's name where the launch script turns NCCL's P2P transport off, else None.

    That is more than one GPU per machine of a card the catalogue marks nccl_p2p_disable (GeForce
    RTX 40/50, wizard/data/gpus.yaml says why); one GPU has no peer to talk to.
    """
    gpu = lookup_gpu(answers.get("gpu_model"))
    several = int(answers.get("gpus_per_node") or 1) > 1
    if answers.get("hardware") != "nvidia" or not several or gpu is None or not gpu.nccl_p2p_disable:
        return None
    return gpu.short_name


def _nvme_values(
    rec: Recommendation, answers: Mapping[str, Any], user_deepspeed: Mapping[str, Any] | None
) -> dict[str, Any] | None:
    """ds_config.json's NVMe swap buffers and aio block, or None when nothing goes to NVMe.

    A brought JSON is copied as it is: only its warning is computed, against the same sizes.
    """
    settings = rec.settings
    if "nvme" not in (settings.get("offload_optimizer"), settings.get("offload_param")) or rec.facts.shape is None:
        return None
    swap = nvme_swap(
        rec.facts.shape,
        world_size=int(settings["num_processes"]),
        processes_per_node=int(answers.get("gpus_per_node", 1)),
        cpu_memory_gb=answers.get("cpu_memory_gb"),
        bytes_per_weight=4 if settings.get("mixed_precision") == "no" else 2,
    )
    if user_deepspeed is not None:
        return {"warning": brought_nvme_warning(swap, user_deepspeed)}
    host = answers.get("cpu_memory_gb")
    warning = nvme_warning(
        swap,
        answers.get("nvme_path"),
        int(answers.get("gpus_per_node", 1)),
        float(host) if isinstance(host, (int, float)) else None,
    )
    return {**swap.template_values(), "warning": warning}


def _notes(
    rec: Recommendation, traits: BackendTraits, answers: Mapping[str, Any], context: Mapping[str, Any]
) -> list[str]:
    """What the user must do beyond the written files: NVMe offload, CP/SP, and the script's own calls."""
    notes = []
    nvme = context.get("nvme")
    if nvme is not None:
        notes.append(str(nvme["warning"]))
    attention = context.get("attn_implementation")
    notes += long_context_notes(answers, rec.settings, traits, rec.facts.shape, str(attention) if attention else None)
    snippet = context.get("snippet")
    notes += script_notes(answers, rec.settings, traits, snippet_adapters=bool(snippet and snippet.get("qlora")))
    batch = context.get("batch_note")
    if batch and answers.get("target") == "accelerate":
        # Only the script can set it: a warning, so the launch files point at it too.
        notes.append(
            Note(
                f"{batch} The Accelerate config cannot set the batch: without these calls the script trains with a"
                " different one.",
                str(batch),
            )
        )
    card = context.get("nccl_p2p_card")
    if card:
        notes.append(
            f"launch.sh sets NCCL_P2P_DISABLE=1: the driver gives {card} cards no working peer-to-peer access"
            " to each other, yet NCCL can try its P2P transport on them and hang (as users of these cards"
            " report), so the variable makes NCCL pass the data through host shared memory instead."
        )
    if answers.get("target") == "accelerate" and answers.get("objective") == "dpo":
        notes.append(dpo_script_note(answers))
    if (
        answers.get("target") == "accelerate"
        and traits.deepspeed_json
        and context.get("cpu_optimizer")
        and not context.get("user_deepspeed")
    ):
        notes.append(CPU_ADAM_NOTE)
    if context.get("distributed_type") == "MULTI_CPU":
        notes.append(MPI_NOTE)  # a system package, not a pip one: easy to miss until the launch fails
    params = rec.facts.get("params")
    if (
        answers.get("target") == "accelerate"
        and traits.deepspeed_json
        and rec.settings.get("zero_stage") == 3
        and isinstance(params, int)
    ):
        # zero3_init_flag works through Transformers' from_pretrained, which builds the model under
        # deepspeed.zero.Init only once the DeepSpeed config is known ("DeepSpeed", Accelerate's
        # usage guide: https://huggingface.co/docs/accelerate/usage_guides/deepspeed).
        copies = int(answers.get("gpus_per_node", 1))
        host = answers.get("cpu_memory_gb")

        def past_host(size: int) -> str:
            """The clause saying that `size` bytes are more than the machine's RAM (", more than ..."), or ""."""
            if not isinstance(host, (int, float)) or size <= host * GIB:
                return ""
            machine = "each" if int(answers.get("num_nodes") or 1) > 1 else "this"
            return f", more than the {host} GiB of {machine} machine"

        over = past_host(copies * 2 * params)
        loaded = (
            f"{to_gib(2 * params)} GiB per process, {copies} per machine: {to_gib(copies * 2 * params)} GiB"
            if copies > 1
            else f"{to_gib(2 * params)} GiB"
        )
        # Loaded in fp32 (a Transformers version that does not read the checkpoint's dtype): twice that, said with
        # its figure where only that passes the machine's RAM.
        fp32_over = "" if over else past_host(copies * 4 * params)
        fp32_figure = f"{to_gib(copies * 4 * params)} GiB{fp32_over}" if fp32_over else ""
        notes.append(
            Note(
                "Create the Accelerator before you load the model (from_pretrained): with ZeRO-3 and zero3_init_flag:"
                " true, Transformers then builds it already "
                + ("sharded over the GPUs" if int(rec.settings.get("num_processes") or 1) > 1 else "partitioned")
                + " (deepspeed.zero.Init), its weights straight where ZeRO-3 keeps them. Loaded"
                " before the Accelerator exists, every process first holds the whole model in host RAM, about"
                f" {to_gib(2 * params)} GiB in 16 bit (pass dtype=torch.bfloat16 to from_pretrained; without it some"
                " Transformers versions load fp32, twice that)"
                + (f", {copies} copies per machine: {to_gib(copies * 2 * params)} GiB" if copies > 1 else "")
                + f"{over}"
                + (f"; in fp32, {fp32_figure}" if fp32_figure else "")
                + ".",
                "Create the Accelerator before from_pretrained: ZeRO-3 then loads the model already sharded. Loaded"
                f" first, every process holds the whole model in host RAM ({loaded} in 16 bit{over}; pass"
                " dtype=torch.bfloat16, or some Transformers versions load fp32, twice that"
                + (f": {fp32_figure}" if fp32_figure else "")
                + ").",
            )
        )
    ours = not context.get("user_deepspeed")  # a brought JSON says itself what a save gathers
    if traits.deepspeed_json and rec.settings.get("zero_stage") == 3 and ours and isinstance(params, int):
        # stage3_gather_16bit_weights_on_model_save (set in ds_config.json so that a saved model
        # loads with from_pretrained) gathers the whole model onto the first process's CPU.
        if context.get("gather_16bit_on_save"):
            accelerate = answers.get("target") == "accelerate"
            notes.append(
                Note(
                    (
                        "Saving the model with accelerator.save_model (or save_pretrained with"
                        " accelerator.get_state_dict)"
                        if accelerate
                        else "Saving the trained model at the end (Transformers' Trainer.save_model, as Axolotl does)"
                    )
                    + " gathers the whole 16-bit model into the host RAM of machine 0"
                    f" (stage3_gather_16bit_weights_on_model_save: true), about {to_gib(2 * params)} GiB on top of"
                    " what training holds there, and writes weights from_pretrained loads; "
                    + (
                        "accelerator.save_state writes ZeRO shards"
                        if accelerate
                        else "the checkpoints during training are ZeRO shards"
                    )
                    + " either way, which only DeepSpeed reads (zero_to_fp32.py turns them into one file).",
                    ("accelerator.save_model" if accelerate else "The final save")
                    + f" gathers the whole 16-bit model, about {to_gib(2 * params)} GiB, into machine 0's host RAM"
                    + (
                        "; accelerator.save_state writes ZeRO shards."
                        if accelerate
                        else "; checkpoints are ZeRO shards."
                    ),
                )
            )
        else:
            held = _offloaded(rec)
            notes.append(
                "Checkpoints stay in ZeRO shards (stage3_gather_16bit_weights_on_model_save: false): gathering the"
                f" whole 16-bit model ({to_gib(2 * params)} GiB) into machine 0's host RAM on top of the"
                f" {to_gib(held)} GiB {'of swap buffers held' if offloads_to_nvme(rec) else 'offloaded'} there"
                " would pass the"
                f" {round(float(answers.get('cpu_memory_gb') or 0) * FIT_MARGIN, 1)} GiB usable of the"
                f" {answers.get('cpu_memory_gb')} GiB it has. Save with accelerator.save_state"
                " (accelerator.save_model and get_state_dict stop with an error then); to load the model elsewhere,"
                " turn the shards into one file after training: python"
                " CHECKPOINT_DIR/zero_to_fp32.py CHECKPOINT_DIR OUTPUT_DIR (DeepSpeed writes the script beside"
                " each checkpoint)."
            )
    if context.get("distributed_type") == "FSDP" and answers.get("target") == "accelerate":
        notes.append(fsdp2_script_note(str(answers.get("method"))))
        if rec.settings.get("strategy") in ("fsdp2_offload", "hsdp_offload"):
            # The step-time band gives the CPU update the fused kernel's rate (bench/cpu_adam.py):
            # a script's unfused AdamW would take several times as long.
            notes.append(FUSED_ADAMW_NOTE)
        # A DDP user expects one checkpoint file; FSDP2 writes one shard per GPU.
        notes.append(SHARDED_CHECKPOINT_NOTE)
    return notes


# What a DDP script must change for FSDP2 under Accelerate 1.15: accelerator.py raises "When using
# FSDP2, a model and optimizer must be passed together to `Accelerator.prepare()`", and
# utils/fsdp_utils.py upcasts low-precision parameters to fp32 when mixed_precision is set.
def _offloaded(rec: Recommendation) -> int:
    """Host bytes per machine the decided layout fills (an NVMe run: DeepSpeed's swap buffers only)."""
    return offloaded_host_bytes(rec) or 0


def _gather_fits(rec: Recommendation, answers: Mapping[str, Any]) -> bool:
    """Whether a ZeRO-3 save may gather the whole 16-bit model into machine 0's host RAM.

    It lands on top of what the run offloads there; where both pass the usable share of the host
    RAM given, the checkpoint stays sharded instead. Unknown host RAM: gather, as usual.
    """
    params, host = rec.facts.get("params"), answers.get("cpu_memory_gb")
    if not isinstance(params, int) or not isinstance(host, (int, float)):
        return True
    return _offloaded(rec) + 2 * params <= host * GIB * FIT_MARGIN  # the usable share, as for the offload


def dpo_script_note(answers: Mapping[str, Any]) -> str:
    """What an Accelerate script does for DPO as the wizard estimated it (TRL's DPOTrainer)."""
    if answers.get("reference_log_probs") == "precomputed":
        reference = (
            "set DPOConfig(precompute_ref_log_probs=True) and pass no ref_model: the reference log-probs are computed"
            " in one forward pass over the dataset before training, and no reference is held or run while it trains"
        )
    elif answers.get("method") != "full":
        reference = (
            "pass the PEFT adapters and no ref_model: the reference is then the base model with the adapters"
            " switched off, which costs no memory, only a forward pass per step (DPOConfig(precompute_ref_log_probs="
            "True) runs it once over the dataset before training instead: --set reference_log_probs=precomputed)"
        )
    else:
        reference = (
            "DPOTrainer keeps a frozen copy of the model as the reference, counted in the estimate (outside DeepSpeed"
            " a deep copy of the model the script trains: fp32 where its weights are fp32 under mixed precision;"
            " a ref_model loaded in bf16 halves it); to drop it, set DPOConfig(precompute_ref_log_probs=True) and"
            " pass no ref_model (--set reference_log_probs=precomputed)"
        )
    return (
        "DPO: train with TRL's DPOTrainer (pip install trl), which runs under accelerate launch with this config; its"
        " per_device_train_batch_size counts pairs, each a chosen and a rejected answer, so the activations are those"
        f" of twice as many sequences; {reference}. TRL's guide: https://huggingface.co/docs/trl/main/dpo_trainer"
    )


def fsdp2_script_note(method: str) -> Note:
    """What a DDP training script changes for FSDP2 (Accelerate upcasts only the trained weights)."""
    weights = (
        "the model may be loaded in bf16 or fp32: with mixed_precision bf16 Accelerate keeps the sharded weights"
        " in fp32 (the 16 bytes per parameter the estimate counts) and computes in bf16"
        if method == "full"
        else "load the 4-bit base as train_snippet.py does (bnb_4bit_quant_storage in a float dtype, so that"
        " FSDP2 can shard it)"
        if method == "qlora"
        else "load the frozen base in bf16 (as the estimate counts it): Accelerate upcasts only the trained"
        " adapters to fp32"
    )
    loading = (
        ""
        if method == "full"
        else "; load the 4-bit base as train_snippet.py does"
        if method == "qlora"
        else "; load the frozen base in bf16"
    )
    return Note(
        "Changes to a DDP training script for FSDP2: pass the model and the optimizer to accelerator.prepare in one"
        " call (Accelerate 1.15 stops with a ValueError otherwise); create the Accelerator before from_pretrained,"
        f" so that fsdp_cpu_ram_efficient_loading loads the weights on the first process only; {weights}; save"
        " with accelerator.save_state, or accelerator.get_state_dict(model) for one full copy.",
        "Changes to a DDP training script for FSDP2: prepare the model and the optimizer in one accelerator.prepare"
        f" call, and create the Accelerator before from_pretrained{loading}.",
    )


FUSED_ADAMW_NOTE = Note(
    "With FSDP2's CPU offload the optimizer step runs on the CPU: create the optimizer as"
    " torch.optim.AdamW(model.parameters(), lr=..., fused=True) (the Transformers Trainer's default,"
    " optim=\"adamw_torch_fused\"); PyTorch's fused kernel updates on the CPU at about the rate of DeepSpeed's CPU"
    " Adam, the rate the step time assumes, where the default unfused AdamW takes several times as long.",
    "With FSDP2's CPU offload, create the optimizer as torch.optim.AdamW(..., fused=True): the unfused default"
    " takes several times as long on the CPU.",
)


SHARDED_CHECKPOINT_NOTE = Note(
    "checkpoints are saved sharded (fsdp_state_dict_type: SHARDED_STATE_DICT), one part per GPU, which"
    " is fast and needs no gather; to load the model elsewhere, merge them first: accelerate merge-weights"
    " CHECKPOINT_DIR OUTPUT_DIR, as Accelerate's FSDP guide shows: https://huggingface.co/docs/accelerate/usage_guides/fsdp",
    "checkpoints are saved sharded, one part per GPU; to load the model elsewhere, merge them first: accelerate"
    " merge-weights CHECKPOINT_DIR OUTPUT_DIR",
)


PARALLEL_AXES = ("dp_replicate", "dp_shard", "tp", "cp", "sp", "ep", "pp")
EP_PLUGIN = "axolotl.integrations.expert_parallel.ExpertParallelPlugin"


def parallel_values(settings: Mapping[str, Any], answers: Mapping[str, Any], traits: BackendTraits) -> dict[str, Any]:
    """The parallel sizes the templates write, with the settings that go with them.

    `sizes` has every axis (1 where the rule set none). `parallelism_config` says whether the
    Accelerate YAML gets a parallelism_config block (a device mesh, or DeepSpeed sequence
    parallelism) and `mesh` whether the Axolotl YAML gets its size keys; `traits` say which of the
    two the backend hosts.
    """
    sizes = {axis: int(settings.get(f"{axis}_size") or 1) for axis in PARALLEL_AXES}
    mesh = traits.device_mesh and any(sizes[a] > 1 for a in ("dp_replicate", "tp", "cp", "ep"))
    gpu = lookup_gpu(answers.get("gpu_model"))
    flash = answers.get("hardware") == "nvidia" and (gpu.flash_attention if gpu else True)
    cp = sizes["cp"]
    return {
        "sizes": sizes,
        "mesh": mesh,
        "parallelism_config": mesh or (traits.sequence_parallel and sizes["sp"] > 1),
        # DeepSpeed SP supports FlashAttention-2/3 and SDPA, never eager or flex (the values
        # Accelerate's parallelism_config_sp_attn_implementation accepts).
        "sp_attn_implementation": "flash_attention_2" if flash else "sdpa",
        # Long context: the model's own gradient checkpointing, which activation offloading (the
        # next memory lever) requires; FSDP's activation checkpointing then stays off, so the
        # layers are not recomputed twice.
        "model_checkpointing": cp > 1,
        # Expert parallel keeps the experts of each EP group only in a full state dict (Axolotl
        # rejects SHARDED_STATE_DICT with EP).
        "fsdp_state_dict_type": "FULL_STATE_DICT" if sizes["ep"] > 1 else "SHARDED_STATE_DICT",
        # Axolotl turns RAM-efficient loading off under TP (with a warning), and QLoRA's staged
        # 4-bit loading, which it switches on, accepts no TP, CP or replicas.
        "cpu_ram_efficient_loading": not (
            sizes["tp"] > 1 or (answers.get("method") == "qlora" and max(sizes["cp"], sizes["dp_replicate"]) > 1)
        ),
        "ep_plugin": EP_PLUGIN if sizes["ep"] > 1 else None,
    }


def batch_values(rec: Recommendation, answers: Mapping[str, Any]) -> dict[str, Any]:
    """The batch plan as the files write it: micro-batch per GPU, accumulation, and the global batch.

    Axolotl's CP examples use one sample per GPU (micro_batch_size: 1): the plan's micro-batch
    is then 1 and its accumulation keeps the global batch. A brought JSON's numeric accumulation
    is the plan's too, so Axolotl agrees with it.
    """
    plan = rec.facts.batch
    assert plan is not None, "a decided run knows its GPUs and micro-batch"
    world = int(rec.settings["num_processes"])
    target = str(answers["target"])
    pairs = answers.get("objective") == "dpo"  # a DPO batch counts preference pairs
    fsdp = rec.settings.get("backend") == "fsdp2"
    megatron = answers.get("megatron") is True
    return {
        "batch": plan,
        # Said in the headers only for a global batch the user set: other sets stay as they were.
        "batch_note": (
            f"Global batch: {batch_line(plan, world, str(answers['hardware']), pairs=pairs)};"
            f" {batch_where(plan, target, megatron, rec.traits.deepspeed_json, dpo=pairs, fsdp=fsdp)}."
            if plan.custom
            else None
        ),
        "axolotl_micro_batch_size": plan.micro,
        "gradient_accumulation_steps": plan.accumulation,
        # Megatron-LM accumulates through its own num_micro_batches (the plan's accumulation).
        "megatron_micro_batches": plan.accumulation,
    }


def _axolotl_values(answers: Mapping[str, Any]) -> dict[str, Any]:
    attention = axolotl_attention(answers["hardware"], lookup_gpu(answers.get("gpu_model")))
    base_model = answers.get("base_model")
    placeholder = False
    revision = None
    hub_id = None  # a catalogue model's repository, where base_model is left to the wizard
    if not base_model:
        # A Hub id is saved as the id (a local path is saved absolute): axolotl loads it by that id,
        # at the revision given (axolotl's revision_of_model,
        # https://docs.axolotl.ai/docs/config-reference.html).
        source = model_source(str(answers["model"]))
        hub_id = catalog_hub_id(answers["model"]) if source is None else None
        if source is not None:
            base_model, revision = source
        elif hub_id:
            # A model named from the catalogue: its base weights' repository, said as such in the file (a chat
            # or instruct variant has an id of its own).
            base_model = hub_id
        else:
            base_model, placeholder = BASE_MODEL_PLACEHOLDER, True
    return {
        "base_model": base_model,
        "base_model_from": catalog_model(answers["model"]) if hub_id else None,
        "base_model_revision": revision,
        "base_model_placeholder": placeholder,
        "dataset_placeholder": DATASET_PLACEHOLDER,
        # By GPU generation: FlashAttention-2 (Ampere and newer), xformers (Turing), else SDPA.
        "attn_implementation": attention,
        # Packing needs an attention backend that handles variable-length samples; Axolotl's
        # validator refuses it for preference training ("`sample_packing: true` does not work with
        # RLHF training", axolotl/utils/schemas/validation.py).
        "sample_packing": attention in VARLEN_ATTENTION and answers.get("objective") != "dpo",
        "dpo": answers.get("objective") == "dpo",
        # DPO: TRL's DPOConfig default for a full fine-tune (1e-6; "DPO Trainer",
        # https://huggingface.co/docs/trl/main/dpo_trainer), 5e-6 for adapters as LLaMA-Factory's LoRA DPO
        # example has it (examples/train_lora/llama3_lora_dpo.yaml, https://github.com/hiyouga/LLaMA-Factory).
        "learning_rate": (1.0e-6 if answers["method"] == "full" else 5.0e-6)
        if answers.get("objective") == "dpo"
        else 2.0e-5
        if answers["method"] == "full"
        else 2.0e-4,
    }


def comment_lines(text: str, width: int = 96) -> list[str]:
    """Wrap text into YAML/shell comment lines (line breaks in user text cannot end a comment)."""
    return [f"# {line}" for line in wrap_words(str(text), width - 2)] or ["#"]


def wrap_words(text: str, width: int) -> list[str]:
    """Lines of at most `width` characters, broken at spaces only; each URL alone on its line, whole.

    textwrap's defaults break a long word and break after a hyphen ("multi-" / "node.html"),
    which makes a copied link, path or command wrong; a URL gets a line of its own so it can be
    copied (or clicked) whole, even when it is longer than `width`.
    """
    return list(_wrap_words(str(text), width))


# The same comments and notes are wrapped file after file, run after run: wrapped once each.
@lru_cache(maxsize=8192)
def _wrap_words(text: str, width: int) -> tuple[str, ...]:
    lines: list[str] = []
    words: list[str] = []
    for word in str(text).split():
        if not URL.match(word):
            words.append(word)
            continue
        lines += textwrap.wrap(" ".join(words), width, break_long_words=False, break_on_hyphens=False)
        lines.append(word)
        words = []
    lines += textwrap.wrap(" ".join(words), width, break_long_words=False, break_on_hyphens=False)
    return tuple(lines)
