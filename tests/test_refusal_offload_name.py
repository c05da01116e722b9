"""A refusal's "allow CPU offload" names the layout that answer leads to, as its what-if row and In short do.

The invariant, over every refusal of the walk that rules offload out: where the refusal's Why says what allowing
offload needs "for" a layout, that layout is the one the "CPU offload allowed (offload: auto)" lever leads to.
"""

from __future__ import annotations

import re
from pathlib import Path

from helpers import FOUR_A100_40GB_13B_FULL, decide, decided_paths

NAMED = re.compile(
    r"allow CPU offload \(offload: auto\), which needs about [\d.]+ GiB of host RAM per machine for ([^,]+?),"
)


# The offload the wizard takes here (ZeRO-3 + optim->CPU, with room) is not the one with the least host RAM.
FOUR_A100_13B = {**FOUR_A100_40GB_13B_FULL, "offload": "none"}


def test_the_offload_a_refusal_names_is_the_one_the_answer_leads_to(tmp_path: Path) -> None:
    checked = 0
    walk = [(answers, result) for answers, result in decided_paths(tmp_path, refusals=True)]
    walk.append((FOUR_A100_13B, decide(FOUR_A100_13B, tmp_path / "four")))
    for answers, result in walk:
        rec = result.recommendation
        if not rec.refused or answers.get("offload") != "none":
            continue
        found = NAMED.search(" ".join(rec.because.split()))
        lever = next((x for x in result.levers if x.change.startswith("CPU offload allowed (offload: auto)")), None)
        if found is None or lever is None or lever.layout is None:
            continue
        assert found.group(1) == lever.layout, (answers, found.group(1), lever.layout)
        checked += 1
    assert checked >= 3, checked
    four = decide({**FOUR_A100_13B, "offload": "auto"}, tmp_path / "four-auto").recommendation
    assert four.settings["strategy"] == "zero3_offload_optimizer"  # the case above is the one it stands for
