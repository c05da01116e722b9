"""A refusal's "add GPUs (about N ...)" says what the memory table would say at that count, tight included.

The invariant, over every refusal of the walk that names a GPU or machine count for FSDP2 without
offload: deciding the same answers again at that count, FSDP2's own estimate fits, and it is tight
(the loss's moment past the usable line) exactly where the refusal says "tight".
"""

from __future__ import annotations

import re
from pathlib import Path

from helpers import decide, decided_paths

NAMED = re.compile(
    r"\(about (?:(\d+) machines, \d+ GPUs in all|(\d+) in all), sharded without offload, by this estimate([^)]*)\)"
)


def test_the_gpus_a_refusal_names_fit_as_it_says(tmp_path: Path) -> None:
    checked = tight = 0
    for number, (answers, result) in enumerate(decided_paths(tmp_path, refusals=True)):
        if not result.recommendation.refused:
            continue
        found = NAMED.search(" ".join(result.recommendation.because.split()))
        if found is None:
            continue
        machines, gpus, rest = found.groups()
        changed = dict(answers)
        if machines:
            changed["num_nodes"] = int(machines)
        elif int(gpus) <= 64:  # the most gpus_per_node allows; more are said in GPUs, not asked of one machine
            changed["gpus_per_node"] = int(gpus)
        else:
            continue
        again = decide(changed, tmp_path / f"again{number}").recommendation.facts.estimates["fsdp2"]
        assert again.fits, (answers, found.group())
        said = "tight with FSDP2: past the usable line for a moment as the backward pass starts" in rest
        assert said is again.tight, (answers, found.group(), again)
        checked += 1
        tight += said
    assert checked >= 3, checked
    assert 0 < tight < checked, (checked, tight)  # both kinds among them
