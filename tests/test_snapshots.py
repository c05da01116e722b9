"""What a user reads, word for word: a few representative runs compared with tests/snapshots/*.txt.

The decision tests compare rule ids, settings and files, so that rewording an explanation breaks
none of them; the wording itself is checked here, on a small set of runs: the summary of a run
(single GPU with LoRA, QLoRA, CPU offload, several machines, a Mac, CPUs, long context, Gaudi,
two refusals, an answer refused as input), `explain` and `estimate`, each at 80 columns. A failing test prints
a unified diff. After a deliberate change of wording, regenerate them all with

    python -m pytest tests/test_snapshots.py --update-snapshots

and review the diff of tests/snapshots/ before committing it.
"""

from __future__ import annotations

import difflib
import shlex
from pathlib import Path

import pytest
import yaml

from helpers import REPO
from scenario_data import answers
from wizard.cli import main

SNAPSHOTS = Path(__file__).resolve().parent / "snapshots"
COLUMNS = 80

# name -> (the scenario whose answers are in answers.yaml, or None; the command's arguments)
RUN = "--answers answers.yaml --output-dir out"
CASES: dict[str, tuple[str | None, str]] = {
    "axolotl_single_gpu_lora": ("axolotl_lora_a10g", RUN),
    "axolotl_qlora": ("axolotl_qlora_rtx4090", RUN),
    "cpu_offload": ("full_7b_a100_cpu_offload", RUN),
    "multi_node": ("full_70b_two_nodes", RUN),
    "mac": ("mac_lora_1b", RUN),
    "cpu_processes": ("cpu_four_processes", RUN),
    "long_context": ("axolotl_context_parallel_128k", RUN),
    "refusal": ("tpu_without_torch_xla", RUN),
    "nothing_fits": ("full_70b_one_16gb_gpu_no_offload", RUN),
    "gaudi_full_copy_does_not_fit": ("gaudi_eight_cards", RUN),
    "answer_refused": ("axolotl_on_cpu", RUN),
    "explain": ("full_7b_four_a100", "explain --answers answers.yaml"),
    "estimate": (None, "estimate --model 7B --method full --gpus-per-node 4 --gpu-model A100"),
}


def render(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], name: str) -> str:
    """Run one case in an empty folder at 80 columns; the text a user reads, with its exit code."""
    scenario, args = CASES[name]
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", str(COLUMNS))
    lines = [f"$ backend-wizard {args}"]
    if scenario is not None:
        (tmp_path / "answers.yaml").write_text(yaml.safe_dump(answers(scenario), sort_keys=False), encoding="utf-8")
        lines.append(f"# answers.yaml: the answers of the scenario {scenario} (tests/scenarios/)")
    code = main(shlex.split(args))
    captured = capsys.readouterr()
    lines += ["--- stdout", *captured.out.splitlines()]
    if captured.err:
        lines += ["--- stderr", *captured.err.splitlines()]
    lines.append(f"--- exit code {code}")
    text = "\n".join(line.rstrip() for line in lines) + "\n"
    # Paths of this machine read as they do from the repository root.
    return text.replace(f"{tmp_path}/", "").replace(f"{REPO}/", "")


@pytest.mark.parametrize("name", sorted(CASES))
def test_snapshot(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    update_snapshots: bool,
    name: str,
) -> None:
    text = render(tmp_path, monkeypatch, capsys, name)
    path = SNAPSHOTS / f"{name}.txt"
    if update_snapshots:
        SNAPSHOTS.mkdir(exist_ok=True)
        path.write_text(text, encoding="utf-8")
        return
    if not path.is_file():
        pytest.fail(f"{path.relative_to(REPO)} is missing: run pytest {Path(__file__).name} --update-snapshots")
    expected = path.read_text(encoding="utf-8")
    if text != expected:
        diff = difflib.unified_diff(
            expected.splitlines(keepends=True),
            text.splitlines(keepends=True),
            fromfile=f"{path.relative_to(REPO)} (snapshot)",
            tofile=f"{name} (this run)",
        )
        pytest.fail(
            "".join(diff) + "\nIf the new wording is meant, regenerate: python -m pytest tests/test_snapshots.py "
            "--update-snapshots",
            pytrace=False,
        )


def test_every_snapshot_file_has_a_case() -> None:
    stale = [path.name for path in sorted(SNAPSHOTS.glob("*.txt")) if path.stem not in CASES]
    assert stale == [], f"remove the snapshots of cases that are gone: {stale}"
