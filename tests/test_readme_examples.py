"""The README's rendered examples ("Multi-node", "SLURM", "Ray") are the wizard's real output.

Each example block in README.md is marked

    <!-- example: ANSWERS FILE [from "FIRST LINE"] ... -->
    ```lang
    ...
    ```
    <!-- example:end -->

and must equal FILE as the wizard renders it from the answers file ANSWERS (a path from the repo
root), or, with `from`, the end of FILE starting at the line FIRST LINE. A template change that
alters an example makes the test fail; `python tests/test_readme_examples.py` pastes the current
output into README.md.
"""

from __future__ import annotations

import re
import sys
import tempfile
from pathlib import Path

import pytest
import yaml

# Run as a script: the tests' helpers and the wizard itself are imported from this checkout.
sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parent.parent)]

from helpers import REPO, decide, file  # noqa: E402

README = REPO / "README.md"
EXAMPLE = re.compile(
    r'(?P<head><!-- example: (?P<answers>\S+) (?P<name>\S+)(?: from "(?P<start>[^"]+)")?[^\n]*-->\n```\w*\n)'
    r"(?P<body>.*?)"
    r"(?P<tail>```\n<!-- example:end -->)",
    re.S,
)


def rendered(answers: str, name: str, start: str | None) -> str:
    """FILE as the wizard renders it from the answers file, or its end from the line `start`."""
    values = yaml.safe_load((REPO / answers).read_text(encoding="utf-8"))
    with tempfile.TemporaryDirectory() as folder:
        text = file(decide(values, Path(folder) / "out"), name).text
    if start is None:
        return text
    lines = text.splitlines(keepends=True)
    first = [line.rstrip("\n") for line in lines].index(start)  # ValueError: the line is gone
    return "".join(lines[first:])


# A command's terminal output, as a reader at 80 columns sees it:
#     <!-- output: ARGS -->
#     ```
#     $ backend-wizard ARGS
#     ...
#     ```
#     <!-- output:end -->
# ARGS run in a fresh folder (paths in them are from the repo root), without colour.
OUTPUT = re.compile(
    r"(?P<head><!-- output: (?P<args>[^\n]*?) -->\n```\n)(?P<body>.*?)(?P<tail>```\n<!-- output:end -->)", re.S
)


def command_output(args: str) -> str:
    """What `backend-wizard ARGS` prints at 80 columns, after a "$ backend-wizard ARGS" line."""
    import contextlib
    import io
    import os
    import shlex

    from wizard.cli import main

    words = [str(REPO / w) if (REPO / w).is_file() and "/" in w else w for w in shlex.split(args)]
    out = io.StringIO()
    saved = (os.getcwd(), os.environ.get("COLUMNS"))
    with tempfile.TemporaryDirectory() as folder:
        os.chdir(folder)
        os.environ["COLUMNS"] = "80"
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
                main(words)
        finally:
            os.chdir(saved[0])
            if saved[1] is None:
                os.environ.pop("COLUMNS", None)
            else:
                os.environ["COLUMNS"] = saved[1]
    lines = [line.rstrip() for line in out.getvalue().splitlines()]
    return f"$ backend-wizard {args}\n" + "\n".join(lines) + "\n"


def outputs() -> list[re.Match[str]]:
    return list(OUTPUT.finditer(README.read_text(encoding="utf-8")))


@pytest.mark.parametrize("match", outputs(), ids=lambda m: m["args"].split()[0])
def test_readme_command_output_is_current(match: re.Match[str]) -> None:
    assert match["body"] == command_output(match["args"]), (
        f"README output of '{match['args']}' is stale: run python tests/test_readme_examples.py"
    )


def test_readme_shows_the_commands_newcomers_meet() -> None:
    shown = {m["args"].split()[0] for m in outputs()}
    assert shown >= {"--answers", "estimate", "explain", "glossary"}, shown


def examples() -> list[re.Match[str]]:
    return list(EXAMPLE.finditer(README.read_text(encoding="utf-8")))


def test_readme_has_the_examples() -> None:
    shown = {(m["answers"], m["name"]) for m in examples()}
    assert shown >= {
        ("tests/assets/readme_two_nodes.yaml", "accelerate_config.yaml"),
        ("tests/assets/readme_two_nodes.yaml", "launch.sh"),
        ("tests/assets/readme_two_nodes.yaml", "slurm.sbatch"),
        ("tests/assets/readme_ray.yaml", "axolotl.yaml"),
        ("tests/assets/readme_ray.yaml", "launch.sh"),
    }


@pytest.mark.parametrize("match", examples(), ids=lambda m: f"{Path(m['answers']).stem}-{m['name']}")
def test_readme_example_is_current(match: re.Match[str]) -> None:
    assert match["body"] == rendered(match["answers"], match["name"], match["start"]), (
        f"README example {match['name']} from {match['answers']} is stale: run python tests/test_readme_examples.py"
    )


def update() -> None:
    """Paste the current output into every example block of README.md."""
    text = README.read_text(encoding="utf-8")
    text = EXAMPLE.sub(lambda m: m["head"] + rendered(m["answers"], m["name"], m["start"]) + m["tail"], text)
    text = OUTPUT.sub(lambda m: m["head"] + command_output(m["args"]) + m["tail"], text)
    README.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    update()
