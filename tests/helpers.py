"""Shared helpers for the test-suite (plain functions; fixtures live in conftest.py)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from wizard.app import Result, load, run
from wizard.engine.tree import Tree
from wizard.errors import WizardError
from wizard.render.renderer import RenderedFile
from wizard.session import Sources

REPO = Path(__file__).resolve().parent.parent
_TREE: Tree | None = None


# A full fine-tune of 13B on one A100 80GB with 256 GiB of host RAM: no layout fits the GPU without
# offload, and the CPU offload is a close call on host RAM (its states fit, DeepSpeed's 1.5x does not).
ONE_A100_13B_FULL = {
    "target": "accelerate",
    "hardware": "nvidia",
    "gpu_model": "A100 80GB",
    "gpus_per_node": 1,
    "cpu_memory_gb": 256,
    "model": "13B",
    "method": "full",
}

# One RTX 4090, a QLoRA of Llama 3.1 8B through Accelerate, defaults elsewhere: the common single-card run.
ONE_4090_8B_QLORA = {
    "target": "accelerate",
    "hardware": "nvidia",
    "gpu_model": "RTX 4090",
    "gpus_per_node": 1,
    "model": "llama-3.1-8b",
    "method": "qlora",
}

# Four A100 40GB cards, a 13B full fine-tune with 512 GB of RAM: a ZeRO-2 offload fits, near the usable line, so
# the offload the wizard takes (with room) is ZeRO-3 + optim->CPU.
FOUR_A100_40GB_13B_FULL = {
    "target": "accelerate",
    "hardware": "nvidia",
    "gpu_model": "A100 40GB",
    "gpus_per_node": 4,
    "model": "13B",
    "method": "full",
    "cpu_memory_gb": 512,
}


def tree() -> Tree:
    """The shipped decision tree, loaded once."""
    global _TREE
    if _TREE is None:
        _TREE = load(REPO / "decision_tree.yaml")
    return _TREE


def decide(answers: dict[str, Any], output_dir: Path, *, write: bool = False, force: bool = False) -> Result:
    """Run the wizard non-interactively on an answers mapping (dry run unless write=True)."""
    return run(tree(), Sources(file_values=answers), output_dir, force=force, dry_run=not write)


def file(result: Result, name: str) -> RenderedFile:
    """One rendered file by name."""
    matches = [f for f in result.files if f.name == name]
    assert matches, f"{name} not rendered; got {[f.name for f in result.files]}"
    return matches[0]


def parsed(result: Result, name: str) -> Any:
    """A rendered YAML or JSON file, parsed."""
    text = file(result, name).text
    return json.loads(text) if name.endswith(".json") else yaml.safe_load(text)


def write_yaml(path: Path, data: Any) -> Path:
    """Write a mapping as YAML and return the path."""
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


_WALK: list[tuple[dict[str, Any], Result | None]] | None = None


def _walk(folder: Path) -> list[tuple[dict[str, Any], Result | None]]:
    """Every path of the walk with its dry-run result (None when refused as input), once per session.

    Deciding the ~1,000 paths takes most of a minute, and a dozen property tests read them: they
    share one walk. Its files (the brought DeepSpeed JSON of some paths) stay in the first
    caller's folder, which pytest keeps until the session ends. Results are read, never changed.
    """
    from paths import enumerate_paths  # tests/paths.py, beside this file

    global _WALK
    if _WALK is None:
        walked: list[tuple[dict[str, Any], Result | None]] = []
        for answers in enumerate_paths(folder):
            try:
                walked.append((answers, decide(answers, folder / "out")))
            except WizardError:
                walked.append((answers, None))
        _WALK = walked
    return _WALK


def decided_paths(
    folder: Path, keep: Callable[[dict[str, Any]], bool] = lambda answers: True, *, refusals: bool = False
) -> list[tuple[dict[str, Any], Result]]:
    """Every path of the walk (tests/paths.py) that `keep` selects and the wizard decides (dry run).

    Disabled combinations are left out (test_paths checks their message), and refusals too unless asked for.
    Each call gets its own copy of every answers mapping, so a test may change them freely.
    """
    return [
        (dict(answers), result)
        for answers, result in _walk(folder)
        if result is not None and keep(answers) and (refusals or not result.recommendation.refused)
    ]


def ignored(key: str, warnings: list[str]) -> bool:
    """Whether the run said it ignored `key`, with the reason its question was not asked."""
    start = f"ignored '{key}': it does not apply to these answers ("
    return any(w.startswith(start) and w.endswith(")") and len(w) > len(start) + 2 for w in warnings)


def title_line(out: str) -> str:
    """The summary panel's top border, with its title: the first line after the "In short:" lines above it."""
    return next(line for line in out.splitlines() if "╭" in line)


def verdict(result: Result) -> int:
    """The exit code a run (and `explain`) gives these answers: 4 refused, 9 past the fit or a close call, else 0."""
    from wizard.engine.evaluate import runs_close_call, runs_past_fit, runs_past_host

    rec = result.recommendation
    if rec.refused:
        return 4
    return 9 if runs_past_fit(rec) or runs_past_host(rec) or runs_close_call(rec) else 0


def next_says(out: str, words: str) -> bool:
    """Whether the summary's Next gives `words` (lower-case first) as its sentence or as one of its numbered steps.

    Next is "Next: <words>..." where only the launch follows, and "Next, in this order:" with numbered steps where
    a check comes first, each step's words capitalised ("2. <Words>...").
    """
    flat = " ".join(out.split())
    step = words[:1].upper() + words[1:]
    numbered = "Next, in this order:" in flat and re.search(rf"\d\. {re.escape(step)}", flat) is not None
    return f"Next: {words}" in flat or numbered
