"""A close call is said with one strength for one layout, and the decided rule's tick carries it.

The invariants, over every decided path (the summary with --explain and the trace after it, as printed):
- under the rule that decided, a close call says it fits by the estimate only, with the word the Risk line
  uses ("would likely" where even the calibration's kinder end passes the card, else "may"), and nothing
  of the kind is said where the chosen layout is not a close call;
- the Why's own sentence about the chosen layout ("As configured, it ... run out of memory at its loss
  peak") uses that same word, never the other.
"""

from __future__ import annotations

from io import StringIO
from pathlib import Path

from rich.console import Console

from helpers import decided_paths, tree
from wizard.engine.evaluate import chosen_estimate
from wizard.ui.console import print_result
from wizard.ui.explain_view import print_explanation


def test_a_close_call_is_said_with_one_strength(tmp_path: Path) -> None:
    close = likely = 0
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
    assert close >= 5 and 0 < likely < close, (close, likely)
