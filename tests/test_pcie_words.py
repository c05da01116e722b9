"""Every figure of traffic over PCIe says what it counts: both directions, and each apart where two are compared.

PCIe carries the copies into the GPU and out of it at the same time, so a total alone reads as
either. The invariants, over the explanations of every third decided path (--explain, as printed):
- a comparison of two offloads per optimizer step gives each layout's in and out, which add up to
  the totals it compares;
- layer offloading's traffic (each frozen layer in twice and back out) is said as "half each way".
"""

from __future__ import annotations

import re
from io import StringIO
from pathlib import Path

from rich.console import Console

from helpers import decided_paths, tree
from wizard.ui.console import print_result

COMPARED = re.compile(
    r"about ([\d.]+) GiB over PCIe per GPU per optimizer step against ([\d.]+) GiB[ (;]+"
    r"[^:]+: ([\d.]+) GiB in, ([\d.]+) GiB out; [^:]+: ([\d.]+) GiB in, ([\d.]+) GiB out"
)
ANY_COMPARED = re.compile(r"GiB over PCIe per GPU per optimizer step against")
LAYER = re.compile(r"([\d.]+) GiB over PCIe( every micro-batch| per optimizer step)?,? (half each way)?[^.]{0,40}")


def test_pcie_figures_say_both_directions(tmp_path: Path) -> None:
    compared = layered = 0
    for _, result in decided_paths(tmp_path)[::3]:
        out = StringIO()
        print_result(Console(file=out, width=200), tree(), result, dry_run=True, detail=True)
        text = " ".join(out.getvalue().replace("│", " ").split())
        found = COMPARED.findall(text)
        assert len(found) == len(ANY_COMPARED.findall(text)), text
        for total_r, total_c, r_in, r_out, c_in, c_out in found:
            assert round(float(r_in) + float(r_out), 1) == float(total_r), (total_r, r_in, r_out)
            assert round(float(c_in) + float(c_out), 1) == float(total_c), (total_c, c_in, c_out)
            compared += 1
        for sentence in re.findall(r"[^.]*frozen layers? in for the forward[^.]*", text):
            if "GiB over PCIe" in sentence:
                assert "half each way" in sentence, sentence
                layered += 1
    assert compared >= 5 and layered >= 5, (compared, layered)
