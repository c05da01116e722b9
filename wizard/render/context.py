"""Everything the templates need, as plain values, computed from a recommendation.

The templates stay free of decisions: this module turns the engine's outcome into concrete
settings (file names, precision flags, the FSDP block, the Axolotl starter values).
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wizard.engine.answers import looks_like_path
from wizard.engine.catalog import lookup_gpu
from wizard.engine.evaluate import Recommendation
from wizard.engine.tree import Tree

ACCELERATE_CONFIG = "accelerate_config.yaml"
AXOLOTL_CONFIG = "axolotl.yaml"
DEEPSPEED_CONFIG = "ds_config.json"
LAUNCH_SCRIPT = "launch.sh"
SLURM_SCRIPT = "slurm.sbatch"
ANSWERS_FILE = "answers.yaml"
BASE_MODEL_PLACEHOLDER = "REPLACE-ME/base-model"
DATASET_PLACEHOLDER = "REPLACE-ME/your-dataset"
MAIN_PROCESS_PORT = 29500


@dataclass(frozen=True)
class RenderPlan:
    """Which files to render, in order, and the context they share."""

    files: tuple[tuple[str, str], ...]  # (output name, template name)
    context: Mapping[str, Any]


def plan_render(tree: Tree, rec: Recommendation, answers: Mapping[str, Any], user_deepspeed: str | None) -> RenderPlan:
    """Decide the output files and build the template context for them."""
    settings = rec.settings
    backend = str(rec.backend)
    target = answers["target"]
    uses_deepspeed = backend == "deepspeed"
    write_ds = uses_deepspeed and user_deepspeed is None
    ds_path = user_deepspeed if user_deepspeed is not None else (DEEPSPEED_CONFIG if uses_deepspeed else None)
    config_name = ACCELERATE_CONFIG if target == "accelerate" else AXOLOTL_CONFIG
    launch = f"./{LAUNCH_SCRIPT}" + (" YOUR_TRAINING_SCRIPT.py" if target == "accelerate" else "")
    context: dict[str, Any] = {
        "target": target,
        "backend": backend,
        "backend_title": tree.backends[backend].title,
        "rule_id": rec.rule.id,
        "guidance": rec.rule.guidance,
        "sources": ", ".join(rec.rule.sources),
        "because": rec.because,
        "distributed_type": tree.backends[backend].distributed_type,
        "hardware": answers["hardware"],
        "mixed_precision": settings["mixed_precision"],
        "num_processes": settings["num_processes"],
        "num_machines": settings["num_machines"],
        "gpus_per_node": answers.get("gpus_per_node", 1),
        "main_process_port": answers.get("main_process_port", MAIN_PROCESS_PORT),
        "main_process_ip": answers.get("main_process_ip"),
        "same_network": answers.get("same_network", True),
        "zero_stage": settings["zero_stage"],
        "offload_optimizer": settings["offload_optimizer"],
        "offload_param": settings["offload_param"],
        "nvme_path": answers.get("nvme_path"),
        "deepspeed_path": ds_path,
        "user_deepspeed": user_deepspeed is not None,
        "gradient_checkpointing": bool(answers.get("gradient_checkpointing", False)),
        "layer_class": rec.facts.shape.layer_class if rec.facts.shape else None,
        "sequence_length": answers["sequence_length"],
        "micro_batch_size": answers["micro_batch_size"],
        "method": answers["method"],
        "config_name": config_name,
        "launch_command": launch,
        "warnings": list(rec.warnings),
    }
    if target == "axolotl":
        context.update(_axolotl_values(answers))
    files: list[tuple[str, str]] = [(config_name, f"{config_name}.j2")]
    if write_ds:
        files.append((DEEPSPEED_CONFIG, f"{DEEPSPEED_CONFIG}.j2"))
    files.append((LAUNCH_SCRIPT, f"launch_{target}.sh.j2"))
    if settings["num_machines"] > 1:
        files.append((SLURM_SCRIPT, f"{SLURM_SCRIPT}.j2"))
    return RenderPlan(tuple(files), context)


def _axolotl_values(answers: Mapping[str, Any]) -> dict[str, Any]:
    gpu = lookup_gpu(answers.get("gpu_model"))
    flash = answers["hardware"] == "nvidia" and (gpu.flash_attention if gpu else True)
    base_model = answers.get("base_model")
    placeholder = False
    if not base_model:
        model = str(answers["model"])
        if looks_like_path(model):
            path = Path(model)
            base_model = str(path.parent if path.name == "config.json" else path)
        else:
            base_model, placeholder = BASE_MODEL_PLACEHOLDER, True
    return {
        "base_model": base_model,
        "base_model_placeholder": placeholder,
        "dataset_placeholder": DATASET_PLACEHOLDER,
        # FlashAttention-2 needs an Ampere-or-newer NVIDIA GPU; SDPA works everywhere (ROCm too).
        "attn_implementation": "flash_attention_2" if flash else "sdpa",
        "sample_packing": flash,
        "learning_rate": 2.0e-5 if answers["method"] == "full" else 2.0e-4,
    }


def comment_lines(text: str, width: int = 96) -> list[str]:
    """Wrap text into YAML/shell comment lines (line breaks in user text cannot end a comment)."""
    flat = " ".join(str(text).split())
    return [f"# {line}" for line in textwrap.wrap(flat, width - 2)] or ["#"]
