"""The add-ons asked after the decision (performance features, layer and activation offloading).

* each is asked only where it applies to the decided backend and hardware, and never together
  with what it conflicts with (disabled choices say why);
* what each writes: Accelerate's fp8_config and dynamo_config, Axolotl's fp8/compile/plugin keys
  and memory levers, the attention backend per GPU generation, train_snippet.py for what lives in
  Python, and the install list;
* the real tools accept every kind of output (Accelerate's loader, launch checks, FP8 recipe and
  dynamo plugin; Axolotl's validator with the plugins' own argument models), and the snippet
  really runs under `accelerate launch` on the CPU (Local SGD over MULTI_CPU, a DDP hook over gloo).
"""

from __future__ import annotations

import os
import py_compile
import re
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from addon_tools import (
    accelerate_addon_dry_run,
    assert_names_exist,
    axolotl_validate_addons,
    h100_capabilities,
    imported_names,
)

from helpers import decide, decided_paths, file, ignored, parsed, tree
from realtools import require_tool, tool_env
from scenario_data import answers as scenario_answers
from scenario_data import scenario
from wizard.engine.advice import LOSS_PEAK_WARNINGS
from wizard.engine.catalog import lookup_gpu
from wizard.engine.facts import Inputs, derive_facts
from wizard.errors import DeepSpeedConfigError, InvalidAnswerError
from wizard.render.addons import addon_values, axolotl_attention
from wizard.session import Sources, Step, collect

ADDONS = [
    "tune",
    "load_in_8bit",
    "fp8",
    "torch_compile",
    "ddp_comm_hook",
    "local_sgd_steps",
    "liger",
    "profiler_steps",
    "activation_offloading",
]
GPU: dict[str, Any] = {
    "target": "accelerate",
    "hardware": "nvidia",
    "num_nodes": 1,
    "micro_batch_size": 1,
    "sequence_length": 2048,
}
H100 = {**GPU, "gpu_model": "H100", "gpu_memory_gb": 80, "method": "full"}
SINGLE = {**H100, "gpus_per_node": 1, "model": "1B"}  # single_gpu
DDP = {**H100, "gpus_per_node": 2, "model": "1B"}  # ddp
FSDP2 = {**H100, "gpus_per_node": 8, "model": "8B", "sequence_length": 4096}  # fsdp2
DEEPSPEED = {**H100, "gpus_per_node": 2, "model": "7B", "offload": "cpu"}  # deepspeed ZeRO-2 + offload
USER_ZERO3 = Path(__file__).resolve().parent / "assets" / "ds_zero3.json"
MULTI_CPU = {"target": "accelerate", "hardware": "cpu", "cpu_processes": 2, "model": "125M", "method": "full"}
AXOLOTL_LORA = {**GPU, "target": "axolotl", "gpu_model": "A100", "gpus_per_node": 1, "gpu_memory_gb": 80}
AXOLOTL_LORA |= {"model": "1B", "method": "lora"}


class Recorder:
    """A prompter that answers from a dict, else takes the default, and records every step."""

    def __init__(self, answers: Mapping[str, Any]) -> None:
        self.answers = answers
        self.steps: dict[str, Step] = {}

    def ask(self, step: Step) -> Any:
        self.steps[step.question.id] = step
        value = self.answers.get(step.question.id, step.default)
        return None if value is None else step.validate(value)

    def review(self, tree: Any, answers: Any) -> str | None:
        return None

    def why_not(self, rec: Any, *, brief: bool = True) -> None:
        return None


def asked(answers: Mapping[str, Any]) -> dict[str, Step]:
    """The add-on questions an interactive run asks for these answers (the others are given)."""
    recorder = Recorder(answers)
    collect(tree(), Sources(prompter=recorder))
    return {qid: step for qid, step in recorder.steps.items() if qid in ADDONS}


# --- which add-ons are asked ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("answers", "expected"),
    [
        # Not tuning: only Local SGD on CPU processes and Axolotl's memory levers come without it.
        ({**SINGLE, "tune": False}, {"tune"}),
        # FP8 on an H100 full fine-tune; DDP-only hooks only on DDP; Local SGD not beside a hook.
        ({**SINGLE, "tune": True}, {"tune", "fp8", "torch_compile"}),
        ({**DDP, "tune": True}, {"tune", "fp8", "torch_compile", "ddp_comm_hook", "local_sgd_steps"}),
        ({**DDP, "tune": True, "ddp_comm_hook": "fp16"}, {"tune", "fp8", "torch_compile", "ddp_comm_hook"}),
        ({**FSDP2, "tune": True}, {"tune", "fp8", "torch_compile"}),
        # DeepSpeed: the precision is the JSON's, so no FP8.
        ({**DEEPSPEED, "tune": True}, {"tune", "torch_compile"}),
        # No FP8 tensor cores (A100), an unknown GPU, or a LoRA run: no FP8 question.
        ({**SINGLE, "gpu_model": "A100", "tune": True}, {"tune", "torch_compile"}),
        ({**{k: v for k, v in SINGLE.items() if k != "gpu_model"}, "tune": True}, {"tune", "torch_compile"}),
        # LoRA on one GPU: the 8-bit base model is offered.
        ({**SINGLE, "method": "lora", "tune": True}, {"tune", "load_in_8bit", "torch_compile"}),
        (MULTI_CPU, {"local_sgd_steps"}),
        ({**MULTI_CPU, "cpu_processes": 1}, set()),
        ({"target": "accelerate", "hardware": "mps", "gpu_memory_gb": 32, "model": "1B", "method": "lora"}, set()),
        # Refused (nothing fits): nothing to add.
        ({**SINGLE, "gpu_memory_gb": 16, "model": "70B", "offload": "none", "tune": True}, set()),
        (
            {**AXOLOTL_LORA, "tune": True},
            {
                "tune",
                "load_in_8bit",
                "torch_compile",
                "liger",
                "profiler_steps",
            },
        ),
        ({**AXOLOTL_LORA, "gpus_per_node": 8, "model": "70B", "method": "qlora", "tune": False}, {"tune"}),
        (
            {**FSDP2, "target": "axolotl", "sequence_length": 16384, "gradient_checkpointing": True, "tune": False},
            {"tune", "activation_offloading"},
        ),
        ({**FSDP2, "target": "axolotl", "sequence_length": 4096, "tune": False}, {"tune"}),
    ],
)
def test_each_addon_is_asked_only_where_it_applies(answers: dict[str, Any], expected: set[str]) -> None:
    assert set(asked(answers)) == expected


def test_the_addon_list_is_the_trees() -> None:
    assert set(ADDONS) == tree().addon_ids


def test_conflicting_choices_are_disabled_with_the_reason() -> None:
    axolotl = asked({**DDP, "target": "axolotl", "tune": True})["fp8"]
    assert set(axolotl.disabled) == {"te", "msamp"} and "torchao only" in axolotl.disabled["te"]
    sharded = asked({**FSDP2, "tune": True})["fp8"]
    assert set(sharded.disabled) == {"msamp"} and "never with FSDP" in sharded.disabled["msamp"]
    assert not asked({**DDP, "tune": True})["fp8"].disabled
    volta = asked({**DDP, "gpu_model": "V100", "gpu_memory_gb": 32, "tune": True})["ddp_comm_hook"]
    assert volta.disabled == {"bf16": "this GPU has no bf16 support"}


def test_a_disabled_choice_in_an_answers_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidAnswerError) as info:
        decide({**FSDP2, "tune": True, "fp8": "msamp"}, tmp_path)
    assert info.value.key == "fp8" and "never with FSDP" in info.value.message


def test_addon_answers_that_do_not_apply_are_ignored_with_a_warning(tmp_path: Path) -> None:
    result = decide({**DEEPSPEED, "tune": True, "fp8": "te", "ddp_comm_hook": "fp16"}, tmp_path)
    assert "fp8" not in result.session.answers and "ddp_comm_hook" not in result.session.answers
    assert ignored("fp8", result.warnings)


def test_defaults_keep_the_decided_configuration(tmp_path: Path) -> None:
    result = decide(SINGLE, tmp_path)
    assert result.session.answers["tune"] is False
    acc = parsed(result, "accelerate_config.yaml")
    assert acc["mixed_precision"] == "bf16" and "fp8_config" not in acc and "dynamo_config" not in acc
    assert [f.name for f in result.files] == ["accelerate_config.yaml", "launch.sh", "answers.yaml"]


# Integer add-ons: off, and a value in range.
INTEGER_VALUES = {"local_sgd_steps": [0, 8], "profiler_steps": [0, 100]}


def addon_combinations(base: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every combination of add-on answers an interactive run can give after `base`.

    Depth first over the add-on questions as the wizard asks them: each run answers with a fixed
    prefix of choice indices and the first value after it, then every later position is
    branched on, so each reachable combination (disabled choices excluded) comes once.
    """
    found: list[dict[str, Any]] = []

    def run(prefix: list[int]) -> None:
        widths: list[int] = []

        class Walker:
            def ask(self, step: Step) -> Any:
                qid = step.question.id
                if qid not in ADDONS:
                    return None if step.default is None else step.validate(step.default)
                if step.question.type == "choice":
                    domain: list[Any] = [c.id for c in step.question.choices if c.id not in step.disabled]
                elif step.question.type == "yesno":
                    domain = [False, True]
                else:
                    domain = INTEGER_VALUES[qid]
                index = prefix[len(widths)] if len(widths) < len(prefix) else 0
                widths.append(len(domain))
                return step.validate(domain[index])

            def review(self, tree: Any, answers: Any) -> str | None:
                return None

        session = collect(tree(), Sources(file_values=dict(base), prompter=Walker()))
        found.append({k: v for k, v in session.answers.items() if k in ADDONS})
        for position in range(len(prefix), len(widths)):
            for value in range(1, widths[position]):
                run(prefix + [0] * (position - len(prefix)) + [value])

    run([])
    return found


COMBINATION_BASES = {
    "single": SINGLE,
    "ddp": DDP,
    "fsdp2": FSDP2,
    "deepspeed": DEEPSPEED,
    "multi_cpu": MULTI_CPU,
    "qlora_fsdp2": {**GPU, "gpu_model": "RTX 4090", "gpus_per_node": 2, "gpu_memory_gb": 24, "model": "70B",
                    "method": "qlora", "offload": "cpu"},
    "axolotl_lora": AXOLOTL_LORA,
    "axolotl_ddp_fp8": {**DDP, "target": "axolotl"},
    "axolotl_fsdp2_long": {**FSDP2, "target": "axolotl", "sequence_length": 16384, "gradient_checkpointing": True},
}  # fmt: skip


@pytest.mark.parametrize("base", sorted(COMBINATION_BASES))
def test_every_addon_combination_passes_the_wizards_own_checks(tmp_path: Path, base: str) -> None:
    """Each combination renders and passes `check` on every file (the wizard refuses its own
    output with exit 6 otherwise), and every chosen add-on leaves a trace in the files."""
    combinations = addon_combinations(COMBINATION_BASES[base])
    assert len(combinations) >= 2
    accelerate = COMBINATION_BASES[base]["target"] == "accelerate"
    for addons in combinations:
        result = decide({**COMBINATION_BASES[base], **addons}, tmp_path)
        assert not result.recommendation.refused and not [k for k in addons if k not in result.session.answers]
        text = "\n".join(f.text for f in result.files if f.name != "answers.yaml")
        expected = {
            "fp8": {"te": "backend: TE", "ao": "backend: AO" if accelerate else "fp8: true", "msamp": "backend: MSAMP"},
            "ddp_comm_hook": {h: f"DDPCommunicationHookType.{h.upper()}" for h in ("fp16", "bf16", "power_sgd")},
            "activation_offloading": {"hidden_states": "activation_offloading: hidden_states", "legacy": "legacy"},
        }
        for key, value in addons.items():
            marker = expected.get(key, {}).get(value) if isinstance(value, str) else None
            if marker is not None:
                assert marker in text, (key, value)
        if addons.get("local_sgd_steps"):
            assert "local_sgd_steps = 8" in text
        if addons.get("torch_compile"):
            assert "dynamo_backend: INDUCTOR" in text or "TorchDynamoPlugin(" in text or "torch_compile: true" in text
        for key in ("liger", "cut_cross_entropy", "layer_offloading"):
            if addons.get(key):
                assert {"liger": "LigerPlugin", "cut_cross_entropy": "CutCrossEntropyPlugin"}.get(key, key) in text


# --- what Accelerate gets ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("answers", "fp8_config", "ram_efficient"),
    [
        (
            {**FSDP2, "fp8": "te"},
            {"backend": "TE", "fp8_format": "HYBRID", "amax_history_len": 1024, "amax_compute_algo": "most_recent"},
            True,
        ),
        # Accelerate refuses torchao with FSDP2 and RAM-efficient loading.
        (
            {**FSDP2, "fp8": "ao"},
            {"backend": "AO", "enable_fsdp_float8_all_gather": True, "pad_inner_dim": True},
            False,
        ),
        ({**DDP, "fp8": "ao"}, {"backend": "AO", "enable_fsdp_float8_all_gather": False, "pad_inner_dim": True}, None),
        ({**DDP, "fp8": "msamp"}, {"backend": "MSAMP", "opt_level": "O2"}, None),
        (
            {**SINGLE, "fp8": "te"},
            {"backend": "TE", "fp8_format": "HYBRID", "amax_history_len": 1024, "amax_compute_algo": "most_recent"},
            None,
        ),
    ],
)
def test_accelerate_fp8_config(
    tmp_path: Path, answers: dict[str, Any], fp8_config: dict[str, Any], ram_efficient: bool | None
) -> None:
    result = decide({**answers, "tune": True}, tmp_path)
    acc = parsed(result, "accelerate_config.yaml")
    assert acc["mixed_precision"] == "fp8" and acc["fp8_config"] == fp8_config
    if ram_efficient is not None:
        assert acc["fsdp_config"]["fsdp_cpu_ram_efficient_loading"] is ram_efficient
    package = {"TE": "transformer-engine", "AO": "torchao", "MSAMP": "MS-AMP"}[fp8_config["backend"]]
    assert package in file(result, "launch.sh").text.split("set -euo")[0]


@pytest.mark.parametrize(("checkpointing", "regional"), [(True, False), (False, True)])
def test_accelerate_dynamo_config(tmp_path: Path, checkpointing: bool, regional: bool) -> None:
    answers = {**DDP, "tune": True, "torch_compile": True, "gradient_checkpointing": checkpointing}
    acc = parsed(decide(answers, tmp_path), "accelerate_config.yaml")
    assert acc["dynamo_config"] == {
        "dynamo_backend": "INDUCTOR",
        "dynamo_mode": "default",
        "dynamo_use_fullgraph": False,
        "dynamo_use_dynamic": False,
        "dynamo_use_regional_compilation": regional,
    }


def test_torch_compile_with_deepspeed_goes_to_python(tmp_path: Path) -> None:
    result = decide({**DEEPSPEED, "tune": True, "torch_compile": True}, tmp_path)
    assert "dynamo_config" not in parsed(result, "accelerate_config.yaml")
    snippet = file(result, "train_snippet.py").text
    assert "TorchDynamoPlugin(" in snippet and "dynamo_plugin=dynamo" in snippet


def test_torch_compile_defaults_to_yes_with_torchao_fp8() -> None:
    steps = asked({**DDP, "tune": True, "fp8": "ao"})
    assert steps["torch_compile"].default is True
    assert asked({**DDP, "tune": True, "fp8": "te"})["torch_compile"].default is False


# --- train_snippet.py ------------------------------------------------------------------------------


SNIPPET_CASES = {
    "local_sgd_cpu": {**MULTI_CPU, "local_sgd_steps": 4},
    "local_sgd_ddp": {**DDP, "tune": True, "local_sgd_steps": 16},
    "hook_bf16": {**DDP, "tune": True, "ddp_comm_hook": "bf16"},
    "hook_power_sgd": {**DDP, "tune": True, "ddp_comm_hook": "power_sgd"},
    "hook_batched_power_sgd": {**DDP, "tune": True, "ddp_comm_hook": "batched_power_sgd"},
    "qlora_single": {
        **GPU,
        "gpu_model": "RTX 4090",
        "gpus_per_node": 1,
        "gpu_memory_gb": 24,
        "model": "8B",
        "method": "qlora",
    },
    "qlora_fsdp2": {
        **GPU,
        "gpu_model": "RTX 4090",
        "gpus_per_node": 2,
        "gpu_memory_gb": 24,
        "model": "70B",
        "method": "qlora",
        "offload": "cpu",
    },
    "qlora_v100_ddp": {
        **GPU,
        "gpu_model": "V100",
        "gpus_per_node": 2,
        "gpu_memory_gb": 32,
        "model": "7B",
        "method": "qlora",
    },
    "compile_deepspeed": {**DEEPSPEED, "tune": True, "torch_compile": True},
    "lora_8bit_ddp": {**DDP, "method": "lora", "tune": True, "load_in_8bit": True},
    "context_parallel": {**FSDP2, "sequence_length": 131072},
}


def snippet(tmp_path: Path, case: str) -> str:
    return file(decide(SNIPPET_CASES[case], tmp_path), "train_snippet.py").text


def test_the_snippet_measures_the_peak_the_estimate_is_held_against(tmp_path: Path) -> None:
    """On a GPU, the --model run's memory is PyTorch's peak allocation plus the estimate's 1 GiB for the runtime.

    That is the peak the glossary's entry and the README's measurements compare with the estimate; the reserved
    figure (the caching allocator's blocks) is said beside it, never in its place.
    """
    code = snippet(tmp_path, "qlora_single")
    meter = code[code.index("class StepMeter") :]
    assert "allocated = torch.cuda.max_memory_allocated(self.device)" in meter
    assert "held = allocated + 2**30" in meter
    assert "held, what = torch.cuda.max_memory_reserved" not in meter
    from wizard.engine.glossary import lookup

    peak = lookup("peak")
    assert peak is not None and "torch.cuda.max_memory_allocated" in peak.definition
    assert "the 1 GiB of overhead" in peak.definition
    compile(code, "train_snippet.py", "exec")


def test_lora_on_an_8bit_base(tmp_path: Path) -> None:
    code = snippet(tmp_path / "accelerate", "lora_8bit_ddp")
    assert "BitsAndBytesConfig(load_in_8bit=True)" in code and "load_in_4bit=True" not in code
    assert "bitsandbytes, peft" in code.split("\n\n")[0]  # the header lists what to install
    axolotl = decide({**AXOLOTL_LORA, "tune": True, "load_in_8bit": True}, tmp_path / "axolotl")
    cfg = parsed(axolotl, "axolotl.yaml")
    assert cfg["load_in_8bit"] is True and cfg["adapter"] == "lora" and "load_in_4bit" not in cfg
    # Never offered where the 8-bit weights would be sharded (FSDP2) or for QLoRA's 4-bit base.
    sharded = {**FSDP2, "gpus_per_node": 8, "model": "70B", "method": "lora", "tune": True}
    assert decide(sharded, tmp_path / "sharded").recommendation.backend == "fsdp2"
    assert "load_in_8bit" not in asked(sharded)
    assert "load_in_8bit" not in asked({**DDP, "method": "qlora", "tune": True})


@pytest.mark.parametrize("case", sorted(SNIPPET_CASES))
def test_snippet_compiles(tmp_path: Path, case: str) -> None:
    path = tmp_path / "train_snippet.py"
    path.write_text(snippet(tmp_path, case))
    py_compile.compile(str(path), doraise=True)
    # Only argparse at the top: the heavy packages are imported where they are used.
    top = [line for line in path.read_text().splitlines() if line.startswith(("import ", "from "))]
    assert top == ["import argparse", "import sys"]


def test_snippet_settings(tmp_path: Path) -> None:
    hook = snippet(tmp_path / "a", "hook_bf16")
    assert "comm_hook=DDPCommunicationHookType.BF16," in hook and "LocalSGD" not in hook
    power = snippet(tmp_path / "b", "hook_power_sgd")
    assert "comm_hook=DDPCommunicationHookType.POWER_SGD," in power
    assert "comm_state_option={'matrix_approximation_rank': 1}," in power
    local = snippet(tmp_path / "c", "local_sgd_ddp")
    assert "local_sgd_steps = 16" in local and "DistributedDataParallelKwargs" not in local
    single = snippet(tmp_path / "d", "qlora_single")
    assert 'bnb_4bit_quant_type="nf4"' in single and "load_in_4bit=True" in single
    assert "bnb_4bit_compute_dtype=torch.bfloat16" in single and "load_in_8bit=" not in single
    assert 'device_map={"": accelerator.local_process_index}' in single and "quant_storage" not in single
    # Not prepare_model_for_kbit_training, whose fp32 embeddings, head and norms the estimate does not count.
    assert "prepare_model_for_kbit_training(" not in single
    assert 'model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})' in single
    assert "model.enable_input_require_grads()" in single
    sharded = snippet(tmp_path / "e", "qlora_fsdp2")
    assert "bnb_4bit_quant_storage=torch.bfloat16" in sharded and "device_map" not in sharded
    assert "bnb_4bit_compute_dtype=torch.float16" in snippet(tmp_path / "f", "qlora_v100_ddp")


def test_a_model_run_of_the_snippet_trains_on_the_planned_sequences(tmp_path: Path) -> None:
    """Invariant, over every path: a snippet that loads a real model (--model) defaults to the planned
    sequence length (padded for context parallel) and, without context parallel, the planned
    micro-batch, so its first steps meet the memory the plan was estimated for. Its own --help says so."""
    checked = 0
    for answers, result in decided_paths(tmp_path):
        found = [f for f in result.files if f.name == "train_snippet.py"]
        if not found or '"--model"' not in found[0].text:
            continue
        text, settings = found[0].text, result.recommendation.settings
        length = int(result.session.answers["sequence_length"])
        cp = int(settings.get("cp_size") or 1)
        padded = -(-length // (2 * cp)) * 2 * cp if cp > 1 else length
        assert f"default: {padded}" in text or f"else {padded}\n" in text, answers
        if cp == 1:
            # A DPO pair is two sequences: the plain batches hold twice the planned micro-batch's rows.
            pairs = 2 if result.session.answers.get("objective") == "dpo" else 1
            assert f"default={int(result.session.answers['micro_batch_size']) * pairs}," in text, answers
        assert ", 128)" not in text, answers  # no fixed toy length on a real model
        checked += 1
    assert checked
    case = {**SNIPPET_CASES["qlora_single"], "sequence_length": 2048, "micro_batch_size": 2}
    script = tmp_path / "run" / "train_snippet.py"
    decide(case, tmp_path / "run", write=True)
    shown = subprocess.run(
        [sys.executable, str(script), "--help"], capture_output=True, text=True, timeout=60, check=True
    ).stdout
    flat = " ".join(shown.split())
    assert "(default: 2048, the planned sequence_length)" in flat, shown
    assert "(default: 2, the planned micro_batch_size)" in flat, shown


def test_snippet_only_when_something_lives_in_python(tmp_path: Path) -> None:
    for answers in ({**DDP, "tune": True, "torch_compile": True}, {**MULTI_CPU, "local_sgd_steps": 0}):
        assert "train_snippet.py" not in [f.name for f in decide(answers, tmp_path).files]
    result = decide(SNIPPET_CASES["local_sgd_ddp"], tmp_path)
    assert "Before your own script: ./launch.sh train_snippet.py runs" in file(result, "launch.sh").text


@pytest.mark.tools
@pytest.mark.parametrize("case", sorted(SNIPPET_CASES))
def test_snippet_imports_exist_in_the_pinned_packages(tmp_path: Path, case: str) -> None:
    require_tool("accelerate")
    source = snippet(tmp_path, case)
    names = imported_names(source)
    assert ("accelerate", "Accelerator") in names
    if "qlora" in case:
        assert {("transformers", "BitsAndBytesConfig"), ("peft", "get_peft_model")} <= set(names)
    assert_names_exist(source)


# --- what Axolotl gets -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("gpu_model", "hardware", "attention"),
    [
        ("A10G", "nvidia", "flash_attention_2"),
        ("H100", "nvidia", "flash_attention_2"),
        ("L40S", "nvidia", "flash_attention_2"),
        ("T4", "nvidia", "xformers"),  # Turing: no FlashAttention-2 kernels; xformers is varlen
        ("RTX 2080", "nvidia", "xformers"),
        ("V100", "nvidia", "sdpa"),
        ("P100", "nvidia", "sdpa"),
        (None, "nvidia", "flash_attention_2"),
        ("MI300X", "amd", "sdpa"),
    ],
)
def test_attention_follows_the_gpu_generation(gpu_model: str | None, hardware: str, attention: str) -> None:
    assert axolotl_attention(hardware, lookup_gpu(gpu_model)) == attention


def test_turing_gets_xformers_and_keeps_packing(tmp_path: Path) -> None:
    answers = {**AXOLOTL_LORA, "gpu_model": "T4", "gpu_memory_gb": 16, "model": "1B", "method": "qlora"}
    result = decide(answers, tmp_path)
    cfg = parsed(result, "axolotl.yaml")
    assert cfg["attn_implementation"] == "xformers" and cfg["sample_packing"] is True and cfg["fp16"] is True
    # The requirement names what needs it, then the install command whole on its own line.
    requirement = "#   xformers (attn_implementation: xformers):\n#     pip install xformers\n"
    assert requirement in file(result, "launch.sh").text


def test_fp8_gpus_are_ada_hopper_blackwell_and_cdna3() -> None:
    fp8 = {name for name in ("H100", "H200", "B200", "L4", "L40S", "RTX 4090", "RTX 5090") if lookup_gpu(name).fp8}  # type: ignore[union-attr]
    assert len(fp8) == 7
    assert not any(lookup_gpu(name).fp8 for name in ("A100", "A10G", "RTX 3090", "V100", "T4", "MI250X"))  # type: ignore[union-attr]
    # The MI300X has FP8 matrix cores, but the FP8 add-ons (Transformer Engine, torchao, MS-AMP)
    # are offered on NVIDIA only.
    assert lookup_gpu("MI300X").fp8 is True  # type: ignore[union-attr]
    on_amd = derive_facts({"hardware": "amd", "gpu_model": "MI300X"}, Inputs())
    on_nvidia = derive_facts({"hardware": "nvidia", "gpu_model": "H100"}, Inputs())
    assert on_amd.values["gpu_fp8"] is False and on_nvidia.values["gpu_fp8"] is True


def test_axolotl_kernels_and_plugins(tmp_path: Path) -> None:
    both = parsed(
        decide({**AXOLOTL_LORA, "tune": True, "liger": True, "cut_cross_entropy": True}, tmp_path), "axolotl.yaml"
    )
    assert both["plugins"] == [
        "axolotl.integrations.liger.LigerPlugin",
        "axolotl.integrations.cut_cross_entropy.CutCrossEntropyPlugin",
    ]
    # One cross-entropy replacement: Cut Cross Entropy, so Liger's fused loss is off.
    assert both["cut_cross_entropy"] is True and both["liger_fused_linear_cross_entropy"] is False
    assert both["liger_rope"] is both["liger_rms_norm"] is both["liger_glu_activation"] is True
    liger = parsed(
        decide({**AXOLOTL_LORA, "tune": True, "liger": True, "profiler_steps": 20}, tmp_path), "axolotl.yaml"
    )
    assert liger["liger_fused_linear_cross_entropy"] is True and "cut_cross_entropy" not in liger
    assert liger["profiler_steps"] == 20


def test_liger_under_tensor_parallelism_drops_rmsnorm_and_the_fused_loss() -> None:
    answers = {**AXOLOTL_LORA, "tune": True, "liger": True}
    context = {
        "attn_implementation": "flash_attention_2",
        "mixed_precision": "bf16",
        "traits": tree().backends["fsdp2"].traits,
    }
    values = addon_values(answers, {"backend": "fsdp2", "tp_size": 2}, context)
    assert values["liger"] == {
        "liger_rope": True,
        "liger_rms_norm": False,
        "liger_glu_activation": True,
        "liger_fused_linear_cross_entropy": False,
    }


def test_activation_offloading_under_fsdp2_uses_the_models_checkpointing(tmp_path: Path) -> None:
    answers = {**FSDP2, "target": "axolotl", "sequence_length": 16384, "gradient_checkpointing": True}
    cfg = parsed(decide({**answers, "activation_offloading": "hidden_states"}, tmp_path), "axolotl.yaml")
    assert cfg["activation_offloading"] == "hidden_states" and cfg["gradient_checkpointing"] is True
    assert cfg["fsdp_config"]["activation_checkpointing"] is False
    plain = parsed(decide(answers, tmp_path), "axolotl.yaml")
    assert "activation_offloading" not in plain and plain["fsdp_config"]["activation_checkpointing"] is True


def test_layer_offloading_is_advised_when_tight_and_written_only_when_asked(tmp_path: Path) -> None:
    # Row 9 (8B QLoRA, 8k tokens, RTX 4090): about 72% of the usable memory. It fits, so nothing is
    # offloaded unasked; the summary names layer offloading as the lever if the run runs short.
    row9 = {**GPU, "target": "axolotl", "gpu_model": "RTX 4090", "gpus_per_node": 1, "gpu_memory_gb": 24}
    row9 |= {"model": "8B", "method": "qlora", "sequence_length": 8192}
    tight = decide(row9, tmp_path)
    assert tight.recommendation.facts.get("ddp_memory_tight") is True
    assert tight.session.answers["layer_offloading"] is False
    assert "layer_offloading" not in parsed(tight, "axolotl.yaml")
    assert any("set layer_offloading: true" in w for w in tight.warnings)
    asked = decide({**row9, "layer_offloading": True}, tmp_path)
    assert parsed(asked, "axolotl.yaml")["layer_offloading"] is True
    roomy = decide(AXOLOTL_LORA, tmp_path)
    assert roomy.session.answers["layer_offloading"] is False
    assert not any("layer_offloading" in w for w in roomy.warnings)


# --- the real tools ------------------------------------------------------------------------------

ACCELERATE_CASES = {
    "te_fsdp2": {**FSDP2, "tune": True, "fp8": "te", "torch_compile": True},
    "ao_fsdp2": {**FSDP2, "tune": True, "fp8": "ao"},
    "ao_ddp": {**DDP, "tune": True, "fp8": "ao", "torch_compile": False},
    "msamp_ddp": {**DDP, "tune": True, "fp8": "msamp"},
    "te_single": {**SINGLE, "tune": True, "fp8": "te"},
    "compile_ddp_hook": {**DDP, "tune": True, "torch_compile": True, "ddp_comm_hook": "power_sgd"},
    "compile_deepspeed": {**DEEPSPEED, "tune": True, "torch_compile": True},
    "local_sgd_cpu": {**MULTI_CPU, "local_sgd_steps": 4},
}


@pytest.mark.tools
@pytest.mark.parametrize("case", sorted(ACCELERATE_CASES))
def test_accelerate_accepts_the_addons(tmp_path: Path, case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # MULTI_CPU's launch check looks for mpirun, which the mpich wheel puts beside this Python.
    monkeypatch.setenv("PATH", os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]))
    decide(ACCELERATE_CASES[case], tmp_path, write=True)
    config = yaml.safe_load((tmp_path / "accelerate_config.yaml").read_text())
    summary = accelerate_addon_dry_run(tmp_path / "accelerate_config.yaml", cwd=tmp_path)
    fp8 = config.get("fp8_config")
    if fp8 is None:
        assert "fp8_recipe" not in summary
    else:
        assert summary["mixed_precision"] == "fp8" and summary["env"]["ACCELERATE_FP8_BACKEND"] == fp8["backend"]
        recipe = summary["fp8_recipe"]
        if fp8["backend"] == "TE":  # the names Accelerate reads, with the values written
            assert (recipe.fp8_format, recipe.amax_history_len, recipe.amax_compute_algo) == (
                "HYBRID",
                1024,
                "most_recent",
            )
        elif fp8["backend"] == "AO":
            assert recipe.config == {
                "pad_inner_dim": True,
                "enable_fsdp_float8_all_gather": fp8["enable_fsdp_float8_all_gather"],
            }
        else:
            assert recipe.opt_level == "O2"
    dynamo = config.get("dynamo_config")
    if dynamo is None:
        assert "dynamo" not in summary
    else:
        plugin = summary["dynamo"]
        assert str(plugin.backend.value) == "INDUCTOR" and plugin.mode == "default"
        assert plugin.use_regional_compilation is dynamo["dynamo_use_regional_compilation"]
    if config["distributed_type"] == "FSDP":
        assert summary["fsdp"]["cpu_ram_efficient_loading"] is config["fsdp_config"]["fsdp_cpu_ram_efficient_loading"]


@pytest.mark.tools
def test_accelerate_refuses_fp8_without_an_fp8_library(tmp_path: Path) -> None:
    """Why the install list matters: without transformer-engine/torchao/MS-AMP the launch fails."""
    from realtools import accelerate_dry_run

    decide(ACCELERATE_CASES["te_fsdp2"], tmp_path, write=True)
    with pytest.raises(RuntimeError, match="FP8 is not available"):
        accelerate_dry_run(tmp_path / "accelerate_config.yaml", cwd=tmp_path)


AXOLOTL_CASES = {
    "fp8_fsdp2_long": (
        {
            **FSDP2,
            "target": "axolotl",
            "model": "13B",
            "sequence_length": 16384,
            "gradient_checkpointing": True,
            "tune": True,
            "fp8": "ao",
            "liger": True,
            "activation_offloading": "hidden_states",
        },
        8,
    ),
    "fp8_ddp_cce_liger": (
        {
            **DDP,
            "target": "axolotl",
            "tune": True,
            "fp8": "ao",
            "liger": True,
            "cut_cross_entropy": True,
            "profiler_steps": 100,
        },
        2,
    ),
    "fsdp2_offload_compile_legacy": (
        {
            **DEEPSPEED,
            "target": "axolotl",
            "sequence_length": 8192,
            "gradient_checkpointing": True,
            "tune": True,
            "torch_compile": True,
            "activation_offloading": "legacy",
        },
        2,
    ),
    # Tensor parallel (an N-D mesh on FSDP2): Liger without RMSNorm and the fused loss.
    "tensor_parallel_liger": (
        {
            **FSDP2,
            "target": "axolotl",
            "model": "13B",
            "model_parallel": True,
            "tensor_parallel_size": 2,
            "tune": True,
            "liger": True,
        },
        8,
    ),
    "user_deepspeed_json_compile_liger": (
        {
            **DDP,
            "target": "axolotl",
            "model": "7B",
            "deepspeed_config": str(USER_ZERO3),
            "tune": True,
            "torch_compile": True,
            "liger": True,
        },
        2,
    ),
    "qlora_layer_offloading_liger": (
        {
            **AXOLOTL_LORA,
            "gpu_model": "RTX 4090",
            "gpu_memory_gb": 24,
            "model": "8B",
            "method": "qlora",
            "sequence_length": 8192,
            "tune": True,
            "liger": True,
            "cut_cross_entropy": True,
        },
        1,
    ),
    "lora_8bit": ({**AXOLOTL_LORA, "tune": True, "load_in_8bit": True}, 1),
    "turing_xformers": (
        {
            **AXOLOTL_LORA,
            "gpu_model": "T4",
            "gpu_memory_gb": 16,
            "method": "qlora",
            "tune": True,
            "torch_compile": True,
        },
        1,
    ),
}


@pytest.mark.tools
@pytest.mark.parametrize("case", sorted(AXOLOTL_CASES))
def test_axolotl_accepts_the_addons(tmp_path: Path, case: str) -> None:
    answers, n_gpu = AXOLOTL_CASES[case]
    decide(answers, tmp_path, write=True)
    written = yaml.safe_load((tmp_path / "axolotl.yaml").read_text())
    caps = h100_capabilities(n_gpu)
    if written.get("fp16"):
        caps = {**caps, "bf16": False, "fp8": False, "tf32": False, "compute_capability": "sm_75"}
    cfg = axolotl_validate_addons(tmp_path / "axolotl.yaml", capabilities=caps, n_gpu=n_gpu)
    assert ("deepspeed" in cfg) is ("deepspeed_config" in answers)
    # Every add-on key survives validation with its value (a dropped key would mean "off").
    addon_keys = [key for key in written if key.startswith(("fp8", "liger_", "cut_cross", "profiler", "torch_compile"))]
    addon_keys += [
        key for key in ("activation_offloading", "layer_offloading", "plugins", "load_in_8bit") if key in written
    ]
    assert addon_keys, written
    for key in addon_keys:
        assert cfg.get(key) == written[key], (key, cfg.get(key), written[key])


@pytest.mark.tools
def test_axolotl_plugin_validators_run(tmp_path: Path) -> None:
    """The plugin argument models are really applied: Liger's own validator refuses RMSNorm with TP."""
    decide(AXOLOTL_CASES["fp8_ddp_cce_liger"][0], tmp_path, write=True)
    path = tmp_path / "axolotl.yaml"
    data = yaml.safe_load(path.read_text())
    path.write_text(yaml.safe_dump({**data, "tensor_parallel_size": 2}))
    with pytest.raises(Exception, match="liger_rms_norm"):
        axolotl_validate_addons(path, capabilities=h100_capabilities(2), n_gpu=2)


# --- real launches of train_snippet.py -------------------------------------------------------------

# Not anchored to line starts: two processes writing to one pipe can still interleave.
NUMBER = r"(-?\d+\.\d+)"
RANK_LINE = re.compile(
    rf"rank (\d+) of (\d+): (\d+) steps, last loss -?\d+\.\d+, weight sum {NUMBER}"
    rf"(?: \(before the last average {NUMBER}\))?"
)


def launch_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACCELERATE_", "FSDP_", "PARALLELISM_CONFIG_"))}
    env.update(tool_env())
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env.update(extra or {})
    return env


def rank_lines(stdout: str) -> list[tuple[int, int, int, str, str]]:
    """(rank, processes, steps, weight sum, weight sum before Local SGD's last average) per line."""
    return sorted((int(r), int(n), int(s), w, d) for r, n, s, w, d in RANK_LINE.findall(stdout))


TEARDOWN_ABORT = "terminate called without an active exception"


def launch_retrying_teardown_abort(
    cmd: list[str], cwd: Path, extra: Mapping[str, str] | None = None, attempts: int = 3
) -> subprocess.CompletedProcess[str]:
    """Run a two-process CPU launch; run it again only if a rank aborted in C++ teardown.

    On this CPU-only stack (gloo, under mpirun or torchrun) a rank now and then aborts while
    torch tears the process group down ("terminate called without an active exception"),
    after the script's own work; the launcher then kills the other rank, whose forwarded
    output may be cut short. Only that failure earns another run (at most ``attempts`` in
    all); any other failure is returned at once, and the caller still asserts on one clean
    run's exit code and every rank's line.
    """
    proc = subprocess.run(cmd, cwd=cwd, env=launch_env(extra), capture_output=True, text=True, timeout=240)
    for _ in range(attempts - 1):
        if proc.returncode == 0 or TEARDOWN_ABORT not in proc.stderr:
            break
        proc = subprocess.run(cmd, cwd=cwd, env=launch_env(extra), capture_output=True, text=True, timeout=240)
    return proc


@pytest.mark.tools
@pytest.mark.launch
def test_local_sgd_snippet_runs_on_two_cpu_processes(tmp_path: Path) -> None:
    require_tool("accelerate")
    out = tmp_path / "out"
    decide(SNIPPET_CASES["local_sgd_cpu"], out, write=True)
    proc = launch_retrying_teardown_abort(
        ["bash", str(out / "launch.sh"), "train_snippet.py", "--steps", "14"], tmp_path
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    ranks = rank_lines(proc.stdout)
    assert [(r, n, s) for r, n, s, _, _ in ranks] == [(0, 2, 14), (1, 2, 14)], proc.stdout
    # Each process trains on its own half of the data without exchanging gradients: two steps
    # after the average at step 12 their weights differ (plain DDP would keep them equal), and
    # leaving the Local SGD block averages them again.
    assert ranks[0][4] != ranks[1][4] and ranks[0][4] and ranks[1][4]
    assert ranks[0][3] == ranks[1][3]


@pytest.mark.tools
@pytest.mark.launch
def test_ddp_communication_hook_snippet_runs_over_gloo(tmp_path: Path) -> None:
    """The fp16 hook on the DDP config (gloo on the CPU; gloo has no bf16 all-reduce)."""
    other = require_tool("accelerate.utils.other")
    out = tmp_path / "out"
    decide({**DDP, "tune": True, "ddp_comm_hook": "fp16"}, out, write=True)
    assert "comm_hook=DDPCommunicationHookType.FP16," in (out / "train_snippet.py").read_text()
    cmd = [
        str(Path(sys.executable).parent / "accelerate"),
        "launch",
        "--config_file",
        str(out / "accelerate_config.yaml"),
        "--main_process_port",
        str(other.get_free_port()),
        str(out / "train_snippet.py"),
        "--steps",
        "6",
    ]
    # ACCELERATE_USE_CPU makes the MULTI_GPU launch run gloo DDP on the CPU (test-only).
    proc = launch_retrying_teardown_abort(cmd, tmp_path, {"ACCELERATE_USE_CPU": "true"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    ranks = rank_lines(proc.stdout)
    assert [(r, n, s) for r, n, s, _, _ in ranks] == [(0, 2, 6), (1, 2, 6)], proc.stdout
    assert ranks[0][3] == ranks[1][3]  # DDP kept the replicas equal through the hook


def test_several_cpu_processes_ask_for_an_mpi(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # MULTI_CPU goes through mpirun: the written files list an MPI under "Install first" and the
    # summary says so too; one CPU process (NO) needs none.
    from wizard.cli import main

    cpu = {"target": "accelerate", "hardware": "cpu", "model": "125M", "method": "full"}
    answers = tmp_path / "answers.yaml"
    answers.write_text(yaml.safe_dump({**cpu, "cpu_processes": 2}))
    out_dir = tmp_path / "out"
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["--answers", str(answers), "--output-dir", str(out_dir)]) == 0
    summary = " ".join(capsys.readouterr().out.split())
    assert "an MPI must be installed on every machine" in summary
    for name in ("accelerate_config.yaml", "launch.sh"):
        text = (out_dir / name).read_text(encoding="utf-8")
        install = text[text.index("# Install first") :]
        assert "Open MPI, Intel MPI, MVAPICH or MPICH" in " ".join(install.split()), name
        assert "sudo apt-get install openmpi-bin" in install, name
    single = decide({**cpu, "cpu_processes": 1}, tmp_path / "one")
    assert all("MPI" not in f.text for f in single.files)


def test_the_near_limit_warning_has_one_threshold_for_every_layout(tmp_path: Path) -> None:
    # Every decided path: the warning is there exactly when the chosen layout's estimate fits and
    # uses more than TIGHT_SHARE of the usable memory, whatever the backend or parallel sizes.
    from helpers import decided_paths
    from wizard.engine.facts import TIGHT_SHARE

    near = far = 0
    for answers, result in decided_paths(tmp_path):
        rec = result.recommendation
        est = (rec.facts.estimates or {}).get(str(rec.settings.get("strategy")))
        warned = [w for w in result.warnings if w.startswith("it fits, close to the usable memory")]
        # The loss warning, when its temporaries outgrow the margin, says it instead (test_loss_memory).
        loss = any(w.startswith(LOSS_PEAK_WARNINGS) for w in result.warnings)
        # The share is of the higher figure: the total, or the loss peak while it stays within the usable.
        high = est is not None and (
            est.total > TIGHT_SHARE * est.budget or (not est.tight and est.peak > TIGHT_SHARE * est.budget)
        )
        expected = est is not None and est.fits and high and not loss
        assert len(warned) == (1 if expected else 0), (answers, warned)
        if expected:
            # A Mac's warning names the Mac, a GPU run's the GPU (test_mac_wording).
            per = "on the Mac" if answers.get("hardware") == "mps" else "per GPU"
            assert est is not None and f"comes to {round(est.total / 2**30, 1)} GiB {per} through a step" in warned[0]
            near += 1
        else:
            far += 1
    assert near and far  # both sides of the threshold are exercised


def test_the_summary_names_every_package_the_headers_ask_to_install_first(tmp_path: Path) -> None:
    """What a header lists under "Install first" is in the summary too, one warning per package (a plan for a Mac,
    made here on another machine, as not checked)."""
    seen = 0
    for answers, result in decided_paths(tmp_path):
        headers = {f.name: f.text for f in result.files if "# Install first" in f.text}
        prefix = (
            "install unchecked: "
            if answers.get("hardware") == "mps" and sys.platform != "darwin"
            else "install first: "
        )
        installs = [w for w in result.warnings if w.startswith(prefix)]
        if not headers:
            assert not installs, installs
            continue
        seen += 1
        for text in headers.values():
            block = " ".join(
                line.lstrip("#").strip() for line in text[text.index("# Install first") :].splitlines()[1:]
            )
            for warning in installs:
                package = warning.removeprefix(prefix).split(" (", 1)[0]
                assert package in block, (package, block[:300])
        assert installs
    assert seen


# ---------------------------------------------------------------------------------------------
# The acceptance table's rows 22, 38 and 39 (their decisions: tests/scenarios/addons.yaml and
# brought_deepspeed.yaml)
# ---------------------------------------------------------------------------------------------


def test_row22_msamp_with_zero3_names_both_ways_out(tmp_path: Path) -> None:
    refused = scenario("brought_msamp_at_stage3")
    with pytest.raises(DeepSpeedConfigError) as info:
        decide(refused.answers_in(tmp_path / "brought"), tmp_path / "out")
    # Another FP8 backend (the fp8 answer's values), or the JSON's stage lowered.
    hint = str(info.value.hint)
    assert "te or ao" in hint and "stage" in hint, hint


def test_row38_accelerate_fsdp2_with_transformer_engine_fp8(tmp_path: Path) -> None:
    result = decide(scenario_answers("accelerate_transformer_engine_fp8"), tmp_path)
    acc = parsed(result, "accelerate_config.yaml")
    assert acc["distributed_type"] == "FSDP" and acc["fsdp_config"]["fsdp_version"] == 2
    assert acc["mixed_precision"] == "fp8"
    assert acc["fp8_config"] == {
        "backend": "TE",
        "fp8_format": "HYBRID",
        "amax_history_len": 1024,
        "amax_compute_algo": "most_recent",
    }
    assert "transformer-engine" in file(result, "launch.sh").text.split("set -euo")[0]


def test_row39_axolotl_torchao_fp8(tmp_path: Path) -> None:
    small = decide(scenario_answers("axolotl_torchao_fp8_3b"), tmp_path / "3b")
    cfg = parsed(small, "axolotl.yaml")
    assert cfg["fp8"] is True and cfg["torch_compile"] is True  # torchao FP8 is fast only compiled
    assert "fp8_enable_fsdp_float8_all_gather" not in cfg and "fsdp_config" not in cfg
    sharded = decide(scenario_answers("axolotl_torchao_fp8_13b"), tmp_path / "13b")
    cfg = parsed(sharded, "axolotl.yaml")
    assert cfg["fsdp_version"] == 2 and cfg["fsdp_config"]["reshard_after_forward"] is True
    assert cfg["fp8"] is True and cfg["fp8_enable_fsdp_float8_all_gather"] is True
    assert not any("fp8" in warning for warning in sharded.warnings), sharded.warnings


@pytest.fixture(scope="module")
def tuned_paths(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """Every decided GPU path of the walk, with the performance extras asked for.

    One path per situation the extras' conditions read (tool, card, method, layout, GPU count,
    offload): paths that differ only elsewhere (sequence length, model size) ask the same extras.
    """
    paths = decided_paths(tmp_path_factory.mktemp("tuned"), keep=lambda a: a.get("hardware") in ("nvidia", "amd"))
    situations: dict[tuple[Any, ...], dict[str, Any]] = {}
    for answers, result in paths:
        keys = ("target", "hardware", "gpu_model", "method", "gpus_per_node", "num_nodes", "offload")
        situation = (*(answers.get(k) for k in keys), result.recommendation.backend)
        situations.setdefault(situation, {**answers, "tune": True})
    return list(situations.values())


def test_extras_not_offered_are_said_with_a_reason_of_the_tree_on_every_path(tuned_paths: list[dict[str, Any]]) -> None:
    """Yes to the extras: each one left out is named once with why, never one that is asked.

    The reason is a sentence of the tree's (no generic "needs x is y" fallback), and extras of the
    other tool or other hardware are not listed: they were never on offer for this run.
    """
    said_any = 0
    for answers in tuned_paths:
        recorder = Recorder(answers)
        collect(tree(), Sources(prompter=recorder))
        asked_labels = {step.question.label for qid, step in recorder.steps.items() if qid in ADDONS}
        named = {label: why for step in recorder.steps.values() for label, why in step.not_offered.items()}
        said_any += bool(named)
        assert not set(named) & asked_labels, (answers, named)
        for label, why in named.items():
            assert why and "yours is" not in why, (answers, label, why)
            assert "Axolotl runs only" not in why and "Accelerate runs only" not in why, (answers, label, why)
    assert said_any > len(tuned_paths) // 2  # the property is exercised, not vacuously true
