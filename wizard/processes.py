"""Stop every process a launch started, even those that left its process group (stdlib only).

A launch is started with `subprocess.Popen(..., start_new_session=True)`: its first process leads
a new session whose id is its pid, and every process it starts inherits that session. Killing the
process group (`os.killpg`) is not enough: a launcher may move its helpers into groups of their
own, as MPICH's `hydra_pmi_proxy` does with setpgid(2), and those survive a killpg with their
workers. The session id stays: only setsid(2) leaves it, and such a process is still a
descendant of the leader, found through its parent pid.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from pathlib import Path

PROC = Path("/proc")


def _stat_fields(pid: int) -> tuple[int, int] | None:
    """(parent pid, session id) of a process from /proc/PID/stat, or None when it is gone or a zombie.

    The second field (comm, the command name in parentheses) may itself hold spaces and
    parentheses, so the fields are read after the last ')' ("proc_pid_stat(5)",
    https://man7.org/linux/man-pages/man5/proc_pid_stat.5.html): state, ppid, pgrp, session, ...
    """
    try:
        text = (PROC / str(pid) / "stat").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    fields = text.rsplit(")", 1)[-1].split()
    if len(fields) < 4 or fields[0] in ("Z", "X"):
        return None  # a zombie holds no memory; its parent (or init) reaps it
    try:
        return int(fields[1]), int(fields[3])
    except ValueError:
        return None


def session_members(leader: int) -> set[int]:
    """The live pids in the leader's session, with every descendant of the leader (Linux /proc).

    Empty where there is no /proc (the caller falls back to the process group there).
    """
    if not PROC.is_dir():
        return set()
    table: dict[int, tuple[int, int]] = {}
    for entry in PROC.iterdir():
        if entry.name.isdigit():
            fields = _stat_fields(int(entry.name))
            if fields is not None:
                table[int(entry.name)] = fields
    members = {pid for pid, (_, session) in table.items() if session == leader}
    # Descendants that called setsid(2) left the session but keep their parent.
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in table.items():
        children.setdefault(parent, []).append(pid)
    stack = [leader, *members]
    while stack:
        for child in children.get(stack.pop(), ()):
            if child not in members:
                members.add(child)
                stack.append(child)
    members.discard(os.getpid())  # never this process, whatever the table says
    return members


def kill_session(leader: int, *, rounds: int = 5) -> None:
    """SIGKILL every process of the session `leader` started (start_new_session=True).

    A process may fork while the others are killed, so the scan is repeated until it finds none
    (a few rounds at most). The process group is killed too: the fallback where /proc is missing.
    """
    for _ in range(rounds):
        # Scanned before the kill: a killed parent's children are handed to init at once, and a
        # descendant that left the session is then found by no link to the leader.
        members = session_members(leader) if sys.platform.startswith("linux") else set()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(leader, signal.SIGKILL)
        for pid in members:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        if not members:
            return
        time.sleep(0.05)
