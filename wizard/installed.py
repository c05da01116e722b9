"""Whether a package or a command is installed where the wizard runs, without importing it.

The summary names the packages the written files need that are missing here ("install first"),
on every run; this module is what that takes, kept apart from ``--detect``'s GPU queries so a run
that only asks about packages loads nothing else. Packages are looked up with importlib's finder
("importlib.util.find_spec", https://docs.python.org/3/library/importlib.html#importlib.util.find_spec),
commands on PATH with ``shutil.which``. A plan for a Mac is checked only on a Mac
(`this_machine_is_a_mac`): what another machine has installed says nothing of it.
"""

from __future__ import annotations

import importlib.util
import shutil
import sys
from collections.abc import Mapping, Sequence
from typing import Any


def this_machine_is_a_mac() -> bool:
    """Whether the wizard runs on macOS (read at each call)."""
    return sys.platform == "darwin"


def mac_plan_elsewhere(answers: Mapping[str, Any]) -> bool:
    """Whether these answers plan for a Mac on a machine that is not one: what is installed here says nothing of it."""
    return answers.get("hardware") == "mps" and not this_machine_is_a_mac()


def package_installed(name: str) -> bool:
    """Whether importlib's finder sees a top-level package (it is not imported)."""
    return importlib.util.find_spec(name) is not None


def requirement_installed(modules: Sequence[str], commands: Sequence[str]) -> bool:
    """Whether a requirement is installed where the wizard runs: every module found, and one of the commands on PATH.

    Neither given (a system library): it cannot be told, so it counts as not installed.
    """
    if not modules and not commands:
        return False
    found = all(package_installed(name) for name in modules)
    return found and (not commands or any(shutil.which(command) for command in commands))
