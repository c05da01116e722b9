"""A close call is said with one strength for one layout, and the decided rule's tick carries it.

The invariants, over every decided path (the summary with --explain and the trace after it, as printed):
- under the rule that decided, a close call says it fits by the estimate only, with the word the Risk line
  uses ("would likely" where even the calibration's kinder end passes the card, else "may"), and nothing
  of the kind is said where the chosen layout is not a close call;
- the Risk line gives the way out by CPU offload exactly where the what-if table has one, with its figures;
- the Why's own sentence about the chosen layout ("As configured, it ... run out of memory at its loss
  peak") uses that same word, never the other.
"""

from __future__ import annotations

from io import StringIO
from pathlib import Path

from rich.console import Console

from helpers import decided_paths, tree
from wizard.engine.evaluate import chosen_estimate
from wizard.engine.what_if import OFFLOAD_CPU
from wizard.ui.console import print_result
from wizard.ui.explain_view import print_explanation


def test_a_close_call_is_said_with_one_strength(tmp_path: Path) -> None:
    close = likely = offered = 0
    for index, (_, result) in enumerate(decided_paths(tmp_path)):
        est = chosen_estimate(result.recommendation)
        if (est is None or not est.close_call) and index % 6:
            continue  # every close call, and a sixth of the rest for the caveat's absence
        out = StringIO()
        console = Console(file=out, width=200)
        print_result(console, tree(), result, dry_run=True, detail=True)
        print_explanation(console, tree(), result.recommendation, result.levers, after_summary=True)
        text = " ".join(out.getvalue().replace("│", " ").replace("├──", " ").replace("└──", " ").split())
        caveat = "A close call: it fits by the estimate, but at this long context its peak of"
        if est is None or not est.close_call:
            assert caveat not in text
            continue
        close += 1
        likely += est.close_call_likely
        other = "may" if est.close_call_likely else "would likely"
        assert caveat in text and f"GiB, so it {est.may} run out of memory on the GPU's" in text, text[:400]
        assert f"As configured, it {other} run out of memory at its loss peak" not in text
        # The offload way out, where the what-if table has one, is on the Risk line with the table's figures.
        offload = next((x for x in result.levers if x.change.startswith(OFFLOAD_CPU) and x.gib_per_gpu), None)
        said = "allow CPU offload (offload: cpu): "
        assert (said in text) is (offload is not None and bool(offload.layout)), text[:600]
        if offload is not None and offload.layout:
            assert f"{said}{offload.layout}, about {offload.gib_per_gpu} GiB per GPU" in text, text[:600]
            offered += 1
    assert close >= 5 and 0 < likely < close and offered, (close, likely, offered)
