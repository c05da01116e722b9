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
BRIEF_NOTE = "comes as an SXM board with NVLink or a PCIe card without)"


def _summary(tmp_path: Path, capsys: pytest.CaptureFixture[str], gpu_model: str, number: int, *flags: str) -> str:
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
    code = main(["--answers", str(path), "--dry-run", "--output-dir", str(tmp_path / f"out{number}"), *flags])
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
        said = f"gpu_link unknown (not sure: {name} {BRIEF_NOTE}"
        assert (said in text) is gpu.gpu_link_varies, (name, text[:1500])
        if gpu.gpu_link_varies and number % 3 == 0:
            # --explain says what the name leaves open and what it does to the step time.
            long = _summary(tmp_path, capsys, name, number, "--explain")
            assert f"gpu_link unknown (not sure: gpu_model {name} {NOTE}" in long, name
        # The note goes inside the menu's "(not sure" bracket, never beside a second one.
        assert "both) (not sure)" not in text


def test_nvlink_answered_for_a_card_without_it_is_said_in_the_notes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Over the NVIDIA cards of the catalogue, two per machine, gpu_link: nvlink answered: the notes say the card has
    no NVLink exactly where it has none (a PCIe-only card), and the step time then counts the link it has."""
    monkeypatch.setenv("COLUMNS", "80")
    cards = [gpu for gpu in gpu_catalog() if gpu.vendor == "nvidia" and gpu.patterns and gpu.tflops]
    without = [gpu for gpu in cards if gpu.gpu_link_gbs is None]
    assert without and len(without) < len(cards)
    for number, gpu in enumerate(without + [g for g in cards if g.gpu_link_gbs is not None][::3]):
        answers = {
            "target": "accelerate",
            "hardware": "nvidia",
            "gpu_model": gpu.patterns[0],
            "gpus_per_node": 2,
            "gpu_link": "nvlink",
            "model": "1B",
            "method": "lora",
        }
        path = tmp_path / f"nvlink{number}.yaml"
        path.write_text(yaml.safe_dump(answers), encoding="utf-8")
        code = main(["--answers", str(path), "--dry-run", "--output-dir", str(tmp_path / f"n{number}")])
        text = " ".join(capsys.readouterr().out.split())
        assert code == 0, text[-300:]
        said = f"gpu_link: nvlink was answered, but the {gpu.short_name} has no NVLink: the step time counts the link"
        assert (said in text) is (gpu.gpu_link_gbs is None), (gpu.name, text[-1500:])
