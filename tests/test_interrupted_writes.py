"""Writing can fail or be interrupted: a full disk, a read-only folder, a file in the way, Ctrl-C or
SIGTERM in the middle of the writes. Whatever happens, each output file is either the old one, whole,
or the new one, complete; no temporary file is left behind; the error line says what happened
(exit 5); and nothing is overwritten without --force (README "Exit codes", "Options and output").

Failures are injected by patching the writer's system calls in-process (tests run as root in CI,
where chmod does not stop a write); signals are sent to a child process.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import io
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers import REPO
from wizard.cli import main

SETTINGS = settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)

# A DeepSpeed run writes the most files: accelerate_config.yaml, ds_config.json, launch.sh, answers.yaml.
ANSWERS: dict[str, Any] = {
    "target": "accelerate",
    "hardware": "nvidia",
    "gpu_model": "A100 80GB",
    "gpus_per_node": 1,
    "cpu_memory_gb": 512,
    "model": "7B",
    "method": "full",
    "offload": "cpu",
}
TEMP_FILE = re.compile(r"^\..+\.tmp$")  # the writer's temporary files: .NAME.XXXX.tmp
REASONS = {
    errno.ENOSPC: "no space left on the device",
    errno.EROFS: "permission denied (read-only location?)",
    errno.EACCES: "permission denied (read-only location?)",
    errno.EIO: os.strerror(errno.EIO),
    errno.EDQUOT: os.strerror(errno.EDQUOT),
}


def cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


def one_error_line(err: str, *fragments: str) -> str:
    assert "Traceback" not in err, err
    assert err.endswith("\n") and err.count("\n") == 1, f"not one line: {err!r}"
    assert err.startswith(("error: ", "stopped: ")), err  # Ctrl-C reads "stopped"
    for fragment in fragments:
        assert fragment in err, (fragment, err)
    return err[:-1]


def write_answers(folder: Path) -> Path:
    path = folder / "answers-in.yaml"
    path.write_text(yaml.safe_dump(ANSWERS, sort_keys=False), encoding="utf-8")
    return path


@functools.cache
def new_files() -> dict[str, bytes]:
    """What a successful run writes (name -> bytes), from a clean folder."""
    folder = Path(tempfile.mkdtemp(prefix="wizard-reference-"))
    code, _, err = cli("--answers", str(write_answers(folder)), "--output-dir", str(folder / "out"))
    assert code == 0, err
    files = {p.name: p.read_bytes() for p in (folder / "out").iterdir()}
    assert set(files) == {"accelerate_config.yaml", "ds_config.json", "launch.sh", "answers.yaml"}
    return files


def old_files() -> dict[str, bytes]:
    """A previous set of outputs: other content under every name the run writes."""
    return {name: f"# previous {name}, written by an earlier run\n".encode() for name in new_files()}


def prepare(folder: Path, with_old: bool) -> tuple[Path, Path]:
    """An answers file and an output folder (holding the old set when `with_old`).

    A dry run first fills the wizard's disk cache of parsed files (wizard/disk_cache.py), which
    writes through mkstemp too and swallows its own failures: a fault meant for the output set
    must not be spent on it when this test is the first in its process to run the wizard.
    """
    cli("--answers", str(write_answers(folder)), "--output-dir", str(folder / "warm"), "--dry-run")
    out = folder / "out"
    if with_old:
        out.mkdir()
        for name, data in old_files().items():
            (out / name).write_bytes(data)
    return write_answers(folder), out


def assert_each_file_whole(out: Path, with_old: bool, *, all_old: bool) -> None:
    """No temporary file left; every file old and whole, or new and complete (or absent, if new)."""
    if not out.exists():
        assert not with_old
        return
    names = sorted(p.name for p in out.iterdir())
    assert not [n for n in names if TEMP_FILE.match(n)], f"temporary files left behind: {names}"
    assert set(names) <= set(new_files()), names
    for name in new_files():
        path = out / name
        old = old_files()[name] if with_old else None
        if all_old:
            assert (path.read_bytes() if path.exists() else None) == old, f"{name} was replaced"
        else:
            assert (path.read_bytes() if path.exists() else None) in (old, new_files()[name]), f"{name} is mixed"


# ---------------------------------------------------------------------------------------------
# A system call fails in the middle of the writes
# ---------------------------------------------------------------------------------------------


class Faults:
    """Make the `nth` call (0-based) of one of the writer's system calls fail with `err`."""

    def __init__(self, op: str, nth: int, err: int) -> None:
        self.op, self.nth, self.err = op, nth, err
        self.calls = 0
        self.fired = False

    def _due(self) -> bool:
        due = self.calls == self.nth
        self.calls += 1
        self.fired = self.fired or due
        return due

    def _error(self) -> OSError:
        return OSError(self.err, os.strerror(self.err))

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        real = {
            "mkstemp": tempfile.mkstemp,
            "fdopen": os.fdopen,
            "fsync": os.fsync,
            "chmod": os.chmod,
            "replace": os.replace,
        }
        faults = self

        def wrap(name: str) -> Callable[..., Any]:
            def call(*args: Any, **kwargs: Any) -> Any:
                if name == faults.op and faults._due():
                    raise faults._error()
                return real[name](*args, **kwargs)

            return call

        def fdopen(fd: int, *args: Any, **kwargs: Any) -> Any:
            handle = real["fdopen"](fd, *args, **kwargs)
            if faults.op == "write" and faults._due():
                return HalfWriter(handle, faults._error())
            return handle

        patches = [
            mock.patch.object(tempfile, "mkstemp", wrap("mkstemp")),
            mock.patch.object(os, "fdopen", fdopen),
            mock.patch.object(os, "fsync", wrap("fsync")),
            mock.patch.object(os, "chmod", wrap("chmod")),
            mock.patch.object(os, "replace", wrap("replace")),
        ]
        with contextlib.ExitStack() as stack:
            for patch in patches:
                stack.enter_context(patch)
            yield


class HalfWriter:
    """A file whose write stores half the data, then fails (the disk filled up mid-file)."""

    def __init__(self, handle: Any, error: OSError) -> None:
        self.handle, self.error = handle, error

    def __enter__(self) -> HalfWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.handle.close()

    def write(self, data: bytes) -> int:
        self.handle.write(data[: len(data) // 2])
        self.handle.flush()
        raise self.error

    def __getattr__(self, name: str) -> Any:
        return getattr(self.handle, name)


@given(
    op=st.sampled_from(["mkstemp", "write", "fsync", "chmod", "replace"]),
    nth=st.integers(min_value=0, max_value=4),
    err=st.sampled_from(sorted(REASONS)),
    with_old=st.booleans(),
)
@SETTINGS
def test_a_failing_write_leaves_every_file_whole(tmp_path: Path, op: str, nth: int, err: int, with_old: bool) -> None:
    folder = Path(tempfile.mkdtemp(dir=tmp_path))
    answers, out = prepare(folder, with_old)
    faults = Faults(op, nth, err)
    with faults.installed():
        code, stdout, stderr = cli("--answers", str(answers), "--output-dir", str(out), "--force", "--output", "json")
    if not faults.fired:  # fewer calls than nth: the run went through
        assert code == 0, stderr
        assert {p.name: p.read_bytes() for p in out.iterdir()} == new_files()
        return
    assert code == 5, (code, stderr)
    line = one_error_line(stderr, "cannot write", str(out), REASONS[err])
    assert json.loads(stdout)["error"]["exit_code"] == 5
    # Every new file is on disk before the first rename: a failure before the renames leaves the
    # whole old set; a failed rename leaves each file old or new, never a mix inside one file.
    assert_each_file_whole(out, with_old, all_old=op != "replace")
    if op != "replace":
        assert "no file was replaced" in line


def test_full_disk_while_writing_keeps_the_old_files(tmp_path: Path) -> None:
    answers, out = prepare(tmp_path, with_old=True)
    with Faults("write", 1, errno.ENOSPC).installed():
        code, stdout, stderr = cli("--answers", str(answers), "--output-dir", str(out), "--force")
    assert code == 5 and stdout == ""
    one_error_line(stderr, "no space left on the device", "no file was replaced")
    assert_each_file_whole(out, True, all_old=True)


def test_read_only_output_folder(tmp_path: Path) -> None:
    """EROFS from mkstemp is what a read-only mount gives even to root."""
    answers, out = prepare(tmp_path, with_old=True)
    with Faults("mkstemp", 0, errno.EROFS).installed():
        code, stdout, stderr = cli("--answers", str(answers), "--output-dir", str(out), "--force")
    assert code == 5 and stdout == ""
    one_error_line(stderr, "permission denied (read-only location?)", "accelerate_config.yaml")
    assert_each_file_whole(out, True, all_old=True)


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root ignores directory permissions")
def test_read_only_output_folder_for_real(tmp_path: Path) -> None:
    answers, out = prepare(tmp_path, with_old=True)
    out.chmod(0o500)
    try:
        code, _, stderr = cli("--answers", str(answers), "--output-dir", str(out), "--force")
    finally:
        out.chmod(0o700)
    assert code == 5
    one_error_line(stderr, "permission denied")
    assert_each_file_whole(out, True, all_old=True)


def test_output_folder_under_a_regular_file(tmp_path: Path) -> None:
    """A path whose parent is a file cannot be created, whoever runs the wizard: said before any work (exit 2)."""
    blocker = tmp_path / "a-file"
    blocker.write_text("mine\n")
    answers = write_answers(tmp_path)
    code, stdout, stderr = cli("--answers", str(answers), "--output-dir", str(blocker / "out"))
    assert code == 2 and stdout == ""
    one_error_line(stderr, "Not a directory", str(blocker / "out"))
    assert blocker.read_text() == "mine\n"


def test_a_directory_in_the_way(tmp_path: Path) -> None:
    answers, out = prepare(tmp_path, with_old=False)
    (out / "ds_config.json").mkdir(parents=True)
    code, _, stderr = cli("--answers", str(answers), "--output-dir", str(out), "--force")
    assert code == 5
    one_error_line(stderr, "a directory is in the way", "ds_config.json")
    assert sorted(p.name for p in out.iterdir()) == ["ds_config.json"], "nothing else was written"


# ---------------------------------------------------------------------------------------------
# Nothing is overwritten without --force
# ---------------------------------------------------------------------------------------------


@given(
    existing=st.dictionaries(
        st.sampled_from(["accelerate_config.yaml", "ds_config.json", "launch.sh", "answers.yaml"]),
        st.one_of(st.text(max_size=200).map(lambda t: t.encode("utf-8")), st.binary(max_size=200)),
        min_size=1,
    ),
    as_json=st.booleans(),
)
@settings(SETTINGS, max_examples=25)
def test_nothing_is_overwritten_without_force(tmp_path: Path, existing: dict[str, bytes], as_json: bool) -> None:
    folder = Path(tempfile.mkdtemp(dir=tmp_path))
    answers, out = prepare(folder, with_old=False)
    out.mkdir()
    for name, data in existing.items():
        (out / name).write_bytes(data)
    extra = ["--output", "json"] if as_json else []
    code, _, stderr = cli("--answers", str(answers), "--output-dir", str(out), *extra)
    differs = {n for n, d in existing.items() if d != new_files()[n]}
    if not differs:
        assert code == 0, stderr
    else:  # text or not (a file that is not UTF-8 differs without a diff), only --force replaces it
        assert code == 1, stderr
        one_error_line(stderr, "not overwriting", "--force")
    if differs:
        assert {p.name: p.read_bytes() for p in out.iterdir()} == existing, "a file was written or replaced"


# ---------------------------------------------------------------------------------------------
# SIGINT / SIGTERM while the files are written (a child process)
# ---------------------------------------------------------------------------------------------

CHILD = textwrap.dedent(
    """
    import os, signal, sys, time
    from pathlib import Path
    from wizard.cli import main

    sig, mode, ready = getattr(signal, sys.argv[1]), sys.argv[2], Path(sys.argv[3])
    real_fsync, real_replace = os.fsync, os.replace
    calls = {"fsync": 0, "replace": 0}

    def fsync(fd):
        calls["fsync"] += 1
        if mode == "external" and calls["fsync"] == 2:
            ready.touch()  # the parent sends the signal now, while this write is in progress
            time.sleep(0.3)
        return real_fsync(fd)

    def replace(src, dst):
        calls["replace"] += 1
        if mode == "self" and calls["replace"] == 2:
            os.kill(os.getpid(), sig)  # between two renames
        return real_replace(src, dst)

    os.fsync, os.replace = fsync, replace
    sys.exit(main(sys.argv[4:]))
    """
)


@pytest.mark.parametrize(
    ("sig", "mode"),
    [("SIGINT", "external"), ("SIGTERM", "external"), ("SIGINT", "self"), ("SIGTERM", "self")],
)
def test_a_signal_during_the_writes_never_leaves_half_a_set(tmp_path: Path, sig: str, mode: str) -> None:
    answers, out = prepare(tmp_path, with_old=True)
    ready = tmp_path / "ready"
    argv = [sys.executable, "-c", CHILD, sig, mode, str(ready), "--answers", str(answers), "--output-dir", str(out)]
    child = subprocess.Popen(
        [*argv, "--force"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    if mode == "external":
        for _ in range(600):
            if ready.exists() or child.poll() is not None:
                break
            time.sleep(0.05)
        assert ready.exists(), "the child never reached the second write"
        child.send_signal(getattr(signal, sig))
    stdout, stderr = child.communicate(timeout=60)
    # The signal is held until the set is complete: every file is the new one.
    assert {p.name: p.read_bytes() for p in out.iterdir()} == new_files(), stderr
    assert "Traceback" not in stderr
    if sig == "SIGINT":
        assert child.returncode == 130, (child.returncode, stderr)
        line = one_error_line(stderr, "interrupted")
        assert "no config was written" not in line, "the config was written, completely"
        assert stdout == ""
    else:
        assert child.returncode == -signal.SIGTERM, (child.returncode, stderr)
