"""The layering rules, checked on the source: dependencies point toward the engine."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import REPO

PACKAGE = REPO / "wizard"
HEAVY = {"torch", "accelerate", "deepspeed", "axolotl", "transformers"}


def _runtime_nodes(tree: ast.AST) -> list[ast.AST]:
    """Every node except those under `if TYPE_CHECKING:` (annotations only, never imported)."""
    nodes: list[ast.AST] = []
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            continue
        nodes.append(node)
        stack.extend(ast.iter_child_nodes(node))
    return nodes


def imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in _runtime_nodes(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


MODULES = {str(p.relative_to(REPO)): imports(p) for p in PACKAGE.rglob("*.py")}


def importers_of(prefix: str) -> set[str]:
    return {mod for mod, names in MODULES.items() if any(n == prefix or n.startswith(prefix + ".") for n in names)}


def test_only_the_prompts_module_imports_questionary() -> None:
    assert importers_of("questionary") == {"wizard/ui/prompts.py"}
    assert importers_of("prompt_toolkit") <= {"wizard/ui/prompts.py"}


def test_rich_stays_in_the_ui_and_cli() -> None:
    assert {m for m in importers_of("rich") if not m.startswith("wizard/ui/")} <= {"wizard/cli.py"}


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m.startswith(("wizard/engine/", "wizard/checks/"))))
def test_engine_is_pure(module: str) -> None:
    names = MODULES[module]
    outer = {
        "wizard.ui",
        "wizard.render",
        "wizard.cli",
        "wizard.app",
        "wizard.session",
        "wizard.inputs",
        "wizard.report",
        "questionary",
        "rich",
        "prompt_toolkit",
        "os",
        "shutil",
        "subprocess",
        "tempfile",
    }
    assert not {n for n in names if any(n == o or n.startswith(o + ".") for o in outer)}
    source = (REPO / module).read_text(encoding="utf-8")
    assert "open(" not in source and "print(" not in source and ".write" not in source


def test_render_layer_does_not_reach_up() -> None:
    for module, names in MODULES.items():
        if module.startswith("wizard/render/"):
            assert not {n for n in names if n.startswith(("wizard.ui", "wizard.cli", "wizard.app"))}, module


def test_no_heavy_import_anywhere_in_the_package() -> None:
    assert not {n for names in MODULES.values() for n in names if n.split(".")[0] in HEAVY}


def loaded_modules(argv: list[str], env: dict[str, str] | None = None) -> set[str]:
    """Every module a fresh `backend-wizard ARGV` process has imported when it ends (a real subprocess)."""
    code = (
        "import sys, json\n"
        "from wizard.cli import main\n"
        "try:\n"
        f"    main({argv!r})\n"
        "except SystemExit:\n"
        "    pass\n"
        "sys.stderr.write('MODULES=' + json.dumps(sorted(sys.modules)))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})},
    )
    assert "MODULES=" in proc.stderr, proc.stderr
    return set(json.loads(proc.stderr.split("MODULES=")[1]))


def roots(modules: set[str]) -> set[str]:
    return {m.split(".")[0] for m in modules}


def test_answers_file_path_loads_no_heavy_prompt_or_printing_modules(tmp_path: Path) -> None:
    example = str(REPO / "examples" / "a100x4-7b-full-accelerate.yaml")
    loaded = loaded_modules(["--answers", example, "--dry-run", "--output", "json", "--output-dir", str(tmp_path)])
    assert "wizard.app" in loaded and "yaml" in loaded
    assert not roots(loaded) & (HEAVY | {"questionary", "prompt_toolkit", "numpy", "rich"} | HUB)
    # The shipped tree is linted by the tests and `tree --lint`, not on every run.
    assert "wizard.engine.tree_lint" not in loaded
    # What this run (an FSDP2 set, nothing to offload, nothing on disk to compare) never uses loads
    # only where it is used: the levers (the JSON has none), the Hub and model-folder readers, the
    # GPU queries of --detect, the other formats' checks, diffs of old files, the signal handling
    # of a run that writes, and importlib.resources (the data files are read as files).
    unused = {
        "wizard.engine.what_if",
        "wizard.hub",
        "wizard.hub_model",
        "wizard.checkpoint",
        "wizard.detect",
        "wizard.checks.axolotl",
        "wizard.checks.deepspeed",
        "subprocess",
        "platform",
        "difflib",
        "signal",
        "logging",
        "importlib.resources",
    }
    assert not loaded & unused, sorted(loaded & unused)


# The Hub client and its HTTP stack: loaded only when a Hub id is not in the local cache.
HUB = {"huggingface_hub", "httpx", "httpcore"}


def test_only_the_hub_module_imports_huggingface_hub_and_only_inside_a_function() -> None:
    assert importers_of("huggingface_hub") == {"wizard/hub.py"}
    assert importers_of("httpx") <= {"wizard/hub.py"}
    module = ast.parse((PACKAGE / "hub.py").read_text(encoding="utf-8"))
    top_level = {
        alias.name if isinstance(node, ast.Import) else node.module
        for node in module.body
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
    }
    assert not {name for name in top_level if name and name.split(".")[0] in HUB}


def test_a_local_model_or_a_cached_hub_id_loads_no_hub_client(tmp_path: Path) -> None:
    config = REPO / "tests" / "assets" / "configs" / "EleutherAI--pythia-12b.json"
    folder = tmp_path / "hub" / "models--acme--cached"
    (folder / "refs").mkdir(parents=True)
    (folder / "refs" / "main").write_text("a" * 40, encoding="utf-8")
    (folder / "snapshots" / ("a" * 40)).mkdir(parents=True)
    (folder / "snapshots" / ("a" * 40) / "config.json").write_bytes(config.read_bytes())
    for model in (str(config), "acme/cached"):
        argv = ["estimate", "--model", model, "--gpu-memory-gb", "80", "--output", "json"]
        loaded = loaded_modules(argv, {"HF_HUB_CACHE": str(tmp_path / "hub")})
        assert "wizard.engine.param_count" in loaded, model
        assert not roots(loaded) & (HEAVY | HUB), (model, roots(loaded) & (HEAVY | HUB))


def test_help_and_version_load_neither_the_engine_nor_its_libraries() -> None:
    for argv in (["--help"], ["--version"]):
        loaded = loaded_modules(argv)
        assert "wizard.cli" in loaded, argv
        assert not roots(loaded) & {"yaml", "jinja2", "rich", "questionary"}, argv
        assert not {m for m in loaded if m.startswith(("wizard.engine", "wizard.app", "wizard.render"))}, argv
        # Nor the standard modules argparse or the wizard would take only for annotations or sizes
        # (the help is wrapped and sized by wizard.commands.common): a tenth of the start-up each.
        assert not roots(loaded) & {"shutil", "textwrap", "typing", "pathlib"}, argv


def test_help_is_wrapped_at_the_terminal_width_without_breaking_an_option(tmp_path: Path) -> None:
    """Every command's help at COLUMNS=60: no line longer, and each option printed whole, never cut
    at a hyphen (the help's own wrapping, which replaces textwrap's)."""
    from wizard.cli import SUBCOMMANDS, build_parser

    for words in ([], *([name] for name in SUBCOMMANDS)):
        proc = subprocess.run(
            [sys.executable, "-m", "wizard", *words, "--help"],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "60"},
        )
        assert proc.returncode == 0, proc.stderr
        lines = proc.stdout.splitlines()
        # argparse keeps a usage group whole ("[--formula {a,b,c}]"), as it should: only such a
        # line, alone on its line, may run past the width.
        long = [line for line in lines if len(line) > 60]
        assert all(line.strip().startswith("[") and line.strip().count("[") == 1 for line in long), long
        assert all(len(line) <= 60 for line in lines[lines.index("options:") :]), proc.stdout
        assert len(lines) > 5 and "options:" in proc.stdout
    text = " ".join(
        subprocess.run(
            [sys.executable, "-m", "wizard", "--help"],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "60"},
        ).stdout.split()
    )
    for action in build_parser()._actions:
        for option in action.option_strings:
            assert option in text.split() or f"[{option}" in text, option


# Who may open a file, and why: everything a user points at goes through wizard/user_files.py,
# which refuses pipes and devices before opening and bounds every read.
FILE_OPENERS = {
    "wizard/user_files.py": "every file a user points at",
    "wizard/render/writer.py": "the output set it writes",
    "wizard/render/existing.py": "the output folder's old files, without following a link or waiting on a pipe",
    "wizard/detect.py": "/proc/meminfo, the machine's own",
    "wizard/ui/output.py": "/dev/null, where output goes after the reader closed the pipe",
    "wizard/smoke/launch.py": "the probe, the Axolotl copy and plugin it writes into its own fresh temporary folder",
    "wizard/processes.py": "/proc/PID/stat, the kernel's record of the processes a launch started",
    "wizard/engine/catalog.py": "the package's own data files (wizard/data), never a user's",
    "wizard/disk_cache.py": "its own entries in the wizard's private cache folder, and its own source for their key",
}


def _opens_a_file(node: ast.Call) -> bool:
    """`open(...)`, `os.open(...)`, `x.read_text()` and the like, except package data (importlib.resources)."""
    func = node.func
    if isinstance(func, ast.Name):
        return func.id == "open"
    if not isinstance(func, ast.Attribute) or func.attr not in {"open", "fdopen", "read_text", "read_bytes"}:
        return False
    return "resources.files(" not in ast.unparse(func.value)


def test_only_the_reading_module_opens_a_users_file() -> None:
    found = {
        f"{path.relative_to(REPO)}:{node.lineno}"
        for path in PACKAGE.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Call) and _opens_a_file(node)
    }
    assert {place.split(":")[0] for place in found} <= set(FILE_OPENERS), sorted(found)
    assert "wizard/user_files.py" in {place.split(":")[0] for place in found}


def test_the_smoke_probe_is_a_template_the_package_never_imports() -> None:
    """templates/smoke_probe.py.j2 is data: rendered and run in a subprocess, where torch lives."""
    assert not importers_of("smoke_probe") and not importers_of("templates")
    probe = (REPO / "templates" / "smoke_probe.py.j2").read_text(encoding="utf-8")
    assert "import torch" in probe and "from accelerate import Accelerator" in probe
    plugin = (REPO / "templates" / "smoke_axolotl_plugin.py.j2").read_text(encoding="utf-8")
    assert "from axolotl.integrations.base import BasePlugin" in plugin and not importers_of("smoke_axolotl_plugin")
    for name in ("__init__", "launch", "plan", "records", "tools", "verdict"):
        assert not {m for m in MODULES[f"wizard/smoke/{name}.py"] if m.split(".")[0] in HEAVY}
    assert not {m for m in MODULES["wizard/processes.py"] if m.split(".")[0] in HEAVY | {"psutil"}}
