"""The output folder's edges: what already stands at a name of the set, and what a run leaves.

A named pipe, a device or a socket where a file goes is refused (exit 2) without being opened
for a blocking read; a huge old file is compared with a bounded read; a symbolic link, even one
that points nowhere, is an existing file that only --force replaces (the link, never its
target); a killed run's temporary files, a failed run's new folders and a --force re-run's
dropped files do not stay behind, and nothing the wizard did not write is ever removed
(README "Options and output", "Exit codes"). Runs that could hang run in a child with a timeout.
"""

from __future__ import annotations

import json
import os
import re
import resource
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from shell_tools import run_script
from test_interrupted_writes import ANSWERS, cli, one_error_line

from helpers import REPO

SET = {"accelerate_config.yaml", "ds_config.json", "launch.sh", "answers.yaml"}  # ANSWERS' set (DeepSpeed)
TEMP = re.compile(r"^\.(?P<name>.+)\.backend-wizard-(?P<pid>[0-9]+)-[^.]+\.tmp$")
# One CPU process set: no DeepSpeed, so no ds_config.json.
NO_DEEPSPEED = yaml.safe_load((REPO / "examples" / "cpu-4proc-accelerate.yaml").read_text(encoding="utf-8"))
MULTI_MACHINE: dict[str, Any] = {
    "target": "accelerate",
    "hardware": "nvidia",
    "gpu_model": "A100 80GB",
    "gpus_per_node": 2,
    "num_nodes": 2,
    "model": "7B",
    "method": "lora",
    "main_process_ip": "10.0.0.1",
}


def answers_file(folder: Path, answers: dict[str, Any] = ANSWERS, name: str = "answers-in.yaml") -> Path:
    path = folder / name
    path.write_text(yaml.safe_dump(answers, sort_keys=False), encoding="utf-8")
    return path


def child(*argv: str, limits: dict[int, int] | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """The real command in a child process, under a time limit (and resource limits, if given)."""

    def set_limits() -> None:
        for limit, value in (limits or {}).items():
            resource.setrlimit(limit, (value, value))

    return subprocess.run(
        [sys.executable, "-m", "wizard", *argv],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=timeout,
        preexec_fn=set_limits if limits else None,
        check=False,
    )


def listing(folder: Path) -> dict[str, str]:
    """Each name in `folder` with what it is: a file's text, a link's target, or its kind."""
    found = {}
    for path in folder.iterdir():
        if path.is_symlink():
            found[path.name] = f"-> {os.readlink(path)}"
        elif path.is_file():
            found[path.name] = path.read_text(encoding="utf-8", errors="replace")
        else:
            found[path.name] = "special"
    return found


# ---------------------------------------------------------------------------------------------
# Something other than a regular file at a name of the set
# ---------------------------------------------------------------------------------------------


@pytest.fixture
def listening_socket(tmp_path: Path) -> Iterator[socket.socket]:
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    yield server
    server.close()


def make_special(path: Path, kind: str, server: socket.socket) -> None:
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "socket":
        server.bind(str(path))
        server.listen(1)
    else:  # the character device /dev/zero (1, 5): a read of it never ends
        try:
            os.mknod(path, 0o666 | 0o020000, os.makedev(1, 5))
        except PermissionError:
            pytest.skip("creating a device node needs CAP_MKNOD")


@pytest.mark.parametrize(
    ("kind", "words"), [("fifo", "a named pipe (FIFO)"), ("device", "a character device"), ("socket", "a socket")]
)
@pytest.mark.parametrize("force", [False, True])
def test_a_special_file_at_a_name_is_refused_without_reading_it(
    tmp_path: Path, listening_socket: socket.socket, kind: str, words: str, force: bool
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    make_special(out / "ds_config.json", kind, listening_socket)
    proc = child("--answers", str(answers_file(tmp_path)), "--output-dir", str(out), *(["--force"] if force else []))
    assert proc.returncode == 2, proc.stderr
    line = one_error_line(proc.stderr, f"{out / 'ds_config.json'}", words, "nothing was written")
    assert "not a regular file" in line or "a regular file or nothing" in line
    assert sorted(p.name for p in out.iterdir()) == ["ds_config.json"], "a file was written beside it"


def test_a_huge_old_file_is_compared_with_a_bounded_read(tmp_path: Path) -> None:
    """8 GiB (sparse) where launch.sh goes, under a 1 GiB address-space limit: read whole, it would not fit."""
    out = tmp_path / "out"
    out.mkdir()
    huge = out / "launch.sh"
    with huge.open("wb") as handle:
        handle.truncate(8 << 30)
    answers = answers_file(tmp_path)
    limits = {resource.RLIMIT_AS: 1 << 30}
    proc = child("--answers", str(answers), "--output-dir", str(out), limits=limits)
    assert proc.returncode == 1, proc.stderr
    one_error_line(proc.stderr, "not overwriting", str(huge), "--force")
    assert huge.stat().st_size == 8 << 30 and sorted(p.name for p in out.iterdir()) == ["launch.sh"]
    assert "larger than 1024 KiB" in proc.stdout, "the summary says why no diff is shown"
    proc = child("--answers", str(answers), "--output-dir", str(out), "--force", limits=limits)
    assert proc.returncode == 0, proc.stderr
    assert huge.read_text().startswith("#!/usr/bin/env bash"), "--force replaced it with the new script"


# ---------------------------------------------------------------------------------------------
# Symbolic links at a name of the set
# ---------------------------------------------------------------------------------------------


def test_a_link_is_an_existing_file_and_is_never_followed(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    outside = tmp_path / "outside.sh"
    outside.write_text("# the user's own script, outside the folder\n")
    (out / "launch.sh").symlink_to("../outside.sh")
    (out / "answers.yaml").symlink_to(tmp_path / "nowhere" / "answers.yaml")  # dangling
    answers = answers_file(tmp_path)
    before = listing(out)

    code, _, err = cli("--answers", str(answers), "--output-dir", str(out))
    assert code == 1, err
    line = one_error_line(err, "not overwriting", str(out / "launch.sh"), str(out / "answers.yaml"), "--force")
    assert "nothing was written" in line
    assert listing(out) == before, "the folder changed without --force"
    assert not (tmp_path / "nowhere").exists(), "the dangling link was followed"

    code, stdout, err = cli("--answers", str(answers), "--output-dir", str(out), "--force")
    assert code == 0, err
    assert "the link itself is replaced" in stdout
    for name in ("launch.sh", "answers.yaml"):
        assert not (out / name).is_symlink() and (out / name).is_file(), f"{name} is not the new file"
    assert outside.read_text() == "# the user's own script, outside the folder\n", "the link's target was written"
    assert not (tmp_path / "nowhere").exists(), "the dangling link was followed"


# ---------------------------------------------------------------------------------------------
# Leftovers: temporary files, new folders, the old set's dropped files
# ---------------------------------------------------------------------------------------------

KILLED_WHILE_RENAMING = textwrap.dedent(
    """
    import os, signal, sys
    from wizard.cli import main

    def replace(src, dst):
        os.kill(os.getpid(), signal.SIGKILL)  # every new file is staged; none is renamed yet

    os.replace = replace
    sys.exit(main(sys.argv[1:]))
    """
)


def test_a_rerun_removes_the_temporary_files_a_killed_run_left(tmp_path: Path) -> None:
    out = tmp_path / "out"
    answers = answers_file(tmp_path)
    proc = subprocess.run(
        [sys.executable, "-c", KILLED_WHILE_RENAMING, "--answers", str(answers), "--output-dir", str(out)],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    left = [p.name for p in out.iterdir()]
    assert left and all(TEMP.match(n) for n in left), f"not the writer's recognisable temporary files: {left}"
    assert {TEMP.match(n)["name"] for n in left} == SET  # type: ignore[index]
    # A temporary file of a run still going (this test's own process) is not a leftover.
    running = out / f".launch.sh.backend-wizard-{os.getpid()}-abcdefgh.tmp"
    running.write_text("being written")
    code, _, err = cli("--answers", str(answers), "--output-dir", str(out))
    assert code == 0, err
    assert sorted(p.name for p in out.iterdir()) == sorted([*SET, running.name])


def test_a_failed_write_removes_the_folders_it_created(tmp_path: Path) -> None:
    """RLIMIT_FSIZE makes the writes fail for real (EFBIG), as a full disk would, in a child."""
    out = tmp_path / "made" / "by" / "the-run"
    proc = child("--answers", str(answers_file(tmp_path)), "--output-dir", str(out), limits={resource.RLIMIT_FSIZE: 64})
    assert proc.returncode == 5, proc.stderr
    one_error_line(proc.stderr, "cannot write", os.strerror(27), "no file was replaced")  # 27: EFBIG
    assert sorted(p.name for p in tmp_path.iterdir()) == ["answers-in.yaml"], "a created folder was left"


def test_a_failed_write_keeps_a_folder_that_existed(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    proc = child("--answers", str(answers_file(tmp_path)), "--output-dir", str(out), limits={resource.RLIMIT_FSIZE: 64})
    assert proc.returncode == 5, proc.stderr
    assert out.is_dir() and not list(out.iterdir())


@given(own_slurm=st.booleans(), foreign=st.sampled_from(["", "notes.txt", "../outside.txt", "launch.sh.bak"]))
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_force_removes_the_old_sets_dropped_files_and_nothing_else(
    tmp_path: Path, own_slurm: bool, foreign: str
) -> None:
    """A DeepSpeed set, then --force with answers that need no ds_config.json.

    The manifest in answers.yaml names the old set; a name written into it by hand (a user's file,
    a path outside the folder) is never removed, nor a file of a set name the old set did not list.
    """
    folder = Path(tempfile.mkdtemp(dir=tmp_path))
    out = folder / "out"
    code, _, err = cli("--answers", str(answers_file(folder)), "--output-dir", str(out))
    assert code == 0, err
    old_answers = (out / "answers.yaml").read_text()
    assert "#   ds_config.json\n" in old_answers, "answers.yaml names the files of its set"
    (folder / "outside.txt").write_text("the user's\n")
    users = ["notes.txt", "launch.sh.bak", *(["slurm.sbatch"] if own_slurm else [])]
    for name in users:
        (out / name).write_text("the user's\n")
    if foreign:  # the manifest edited to name a file the wizard did not write
        (out / "answers.yaml").write_text(
            old_answers.replace("#   ds_config.json", f"#   {foreign}\n#   ds_config.json")
        )

    plain = answers_file(folder, NO_DEEPSPEED, "plain.yaml")
    code, _, err = cli("--answers", str(plain), "--output-dir", str(out))
    assert code == 1, "without --force nothing is replaced or removed"
    assert (out / "ds_config.json").exists()

    code, stdout, err = cli("--answers", str(plain), "--output-dir", str(out), "--force", "--output", "json")
    assert code == 0, err
    names = {p.name for p in out.iterdir()}
    assert set(users) <= names and (folder / "outside.txt").exists(), "a user's file was removed"
    assert "ds_config.json" not in names, "the dropped file of the old set stayed"
    removal = {"path": str(out / "ds_config.json"), "action": "remove"}
    assert removal in json.loads(stdout)["files"], "the report lists the removal"
    assert "ds_config.json" not in (out / "answers.yaml").read_text(), "the new manifest names the new set"


# ---------------------------------------------------------------------------------------------
# The output folder's name
# ---------------------------------------------------------------------------------------------

CONTROL = [chr(c) for c in [*range(1, 32), 127, 0x85, 0x9B]]


@given(char=st.sampled_from(CONTROL), where=st.sampled_from(["end", "middle", "parent"]))
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_a_control_character_in_the_output_folder_is_refused(tmp_path: Path, char: str, where: str) -> None:
    """A trailing newline would make launch.sh `cd` into the folder without it: refused, exit 2."""
    out = {
        "end": tmp_path / f"out{char}",
        "middle": tmp_path / f"o{char}ut",
        "parent": tmp_path / f"p{char}" / "out",
    }[where]
    code, _, err = cli("--answers", str(answers_file(tmp_path)), "--output-dir", str(out))
    assert code == 2, err
    one_error_line(err, "--output-dir", repr(char)[1:-1], "control character")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["answers-in.yaml"], "a folder was created"


@pytest.mark.parametrize("name", ["out", "with space", 'it\'s "quoted"', "$(touch pwned)", "trailing space "])
def test_the_multi_machine_launch_script_finds_its_own_folder(tmp_path: Path, name: str) -> None:
    """The script, run with bash from elsewhere, passes the config of its own folder, whatever the name."""
    out = tmp_path / name
    twin = tmp_path / name.rstrip()  # where a stripped name would lead
    code, _, err = cli("--answers", str(answers_file(tmp_path, MULTI_MACHINE)), "--defaults", "--output-dir", str(out))
    assert code == 0, err
    proc, calls = run_script(out / "launch.sh", tmp_path / "tools", "train.py", env={"MACHINE_RANK": "1"}, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    (call,) = calls
    config = call.argv[call.argv.index("--config_file") + 1]
    assert config == str(out.resolve() / "accelerate_config.yaml"), config
    assert not (tmp_path / "pwned").exists()
    if twin != out:
        assert not twin.exists()
