"""End-to-end runs of the real command under a pseudo-terminal (pexpect)."""

from __future__ import annotations

import json
import os
import re
import shlex
import sys
from pathlib import Path

import pexpect
import pytest
import yaml

from helpers import REPO

UP, DOWN = "\x1b[A", "\x1b[B"
# The why-not menu's last entry: its cursor stops there however often Down is pressed.
DONE = DOWN * 9 + "\r"


def spawn(cwd: Path, *args: str, columns: int = 120) -> pexpect.spawn:
    env = {
        **os.environ,
        "PROMPT_TOOLKIT_NO_CPR": "1",
        "TERM": "xterm-256color",
        "PYTHONPATH": str(REPO),
        "COLUMNS": str(columns),
    }
    return pexpect.spawn(
        sys.executable,
        ["-m", "wizard", *args],
        cwd=str(cwd),
        env=env,
        encoding="utf-8",
        timeout=30,
        dimensions=(40, columns),
    )


def answer(child: pexpect.spawn, prompt: str, keys: str) -> None:
    child.expect_exact(prompt)
    child.send(keys)


FIRST_HALF = [
    ("Use this machine's GPUs", "n\r"),  # y or n, then Enter
    ("Which tool will launch the training?", "\r"),
    ("What will it train on?", "\r"),
    ("Which GPU model (optional)?", "A100\r"),
    ("How many GPUs", "\x7f4\r"),
    ("How many machines (nodes)?", "\r"),
]
SECOND_HALF = [
    ("How are the GPUs of a machine linked?", "\r"),
    ("Memory per GPU", "\r"),
    ("Host RAM per machine, in GiB (optional)?", "\r"),
    ("Model (a size, a name, a folder or a Hub id)?", "7B\r"),
    ("Training method?", UP + "\r"),
    ("Training objective?", "\r"),
    ("Is your training code written for Megatron-LM?", "\r"),
    ("Path to an existing DeepSpeed JSON (optional)?", "\r"),
    ("Offload to CPU or NVMe?", "\r"),
    ("Optimizer?", "\r"),
    ("Sequence length (tokens)?", "\r"),
    ("Micro-batch size (sequences", "\r"),
    ("Global batch size (sequences", "\r"),
    ("Use gradient checkpointing?", "\r"),
    ("Does your training script compute the loss in chunks?", "\r"),
    ("Set a tensor parallel size yourself?", "\r"),
    ("Add performance extras", "\r"),
    ("Anything to change?", "\r"),
]


def test_interactive_run_writes_configs(tmp_path: Path) -> None:
    child = spawn(tmp_path)
    for prompt, keys in FIRST_HALF + SECOND_HALF:
        answer(child, prompt, keys)
    child.expect_exact("Next")
    # "Why not X?" for the backends that lost: Enter reads the first, and each time the cursor
    # moves on to the next one not read yet, then to "Done", so Enter alone reads them all and leaves.
    answer(child, "Questions about the choice?", "\r")
    # One GPU and DDP lost for the same reason: one entry, "Why not One GPU, no distributed backend / DDP?".
    # The summary above gave that reason: the answer adds the copy's figures beside FSDP2's.
    child.expect_exact("beyond the summary above:")
    child.expect_exact("in figures:")
    child.expect_exact("(read)")  # the menu again, the answer just read marked so
    # DeepSpeed: its figures; Megatron-LM, which has no estimate row: its whole reason.
    for reason in ("in figures:", "megatron: no", "Done"):
        child.send("\r")  # DeepSpeed, Megatron-LM, then the cursor is on Done
        if reason != "Done":
            child.expect_exact(reason)
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    out = tmp_path / "backend-wizard-out"
    config = yaml.safe_load((out / "accelerate_config.yaml").read_text())
    assert config["distributed_type"] == "FSDP" and config["num_processes"] == 4
    assert yaml.safe_load((out / "answers.yaml").read_text())["answers"]["method"] == "full"


def test_the_offer_to_detect_fills_defaults_and_says_where_they_came_from(tmp_path: Path) -> None:
    child = spawn(tmp_path, "--dry-run")
    answer(child, "Use this machine's GPUs", "y\r")
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


def resume_words(transcript: str) -> list[str]:
    """The command the wizard printed to go on with, as words.

    It may span lines, each but the last ending in a backslash, as a shell reads it.
    """
    assert "go on with:" in transcript, f"no resume command in: {transcript[-600:]}"
    lines = transcript.split("go on with:", 1)[1].strip().splitlines()
    command = []
    for line in lines:
        command.append(line.strip().removesuffix("\\"))
        if not line.rstrip().endswith("\\"):
            break
    assert command[0].startswith("backend-wizard "), command
    return shlex.split(" ".join(command))


def test_ctrl_c_saves_answers_and_the_printed_command_resumes_with_the_same_options(tmp_path: Path) -> None:
    child = spawn(tmp_path, "--output-dir", "my out", "--explain")
    for prompt, keys in FIRST_HALF:
        answer(child, prompt, keys)
    child.expect_exact("How are the GPUs of a machine linked?")
    child.sendintr()
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 130
    words = resume_words(child.before or "")
    assert words[:4] == ["backend-wizard", "--answers", "backend-wizard-partial-answers.yaml", "--ask-missing"]
    assert words[4:] == ["--output-dir", "my out", "--explain"], "the run's own options are kept"
    saved = (tmp_path / "backend-wizard-partial-answers.yaml").read_text()
    assert "Resume: backend-wizard --answers THIS-FILE --ask-missing" in saved.splitlines()[0]
    assert yaml.safe_load(saved)["answers"] == {
        "target": "accelerate",
        "hardware": "nvidia",
        "gpu_model": "A100",
        "gpus_per_node": 4,
        "num_nodes": 1,
    }
    assert not (tmp_path / "my out").exists(), "no config was written"

    child = spawn(tmp_path, *words[1:])  # exactly what was printed
    for prompt, keys in SECOND_HALF:
        answer(child, prompt, keys)
    child.expect_exact("How the decision was made")  # --explain came along
    answer(child, "Questions about the choice?", DONE)
    # The saved file has served its purpose, and the run says so, last, rather than leaving it unexplained.
    child.expect(r"was\s+only\s+kept\s+to\s+resume")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    assert (tmp_path / "my out" / "accelerate_config.yaml").exists()


def test_ctrl_c_never_replaces_an_existing_answers_file(tmp_path: Path) -> None:
    mine = tmp_path / "backend-wizard-partial-answers.yaml"
    mine.write_text("# my own notes\nanswers: {model: 70B}\n")
    child = spawn(tmp_path)
    for prompt, keys in FIRST_HALF[:3]:
        answer(child, prompt, keys)
    child.expect_exact("Which GPU model")
    child.sendintr()
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 130
    assert mine.read_text() == "# my own notes\nanswers: {model: 70B}\n", "the existing file is untouched"
    words = resume_words(child.before or "")
    assert words[2] == "backend-wizard-partial-answers-2.yaml"
    saved = yaml.safe_load((tmp_path / words[2]).read_text())
    assert saved["answers"] == {"target": "accelerate", "hardware": "nvidia"}


@pytest.mark.parametrize("where", ["Which GPU model", "What will it train on?", "Anything to change?"])
def test_ctrl_d_ends_like_ctrl_c_without_a_traceback(tmp_path: Path, where: str) -> None:
    child = spawn(tmp_path)
    steps = FIRST_HALF + SECOND_HALF
    for prompt, keys in steps[: next(i for i, (p, _) in enumerate([*steps, (where, "")]) if p.startswith(where))]:
        answer(child, prompt, keys)
    child.expect_exact(where)
    child.send("\x04")
    child.expect(pexpect.EOF)
    child.close()
    transcript = child.before or ""
    assert child.exitstatus == 130 and "Traceback" not in transcript and "EOFError" not in transcript
    assert "stopped" in transcript and "no config was written" in transcript and "interrupted" not in transcript
    assert (tmp_path / "backend-wizard-partial-answers.yaml").exists()


def test_a_file_answer_is_changed_on_the_review_screen_and_back_goes_back(tmp_path: Path) -> None:
    answers = tmp_path / "mine.yaml"
    answers.write_text(
        "{target: accelerate, hardware: nvidia, gpus_per_node: 4, num_nodes: 1, gpu_memory_gb: 80, model: 7B,"
        " method: lora, objective: sft, megatron: false, offload: auto, sequence_length: 2048, micro_batch_size: 1,"
        " gradient_checkpointing: true, chunked_loss: false, model_parallel: false, tune: false}\n"
    )
    child = spawn(tmp_path, "--answers", "mine.yaml", "--ask-missing", "--dry-run", columns=80)
    for prompt in (
        "Which GPU model",
        "How are the GPUs of a machine linked?",
        "Host RAM per machine",
        "LoRA rank",
        "Path to an existing DeepSpeed JSON",
        "Optimizer?",
        "Global batch size",
    ):
        answer(child, prompt, "\r")  # the questions the file lacks: skipped, or their defaults kept
    child.expect_exact("Review your answers")
    child.expect_exact("GPUs per machine")
    change_gpus = DOWN * 3 + "\r"  # Tool, Hardware, GPU model (not given), GPUs per machine
    answer(child, "Anything to change?", DOWN + "\r")  # "Change an answer"
    answer(child, "Which answer?", change_gpus)
    # The picked question offers "<": it cancels the change and returns to the review screen.
    answer(child, "How many GPUs", "\x7f<\r")
    child.expect_exact("Review your answers")
    answer(child, "Anything to change?", DOWN + "\r")
    answer(child, "Which answer?", change_gpus)
    answer(child, "How many GPUs", "\x7f2\r")
    answer(child, "Global batch size", "\r")  # it followed the GPU count: asked again with its new value
    answer(child, "Anything to change?", "\r")
    child.expect(r"processes \(all machines\)(?:\x1b\[[0-9;]*m|\s)+(\d+)")
    assert child.match.group(1) == "2", "the file's 4 GPUs became 2"
    answer(child, "Questions about the choice?", DONE)
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0


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


def test_after_no_backend_fits_the_review_screen_comes_back(tmp_path: Path) -> None:
    answers = tmp_path / "big.yaml"
    answers.write_text(
        "{target: accelerate, hardware: nvidia, gpu_model: RTX 4090, gpus_per_node: 1, num_nodes: 1,"
        " cpu_memory_gb: 64, model: 70B, method: full, objective: sft, deepspeed_config: null, offload: none,"
        " sequence_length: 2048, micro_batch_size: 1, gradient_checkpointing: true, chunked_loss: false}\n"
    )
    child = spawn(tmp_path, "--answers", "big.yaml", "--ask-missing", "--dry-run", columns=80)
    answer(child, "Memory per GPU", "\r")  # the RTX 4090's 23.99 GiB
    answer(child, "Path to an existing DeepSpeed JSON", "\r")
    answer(child, "Optimizer?", "\r")  # AdamW: one GPU without offload asks it
    answer(child, "Global batch size", "\r")
    answer(child, "Anything to change?", "\r")  # looks right: decide
    answer(child, "Change one?", "\r")  # "No backend fits these answers. Change one?": yes, to the review
    child.expect_exact("Review your answers")
    change_model = DOWN * 7 + "\r"  # Tool, Hardware, GPU model, GPUs, Machines, Memory, RAM, Model
    answer(child, "Anything to change?", DOWN + "\r")
    answer(child, "Which answer?", change_model)
    answer(child, "Model (a size, a name, a folder or a Hub id)?", "1B\r")  # typing replaces the shown 70B
    answer(child, "Add performance extras", "\r")  # asked now that a backend is chosen
    answer(child, "Anything to change?", "\r")
    answer(child, "Questions about the choice?", DONE)
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0, child.before
    assert "error:" not in (child.before or "")


def test_an_error_in_a_terminal_wraps_between_words(tmp_path: Path) -> None:
    """In a terminal the error line is wrapped at 80 columns between words (a pipe gets one line)."""
    child = spawn(tmp_path, "glossary", "a-term-nobody-has-written-down", columns=80)
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 2
    shown = re.sub(r"\x1b\[[0-9;]*m", "", (child.before or "").replace("\r", ""))  # colours are no columns
    lines = [line.rstrip() for line in shown.splitlines() if line.strip()]
    assert len(lines) > 1 and all(len(line) <= 80 for line in lines), lines
    said = " ".join(lines)
    assert said.startswith("error: 'a-term-nobody-has-written-down' is not in the glossary"), said
    assert "`backend-wizard glossary` lists every term" in said, said  # words whole across the break
