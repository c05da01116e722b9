"""A real-tool test skips when its tool is missing, unless BACKEND_WIZARD_REQUIRE_TOOLS=1 (CI) fails it.

Run as a real pytest session on a one-test file, since skipping and failing are pytest's outcomes.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent

PROBE = """\
import pytest
from realtools import require_tool

pytestmark = pytest.mark.tools


def test_needs_a_tool():
    require_tool("backend_wizard_no_such_tool")
"""


@pytest.mark.parametrize(("required", "outcome"), [(None, "1 skipped"), ("1", "1 failed")])
def test_a_missing_tool_skips_outside_ci_and_fails_in_ci(tmp_path: Path, required: str | None, outcome: str) -> None:
    (tmp_path / "test_probe.py").write_text(PROBE, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k != "BACKEND_WIZARD_REQUIRE_TOOLS"}
    if required is not None:
        env["BACKEND_WIZARD_REQUIRE_TOOLS"] = required
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS), env.get("PYTHONPATH", "")])
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", "-rs", "test_probe.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert outcome in proc.stdout, proc.stdout
    assert "real tool 'backend_wizard_no_such_tool' is not importable" in proc.stdout, proc.stdout
    assert proc.returncode == (1 if required else 0), proc.stdout
