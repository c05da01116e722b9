"""Things said in two places say the same, and what a sentence points at is there.

* no generated file points at a memory table "below": the files have none, the summary has it;
* wherever the files or the summary say which optimizers DeepSpeed's CPU Adam replaces by Adam, they name the same
  ones;
* the micro-batch's room for the estimate's error says what its 1.13x was measured on: GPUs at 2,048 to 4,096 tokens;
  not a Mac; and at a long context, the larger long-context factor too.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from helpers import decided_paths
from wizard.cli import main
from wizard.engine.memory import UNDERSHOOT

ADAM_LIST = re.compile(r"an optimizer other than ([^()]*?) (?:then )?runs as Adam")


def test_no_file_points_at_a_table_below_and_the_adam_list_is_one(tmp_path: Path) -> None:
    lists: set[str] = set()
    for answers, result in decided_paths(tmp_path):
        for rendered in result.files:
            text = " ".join(rendered.text.replace("\n#", " ").split())
            assert "memory table below" not in text, (rendered.name, answers)
            lists.update(ADAM_LIST.findall(text))
        lists.update(ADAM_LIST.findall(" ".join(result.recommendation.because.split())))
    assert lists == {"Adam, AdamW, Adagrad or a 32-bit Lion"}, lists


@pytest.mark.parametrize(
    ("answers", "said"),
    [
        (
            {"hardware": "mps", "gpu_memory_gb": 64, "model": "1B"},
            "peaks measured on an NVIDIA card came to up to 1.13x of it, and none was measured on a Mac",
        ),
        (
            {"hardware": "nvidia", "gpu_model": "H100", "gpus_per_node": 1, "model": "1B", "sequence_length": 2048},
            "peaks measured at 2,048 to 4,096 tokens came to up to 1.13x of it",
        ),
        (
            {"hardware": "nvidia", "gpu_model": "H200", "gpus_per_node": 1, "model": "1B", "sequence_length": 12288},
            "peaks measured at 2,048 to 4,096 tokens came to up to 1.13x of it, and at this long context published"
            f" limits (Unsloth's) put it up to {UNDERSHOOT}x, which 70% also keeps within the usable line",
        ),
    ],
)
def test_the_room_for_the_estimates_error_says_what_it_was_measured_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], answers: dict[str, object], said: str
) -> None:
    path = tmp_path / "answers.yaml"
    full = {"target": "accelerate", "method": "lora", "global_batch_size": 32, **answers}
    path.write_text(yaml.safe_dump(full), encoding="utf-8")
    # --explain: the short summary says "the largest that fits with room", the long one what the room is for.
    code = main(["--answers", str(path), "--dry-run", "--explain"])
    text = " ".join(capsys.readouterr().out.split())
    assert code in (0, 9), text[:400]
    assert "the largest power of two that divides global_batch_size 32 and fits with its peak within" in text
    assert said in text, text[:3000]


# What a string that missed its f-prefix, or a template left unrendered, would print: {name}, {call(...)}, {{ or {%
# JSON and YAML in the file previews quote their keys, so they never match.
UNRENDERED = re.compile(r"\{[A-Za-z_][\w.]*(?:\([^)]*\))?\}|\{\{|\{%")


def test_no_summary_prints_an_unrendered_placeholder(tmp_path: Path) -> None:
    """Over the walk (refusals too), the short and the long summary print no placeholder left unfilled."""
    import io

    from rich.console import Console

    from helpers import tree
    from wizard.ui.console import print_result

    checked = 0
    for answers, result in decided_paths(tmp_path, refusals=True)[::8]:
        for detail in (False, True):
            out = io.StringIO()
            print_result(Console(file=out, width=80), tree(), result, dry_run=True, detail=detail)
            # The wizard's own words: the previews of the files (a Python snippet's f-strings) are cut off.
            said = out.getvalue().split("\n── ", 1)[0]
            found = UNRENDERED.search(said)
            assert found is None, (answers, detail, said[max(0, found.start() - 300) : found.end() + 100])
            checked += 1
    assert checked > 100, checked
