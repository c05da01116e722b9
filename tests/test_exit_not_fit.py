"""Exit 9: the files are written, but by the estimate the run does not fit as written, or may run out of memory.

The invariant, over the walk's decided paths: a run exits 9 exactly where its panel title says "does not fit by this
estimate" or "host RAM short by this estimate" (a DeepSpeed JSON kept as written, NVMe asked for where it is short, an
offload past cpu_memory_gb) or "may run out of memory" (a close call), with a last line on stderr that says why; every
other decided run exits 0.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from helpers import decided_paths, title_line
from wizard.cli import main
from wizard.engine.evaluate import chosen_estimate, runs_past_fit, runs_past_host
from wizard.errors import ExitCode

SHORT_TITLE = re.compile(r"\((does not fit|host RAM short) by this estimate\)")


def test_a_plan_that_does_not_fit_as_written_exits_9_and_says_why(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "120")  # the whole title on its border
    paths = decided_paths(tmp_path)
    short = [(a, r) for a, r in paths if runs_past_fit(r.recommendation) or runs_past_host(r.recommendation)]
    close = [(a, r) for a, r in paths if (est := chosen_estimate(r.recommendation)) is not None and est.close_call]
    plain = [(a, r) for a, r in paths if (a, r) not in short and (a, r) not in close]
    assert short and close and plain
    host = [(a, r) for a, r in short if runs_past_host(r.recommendation)]
    # Each kind of short run (a brought JSON, an NVMe offload, host RAM) and a spread of the others: one main() each.
    chosen = short[::6] + host[:2] + close[::5] + plain[:: max(1, len(plain) // 8)]
    for number, (answers, result) in enumerate(chosen):
        path = tmp_path / f"answers{number}.yaml"
        path.write_text(yaml.safe_dump(answers), encoding="utf-8")
        code = main(["--answers", str(path), "--dry-run", "--output-dir", str(tmp_path / f"out{number}")])
        captured = capsys.readouterr()
        rec = result.recommendation
        short_run = runs_past_fit(rec) or runs_past_host(rec)
        close = not short_run and (est := chosen_estimate(rec)) is not None and est.close_call
        titled = bool(SHORT_TITLE.search(captured.out))
        assert titled is short_run, (answers, captured.out[:600])
        # "likely to" where even the calibration's kinder end passes the card (Estimate.close_call_likely).
        said = re.search(r"may run out of memory|likely (?:to run )?out of memory", title_line(captured.out))
        assert bool(said) is close, (answers, captured.out[:200])
        if close:
            assert est is not None and ("likely" in said.group(0)) is est.close_call_likely, captured.out[:200]
        assert code == (ExitCode.WRITTEN_WONT_RUN if short_run or close else ExitCode.OK), (answers, code)
        err = " ".join(captured.err.split())
        said = "exit 9: the files are shown, but by this estimate the run does not fit as written"
        assert (said in err) is short_run, (answers, captured.err)
        may = "will likely" if close and est is not None and est.close_call_likely else "may"
        said = (
            f"exit 9: the files are shown, but by this estimate it {may} run out of memory at the backward pass of its"
            " first full-length batch"
        )
        assert (said in err) is close, (answers, captured.err)


def test_an_nvme_run_is_never_said_short_of_host_ram(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """NVMe offload puts the states on the drive: the CPU offload's host figure is not its own, so neither its title
    nor its exit says host RAM is short, however little RAM the machine has."""
    from wizard.engine.evaluate import offloads_to_nvme

    nvme = [
        (answers, result)
        for answers, result in decided_paths(tmp_path)
        if offloads_to_nvme(result.recommendation) and answers.get("cpu_memory_gb") is None
    ]
    assert nvme
    # 13B full on one A100 80GB with 256 GB of RAM: the CPU offload's figure, 290.6 GiB, is past it.
    known = {
        "target": "accelerate", "hardware": "nvidia", "gpu_model": "A100 80GB", "gpus_per_node": 1,
        "cpu_memory_gb": 256, "model": "13B", "method": "full", "offload": "nvme", "nvme_path": "/local_nvme/ds",
    }  # fmt: skip
    nvme.insert(0, (known, nvme[0][1]))
    planned = 0
    for number, (answers, _) in enumerate(nvme[:: max(1, len(nvme) // 6)]):
        # Little RAM: the CPU offload's figure would be past it.
        answers = {"cpu_memory_gb": 64, **answers}
        path = tmp_path / f"nvme{number}.yaml"
        path.write_text(yaml.safe_dump(answers), encoding="utf-8")
        code = main(["--answers", str(path), "--dry-run", "--output-dir", str(tmp_path / f"nvme{number}")])
        out = capsys.readouterr().out
        if code == ExitCode.REFUSED:
            continue  # so little RAM that the wizard refuses: nothing is written
        assert "host RAM short" not in out, (answers, out[:400])
        assert code == (ExitCode.WRITTEN_WONT_RUN if "(does not fit by this estimate)" in out else ExitCode.OK)
        planned += 1
    assert planned
