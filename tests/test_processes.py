"""`wizard.processes.kill_session`: every process a launch started goes, whatever group it moved to."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from wizard.processes import _stat_fields, kill_session, session_members

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc (Linux)")

# A launcher (bash) whose child starts three sleepers: one in the launch's group, one that moves to
# a group of its own (setpgid(0, 0), as MPICH's hydra_pmi_proxy does) with a command name holding
# spaces and parentheses, and one that leaves the session (setsid). Each writes its pid.
SLEEPER = textwrap.dedent(
    """
    import os, sys, time
    how, out = sys.argv[1], sys.argv[2]
    if how == "group":
        os.setpgid(0, 0)
        with open("/proc/self/comm", "w") as comm:
            comm.write("p) x (y) 1 2")
    elif how == "session":
        os.setsid()
    with open(out, "w") as handle:
        handle.write(str(os.getpid()))
    time.sleep(300)
    """
)


def alive(pid: int, wait: float = 5.0) -> bool:
    """Whether the process still runs after `wait` seconds (gone, or a zombie waiting to be reaped, is not)."""
    deadline = time.monotonic() + wait
    while _stat_fields(pid) is not None:
        if time.monotonic() > deadline:
            return True
        time.sleep(0.05)
    return False


def launch_sleepers(folder: Path) -> tuple[subprocess.Popen[bytes], dict[str, int]]:
    """The launcher in a new session (as smoke starts launch.sh) and the pids of its three sleepers."""
    script = folder / "sleeper.py"
    script.write_text(SLEEPER)
    files = {how: folder / f"{how}.pid" for how in ("plain", "group", "session")}
    child = " & ".join(f"{sys.executable} {script} {how} {path}" for how, path in files.items())
    launcher = subprocess.Popen(["bash", "-c", f"bash -c '{child} & wait' & wait"], start_new_session=True)
    deadline = time.monotonic() + 30
    while not all(path.exists() and path.read_text() for path in files.values()):
        assert time.monotonic() < deadline, "the sleepers did not start"
        time.sleep(0.05)
    pids = {how: int(path.read_text()) for how, path in files.items()}
    assert all(alive(pid, wait=0) for pid in pids.values())
    return launcher, pids


def test_every_process_of_the_session_goes(tmp_path: Path) -> None:
    launcher, pids = launch_sleepers(tmp_path)
    members = session_members(launcher.pid)
    assert {pids["plain"], pids["group"]} <= members  # the odd command name parses
    assert pids["session"] in members  # left the session, found as a descendant
    kill_session(launcher.pid)
    launcher.wait()
    for how, pid in pids.items():
        assert not alive(pid), how


def test_a_process_group_kill_alone_leaves_the_one_that_moved(tmp_path: Path) -> None:
    """What killpg leaves (the reason for kill_session), then kill_session finds it by its session."""
    launcher, pids = launch_sleepers(tmp_path)
    os.killpg(launcher.pid, signal.SIGKILL)
    launcher.wait()
    assert alive(pids["group"], wait=0.5)
    kill_session(launcher.pid)
    assert not alive(pids["group"])
    os.kill(pids["session"], signal.SIGKILL)  # orphaned out of the session by the killpg: no link left
