"""Real-tool checks for the add-on outputs (FP8, torch.compile, Axolotl plugins, train_snippet.py).

The add-ons need libraries this CPU test machine does not have (transformer-engine, torchao,
MS-AMP, liger-kernel, cut-cross-entropy, bitsandbytes): they are installed on the training
machine, which is what the generated files' install list says. Where a tool only asks whether such
a library is importable, that one question is patched to "yes"; everything else (the loaders,
launch checks, recipe and plugin-argument validators) is the tools' own code.
"""

from __future__ import annotations

import ast
import contextlib
import importlib
import importlib.util
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import yaml

from realtools import accelerate_dry_run, axolotl_validate, require_tool

# Axolotl plugin -> the pydantic model of its YAML keys. The Cut Cross Entropy package's __init__
# imports training-time modules (evaluate) this venv lacks, so its args module is loaded from its
# file; it needs only pydantic.
PLUGIN_ARGS = {
    "axolotl.integrations.liger.LigerPlugin": ("axolotl.integrations.liger.LigerArgs", None),
    "axolotl.integrations.cut_cross_entropy.CutCrossEntropyPlugin": (
        "backend_wizard_tests_cce_args.CutCrossEntropyArgs",
        "axolotl/integrations/cut_cross_entropy/args.py",
    ),
}


def h100_capabilities(n_gpu: int) -> dict[str, Any]:
    """Axolotl capabilities of ``n_gpu`` H100s (sm_90, FP8 tensor cores)."""
    return {"bf16": True, "fp8": True, "tf32": True, "n_gpu": n_gpu, "compute_capability": "sm_90"}


def _load_args_module(name: str, relative: str) -> None:
    """Import an Axolotl args module from its file under ``name`` (once)."""
    if name in sys.modules:
        return
    package = Path(require_tool("axolotl").__file__).resolve().parent.parent
    spec = importlib.util.spec_from_file_location(name, package / relative)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)


def axolotl_validate_addons(path: Path, *, capabilities: dict[str, Any], n_gpu: int) -> dict[str, Any]:
    """Axolotl 0.21.0's validate_config with the config's plugins' own argument models.

    The Axolotl CLI registers the listed plugins before validating, which adds their keys
    (liger_*, cut_cross_entropy) and validators to the schema; without that they would be dropped
    as unknown keys. Here the plugin manager is asked for exactly those argument models, and the
    FP8-library check answers yes (see the module docstring).
    """
    base = require_tool("axolotl.integrations.base")
    schema = require_tool("axolotl.utils.schemas.config")
    plugins = yaml.safe_load(path.read_text()).get("plugins") or []
    args = []
    for plugin in plugins:
        dotted, relative = PLUGIN_ARGS[plugin]
        if relative is not None:
            _load_args_module(dotted.rsplit(".", 1)[0], relative)
        args.append(dotted)
    with (
        mock.patch.object(base.PluginManager, "get_input_args", return_value=args),
        mock.patch.object(schema, "is_fp8_available", return_value=True),
    ):
        return axolotl_validate(path, capabilities=capabilities, n_gpu=n_gpu)


@contextlib.contextmanager
def _fp8_libraries() -> Iterator[None]:
    """Answer "installed" for the FP8 libraries; torchao's config class records its arguments."""
    dataclasses = require_tool("accelerate.utils.dataclasses")
    launch_utils = require_tool("accelerate.utils.launch")
    float8 = types.ModuleType("torchao.float8")
    float8.Float8LinearConfig = lambda **kwargs: dict(kwargs)  # type: ignore[attr-defined]
    # Only these two entries are added and removed: restoring all of sys.modules (patch.dict)
    # would drop the torch modules imported meanwhile, and torch cannot import them twice.
    stubs = {"torchao": types.ModuleType("torchao"), "torchao.float8": float8}
    assert not set(stubs) & set(sys.modules), "torchao is installed: use it instead of the stub"
    sys.modules.update(stubs)
    try:
        with (
            mock.patch.object(launch_utils, "is_fp8_available", return_value=True),
            mock.patch.object(dataclasses, "is_transformer_engine_available", return_value=True),
            mock.patch.object(dataclasses, "is_torchao_available", return_value=True),
        ):
            yield
    finally:
        for name in stubs:
            sys.modules.pop(name, None)


def accelerate_addon_dry_run(config_path: Path, *, cwd: Path) -> dict[str, Any]:
    """Accelerate's launch code path for a config with add-ons, plus what the workers build from it.

    Returns the dry-run summary with ``fp8_recipe`` (the recipe kwargs handler Accelerator creates
    for the configured backend, from the exported variables) and ``dynamo`` (the
    ``TorchDynamoPlugin`` built from them) when they apply.
    """
    accelerate_utils = require_tool("accelerate.utils")
    with _fp8_libraries():
        summary = accelerate_dry_run(config_path, cwd=cwd)
        env = summary["env"]
        with accelerate_utils.patch_environment(**env):
            backend = env.get("ACCELERATE_FP8_BACKEND")
            recipe = {
                "TE": accelerate_utils.TERecipeKwargs,
                "AO": accelerate_utils.AORecipeKwargs,
                "MSAMP": accelerate_utils.MSAMPRecipeKwargs,
            }.get(str(backend))
            if recipe is not None:
                summary["fp8_recipe"] = recipe()
            if env.get("ACCELERATE_DYNAMO_BACKEND") not in (None, "NO"):
                summary["dynamo"] = accelerate_utils.TorchDynamoPlugin()
    return summary


def imported_names(source: str) -> list[tuple[str, str]]:
    """Every ``from MODULE import NAME`` in a Python file (at any depth), in order."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found += [(node.module, alias.name) for alias in node.names]
    return found


def assert_names_exist(source: str) -> None:
    """Every name a snippet imports exists in the installed (pinned) packages."""
    for module, name in imported_names(source):
        assert hasattr(importlib.import_module(module), name), f"{module} has no {name}"
