"""A plain LoRA run for Accelerate gets train_snippet.py: the model loaded as the estimate counts it, with its adapters,
and a --model run that measures the step time and memory beside the estimate.

The invariants:
* over every decided Accelerate path: the snippet loads the model with LoRA adapters exactly where the run is LoRA
  (QLoRA's quantized base; a plain 16-bit or fp32 one for supervised training without context parallel); a plain
  base loads in the dtype the estimate counts, the adapters have the answered rank, the model's own checkpointing
  is turned on exactly where the script must turn it on, and the estimate it prints beside the measurement is the
  chosen layout's;
* a real --model run on the CPU trains and prints the seconds per optimizer step;
* on a Mac, where smoke runs on the CPU, the summary offers that run as the measurement of the Mac itself.
"""

from __future__ import annotations

import ast
import os
import py_compile
import re
import shlex
import subprocess
import sys
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from helpers import decide, decided_paths, tree
from realtools import require_tool
from wizard.engine.advice import GATED_PREFIXES
from wizard.engine.evaluate import chosen_estimate
from wizard.engine.memory import lora_rank_of, to_gib
from wizard.ui.console import print_result


def _snippet(result: Any) -> str | None:
    return next((f.text for f in result.files if f.name == "train_snippet.py"), None)


def _expected_dtype(answers: dict[str, Any], mixed_precision: str) -> str:
    if answers.get("base_dtype") == "bf16" and answers.get("hardware") == "mps":
        return "bfloat16"
    return {"bf16": "bfloat16", "fp8": "bfloat16", "fp16": "float16"}.get(mixed_precision, "float32")


def test_every_lora_run_for_accelerate_gets_a_snippet_that_loads_the_model_as_estimated(tmp_path: Path) -> None:
    plain = 0
    for answers, result in decided_paths(tmp_path, lambda a: a["target"] == "accelerate"):
        rec, given = result.recommendation, result.session.answers
        code = _snippet(result)
        cp = int(rec.settings.get("cp_size") or 1) if rec.traits.device_mesh else 1
        # A quantized base always loads with its adapters; a plain one where the script is ordinary supervised
        # training on one sequence per micro-batch (DPO's adapters go to TRL, context parallel has its own step).
        quantized = given["method"] == "qlora" or given.get("load_in_8bit") is True
        plain_lora = given["method"] == "lora" and not quantized and given.get("objective") != "dpo" and cp == 1
        measured = code is not None and "class StepMeter" in code
        assert measured == (quantized or plain_lora), (answers, rec.backend)
        if not measured or code is None:
            continue
        path = tmp_path / "train_snippet.py"
        path.write_text(code, encoding="utf-8")
        py_compile.compile(str(path), doraise=True)
        rank = lora_rank_of(given)
        assert f"LoraConfig(r={rank}, lora_alpha={2 * rank}," in code, answers
        est = chosen_estimate(rec)
        shown = ast.literal_eval(re.search(r"^ESTIMATE_GIB = (.*)$", code, re.M).group(1))  # type: ignore[union-attr]
        if est is None:
            assert shown is None, answers
        else:
            assert shown == {"total": to_gib(est.total), "peak": to_gib(est.peak), "usable": to_gib(est.budget)}
        if quantized:
            continue
        plain += 1
        dtype = _expected_dtype(given, str(rec.settings.get("mixed_precision")))
        assert f"from_pretrained(args.model, dtype=torch.{dtype})" in code, (answers, dtype)
        script = bool(given.get("gradient_checkpointing")) and rec.traits.checkpointing == "script"
        block = code.split("# --- copy: LoRA.", 1)[1].split("# --- end of copy", 1)[0]
        assert ("model.gradient_checkpointing_enable(" in block) == script, (answers, rec.backend)
        # On a Mac the script never speaks of a GPU; elsewhere it never reads the MPS driver.
        on_mac = given["hardware"] == "mps"
        assert ("torch.mps" in code) == on_mac and ("torch.cuda" in code) != on_mac, answers
    assert plain > 20, plain


@pytest.mark.tools
@pytest.mark.launch
def test_a_model_run_of_the_lora_snippet_trains_and_prints_its_step_time(tmp_path: Path) -> None:
    """The plain LoRA snippet on one CPU process with a small Llama saved here: it loads the model, wraps it in
    adapters, trains the planned batches and prints the measured step time (the CPU's memory is not measured)."""
    transformers = require_tool("transformers")
    require_tool("peft")
    import torch

    config = transformers.LlamaConfig(
        vocab_size=256,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        tie_word_embeddings=False,
    )
    torch.manual_seed(0)
    model_dir = tmp_path / "tiny-llama"
    transformers.LlamaForCausalLM(config).save_pretrained(str(model_dir))
    answers = {
        "target": "accelerate",
        "hardware": "cpu",
        "model": str(model_dir),
        "method": "lora",
        "lora_rank": 4,
        "sequence_length": 64,
        "global_batch_size": 4,
    }
    out = tmp_path / "out"
    decide(answers, out, write=True)
    code = (out / "train_snippet.py").read_text(encoding="utf-8")
    assert "LoraConfig(r=4, lora_alpha=8," in code
    assert f"--model {shlex.quote(str(model_dir))} --steps 5" in code  # the header names the model answered
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    proc = subprocess.run(
        ["bash", str(out / "launch.sh"), "train_snippet.py", "--model", str(model_dir), "--steps", "3"],
        cwd=out,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(line for line in proc.stdout.splitlines() if line.startswith("rank 0 of 1: "))
    assert line.startswith("rank 0 of 1: 3 steps, last loss "), line
    loss = float(re.search(r"last loss (\S+),", line).group(1))  # type: ignore[union-attr]
    assert 0 < loss < 20, line  # a language-model loss over 256 tokens, not a toy regression's
    seconds = float(re.search(r"; (\d+\.\d+) s per optimizer step after the first", line).group(1))  # type: ignore[union-attr]
    assert seconds > 0, line
    assert line.endswith("memory not measured on cpu"), line


def test_a_mac_run_is_offered_the_measurement_of_the_mac_itself(tmp_path: Path) -> None:
    """Exactly where the Mac's snippet measures (a LoRA run), the summary gives the command, whole and quoted."""
    paths = decided_paths(tmp_path, lambda a: a["target"] == "accelerate")
    mac = [(a, r) for a, r in paths if a["hardware"] == "mps"]
    others = [(a, r) for a, r in paths if a["hardware"] != "mps"][::25]
    offered = 0
    for number, (answers, _) in enumerate(mac + others):
        result = decide(answers, tmp_path / f"out{number}", write=True)
        out = StringIO()
        print_result(Console(file=out, width=80), tree(), result, dry_run=False, detail=False)
        text = out.getvalue()
        code = _snippet(result)
        expected = answers["hardware"] == "mps" and code is not None and "class StepMeter" in code
        said = "Measure the Mac itself, still before your own script" in text
        assert said == expected, answers
        if said:
            command = next(line.strip() for line in text.splitlines() if "train_snippet.py --model" in line)
            words = shlex.split(command)
            assert Path(words[0]).name == "launch.sh" and Path(words[0]).is_file(), command
            assert Path(words[1]).name == "train_snippet.py" and Path(words[1]).is_file(), command
            assert words[2] == "--model" and words[-2:] == ["--steps", "5"], command
            # A gated repository is said before its download would stop with a 401.
            gated = f"({words[3]} is most likely gated: accept its licence" in " ".join(text.split())
            assert gated is words[3].startswith(GATED_PREFIXES), (words[3], text[-800:])
            offered += 1
    assert offered, "no Mac LoRA path"


def test_a_gated_catalogue_model_is_said_gated_where_the_mac_measurement_downloads_it(tmp_path: Path) -> None:
    answers = {
        "target": "accelerate",
        "hardware": "mps",
        "gpu_memory_gb": 64,
        "model": "llama-3.2-3b",
        "method": "lora",
        "base_dtype": "bf16",
        "global_batch_size": 16,
    }
    result = decide(answers, tmp_path / "out", write=True)
    out = StringIO()
    print_result(Console(file=out, width=80), tree(), result, dry_run=False, detail=False)
    text = " ".join(out.getvalue().split())
    # The catalogue name is loaded by its Hub repository, which Meta gates behind a licence.
    assert "train_snippet.py --model meta-llama/Llama-3.2-3B --steps 5" in text, text[-1200:]
    assert "(meta-llama/Llama-3.2-3B is most likely gated: accept its licence on" in text
    assert "and run hf auth login first)" in text
