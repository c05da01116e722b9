"""The summary's "Next": what to do after the files are written, in the order to do it.

The invariant: where a check that costs nothing is offered (smoke on this machine, the Mac's own
measurement), it is a numbered step before the launch of the user's own script, and the launch is
the last step; the steps are numbered 1, 2, ... with no gap. Read from the summary as printed at
80 columns, over a sample of every kind of path.
"""

from __future__ import annotations

import re
from io import StringIO
from pathlib import Path

import pytest
from rich.console import Console

from helpers import decide, decided_paths, tree
from wizard.ui.console import print_result

_STEP = re.compile(r"^(\d+)\. ")


def _next_block(text: str) -> list[str]:
    """The lines from the "Next" heading to the pointer to `explain` ("More: ...")."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("Next"))
    end = next(i for i, line in enumerate(lines) if i > start and line.startswith("More: "))
    return lines[start:end]


def test_checks_that_cost_nothing_come_before_the_launch_and_the_launch_comes_last(tmp_path: Path) -> None:
    """Smoke (and a Mac's measurement) are steps before the launch; the steps count 1, 2, ... to the launch."""
    paths = decided_paths(tmp_path)
    mac = [p for p in paths if p[0]["hardware"] == "mps"][::4]
    sample = paths[::13] + mac
    ordered = plain = 0
    for number, (answers, _) in enumerate(sample):
        folder = tmp_path / f"out{number}"
        result = decide(answers, folder, write=True)
        out = StringIO()
        print_result(Console(file=out, width=80), tree(), result, dry_run=False, detail=False)
        text = out.getvalue()
        if "launch.sh" not in [a.path.name for a in result.actions] or result.conflicts:
            continue
        block = _next_block(text)
        smoke_at = [i for i, line in enumerate(block) if line.strip().startswith("backend-wizard smoke ")]
        launch_at = [
            i
            for i, line in enumerate(block)
            if re.match(r"^\s+(?:[A-Z_]+=\S+ )?\S*launch\.sh(?: YOUR_TRAINING_SCRIPT\.py)?(?:  # .*)?$", line)
        ]
        assert launch_at, (answers, block)
        if block[0] == "Next, in this order:":
            ordered += 1
            numbers = [int(m.group(1)) for line in block if (m := _STEP.match(line))]
            assert numbers == list(range(1, len(numbers) + 1)) and len(numbers) >= 2, block
            # The smoke command comes before the launch, which is the last step; only a close call's fix (a step with
            # no command) may come before the smoke test.
            assert smoke_at and smoke_at[0] < launch_at[0], block
            steps_before_smoke = [line for line in block[: smoke_at[0]] if _STEP.match(line)]
            assert len(steps_before_smoke) == 1 or (
                len(steps_before_smoke) == 2 and "run out of memory" in " ".join(block[: smoke_at[0]])
            ), block
            last_step = max(i for i, line in enumerate(block) if _STEP.match(line))
            assert last_step < launch_at[0], block
            assert all(not _STEP.match(line) for line in block[launch_at[0] :]), block
            measure = [i for i, line in enumerate(block) if "launch.sh" in line and "train_snippet.py" in line]
            if answers["hardware"] == "mps" and measure:
                assert smoke_at[0] < measure[0] < launch_at[0], block
        else:
            plain += 1
            # No numbered list: then nothing to test first is offered here (another machine, a DPO set, a
            # JSON that cannot run here), and no smoke command either.
            assert not smoke_at, block
    assert ordered > 20 and plain > 0, (ordered, plain)


def test_every_command_of_next_fits_80_columns_and_pastes_as_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A command longer than the terminal is broken before its options with backslashes, never inside a word:
    each printed line fits 80 columns, and the lines joined are the command a shell would run."""
    import shlex

    paths = decided_paths(tmp_path)
    monkeypatch.chdir(tmp_path)  # relative output folders, as a user types them: short enough to break well
    mac = [p for p in paths if p[0]["hardware"] == "mps"]
    broken = 0
    for number, (answers, _) in enumerate(paths[::17] + mac[::3]):
        result = decide(answers, Path(f"out-with-a-long-name-{number}"), write=True)
        out = StringIO()
        print_result(Console(file=out, width=80), tree(), result, dry_run=False, detail=False)
        if "launch.sh" not in [a.path.name for a in result.actions]:
            continue
        block = _next_block(out.getvalue())
        for index, line in enumerate(block):
            if "#" in line:
                continue  # a command with a comment after it stays whole
            # Past 80 columns only where one argument is itself longer than a line can hold.
            assert len(line) <= 80 or any(len(w) > 70 for w in line.split()), (answers, line)
            if line.endswith(" \\"):
                rest = block[index + 1]
                indent = len(line) - len(line.lstrip())
                if not block[index - 1].endswith(" \\"):
                    assert rest.startswith(" " * (indent + 2)), (answers, block)  # continuations indented under it
                if not block[index - 1].endswith(" \\"):
                    # The first line of a broken command: the joined lines split into whole arguments.
                    joined, at = line[:-2], index + 1
                    while block[at - 1].endswith(" \\"):
                        joined += " " + block[at].strip().removesuffix(" \\").strip()
                        at += 1
                    words = shlex.split(joined)
                    assert all(w.startswith(("--", "/")) or not w.startswith("-") for w in words), joined
                    broken += 1
    assert broken >= 3, broken
