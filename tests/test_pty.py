"""End-to-end runs of the real command under a pseudo-terminal (pexpect)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pexpect
import yaml

from helpers import REPO

UP = "\x1b[A"


def spawn(cwd: Path, *args: str) -> pexpect.spawn:
    env = {
        **os.environ,
        "PROMPT_TOOLKIT_NO_CPR": "1",
        "TERM": "xterm-256color",
        "PYTHONPATH": str(REPO),
        "COLUMNS": "120",
    }
    return pexpect.spawn(
        sys.executable,
        ["-m", "wizard", *args],
        cwd=str(cwd),
        env=env,
        encoding="utf-8",
        timeout=30,
        dimensions=(40, 120),
    )


def answer(child: pexpect.spawn, prompt: str, keys: str) -> None:
    child.expect_exact(prompt)
    child.send(keys)


FIRST_HALF = [
    ("Fill in defaults from this machine", "n"),
    ("Which tool will launch the training?", "\r"),
    ("What will it train on?", "\r"),
    ("Which GPU model (optional)?", "A100\r"),
    ("How many GPUs", "\x7f4\r"),
    ("How many machines (nodes)?", "\r"),
]
SECOND_HALF = [
    ("Memory per GPU", "\r"),
    ("Host RAM per machine, in GB (optional)?", "\r"),
    ("Model size or config.json?", "7B\r"),
    ("Training method?", UP + "\r"),
    ("Is your training code Megatron-aware", "\r"),
    ("Path to an existing DeepSpeed JSON (optional)?", "\r"),
    ("Offload to CPU or NVMe?", "\r"),
    ("Sequence length (tokens)?", "\r"),
    ("Micro-batch size per GPU?", "\r"),
    ("Use gradient checkpointing?", "\r"),
    ("Set a tensor parallel size yourself?", "\r"),
    ("Add optional performance features", "\r"),
    ("Anything to change?", "\r"),
]


def test_interactive_run_writes_configs(tmp_path: Path) -> None:
    child = spawn(tmp_path)
    for prompt, keys in FIRST_HALF + SECOND_HALF:
        answer(child, prompt, keys)
    child.expect_exact("Next:")
    # "Why not X?" for the backends that lost: ask about the first, then leave (Up wraps to "Done").
    answer(child, "Questions about the choice?", "\r")
    child.expect_exact("world size is 1 (it is 4)")
    answer(child, "Questions about the choice?", UP + "\r")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    out = tmp_path / "backend-wizard-out"
    config = yaml.safe_load((out / "accelerate_config.yaml").read_text())
    assert config["distributed_type"] == "FSDP" and config["num_processes"] == 4
    assert yaml.safe_load((out / "answers.yaml").read_text())["answers"]["method"] == "full"


def test_the_offer_to_detect_fills_defaults_and_says_where_they_came_from(tmp_path: Path) -> None:
    child = spawn(tmp_path, "--dry-run")
    answer(child, "Fill in defaults from this machine", "y")
    # This machine has no nvidia-smi/rocm-smi GPU: detection says so and proposes the CPU.
    child.expect_exact("hardware = cpu")
    answer(child, "Which tool will launch the training?", "\r")
    child.expect_exact("default detected on this machine (no nvidia-smi or rocm-smi GPU found)")
    child.expect_exact("What will it train on?")
    child.expect(r"» (\x1b\[[0-9;]*m)*CPU only")  # the detected value is pre-selected, still changeable
    child.sendintr()
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 130


def test_ctrl_c_saves_answers_and_they_resume(tmp_path: Path) -> None:
    child = spawn(tmp_path)
    for prompt, keys in FIRST_HALF:
        answer(child, prompt, keys)
    child.expect_exact("Memory per GPU")
    child.sendintr()
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 130
    assert "backend-wizard-partial-answers.yaml" in (child.before or "")
    partial = yaml.safe_load((tmp_path / "backend-wizard-partial-answers.yaml").read_text())
    assert partial["answers"] == {
        "target": "accelerate",
        "hardware": "nvidia",
        "gpu_model": "A100",
        "gpus_per_node": 4,
        "num_nodes": 1,
    }
    assert not (tmp_path / "backend-wizard-out").exists(), "no config was written"

    child = spawn(tmp_path, "--answers", "backend-wizard-partial-answers.yaml", "--ask-missing")
    for prompt, keys in SECOND_HALF:
        answer(child, prompt, keys)
    answer(child, "Questions about the choice?", UP + "\r")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    assert (tmp_path / "backend-wizard-out" / "accelerate_config.yaml").exists()


def test_prompts_draw_on_stderr_so_json_stdout_stays_clean(tmp_path: Path) -> None:
    env = {**os.environ, "PROMPT_TOOLKIT_NO_CPR": "1", "TERM": "xterm-256color", "PYTHONPATH": str(REPO)}
    command = f"{sys.executable} -m wizard --output json --dry-run > result.json"
    child = pexpect.spawn(
        "bash", ["-c", command], cwd=str(tmp_path), env=env, encoding="utf-8", timeout=30, dimensions=(40, 120)
    )
    for prompt, keys in FIRST_HALF + SECOND_HALF:
        answer(child, prompt, keys)
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    data = json.loads((tmp_path / "result.json").read_text())  # one JSON object and nothing else
    assert data["recommendation"]["backend"] == "fsdp2"
    assert not (tmp_path / "backend-wizard-out").exists()
