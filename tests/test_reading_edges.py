"""Every file the wizard reads is refused cleanly when it is not a file it can read (README "Input limits").

Named pipes, character devices (also behind a symlink), sparse giants, over-long names, symlink
loops and documents nested past the limit, through each reader: ``--answers``, ``--set model=``,
``--set deepspeed_config=``, ``check`` (directly and through a YAML that references a JSON) and
``--tree``. The answer is always one line naming the path, a documented exit code, and nothing
written. A pipe or a device would block or never end, so those runs are real subprocesses under
a time limit: a regression fails the test instead of hanging the suite.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from helpers import REPO
from wizard.cli import main
from wizard.engine.located_yaml import YamlProblem, parse_yaml
from wizard.engine.nesting import MAX_DEPTH
from wizard.engine.strict_json import JsonProblem, loads_strict
from wizard.errors import AnswersFileError
from wizard.inputs import MAX_ANSWERS_BYTES
from wizard.user_files import read_user_bytes

EXAMPLE = REPO / "examples" / "a100x4-7b-full-accelerate.yaml"
LONG_NAME = "d" * 300  # longer than any filesystem's 255-byte name limit
BOTH_STACKS = "base_model: org/model\ndeepspeed: ds.json\nfsdp_config:\n  reshard_after_forward: true\n"


def wizard(*argv: str, cwd: Path, timeout: float = 60) -> tuple[int, str, str]:
    """The real command in a child process, bounded in time (a pipe would otherwise block it forever)."""
    proc = subprocess.run(
        [sys.executable, "-m", "wizard", *argv],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    return proc.returncode, proc.stdout, proc.stderr


def cli(*argv: str) -> tuple[int, str, str]:
    """The command in-process, for the cases that cannot block: (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


def assert_one_line(err: str, *fragments: str) -> None:
    assert "Traceback" not in err, err
    assert err.endswith("\n") and err.count("\n") == 1, f"not one line: {err!r}"
    assert err.startswith("error: "), err
    for fragment in fragments:
        assert fragment in err, (fragment, err)


def main_run(tmp_path: Path, *extra: str) -> list[str]:
    """The main command on an example answers file, writing into tmp_path/out."""
    return ["--answers", str(EXAMPLE), "--output-dir", str(tmp_path / "out"), *extra]


def readers(path: str, tmp_path: Path) -> dict[str, tuple[list[str], int]]:
    """Each way the wizard reads a user's file, as (arguments, the exit code of a refusal)."""
    return {
        "answers": (["--answers", path, "--output-dir", str(tmp_path / "out")], 2),
        "model": (main_run(tmp_path, f"--set=model={path}"), 2),
        "deepspeed_config": (main_run(tmp_path, f"--set=deepspeed_config={path}"), 2),
        "check": (["check", path], 2),
        "tree": (main_run(tmp_path, "--tree", path), 3),  # the tree's own code (README "Exit codes")
        # The referenced JSON is part of the YAML's check: an error finding on the YAML, exit 1.
        "check_reference": (["check", "--output", "json", str(referencing_yaml(path, tmp_path))], 1),
    }


def referencing_yaml(path: str, tmp_path: Path) -> Path:
    """An Accelerate config whose DeepSpeed JSON is `path`."""
    config = tmp_path / "refers.yaml"
    config.write_text(f"distributed_type: DEEPSPEED\ndeepspeed_config:\n  deepspeed_config_file: {json.dumps(path)}\n")
    return config


def reference_errors(out: str) -> list[str]:
    """The error findings of `check --output json`."""
    return [f["message"] for f in json.loads(out)["findings"] if f["severity"] == "error"]


def assert_refused(result: tuple[int, str, str], code: int, *fragments: str) -> None:
    """Refused as `readers` says: one error line, or for a referenced JSON an error finding."""
    assert result[0] == code, result
    if code == 1:
        assert any(all(f in m for f in fragments) for m in reference_errors(result[1])), result[1]
        assert "Traceback" not in result[2]
    else:
        assert_one_line(result[2], *fragments)
        assert result[1] == ""


@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    path = tmp_path / "pipe.json"
    os.mkfifo(path)
    return path


READERS = ["answers", "model", "deepspeed_config", "check", "tree", "check_reference"]


@pytest.mark.parametrize("reader", READERS)
def test_a_named_pipe_is_refused_without_waiting(tmp_path: Path, fifo: Path, reader: str) -> None:
    argv, code = readers(str(fifo), tmp_path)[reader]
    started = time.monotonic()
    result = wizard(*argv, cwd=tmp_path, timeout=30)
    assert time.monotonic() - started < 30
    assert_refused(result, code, str(fifo), "is not a regular file (a named pipe)")
    assert not (tmp_path / "out").exists()


def test_a_folder_holding_a_pipe_named_config_json(tmp_path: Path) -> None:
    """`--set model=FOLDER` reads FOLDER/config.json: a pipe there is refused too."""
    folder = tmp_path / "model"
    folder.mkdir()
    os.mkfifo(folder / "config.json")
    code, out, err = wizard(*main_run(tmp_path, f"--set=model={folder}"), cwd=tmp_path, timeout=30)
    assert code == 2 and out == ""
    assert_one_line(err, "model:", str(folder / "config.json"), "is not a regular file (a named pipe)")


DEVICE_CASES = [
    *(("/dev/zero", reader) for reader in READERS),
    ("/dev/urandom", "answers"),
    ("/dev/urandom", "check"),
    ("symlink", "deepspeed_config"),
    ("symlink", "check_reference"),
]


@pytest.mark.parametrize(("device", "reader"), DEVICE_CASES)
def test_a_device_is_refused_before_reading(tmp_path: Path, device: str, reader: str) -> None:
    """/dev/zero never ends: read without a bound, memory grows about 1 GB/s until MemoryError."""
    if device == "symlink":
        device = str(tmp_path / "ds.json")
        os.symlink("/dev/zero", device)
    argv, code = readers(device, tmp_path)[reader]
    result = wizard(*argv, cwd=tmp_path, timeout=30)
    assert_refused(result, code, device, "is not a regular file (a character device)")
    assert not (tmp_path / "out").exists()


def test_a_sparse_giant_is_refused_at_once_naming_the_limit(tmp_path: Path) -> None:
    giant = tmp_path / "answers.yaml"
    with giant.open("wb") as handle:
        handle.truncate(2 * 1024**3)  # 2 GiB of holes: no disk used, but read whole it is 2 GiB of memory
    started = time.monotonic()
    code, out, err = wizard("--answers", str(giant), "--output-dir", str(tmp_path / "out"), cwd=tmp_path)
    assert time.monotonic() - started < 30
    assert code == 2 and out == ""
    assert_one_line(err, str(giant), "2,147,483,648 bytes", f"the limit is {MAX_ANSWERS_BYTES:,}")


@settings(max_examples=25, deadline=None)
@given(limit=st.integers(min_value=0, max_value=4096))
@example(limit=0)
def test_a_read_stops_at_its_limit_even_when_the_size_says_nothing(limit: int) -> None:
    """/proc files report size 0, so only the read itself can bound them: never more than the limit."""
    status = Path("/proc/self/status")
    if not status.is_file():
        pytest.skip("no /proc on this system")
    try:
        data = read_user_bytes(status, limit, "answers file", AnswersFileError)
    except AnswersFileError as exc:
        assert exc.message == f"answers file {status} is larger than the limit of {limit:,} bytes"
    else:
        assert len(data) <= limit


@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize("where", ["file", "folder"])
def test_an_over_long_name_is_one_line(tmp_path: Path, reader: str, where: str) -> None:
    """A 300-character name as the file, or as a folder on the way to it."""
    path = str(tmp_path / LONG_NAME) if where == "file" else str(tmp_path / LONG_NAME / "config.json")
    argv, code = readers(path, tmp_path)[reader]
    assert_refused(cli(*argv), code, "the name is too long")
    assert not (tmp_path / "out").exists()


def test_a_symlink_loop_is_one_line(tmp_path: Path) -> None:
    loop = tmp_path / "loop.yaml"
    os.symlink(loop, loop)
    assert_refused(cli("--answers", str(loop), "--output-dir", str(tmp_path / "out")), 2, str(loop), "symbolic links")


def test_a_name_with_a_line_break_stays_on_one_line(tmp_path: Path) -> None:
    missing = str(tmp_path / "two\nlines.yaml")
    assert_refused(cli("--answers", missing, "--output-dir", str(tmp_path / "out")), 2, repr(missing), "does not exist")


@pytest.mark.parametrize("folder", [LONG_NAME, f"missing/{LONG_NAME}", f"{LONG_NAME}/candidates"])
def test_check_split_into_an_over_long_folder_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, folder: str
) -> None:
    monkeypatch.chdir(tmp_path)
    config = tmp_path / "both.yaml"
    config.write_text(BOTH_STACKS)
    assert_refused(cli("check", str(config), "--split", folder), 2, "--split folder", "the name is too long")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["both.yaml"]


# ---------------------------------------------------------------------------------------------
# One nesting limit, one answer from every reader
# ---------------------------------------------------------------------------------------------


def nested_json(depth: int, kind: str) -> str:
    """A DeepSpeed JSON whose deepest value sits `depth` levels down (the config's own keys are 2 deep)."""
    inner = (
        "[" * (depth - 1) + "1" + "]" * (depth - 1)
        if kind == "list"
        else '{"a": ' * (depth - 1) + "1" + "}" * (depth - 1)
    )
    return '{"zero_optimization": {"stage": 2}, "x": ' + inner + "}"


def refused(parse: object, text: str) -> bool:
    try:
        parse(text)  # type: ignore[operator]
    except (JsonProblem, YamlProblem) as exc:
        assert "nesting deeper than 64 levels" in str(exc), exc
        return True
    return False


@settings(max_examples=40, deadline=None)
@given(depth=st.integers(min_value=2, max_value=3000), kind=st.sampled_from(["list", "map"]))
@example(depth=MAX_DEPTH, kind="map")
@example(depth=MAX_DEPTH + 1, kind="map")
@example(depth=985, kind="map")
@example(depth=MAX_DEPTH + 1, kind="list")
def test_json_and_yaml_share_one_nesting_limit(depth: int, kind: str) -> None:
    """JSON is YAML: the same text is refused by both readers exactly when it is nested past the limit."""
    text = nested_json(depth, kind)
    assert refused(loads_strict, text) == refused(parse_yaml, text) == (depth > MAX_DEPTH)


def test_a_deep_document_gets_one_answer_everywhere(tmp_path: Path) -> None:
    """985 levels passed the JSON reader and failed later, as "a bug" (exit 6): now exit 2 at the read."""
    deep = nested_json(985, "map")
    files = {"ds.json": deep, "deep.yaml": deep, "config.json": '{"hidden_size": ' + deep + "}"}
    files["answers.json"] = '{"target": ' + deep + "}"
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    runs = [
        (main_run(tmp_path, f"--set=deepspeed_config={tmp_path / 'ds.json'}"), 2),
        (main_run(tmp_path, f"--set=model={tmp_path / 'config.json'}"), 2),
        (["--answers", str(tmp_path / "answers.json"), "--output-dir", str(tmp_path / "out")], 2),
        (["check", str(tmp_path / "ds.json")], 2),
        (["check", str(tmp_path / "deep.yaml")], 2),
        (readers(str(tmp_path / "ds.json"), tmp_path)["check_reference"]),
    ]
    for argv, code in runs:
        assert_refused(cli(*argv), code, "nesting deeper than 64 levels")
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------------------------------------
# Numeric options: a documented range, one line outside it
# ---------------------------------------------------------------------------------------------

ESTIMATE = ["estimate", "--model", "7B", "--gpu-model", "A100", "--formula", "deepspeed"]
OPTIONS = {
    "--largest-layer-params": (ESTIMATE, 1, 10**14),
    "--world-size": (["check", str(REPO / "tests" / "assets" / "ds_zero3.json")], 1, 65_536),
}


@settings(max_examples=30, deadline=None)
@given(option=st.sampled_from(sorted(OPTIONS)), value=st.one_of(st.integers(), st.text(max_size=12)))
@example(option="--largest-layer-params", value="9" * 400)  # an OverflowError traceback, once
@example(option="--world-size", value="9" * 400)
@example(option="--largest-layer-params", value=10**14 + 1)
@example(option="--world-size", value=65_537)
@example(option="--world-size", value=0)
def test_numeric_options_have_one_range(option: str, value: int | str) -> None:
    """Inside the documented range the option is taken; outside it, one line names the option and the range."""
    argv, low, high = OPTIONS[option]
    text = str(value)
    inside = bool(re.fullmatch(r"[+-]?[0-9]+", text.strip())) and low <= int(text) <= high
    code, out, err = cli(*argv, f"{option}={text}")
    if inside:
        assert code in (0, 1) and "Traceback" not in err, err  # check's exit 1: a finding at that world size
    else:
        assert code == 2 and out == "", (code, err)
        assert_one_line(err, option, f"expected a whole number from {low:,} to {high:,}")
        assert len(err) < 200  # a 400-digit value is shortened, not repeated whole


def exits(*argv: str) -> tuple[int, str, str]:
    """`cli`, where argparse itself may stop the run (it exits through SystemExit)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(argv))
        except SystemExit as stop:
            code = int(stop.code or 0)
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("folder", [LONG_NAME, f"{LONG_NAME}/run", "a-file/run"])
@pytest.mark.parametrize("extra", [(), ("--dry-run",)])
def test_an_output_folder_the_system_cannot_make_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, folder: str, extra: tuple[str, ...]
) -> None:
    """A name too long for the file system, or a path through a file: exit 2 before any work, nothing made."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a-file").write_text("not a folder\n", encoding="utf-8")
    code, out, err = cli("--answers", str(EXAMPLE), "--output-dir", folder, *extra)
    assert code == 2 and out == "", out
    assert_one_line(err, "--output-dir", "allowed: a folder the system can make")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file"]


@pytest.mark.parametrize("option", ["--output-dir", "--answers", "--tree"])
def test_an_empty_path_is_refused_not_taken_as_this_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, option: str
) -> None:
    """`--output-dir "$UNSET"` would otherwise write wherever the command runs."""
    monkeypatch.chdir(tmp_path)
    given = {"--answers": str(EXAMPLE), "--output-dir": str(tmp_path / "out"), "--tree": None}
    given[option] = ""
    argv = [word for key, value in given.items() if value is not None for word in (key, value)]
    code, out, err = exits(*argv, "--dry-run")
    assert code == 2 and out == ""
    assert_one_line(err, f"argument {option}: an empty path")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("argv", "near"),
    [
        (["--dry"], "--dry-run"),  # an abbreviation is not taken: a new option could make it mean another
        (["--for"], "--force"),
        (["--dry-rn"], "--dry-run"),
        (["estimate", "--modle", "7B"], "--model"),
    ],
)
def test_options_are_whole_names_and_a_near_miss_is_named(argv: list[str], near: str) -> None:
    code, out, err = exits(*argv)
    assert code == 2 and out == ""
    assert_one_line(err, "unrecognized arguments", f"did you mean {near}?", "--help")


@pytest.mark.parametrize(
    "argv",
    [
        ["estimate", "--model", "7B", "--hardware", "mps"],
        ["--hardware", "mps"],
        ["explain", "--target=axolotl"],
    ],
)
def test_an_answer_given_as_an_option_points_to_set(argv: list[str]) -> None:
    # Every answer is taken by --set; an answer's name as an option is pointed there, not to a
    # near-miss option ("--hardware" is no typo of "--find-hardware").
    key = [word for word in argv if word.startswith("--")][-1].split("=")[0].removeprefix("--")
    code, out, err = exits(*argv)
    assert code == 2 and out == ""
    assert_one_line(err, "unrecognized arguments", f"{key} is an answer: --set {key}=VALUE", "--help")
    assert "did you mean" not in err


def test_an_option_of_the_hub_id_answer_is_named_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    code, _, err = cli("estimate", "--model", "acme/not-cached", "--gpu-memory-gb", "80")
    assert code == 2
    assert_one_line(err, "error: --model: 'acme/not-cached' is not in the Hugging Face cache")


def test_a_json_run_that_meets_a_differing_file_points_at_the_run_that_shows_the_diff(tmp_path: Path) -> None:
    out_dir = tmp_path / "out"
    assert cli("--answers", str(EXAMPLE), "--output-dir", str(out_dir))[0] == 0
    code, out, err = cli(
        "--answers", str(EXAMPLE), "--set", "gpus_per_node=8", "--output-dir", str(out_dir), "--output", "json"
    )
    assert code == 1
    assert json.loads(out)["files"][0]["action"] == "conflict"  # stdout stays one JSON document
    assert "a text run with --dry-run shows the diff" in err and "the diff is above" not in err, err
