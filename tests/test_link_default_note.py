"""The GPU link a named card leaves open is said where it is assumed.

The invariant, over every NVIDIA card of the catalogue on a two-GPU machine: the summary's defaults line says that
gpu_model names no board exactly where the card comes as both SXM and PCIe boards (its gpu_link default is unknown);
a card whose name fixes its board takes that board's link without the note.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from wizard.cli import main
from wizard.engine.catalog import gpu_catalog

NOTE = "names no board; SXM boards have NVLink and PCIe cards do not; the step time spans both)"


def _summary(tmp_path: Path, capsys: pytest.CaptureFixture[str], gpu_model: str, number: int) -> str:
    answers = {
        "target": "accelerate",
        "hardware": "nvidia",
        "gpu_model": gpu_model,
        "gpus_per_node": 2,
        "model": "1B",
        "method": "lora",
    }
    path = tmp_path / f"answers{number}.yaml"
    path.write_text(yaml.safe_dump(answers), encoding="utf-8")
    code = main(["--answers", str(path), "--dry-run", "--output-dir", str(tmp_path / f"out{number}")])
    out = capsys.readouterr().out
    assert code == 0, out[-400:]
    return " ".join(out.split())


def test_a_card_sold_with_either_link_says_so_where_the_link_is_assumed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    cards = [gpu for gpu in gpu_catalog() if gpu.vendor == "nvidia" and gpu.patterns]
    varies = [gpu for gpu in cards if gpu.gpu_link_varies]
    fixed = [gpu for gpu in cards if not gpu.gpu_link_varies]
    assert varies and fixed
    for number, gpu in enumerate(varies + fixed[::3]):
        name = gpu.patterns[0]
        text = _summary(tmp_path, capsys, name, number)
        said = f"gpu_link unknown (not sure: gpu_model {name} {NOTE}"
        assert (said in text) is gpu.gpu_link_varies, (name, text[:1500])
        # The note goes inside the menu's "(not sure" bracket, never beside a second one.
        assert "both) (not sure)" not in text
