"""A CPU offload that fits the host RAM given, but with little of its usable part left, is said to be tight.

Invariant, over every decided path: the warning appears exactly when the chosen layout offloads to
the CPU, the host RAM was given, the offload fits it, and it takes more than HOST_TIGHT_SHARE of the
usable part; its figures are the estimate's.
"""

from __future__ import annotations

from pathlib import Path

from helpers import decided_paths
from wizard.engine.advice import HOST_TIGHT_SHARE
from wizard.engine.memory import FIT_MARGIN, OFFLOAD_STRATEGIES, to_gib

TIGHT = "host RAM is nearly full:"


def test_the_host_ram_warning_appears_exactly_when_the_offload_leaves_little_usable_ram(tmp_path: Path) -> None:
    tight = roomy = 0
    for answers, result in decided_paths(tmp_path):
        rec = result.recommendation
        strategy = str(rec.settings.get("strategy"))
        est = rec.facts.estimates.get(strategy) if rec.facts.estimates else None
        said = [" ".join(w.split()) for w in result.warnings if w.startswith(TIGHT)]
        expected = (
            est is not None
            and strategy in OFFLOAD_STRATEGIES
            and answers.get("offload") != "nvme"
            and est.host_memory is not None
            and bool(est.host_fits)
            and est.host_per_node > HOST_TIGHT_SHARE * FIT_MARGIN * est.host_memory
        )
        assert len(said) == int(expected), (answers, said)
        if expected:
            assert est is not None
            tight += 1
            assert f"about {to_gib(est.host_per_node)} GiB per machine" in said[0]
            assert f"{est.host_per_node / (FIT_MARGIN * est.host_memory):.0%} of the" in said[0]
        elif est is not None and strategy in OFFLOAD_STRATEGIES and est.host_memory is not None:
            roomy += 1
    assert tight and roomy, (tight, roomy)
