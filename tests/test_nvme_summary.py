"""An NVMe run reads as one: its layout named ->NVMe, its states on the drive, its step with the drive.

Invariants, over every path of the walk that offloads to NVMe:
* the title, the memory breakdown and the step-time table name the chosen layout "->NVMe", never
  the CPU offload row it is estimated with;
* host RAM figures of the run are DeepSpeed's pinned swap buffers; the drive holds the offloaded
  states as stored (without the 1.5x of pinned host buffers);
* a ZeRO-3 save gathers the 16-bit model into host RAM unless that with the swap buffers would
  pass the usable host RAM (not the states on the drive);
* the step time counts the drive's reads and writes.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from helpers import decide, decided_paths, file, tree
from wizard.app import Result
from wizard.engine.evaluate import backend_title, nvme_drive_bytes, offloaded_host_bytes
from wizard.engine.memory import FIT_MARGIN, GIB, HOST_BUFFER_FACTOR, to_gib
from wizard.engine.speed import NVME_FAST, NVME_SLOW
from wizard.ui.console import made_of
from wizard.ui.speed_view import speed_table


@pytest.fixture(scope="module")
def nvme_paths(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[dict[str, Any], Result]]:
    return decided_paths(tmp_path_factory.mktemp("nvme"), lambda a: a.get("offload") == "nvme")


def plain(renderable: Any) -> str:
    from rich.console import Console

    console = Console(width=200, record=True, color_system=None)
    console.print(renderable)
    return " ".join(console.export_text().split())


def test_every_nvme_run_names_its_layout_and_places_its_states_on_the_drive(
    nvme_paths: list[tuple[dict[str, Any], Result]],
) -> None:
    assert len(nvme_paths) >= 40
    for answers, result in nvme_paths:
        rec = result.recommendation
        est = rec.facts.estimates[str(rec.settings["strategy"])]
        assert "->NVMe" in backend_title(tree(), rec) and "->CPU" not in backend_title(tree(), rec)
        parts = made_of(rec)
        assert parts is not None and parts.startswith(f"What the {est.label.replace('->CPU', '->NVMe')} figure")
        drive = nvme_drive_bytes(rec)
        assert drive == int(est.host_per_node / HOST_BUFFER_FACTOR) > 0
        assert f"about {to_gib(drive)} GiB on the NVMe drive per machine" in parts, parts
        assert f"{to_gib(est.host_per_node)} GiB in host RAM" not in parts
        buffers = offloaded_host_bytes(rec)
        if "cpu_memory_gb" in answers:
            assert buffers is not None and f"about {to_gib(buffers)} GiB of swap buffers in host RAM" in parts
        # The tree's reason names the drive size as stored.
        assert f"the drive needs room for about {to_gib(drive)} GiB per machine" in " ".join(rec.because.split())


def test_every_nvme_step_counts_the_drive_and_names_the_layout(
    nvme_paths: list[tuple[dict[str, Any], Result]],
) -> None:
    timed = 0
    for _, result in nvme_paths:
        rec = result.recommendation
        step = rec.facts.speeds.get(str(rec.settings["strategy"]))
        if step is None:
            continue  # a card without a throughput figure has no band
        timed += 1
        assert step.drive_bytes > 0
        # Reading and writing it takes at least the fast drive's time, at most the slow one's.
        assert step.drive_bytes / max(NVME_FAST) <= step.drive_s[0] + 1e-9
        assert step.drive_s[1] <= step.drive_bytes / min(NVME_SLOW) + 1e-9
        assert step.high >= step.drive_s[1] and step.low >= step.drive_s[0]
        table = plain(speed_table(rec))
        assert "all->NVMe" in table and "ZeRO-3 + all->CPU" not in table, table
        assert "NVMe drive reading" in table
    assert timed >= 20


def test_a_zero3_save_gathers_unless_the_swap_buffers_and_the_model_pass_the_host_ram(
    nvme_paths: list[tuple[dict[str, Any], Result]],
) -> None:
    both = set()
    for answers, result in nvme_paths:
        rec = result.recommendation
        params, host = rec.facts.get("params"), answers.get("cpu_memory_gb")
        if not isinstance(params, int) or not isinstance(host, (int, float)) or "deepspeed_config" in answers:
            continue
        buffers = offloaded_host_bytes(rec) or 0
        gathers = json.loads(file(result, "ds_config.json").text)["zero_optimization"][
            "stage3_gather_16bit_weights_on_model_save"
        ]
        assert gathers == (buffers + 2 * params <= host * GIB * FIT_MARGIN), answers
        both.add(gathers)
    assert True in both


def test_the_13b_nvme_run_on_one_a100_reads_right_at_80_columns(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from wizard.cli import main

    answers = tmp_path / "nvme.yaml"
    answers.write_text(
        "target: accelerate\nhardware: nvidia\ngpu_model: A100 80GB\ngpus_per_node: 1\ncpu_memory_gb: 256\n"
        "model: 13B\nmethod: full\noffload: nvme\nnvme_path: /local_nvme/ds_offload\n",
        encoding="utf-8",
    )
    monkeypatch.setenv("COLUMNS", "80")
    code = main(["--answers", str(answers), "--output-dir", str(tmp_path / "out"), "--explain"])
    text = " ".join(capsys.readouterr().out.split())
    assert code == 0
    # 13e9 trained parameters x 18 bytes (16 offloaded + the 16-bit weights), as stored: 217.9 GiB.
    assert "the drive needs room for about 217.9 GiB per machine" in text
    assert "all->CPU" not in text.split("Why not the others")[0]
    assert re.search(r"ZeRO-3 \+ all->NVMe │ +\d+-\d+ │", text), text
    assert "1 copies" not in text
    # The save path keeps working: 55 GiB of swap buffers and the 24 GiB model fit 80% of 256 GiB.
    ds = json.loads((tmp_path / "out" / "ds_config.json").read_text())
    assert ds["zero_optimization"]["stage3_gather_16bit_weights_on_model_save"] is True
    assert "install libaio-dev" not in text.split("Install where it trains")[0]


def test_a_cpu_offload_run_has_no_drive_time(tmp_path: Path) -> None:
    # Only an NVMe layout gets the drive; a CPU-offload run keeps its band.
    cpu = decide(
        {
            "target": "accelerate",
            "hardware": "nvidia",
            "gpu_model": "A100 80GB",
            "gpus_per_node": 1,
            "cpu_memory_gb": 512,
            "model": "13B",
            "method": "full",
            "offload": "cpu",
        },
        tmp_path,
    ).recommendation
    step = cpu.facts.speeds[str(cpu.settings["strategy"])]
    assert step.drive_bytes == 0 and step.drive_s == (0.0, 0.0)
