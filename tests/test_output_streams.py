"""Printing at the edges: a narrow encoding, a closed pipe, Ctrl-C during the summary, no colour.

Each case runs the real command in a child process with a time limit: PYTHONIOENCODING=ascii,
a pipe whose reader is gone (as `| head` leaves it), a real SIGINT while the summary is blocked
on a full pipe, a pseudo-terminal with NO_COLOR. What the user sees is checked: the exit code
(README "Exit codes"), stderr (one line or nothing, never a traceback), stdout, files on disk.
"""

from __future__ import annotations

import array
import fcntl
import json
import os
import shlex
import signal
import subprocess
import sys
import termios
import time
from pathlib import Path

import pexpect
import pytest
from test_interrupted_writes import one_error_line
from test_output_set import SET, answers_file

from helpers import REPO

ENV = {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "80"}
WIZARD = [sys.executable, "-m", "wizard"]
BROKEN_PIPE = 141  # 128 + SIGPIPE


def commands(folder: Path) -> dict[str, list[str]]:
    answers = str(answers_file(folder))
    out = str(folder / "out")
    return {
        "summary": ["--answers", answers, "--output-dir", out],
        "dry-run-explain": ["--answers", answers, "--output-dir", out, "--dry-run", "--explain"],
        "json": ["--answers", answers, "--output-dir", out, "--dry-run", "--output", "json"],
        "explain": ["explain", "--answers", answers],
        "tree": ["tree"],
    }


@pytest.mark.parametrize("name", ["summary", "dry-run-explain", "explain", "tree"])
def test_an_ascii_only_stream_gets_plain_characters(tmp_path: Path, name: str) -> None:
    argv = commands(tmp_path)[name]
    proc = subprocess.run(
        [*WIZARD, *argv], env={**ENV, "PYTHONIOENCODING": "ascii"}, capture_output=True, timeout=60, check=False
    )
    assert proc.returncode == 0, proc.stderr.decode("ascii", "replace")
    assert proc.stderr == b""
    text = proc.stdout.decode("ascii")  # raises if any character is not ASCII
    assert "UnicodeEncodeError" not in text and len(text.splitlines()) > 10
    if name == "summary":
        assert {p.name for p in (tmp_path / "out").iterdir()} == SET
        assert "Next" in text and "More: " in text, "the summary was printed to its end"


@pytest.mark.parametrize("name", ["json", "explain", "tree", "dry-run-explain"])
def test_a_closed_pipe_ends_the_run_quietly(tmp_path: Path, name: str) -> None:
    """Standard output is a pipe whose reader is gone: every write fails with EPIPE."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        proc = subprocess.run(
            [*WIZARD, *commands(tmp_path)[name]],
            env=ENV,
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        os.close(write_end)
    assert (proc.returncode, proc.stderr) == (BROKEN_PIPE, "")


@pytest.mark.parametrize(("name", "reader"), [("json", "head -c 10"), ("explain", "head -1")])
def test_piped_into_head(tmp_path: Path, name: str, reader: str) -> None:
    command = f"{shlex.join([*WIZARD, *commands(tmp_path)[name]])} | {reader}"
    proc = subprocess.run(["bash", "-c", command], env=ENV, capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert proc.stdout.strip(), "head printed the first of the output"


def _queued(read_end: int) -> int:
    """How many bytes wait in a pipe (FIONREAD)."""
    size = array.array("i", [0])
    fcntl.ioctl(read_end, termios.FIONREAD, size)
    return size[0]


def test_ctrl_c_while_the_summary_prints(tmp_path: Path) -> None:
    """SIGINT after the files are written, while the summary prints (a real signal to a child).

    Standard output is a pipe of one page that nobody reads: the summary (several pages) cannot
    end before the signal, and once some of it is in the pipe, the files are all written.
    """
    out = tmp_path / "out"
    argv = commands(tmp_path)["summary"]
    read_end, write_end = os.pipe()
    fcntl.fcntl(write_end, fcntl.F_SETPIPE_SZ, 4096)
    proc = subprocess.Popen([*WIZARD, *argv], env=ENV, stdout=write_end, stderr=subprocess.PIPE, text=True)
    os.close(write_end)
    try:
        deadline = time.monotonic() + 30
        while _queued(read_end) == 0:
            assert proc.poll() is None, "the run ended before it printed"
            assert time.monotonic() < deadline, "the summary never started"
            time.sleep(0.02)
        assert (out / "answers.yaml").exists(), "the summary started before the files were written"
        proc.send_signal(signal.SIGINT)
        with os.fdopen(read_end, "rb") as reader:
            reader.read()  # let the rest go, so that the child can end
        stderr = proc.communicate(timeout=60)[1]
    finally:
        proc.kill()
        proc.wait(timeout=10)
    assert proc.returncode == 130, stderr
    line = one_error_line(stderr, "stopped: interrupted while printing", str(out), "each one complete")
    assert "Traceback" not in line
    rerun = subprocess.run(
        [*WIZARD, *argv, "--output", "json"], env=ENV, capture_output=True, text=True, timeout=60, check=False
    )
    assert rerun.returncode == 0, rerun.stderr
    assert {f["action"] for f in json.loads(rerun.stdout)["files"]} == {"unchanged"}, "a file was not whole"


@pytest.mark.parametrize("no_color", ["1", ""])
def test_no_color_in_a_terminal_prints_no_escape_codes(tmp_path: Path, no_color: str) -> None:
    """NO_COLOR set to anything but "" (https://no-color.org/): plain text even in a terminal."""
    child = pexpect.spawn(
        WIZARD[0],
        [*WIZARD[1:], *commands(tmp_path)["dry-run-explain"]],
        env={**ENV, "TERM": "xterm-256color", "NO_COLOR": no_color},
        encoding="utf-8",
        timeout=60,
        dimensions=(40, 80),
    )
    child.expect(pexpect.EOF)
    child.close()
    text = child.before
    assert child.exitstatus == 0, text
    assert ("\x1b" in text) == (no_color == ""), "escape codes unlike NO_COLOR asks"  # "" means unset


def test_a_non_terminal_gets_no_escape_codes(tmp_path: Path) -> None:
    env = {k: v for k, v in ENV.items() if k not in ("FORCE_COLOR", "TTY_COMPATIBLE", "NO_COLOR")}
    for name in ("summary", "explain", "tree"):
        proc = subprocess.run(
            [*WIZARD, *commands(tmp_path)[name], "--force"][: None if name == "summary" else -1],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert proc.returncode == 0, proc.stderr
        assert "\x1b" not in proc.stdout + proc.stderr, name


@pytest.mark.parametrize("case", ["written", "conflict", "bad-answer", "detect"])
def test_json_output_keeps_stdout_pure(tmp_path: Path, case: str) -> None:
    """FORCE_COLOR makes any stray print on stdout carry escape codes, which json.loads refuses."""
    argv = [*commands(tmp_path)["summary"], "--output", "json"]
    expected = 0
    if case == "conflict":
        (tmp_path / "out").mkdir()
        (tmp_path / "out" / "launch.sh").write_text("# mine\n")
        expected = 1
    elif case == "bad-answer":
        argv += ["--set", "gpus_per_node=many"]
        expected = 2
    elif case == "detect":
        argv += ["--detect"]
    proc = subprocess.run(
        [*WIZARD, *argv], env={**ENV, "FORCE_COLOR": "1"}, capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == expected, proc.stderr
    document = json.loads(proc.stdout)
    assert ("error" in document) == (case == "bad-answer")
    if expected:
        assert proc.stderr.count("error:") == 1, proc.stderr


def test_ctrl_c_the_command_does_not_catch_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    """Ctrl-C while the command starts (before it can save or finish anything): exit 130, no traceback."""
    from wizard.ui.output import ends_quietly

    @ends_quietly
    def starting() -> int:
        raise KeyboardInterrupt

    assert starting() == 130
    assert capsys.readouterr().err == "stopped: interrupted\n"
