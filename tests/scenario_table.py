"""A registry for the acceptance table: 44 numbered training setups, each with the backend it expects.

Each row of the table is checked by one function registered with `@row(n)`; the functions live
next to the feature they exercise (tests/scenarios_*.py and tests/test_scenarios.py), and
tests/test_scenarios.py runs every registered row as one parametrized test. A row the table
itself gets wrong is registered with `note=`, saying which guideline the check follows and why.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROW_COUNT = 44

Check = Callable[[Path], None]


@dataclass(frozen=True)
class Scenario:
    """One table row: the function that checks it, and a note where the table is inconsistent."""

    row: int
    check: Check
    note: str | None = None


SCENARIOS: dict[int, Scenario] = {}


def row(number: int, note: str | None = None) -> Callable[[Check], Check]:
    """Register `check(tmp_path)` as the test of table row `number` (each row exactly once)."""

    def register(check: Check) -> Check:
        if not 1 <= number <= ROW_COUNT:
            raise ValueError(f"the table has rows 1-{ROW_COUNT}, not {number}")
        if number in SCENARIOS:
            raise ValueError(f"row {number} is registered twice ({SCENARIOS[number].check.__name__})")
        SCENARIOS[number] = Scenario(number, check, note)
        return check

    return register
