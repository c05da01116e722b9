"""A plan that fits only because the loss is computed in chunks says so in its Why, with the figure without it.

The invariant, over the GPU paths of the walk with the chunked loss turned on (Cut Cross Entropy for
Axolotl, chunked_loss for a script of one's own): where the decision keeps a full copy on each GPU
and that copy, with the ordinary loss, would pass the usable line, the Why says so with the full
copy's figure as the same answers without the chunked loss estimate it; elsewhere it does not.
"""

from __future__ import annotations

import re
from pathlib import Path

from helpers import decide, decided_paths
from wizard.engine.facts import GPU_HARDWARE
from wizard.engine.memory import to_gib

SAID = re.compile(
    r"with the ordinary loss, which builds the output logits whole, the run on this GPU would need about ([\d.]+) GiB"
    r" through the step at this micro_batch_size \d+, more than the usable memory; --set"
    r" (cut_cross_entropy|chunked_loss)=no shows the plan without it"
)


def test_a_copy_that_fits_only_with_a_chunked_loss_says_so(tmp_path: Path) -> None:
    paths = decided_paths(tmp_path, lambda a: a["hardware"] in GPU_HARDWARE and not a.get("deepspeed_config"))
    said = unsaid = 0
    for number, (answers, _) in enumerate(paths[::2]):
        key = "cut_cross_entropy" if answers["target"] == "axolotl" else "chunked_loss"
        chunked = decide({**answers, key: True}, tmp_path / f"c{number}")
        ordinary = decide({**answers, key: False}, tmp_path / f"o{number}")
        rec = chunked.recommendation
        if rec.refused or "ddp" not in rec.facts.estimates:
            continue
        because = " ".join(rec.because.split())
        found = SAID.search(because)
        copy = ordinary.recommendation.facts.estimates["ddp"]
        full_copy_kept = rec.settings.get("strategy") == "ddp" and rec.facts.estimates["ddp"].fits
        needs_it = full_copy_kept and copy.total > copy.budget
        if found is None:
            # Not said: either no full copy is kept, or the copy fits with the ordinary loss as well.
            assert not needs_it, (answers, because)
            unsaid += 1
            continue
        assert needs_it, (answers, because)
        assert float(found.group(1)) == float(to_gib(copy.total)) and found.group(2) == key, (answers, because)
        said += 1
    assert said >= 2 and unsaid >= 3, (said, unsaid)
