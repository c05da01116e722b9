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
    README.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    update()
