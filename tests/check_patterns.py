"""Config patterns found in the upstream projects' own configs, each written small, with the verdict.

Each pattern is a config file written here (not copied from upstream) that reproduces what `check`
once got wrong on the configs of Axolotl, Accelerate, TRL, transformers and DeepSpeedExamples
(bench/check_corpus.py runs `check` over them), with what `check` must say and what the real
tool says of the same file. tests/test_checks.py asserts the first for every pattern;
tests/test_real_tools.py runs the real tool on every file in one batch and asserts the second.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class Pattern:
    """One config file, what `check` finds in it, and what the real tool does with it.

    Attributes:
        name: What the pattern is, as a test id.
        file: The file name (its suffix matters to format detection).
        text: The file's content.
        fmt: The format `check` must detect ("none": none of the three).
        tool: The real tool that reads the file: "accelerate", "deepspeed" or "axolotl".
        rejects: A text of the real tool's error when it refuses the file; "" when it accepts it.
        errors: The check ids of every error finding `check` must give (none when it accepts).
        warnings: Check ids of warnings `check` must give (others may come too).
        absent: Check ids `check` must not give at all (the false errors and noisy advice fixed).
        world_size: The --world-size given to `check` and the ranks the real tool is run for.
        files: Other files beside it (a DeepSpeed JSON it references), name to content.
    """

    name: str
    file: str
    text: str
    fmt: str
    tool: str
    rejects: str = ""
    errors: frozenset[str] = frozenset()
    warnings: frozenset[str] = frozenset()
    absent: frozenset[str] = frozenset()
    world_size: int | None = None
    files: dict[str, str] = field(default_factory=dict)


def P(name: str, file: str, text: str, fmt: str, tool: str, **kw: object) -> Pattern:
    """A pattern; ``errors``, ``warnings`` and ``absent`` may be given as sets."""
    sets = {k: frozenset(v) for k, v in kw.items() if k in ("errors", "warnings", "absent")}  # type: ignore[arg-type]
    rest = {k: v for k, v in kw.items() if k not in sets}
    return Pattern(name, file, textwrap.dedent(text).lstrip(), fmt, tool, **sets, **rest)  # type: ignore[arg-type]


# The smallest Axolotl 0.21 config validate_config accepts offline; each Axolotl pattern adds to it.
AXOLOTL_BASE = """
base_model: HuggingFaceTB/SmolLM2-135M
datasets:
  - path: tatsu-lab/alpaca
    type: alpaca
micro_batch_size: 1
num_epochs: 1
learning_rate: 0.0002
"""


def axolotl(name: str, extra: str, **kw: object) -> Pattern:
    """An Axolotl pattern: the base config plus ``extra`` lines."""
    return P(name, f"{name}.yaml", AXOLOTL_BASE + textwrap.dedent(extra).lstrip(), "axolotl", "axolotl", **kw)


PATTERNS: list[Pattern] = [
    # 1. Format detection: a cloud launcher's YAML is no Accelerate config (the loader refuses it),
    # and `check` says it is none of the formats instead of giving Accelerate's errors.
    P("cloud-launcher-yaml", "cloud.yaml", """
        provider: modal
        gpu: h100
        gpu_count: 8
        branch: main
        timeout: 86400
        """, "none", "accelerate", rejects="A `distributed_type` must be specified",
        absent={"acc-unknown-key", "acc-distributed-type-missing"}),
    # TRL's CLI config shares learning_rate with Axolotl, which refuses it (no datasets): not Axolotl's.
    P("trl-cli-config", "sft.yaml", """
        model_name_or_path: Qwen/Qwen2.5-0.5B
        dataset_name: stanfordnlp/imdb
        learning_rate: 0.0001
        lr_scheduler_type: cosine
        attn_implementation: sdpa
        """, "none", "axolotl", rejects="either datasets or pretraining_dataset is required",
        absent={"ax-unknown-key"}),
    # A plain DeepSpeed JSON without zero_optimization, with a key DeepSpeed does not know.
    P("deepspeed-json-without-zero", "ds.json", """
        {"train_batch_size": 8, "train_micro_batch_size_per_gpu": 8, "steps_per_print": 10,
         "prescale_gradients": false, "my_note": "bert"}
        """, "deepspeed", "deepspeed", absent={"acc-unknown-key", "ds-zero-missing"},
        warnings={"ds-zero-missing-plain", "ds-unknown-top-key"}),
    # 2. distributed_type 'NO' with both blocks: they are unused, so warnings only.
    P("no-type-with-unused-blocks", "launch.yaml", """
        compute_environment: LOCAL_MACHINE
        distributed_type: 'NO'
        mixed_precision: 'no'
        num_processes: 1
        deepspeed_config:
          deepspeed_config_file: missing_ds.json
          zero3_init_flag: true
        fsdp_config:
          fsdp_sync_module_states: false
          fsdp_cpu_ram_efficient_loading: true
        """, "accelerate", "accelerate",
        warnings={"acc-deepspeed-config-unused", "acc-fsdp-config-unused"},
        absent={"acc-deepspeed-and-fsdp", "ds-file-missing", "acc-fsdp-ram-loading-sync"}),
    # 3. DeepSpeed sequence parallel with a data-parallel shard size beside it (ALST/Ulysses).
    P("deepspeed-sp-with-dp-shard", "alst.yaml", """
        compute_environment: LOCAL_MACHINE
        distributed_type: DEEPSPEED
        mixed_precision: bf16
        num_machines: 1
        num_processes: 4
        deepspeed_config:
          zero_stage: 3
          zero3_init_flag: true
        parallelism_config:
          parallelism_config_dp_shard_size: 2
          parallelism_config_sp_size: 2
          parallelism_config_sp_backend: deepspeed
          parallelism_config_sp_seq_length_is_variable: true
          parallelism_config_sp_attn_implementation: sdpa
        """, "accelerate", "accelerate", absent={"acc-parallel-needs-fsdp2", "acc-parallel-product"}),
    # 6. Axolotl 0.21: sample packing with sdpa is safe, DeepSpeed with context parallel is Ulysses,
    # and context parallel wraps sdpa as well as flash attention.
    P("axolotl-sdpa-packing-deepspeed-cp", "sft.yaml", """
        base_model: HuggingFaceTB/SmolLM2-135M
        datasets:
          - path: tatsu-lab/alpaca
            type: alpaca
        output_dir: ./out
        sequence_len: 2048
        sample_packing: true
        attn_implementation: sdpa
        micro_batch_size: 1
        gradient_accumulation_steps: 1
        num_epochs: 1
        learning_rate: 0.0002
        bf16: true
        deepspeed: zero2.json
        context_parallel_size: 2
        """, "axolotl", "axolotl", world_size=2, absent={"ax-packing-attn", "ax-deepspeed-mesh", "ax-cp-attn"},
        files={"zero2.json": '{"zero_optimization": {"stage": 2}, "train_micro_batch_size_per_gpu": "auto"}'}),
    # A missing fsdp_version is filled by Axolotl 0.21: an info at most.
    P("axolotl-fsdp-without-version", "fsdp.yaml", """
        base_model: HuggingFaceTB/SmolLM2-135M
        datasets:
          - path: tatsu-lab/alpaca
            type: alpaca
        micro_batch_size: 1
        num_epochs: 1
        learning_rate: 0.0002
        fsdp_config:
          auto_wrap_policy: TRANSFORMER_BASED_WRAP
          state_dict_type: FULL_STATE_DICT
          reshard_after_forward: true
        """, "axolotl", "axolotl", world_size=2),
    # 4. A key written twice in a YAML file Accelerate loads (PyYAML keeps the later value).
    P("accelerate-duplicate-key", "twice.yaml", """
        compute_environment: LOCAL_MACHINE
        debug: false
        distributed_type: MULTI_GPU
        num_processes: 2
        gpu_ids: all
        debug: true
        """, "accelerate", "accelerate", warnings={"duplicate-key"}),
    # Accelerate 1.15 takes a parallelism_config under MULTI_GPU too (its validator accepts FSDP2,
    # MULTI_<device> and DEEPSPEED); under 'NO' the launcher does not pass it on.
    P("multi-gpu-tensor-parallel", "tp.yaml", """
        compute_environment: LOCAL_MACHINE
        distributed_type: MULTI_GPU
        mixed_precision: bf16
        num_machines: 1
        num_processes: 2
        parallelism_config:
          parallelism_config_tp_size: 2
        """, "accelerate", "accelerate", absent={"acc-parallel-needs-fsdp2"}),
    P("no-type-with-parallelism", "one.yaml", """
        compute_environment: LOCAL_MACHINE
        distributed_type: 'NO'
        num_processes: 1
        parallelism_config:
          parallelism_config_tp_size: 2
        """, "accelerate", "accelerate", warnings={"acc-parallel-unused"}),
    # 5. Batch keys: DeepSpeed derives the missing one, so no identity error for a JSON with two;
    # with none of the two batch sizes it stops, under every launcher.
    P("deepspeed-derives-accumulation", "ds.json", """
        {"zero_optimization": {"stage": 2}, "train_batch_size": 32, "train_micro_batch_size_per_gpu": 2}
        """, "deepspeed", "deepspeed", world_size=8, absent={"ds-batch-identity", "ds-batch-zero"}),
    P("deepspeed-no-batch-size", "ds.json", """
        {"zero_optimization": {"stage": 2}, "gradient_accumulation_steps": 4}
        """, "deepspeed", "deepspeed", world_size=2, errors={"ds-batch-missing"},
        rejects="Either train_batch_size or train_micro_batch_size_per_gpu"),
    # 7. Batch arithmetic that leaves zero accumulation steps (or a zero micro batch) at this world size.
    P("deepspeed-zero-accumulation", "ds.json", """
        {"zero_optimization": {"stage": 1}, "train_batch_size": 4, "train_micro_batch_size_per_gpu": 1}
        """, "deepspeed", "deepspeed", world_size=8, errors={"ds-batch-zero"},
        rejects="Gradient accumulation steps: 0"),
    P("deepspeed-zero-micro-batch", "ds.json", """
        {"zero_optimization": {"stage": 0}, "train_batch_size": 1}
        """, "deepspeed", "deepspeed", world_size=8, rejects="Micro batch size per gpu: 0", errors={"ds-batch-zero"}),
    # A bound from DeepSpeed's own field metadata (transformers' ZeRO-3 test config writes 0 here).
    P("deepspeed-reduce-bucket-zero", "ds.json", """
        {"zero_optimization": {"stage": 3, "reduce_bucket_size": 0}, "train_micro_batch_size_per_gpu": 1}
        """, "deepspeed", "deepspeed", world_size=2, errors={"ds-value-range"},
        rejects="reduce_bucket_size\n  Input should be greater than 0"),
    # The deprecated spelling still works in 0.19.8: a warning, never an error.
    P("deepspeed-deprecated-gather", "ds.json", """
        {"zero_optimization": {"stage": 3, "stage3_gather_fp16_weights_on_model_save": true},
         "train_micro_batch_size_per_gpu": 1}
        """, "deepspeed", "deepspeed", world_size=2, warnings={"ds-deprecated-key"}),
    # 7. Axolotl 0.21's schema: wrong kinds (from its annotations), removed keys (from its
    # deprecated-parameter validators), keys that need a companion, expert parallel's state dict.
    axolotl("axolotl-warmup-fraction", "warmup_steps: 0.1\n", errors={"ax-value-type"},
            rejects="warmup_steps\n  Input should be a valid integer, got a number with a fractional part"),
    axolotl("axolotl-output-dir-null", "output_dir:\n", errors={"ax-value-type"},
            rejects="output_dir\n  Input should be a valid string"),
    axolotl("axolotl-tokens-mapping", "tokens:\n  pad: <pad>\n", errors={"ax-value-type"},
            rejects="tokens\n  Input should be a valid list"),
    axolotl("axolotl-max-packed-sequence-len", "max_packed_sequence_len: 2048\n", errors={"ax-removed-key"},
            rejects="`max_packed_sequence_len` is no longer supported"),
    axolotl("axolotl-flash-attn-rms-norm", "flash_attn_rms_norm: true\n", errors={"ax-removed-key"},
            rejects="`flash_attn_rms_norm` is no longer supported"),
    axolotl("axolotl-early-stopping-alone", "early_stopping_patience: 3\n", errors={"ax-early-stopping"},
            rejects="`early_stopping_patience` requires save_steps and eval_steps"),
    axolotl("axolotl-save-best-without-metric", "save_strategy: best\n", errors={"ax-save-best-metric"},
            rejects="save_strategy: 'best' requires metric_for_best_model"),
    axolotl("axolotl-expert-parallel-sharded", """
        expert_parallel_size: 2
        fsdp_version: 2
        fsdp_config:
          state_dict_type: SHARDED_STATE_DICT
          reshard_after_forward: true
        """, world_size=2, errors={"ax-ep-state-dict"},
        rejects="requires fsdp_config.state_dict_type: FULL_STATE_DICT"),
    axolotl("axolotl-ebft-strided-compile", """
        rl: ebft
        ebft:
          mode: strided
          stride: 8
        attn_implementation: flex_attention
        gradient_checkpointing: true
        torch_compile: true
        """, errors={"ax-ebft-compile"},
            rejects="EBFT strided mode: `torch_compile: true` with `gradient_checkpointing"),
    # Packing with a hub kernel that does not isolate samples: Axolotl warns, and so does check.
    axolotl("axolotl-packing-hub-kernel", """
        sample_packing: true
        attn_implementation: kernels-community/vllm-flash-attn3
        """, warnings={"ax-packing-attn"}),
    # The fixed twins: the same keys, written the way the schema takes them.
    axolotl("axolotl-schema-twins", """
        warmup_steps: 10
        output_dir: ./out
        tokens: ["<pad>"]
        early_stopping_patience: 3
        save_steps: 100
        eval_steps: 50
        val_set_size: 0.05
        """, absent={"ax-value-type", "ax-early-stopping"}),
    axolotl("axolotl-save-best-with-metric", "save_strategy: best\nmetric_for_best_model: eval_loss\n",
            absent={"ax-save-best-metric"}),
]  # fmt: skip


def write(pattern: Pattern, folder: Path) -> Path:
    """Write the pattern's file (and the files beside it) into ``folder``; return the file's path."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in pattern.files.items():
        (folder / name).write_text(textwrap.dedent(text).lstrip(), encoding="utf-8")
    path = folder / pattern.file
    path.write_text(pattern.text, encoding="utf-8")
    return path
