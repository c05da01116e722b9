"""Whether the Python that launch.sh runs has the packages the probe needs."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

from wizard.smoke.records import SmokeError, SmokePlan


def check_tools(plan: SmokePlan, env: dict[str, str], *, on_gpu: bool = False) -> Path:
    """The launcher the set's script runs; refuse in one line when it or a package is missing."""
    exe = "axolotl" if plan.target == "axolotl" else "accelerate"
    found = shutil.which(exe, path=env.get("PATH"))
    install = " ".join(dict.fromkeys(_pip_name(n) for n in plan.needs))
    if found is None:
        raise SmokeError(f"{exe} is not on PATH, so the set cannot run here: pip install {install}")
    interpreter = _interpreter(Path(found))
    if interpreter is None:
        return Path(found)  # not a Python entry point (a wrapper script): it will say itself what it lacks
    probe = (
        "import importlib.util as u, json, sys; print(json.dumps([m for m in sys.argv[1:] if u.find_spec(m) is None]))"
    )
    modules = [n for n in plan.needs if n != "bitsandbytes" or on_gpu]
    if plan.target == "axolotl":
        modules += ["trl"]  # Axolotl's trainer (its schema validator alone lacks it)
    try:
        done = subprocess.run(
            [*interpreter, "-c", probe, *modules], capture_output=True, text=True, timeout=60, env=env, check=False
        )
        missing = json.loads(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 else modules
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        missing = modules
    if missing:
        names = ", ".join(missing)
        what = "axolotl's trainer" if plan.target == "axolotl" and "trl" in missing else names
        pip = " ".join(dict.fromkeys(_pip_name(n) for n in missing))
        if plan.target == "axolotl":
            pip = "'axolotl[deepspeed]'" if plan.deepspeed else "axolotl"
        raise SmokeError(
            f"{what} missing where {exe} runs ({' '.join(interpreter)}): pip install {pip}"
            + ("" if plan.target != "axolotl" else f" (not found: {names})")
        )
    return Path(found)


def _pip_name(module: str) -> str:
    return {"axolotl": "axolotl", "trl": "axolotl"}.get(module, module)


def _interpreter(script: Path) -> list[str] | None:
    """The Python a console script's #! line names (None when it is not a Python script)."""
    from wizard.user_files import read_user_prefix

    try:
        head = read_user_prefix(script, 512, "launcher", SmokeError).split(b"\n", 1)[0].decode("utf-8", "replace")
    except SmokeError:
        return None
    if not head.startswith("#!"):
        return None
    words = head[2:].split()
    if not words:
        return None
    if Path(words[0]).name == "env":
        words = words[1:]
    return words if words and Path(words[0]).name.startswith("python") else None
