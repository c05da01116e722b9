"""How many paths the tree has (tests/paths.py's enumeration) and how long deciding and rendering
all of them takes, in one process.

Usage: python bench/paths.py
"""

from __future__ import annotations

import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests")]

from paths import enumerate_paths  # noqa: E402

from wizard.app import load, run  # noqa: E402
from wizard.errors import WizardError  # noqa: E402
from wizard.session import Sources  # noqa: E402


def main() -> None:
    tree = load(None)
    outcomes: Counter[str] = Counter()
    with tempfile.TemporaryDirectory() as folder:
        paths = list(enumerate_paths(Path(folder)))
        start = time.perf_counter()
        for answers in paths:
            try:
                result = run(tree, Sources(file_values=answers), Path(folder) / "out", force=False, dry_run=True)
                outcomes["refused" if result.recommendation.refused else str(result.recommendation.backend)] += 1
            except WizardError:
                outcomes["rejected answer"] += 1
        elapsed = time.perf_counter() - start
    print(f"paths: {len(paths)} ({', '.join(f'{k} {v}' for k, v in sorted(outcomes.items()))})")
    print(f"decide + render + self-check, all paths: {elapsed:.2f} s ({1000 * elapsed / len(paths):.1f} ms per path)")


if __name__ == "__main__":
    main()
