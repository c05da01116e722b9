"""The summary says once, under its panel, the margins its verdicts rest on: only those the run's figures use.

The invariants, over every decided path (the summary as printed at 80 columns):
- a decision with a memory estimate has the "How memory is judged" paragraph right under the panel, and it
  gives the usable line with the same figures the panel's Memory line gives (the share, the card, the GiB);
- the loss moment's sentence is there exactly where some layout of the table has a moment worth naming;
- the long-context sentence is there exactly where a GPU layout is at 8,192 tokens or more per GPU, and it
  names the same allowance the fits legend's 'risk' uses;
- a refusal has no such paragraph (its levers say their own figures).
"""

from __future__ import annotations

from io import StringIO
from pathlib import Path

from rich.console import Console

from helpers import decided_paths, tree
from wizard.engine.device import GPU_DEVICE, MAC_DEVICE
from wizard.engine.evaluate import chosen_estimate
from wizard.engine.memory import UNDERSHOOT_PERCENT, memory_gib, to_gib
from wizard.ui.console import print_result

HEAD = "How memory is judged: "


def _printed(result: object) -> str:
    out = StringIO()
    print_result(Console(file=out, width=80), tree(), result, dry_run=True, detail=False)  # type: ignore[arg-type]
    return out.getvalue()


def test_the_margins_are_said_once_and_only_those_the_run_uses(tmp_path: Path) -> None:
    kinds: set[str] = set()
    for number, (answers, result) in enumerate(decided_paths(tmp_path, refusals=True)):
        rec = result.recommendation
        est = None if rec.refused else chosen_estimate(rec)
        if number % 3 and not (est is not None and est.long_context):
            continue  # a third of the walk, and every long context
        text = _printed(result)
        flat = " ".join(text.split())
        if est is None:
            assert HEAD not in flat, answers
            kinds.add("none")
            continue
        assert flat.count(HEAD) == 1, answers
        lines = text.splitlines()
        at = next(i for i, line in enumerate(lines) if line.startswith(HEAD))
        assert lines[at - 1].startswith("╰"), lines[at - 1]  # right under the panel
        said = flat.split(HEAD, 1)[1].split(" Key settings", 1)[0]
        usable = f"{memory_gib(est.gpu_memory)} GiB ({to_gib(est.budget)} GiB)"
        assert f"{est.share:.0%} of" in said and usable in said, (answers, said)
        # The same usable figure the rest of the summary gives.
        assert f"{to_gib(est.budget)} GiB" in flat.replace(said, ""), answers
        moment = any(e.transient >= e.budget // 20 for e in rec.facts.estimates.values())
        assert ("the loss's fp32 temporaries add to the peak" in said) is moment, (answers, said)
        long_context = est.device == GPU_DEVICE and any(e.long_context for e in rec.facts.estimates.values())
        allowance = f"taken {UNDERSHOOT_PERCENT} higher must still fit the whole GPU"
        assert (allowance in said) is long_context, (answers, said)
        if "fits 'risk'" in flat:
            assert long_context and f"up to {UNDERSHOOT_PERCENT} higher" in flat, answers
        kinds.update({"mac" if est.device == MAC_DEVICE else "gpu", "moment" * moment, "long" * long_context})
    assert {"none", "mac", "gpu", "moment", "long"} <= kinds, kinds
