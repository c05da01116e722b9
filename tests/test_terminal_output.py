"""What a user reads in an 80- (or 60-) column terminal: nothing cut, every figure right, help that teaches.

The commands run for real (`wizard.cli.main` with COLUMNS set) and the tests read their output
as text: no line wider than the terminal, no "…" anywhere, the memory table's figures equal the
estimator's, the bar chart has one bar per strategy that sits on the side of the usable line
the table's fits column says, and every option of every parser explains its values and default.
"""

from __future__ import annotations

import argparse
import importlib
import io
import itertools
import json
import re
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from helpers import REPO, decided_paths, title_line, tree, verdict
from wizard.app import Result
from wizard.cli import SUBCOMMANDS, build_parser, main
from wizard.engine.glossary import lookup
from wizard.engine.memory import GIB, STRATEGY_TITLES, Estimate, memory_gib, to_gib
from wizard.ui.console import brief_steps, one_gpu_rows
from wizard.ui.memory_chart import ASCII, UNICODE, Bar, MemoryChart, fits_mark, glyphs_for

ELLIPSIS = "…"
# A figure as the tables print it (always with decimals), "-" for none, or a fits verdict.
FIGURE = re.compile(r"^(\d+\.\d+|-|yes|no|host|tight|risk|oom)$")
# A step band ("9.2-23") is a figure too, in the short summary's table (one rounded alike at both ends, "13",
# reads as a row name's number and is left to test_brief_table).
BAND = re.compile(r"^\d+(?:\.\d+)?-\d+(?:\.\d+)?$")
BOX = re.compile(r"[\u2500-\u257f]")  # rich's box-drawing characters
BAR_LINE = re.compile(
    r"^(?P<label>.*?) *(?P<bar>[█░▶▒#.>+|]+) +(?P<value>\d+\.\d+) (?P<mark>yes|no|host|tight|risk|oom)$"
)
BAR_ONLY = re.compile(r"^ +(?P<bar>[█░▶▒#.>+|]+) +(?P<value>\d+\.\d+) (?P<mark>yes|no|host|tight|risk|oom)$")


def run_cli(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, *args: str, columns: int = 80
) -> tuple[int, str, str]:
    """The real command line at a terminal width; returns the exit code, stdout and stderr."""
    monkeypatch.setenv("COLUMNS", str(columns))
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


# --- reading the output back -------------------------------------------------------------------


def _section(lines: list[str], start: str, stop: str | tuple[str, ...]) -> list[str]:
    """The lines from the first one starting with `start` up to (not including) the next starting with `stop`."""
    first = next(i for i, line in enumerate(lines) if line.startswith(start))
    last = next(i for i in range(first + 1, len(lines)) if lines[i].startswith(stop))
    return lines[first:last]


def table_tokens(
    lines: list[str], start: str, stop: str | tuple[str, ...], first_row: str, *, bands: bool = False
) -> list[str]:
    """The figures and verdicts of a table, in reading order, whatever its layout.

    The table runs from the line starting with `start` to the one starting with `stop` (its
    caption); the title and headers before the first row's name hold words and figures of their
    own ("80.0 GiB", "host"), so reading starts at that name.
    """
    text = " ".join(BOX.sub(" ", " ".join(_section(lines, start, stop))).split())
    assert first_row in text, f"{first_row!r} not found whole in {text[:300]!r}"
    text = text[text.index(first_row) :]
    return [token for word in text.split() if FIGURE.match(token := word.rstrip(",")) or (bands and BAND.match(token))]


def expected_tokens(
    estimates: Mapping[str, Estimate], marks: Mapping[str, str] | None = None, steps: Mapping[str, str] | None = None
) -> list[str]:
    """The summary's table, row by row: states, activations, other, total, host, fits.

    With `steps` (the short summary's table where step bands are worked out): total, host, step, fits.
    """
    tokens = []
    offloads = any(est.host_per_node for est in estimates.values())  # else the host column is left out
    for strategy, est in estimates.items():
        figures = (est.total,) if steps else (est.model_states, est.activations, est.overhead, est.total)
        tokens += [str(to_gib(v)) for v in figures]
        mark = (marks or {}).get(strategy, fits_mark(est))
        # An NVMe run's chosen row has no host figure: the drive holds what is offloaded.
        host = est.host_per_node and strategy not in (marks or {})
        tokens += [str(to_gib(est.host_per_node)) if host else "-"] if offloads else []
        tokens += (
            [band for band in [steps.get(strategy, "-")] if FIGURE.match(band) or BAND.match(band)] if steps else []
        )
        tokens += [mark]
    return tokens


def shown_label(strategy: str, est: Estimate, marks: Mapping[str, str]) -> str:
    """A row's label as printed: an NVMe run's chosen row is named for the drive."""
    return est.label.replace("->CPU", "->NVMe") if strategy in marks else est.label


def nvme_marks(result: Result) -> dict[str, str]:
    """An NVMe run's chosen row is judged on the GPU alone: its host figure is for a CPU offload."""
    rec = result.recommendation
    if "nvme" not in (rec.settings.get("offload_param"), rec.settings.get("offload_optimizer")):
        return {}
    strategy = str(rec.settings["strategy"])
    est = rec.facts.estimates[strategy]
    return {strategy: ("risk" if est.close_call else "tight" if est.tight else "yes") if est.fits else "no"}


def chart_bars(lines: list[str], title_start: str) -> list[dict[str, str]]:
    """The chart's bars: label, bar, value and mark, beside each other or label above bar."""
    chart = _section(lines, title_start, "█")
    bars: list[dict[str, str]] = []
    label = ""
    for line in chart[1:]:
        line = line.rstrip()
        if (match := BAR_ONLY.match(line)) is not None:
            bars.append({"label": label, **match.groupdict()})
        elif (match := BAR_LINE.match(line)) is not None and match["label"]:
            bars.append({**match.groupdict(), "label": match["label"].strip()})
        elif line.strip() in STRATEGY_TITLES.values() or re.fullmatch(
            r"FSDP2 \+ [TCE]P \d+( x [TCE]P \d+)*", line.strip()
        ):
            label = line.strip()
    return bars


ND_LABEL = re.compile(r"FSDP2 \+ [TCE]P \d+( x [TCE]P \d+)*")  # the N-D row, named by its sizes


def check_chart(bars: list[dict[str, str]], expected: list[tuple[str, str, str]]) -> None:
    """One bar per strategy, in order, with the table's value and verdict, on the right side of the line."""
    assert [(b["label"], b["value"], b["mark"]) for b in bars] == expected
    for bar in bars:
        assert bar["bar"].count("|") == 1, bar
        left, right = bar["bar"].split("|")
        # Past the usable line only the bar itself is drawn: no "free" track there.
        assert not set(right) & set("░."), bar
        beyond = right.strip("▒+")
        # The moment's peak (a lighter shade after the bar) crosses the line exactly where the mark is
        # "tight" or "oom" (or the bar itself crosses it); "yes" keeps the whole peak left of it. "risk"
        # is judged against the card at a long context, its peak on either side of the line.
        if bar["mark"] in ("tight", "oom"):
            assert right.startswith(("▒", "+")), f"{bar['label']} is {bar['mark']} but its peak stops: {bar}"
        if bar["mark"] == "yes":
            assert not right, f"{bar['label']} fits but its bar or peak crosses the usable line: {bar}"
        if bar["mark"] == "no":
            assert beyond, f"{bar['label']} does not fit but its bar stops at the usable line: {bar}"
        else:
            assert not beyond, f"{bar['label']} fits but its bar crosses the usable line: {bar}"
            assert left.strip("░.▒+") or float(bar["value"]) == 0, bar


def check_lines(lines: list[str], columns: int) -> None:
    too_long = [line for line in lines if len(line.rstrip()) > columns]
    assert not too_long, "\n".join(too_long)
    assert not [line for line in lines if ELLIPSIS in line]


# --- the summary and explain over the decision tree's paths ------------------------------------


def _figure_width(estimates: Mapping[str, Estimate]) -> int:
    values = (v for e in estimates.values() for v in (e.total, e.model_states, e.activations, e.host_per_node))
    return max(len(str(to_gib(v))) for v in values)


@pytest.fixture(scope="module")
def representative(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[Path, Result]]:
    """One answers file per kind of output (backend, strategies shown, verdicts), widest figures first."""
    folder = tmp_path_factory.mktemp("paths")
    chosen: dict[tuple[Any, ...], tuple[int, dict[str, Any], Result]] = {}
    for answers, result in decided_paths(folder, refusals=True):
        rec = result.recommendation
        if not rec.facts.estimates:
            continue
        marks = frozenset(fits_mark(e) for e in rec.facts.estimates.values())
        key = (rec.backend, rec.refused, tuple(rec.facts.estimates), marks)
        width = _figure_width(rec.facts.estimates)
        if key not in chosen or width > chosen[key][0]:
            chosen[key] = (width, answers, result)
    files = []
    for index, (_, answers, result) in enumerate(chosen.values()):
        path = folder / f"answers-{index}.json"
        path.write_text(json.dumps(answers))
        files.append((path, result))
    assert len(files) >= 20, "the walk should give many kinds of memory tables"
    return files


def _summary_sections(lines: list[str]) -> Iterator[str]:
    """The lines this module is about: key settings, memory table and chart, the list of files.

    (The previews of the files are the files' own lines, unwrapped: `preview_files` reads them.)
    """
    for title in ("Key settings", "Would write", "Files"):
        if any(line.startswith(title) for line in lines):
            start = next(i for i, line in enumerate(lines) if line.startswith(title))
            yield lines[start]
            for line in lines[start + 1 :]:
                if not line.startswith(" "):
                    break
                yield line
    # The memory table's title names the device: "Memory per GPU", or "Memory on the Mac" (mps).
    mac = any(line.startswith("Memory on the Mac") for line in lines)
    # The chart's legend ends the section (--explain); the short summary has no chart.
    ends = (
        "█",
        "Why not the others",
        "Why each backend does not fit",
        "To get a different answer",
        "To give it room at its peak",
        "Before the first launch",
        "Would write",
        "Files",
    )
    yield from _section(lines, "Memory on the Mac" if mac else "Memory per GPU", ends)


@pytest.mark.parametrize("columns", [80, 60])
def test_summary_memory_table_and_chart_at_narrow_widths(
    representative: list[tuple[Path, Result]],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    columns: int,
) -> None:
    cases = representative if columns == 80 else representative[::3]
    for (path, result), explain in itertools.product(cases, (False, True)):
        flags = ("--explain",) if explain else ()
        code, out, _ = run_cli(
            capsys,
            monkeypatch,
            "--answers",
            str(path),
            "--dry-run",
            "--output-dir",
            str(tmp_path),
            *flags,
            columns=columns,
        )
        assert code in (0, 4, 9), out  # 9: written, past the memory as written
        lines = out.splitlines()
        estimates = result.recommendation.facts.estimates
        check_lines(list(_summary_sections(lines)), columns)
        first = next(iter(estimates.values()))
        # A Mac's table and chart name the Mac, where a GPU run's say "per GPU" (test_mac_wording).
        per = "on the Mac" if result.session.answers.get("hardware") == "mps" else "per GPU"
        # The micro-batch every row is estimated at is in the title (the Why may quote another).
        micro = result.recommendation.facts.workload.micro_batch_size  # type: ignore[union-attr]
        # The short summary's table gives each layout's total, host RAM and step where bands are worked out.
        steps = {} if explain else brief_steps(result.recommendation)
        title = (
            f"Memory {per} in GiB and the time per optimizer step at micro_batch_size {micro}; fits = the total"
            f" within the usable {first.share:.0%} of {memory_gib(first.gpu_memory)} GiB (the rest is a margin)"
            if steps
            else f"Memory {per} in GiB (2^30 bytes) at micro_batch_size {micro}; fits = the total at most"
            f" {first.share:.0%} of {memory_gib(first.gpu_memory)} GiB"
        )
        assert title in " ".join(out.split())
        stop = "total:" if steps else "model states:"
        tokens = table_tokens(lines, f"Memory {per}", stop, next(iter(estimates.values())).label, bands=bool(steps))
        marks = nvme_marks(result)
        # On one GPU the short table leaves out the sharded layouts without offload (its note says so).
        shown = estimates if explain or (rows := one_gpu_rows(result.recommendation)) is None else rows[0]
        assert tokens == expected_tokens(shown, marks, steps), path.read_text()
        expected = [
            (shown_label(s, e, marks), str(to_gib(e.total)), marks.get(s, fits_mark(e))) for s, e in estimates.items()
        ]
        if not explain:
            # The short summary leaves the chart to --explain: the table alone says the same.
            assert f"Total {per} against the usable" not in out
            continue
        check_chart(chart_bars(lines, f"Total {per} against the usable"), expected)
        assert f"usable {to_gib(first.budget)} GiB" in " ".join(out.split())


def test_explain_memory_table_and_chart_at_80_columns(
    representative: list[tuple[Path, Result]], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for path, result in representative[::4]:
        code, out, err = run_cli(capsys, monkeypatch, "explain", "--answers", str(path))
        assert code == verdict(result), err
        lines = out.splitlines()
        estimates = result.recommendation.facts.estimates
        check_lines(_section(lines, "Memory per GPU", "█"), 80)
        first = next(iter(estimates.values()))
        # A Mac's table and chart name the Mac, where a GPU run's say "per GPU" (test_mac_wording).
        per = "on the Mac" if result.session.answers.get("hardware") == "mps" else "per GPU"
        # The micro-batch every row is estimated at is in the title (the Why may quote another).
        micro = result.recommendation.facts.workload.micro_batch_size  # type: ignore[union-attr]
        title = (
            f"Memory {per} in GiB (2^30 bytes) at micro_batch_size {micro}; fits = the total at most"
            f" {first.share:.0%} of {memory_gib(first.gpu_memory)} GiB"
        )
        assert title in " ".join(out.split())
        tokens = table_tokens(lines, f"Memory {per}", "model states:", next(iter(estimates.values())).label)
        marks = nvme_marks(result)
        assert tokens == expected_tokens(estimates, marks)
        expected = [
            (shown_label(s, e, marks), str(to_gib(e.total)), marks.get(s, fits_mark(e))) for s, e in estimates.items()
        ]
        check_chart(chart_bars(lines, "Total per GPU against the usable"), expected)


def test_long_paths_wrap_in_the_files_list_and_panels(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    folder = tmp_path / ("a-rather-long-folder-name-" * 4) / "run"
    answers = REPO / "examples" / "a100-7b-full-offload-accelerate.yaml"
    code, out, _ = run_cli(capsys, monkeypatch, "--answers", str(answers), "--dry-run", "--output-dir", str(folder))
    assert code == 0
    assert ELLIPSIS not in out
    joined = "".join(out.split())
    for name in ("accelerate_config.yaml", "ds_config.json", "launch.sh"):
        # Folded across lines, but whole: in the list of files and above (or on) its panel.
        assert joined.count(str(folder / name)) >= 2, name
    lines = out.splitlines()
    check_lines(list(_summary_sections(lines)), 80)


# --- estimate over a grid of arguments ---------------------------------------------------------

GRID = [
    ["--model", "7B", "--gpu-model", "A100"],
    ["--model", "70B", "--method", "full", "--gpus-per-node", "8", "--gpu-memory-gb", "80", "--cpu-memory-gb", "2048"],
    ["--model", "70B", "--method", "full", "--gpus-per-node", "8", "--num-nodes", "4", "--gpu-model", "H100"],
    ["--model", "405B", "--method", "full", "--gpu-model", "A100", "--sequence-length", "131072"],
    ["--model", "405B", "--method", "full", "--gpus-per-node", "8", "--num-nodes", "16", "--gpu-model", "H200"],
    ["--model", "70B", "--method", "qlora", "--gpus-per-node", "2", "--gpu-model", "RTX 4090", "--cpu-memory-gb", "64"],
    ["--model", "8x7B", "--method", "full", "--gpus-per-node", "8", "--num-nodes", "2", "--gpu-memory-gb", "80"],
    [
        "--model",
        "70B",
        "--method",
        "full",
        "--gpus-per-node",
        "8",
        "--num-nodes",
        "2",
        "--gpu-model",
        "A100",
        "--sequence-length",
        "131072",
        "--set",
        "model_parallel=true",
        "--set",
        "tensor_parallel_size=4",
    ],
    [
        "--model",
        "70B",
        "--method",
        "full",
        "--gpus-per-node",
        "8",
        "--gpu-model",
        "A100",
        "--set",
        "target=accelerate",
        "--set",
        "megatron=true",
        "--set",
        "tensor_parallel_size=8",
        "--set",
        "pipeline_parallel_size=1",
    ],
    [
        "--model",
        "7B",
        "--method",
        "full",
        "--gpu-model",
        "T4",
        "--micro-batch-size",
        "64",
        "--sequence-length",
        "32768",
    ],
]
FORMULAS = {"default": ("GiB", GIB, 1), "deepspeed": ("GiB", GIB, 2), "zero-paper": ("GB", 10**9, 3)}
# The estimate table's caption starts with its first column's meaning.
CAPTION_START = ("model states:", "host RAM:")


def json_mark(row: Mapping[str, Any]) -> str:
    """The fits column for a row of the JSON form: no (GPU), host (host RAM) or yes."""
    if not row["fits"]:
        return "no"
    return "host" if row["host_fits"] is False else "yes"


def _nvme_args(tmp_path: Path) -> list[str]:
    folder = tmp_path / "nvme"
    folder.mkdir(exist_ok=True)
    workload = ["--model", "70B", "--method", "full", "--gpu-model", "A100", "--cpu-memory-gb", "256"]
    return [*workload, "--set", "offload=nvme", "--set", f"nvme_path={folder}"]


@pytest.mark.parametrize("formula", sorted(FORMULAS))
@pytest.mark.parametrize("columns", [80, 60])
def test_estimate_grid_is_whole_and_right(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path, formula: str, columns: int
) -> None:
    unit, scale, digits = FORMULAS[formula]
    grid = [*GRID, _nvme_args(tmp_path)]
    for args in grid if columns == 80 else grid[::2]:
        args = [*args, "--formula", formula]
        code, raw, err = run_cli(capsys, monkeypatch, "estimate", *args, "--output", "json", columns=columns)
        assert code == 0, (args, err)
        data = json.loads(raw)
        code, out, err = run_cli(capsys, monkeypatch, "estimate", *args, columns=columns)
        assert code == 0, (args, err)
        lines = out.splitlines()
        check_lines(lines, columns)
        expected: list[str] = []
        for row in data["strategies"]:
            figures = [row["model_states_bytes"], row["activations_bytes"], row["overhead_bytes"]]
            figures = [*figures, row["gpu_bytes"]] if formula == "default" else [row["gpu_bytes"]]
            expected += [f"{round(v / scale, digits):.{digits}f}" for v in figures]
            host = row["cpu_bytes_per_node"]
            expected += [f"{round(host / scale, digits):.{digits}f}" if host else "-", json_mark(row)]
        if formula == "default":
            # The wizard's figures are the estimator's, as to_gib rounds them.
            decimals = [t for t in expected if "." in t]
            assert decimals == [
                str(to_gib(v))
                for row in data["strategies"]
                for v in (
                    row["model_states_bytes"],
                    row["activations_bytes"],
                    row["overhead_bytes"],
                    row["gpu_bytes"],
                    *([row["cpu_bytes_per_node"]] if row["cpu_bytes_per_node"] else []),
                )
            ]
        first_row = data["strategies"][0]["title"]
        assert table_tokens(lines, "Per GPU in", CAPTION_START, first_row) == expected, args
        what = "Total" if formula == "default" else "Model states"
        bars = chart_bars(lines, f"{what} per GPU against the usable")
        check_chart(
            bars,
            [(row["title"], f"{row['gpu_bytes'] / scale:.{digits}f}", json_mark(row)) for row in data["strategies"]],
        )
        assert f"{unit} per GPU" in out


def test_estimate_prints_the_defaults_it_assumed(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    code, out, _ = run_cli(capsys, monkeypatch, "estimate", "--model", "7B", "--gpu-model", "A100")
    assert code == 0
    text = " ".join(out.split())
    assert "method: lora (default; --method full|lora|qlora)" in text
    assert "sequence_length: 2048 (default; --sequence-length N, 16-1048576)" in text
    assert "gpus_per_node: 1 (default; --gpus-per-node N, 1-64)" in text
    # --gpu-model A100 is the 80 GB card: which entry, which size, and how to choose the other.
    assert "from --gpu-model 'A100': the catalogue's NVIDIA A100 80GB (PCIe, SXM4) (81920 MiB" in text
    assert "NVIDIA A100 40GB (PCIe, SXM4): --gpu-model 'a100 40'" in text
    assert "--gpu-memory-gb GIB" in text
    code, out, _ = run_cli(
        capsys,
        monkeypatch,
        "estimate",
        "--model",
        "7B",
        "--method",
        "full",
        "--gpu-memory-gb",
        "40",
        "--gpus-per-node",
        "2",
    )
    text = " ".join(out.split())
    assert code == 0 and "method:" not in text and "catalogue" not in text and "gpus_per_node:" not in text
    assert "cpu_memory_gb: not given" in text


def test_estimate_names_the_flag_for_a_missing_answer(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    code, out, err = run_cli(capsys, monkeypatch, "estimate", "--model", "7B")
    assert code == 2 and not out and "Traceback" not in err
    assert "--gpu-memory-gb GIB" in err and "--gpu-model" in err


# --- without colour, and without block characters ----------------------------------------------


def test_chart_without_colour_or_unicode() -> None:
    bars = [
        Bar("fits", 10.0, "10.0", True, "yes"),
        Bar("too big", 500.0, "500.0", False, "no"),
        Bar("tight", 50.0, "50.0", True, "tight", peak=70.0),
    ]
    chart = MemoryChart(bars, 64.0, "title")
    plain = Console(file=io.StringIO(), width=80, no_color=True, color_system=None, force_terminal=False)
    plain.print(chart)
    text = plain.file.getvalue()  # type: ignore[attr-defined]
    assert "\x1b[" not in text and "█" in text and "░" in text and "▶" in text
    # The loss's moment is drawn past the bar and across the line, and the legend names it.
    tight = next(line for line in text.splitlines() if line.startswith("tight "))
    assert "█▒" in tight and "|▒" in tight, tight
    assert "▒ a moment's peak (the loss)" in text
    ascii_file = io.TextIOWrapper(io.BytesIO(), encoding="ascii")
    console = Console(file=ascii_file, width=80, color_system=None)
    assert glyphs_for(console) == ASCII and glyphs_for(plain) == UNICODE
    console.print(chart)
    ascii_file.flush()
    drawn = ascii_file.buffer.getvalue().decode("ascii")  # type: ignore[attr-defined]
    assert "#" in drawn and "|" in drawn and ">" in drawn and "#+" in drawn and "|+" in drawn


def test_estimate_on_an_ascii_console(tmp_path: Path) -> None:
    env = {"PYTHONIOENCODING": "ascii", "COLUMNS": "80", "NO_COLOR": "1", "PATH": "/usr/bin:/bin"}
    env["BACKEND_WIZARD_CACHE_DIR"] = str(tmp_path / "cache")  # not the user's template cache
    command = [
        sys.executable,
        "-m",
        "wizard",
        "estimate",
        "--model",
        "70B",
        "--gpus-per-node",
        "8",
        "--gpu-model",
        "A100",
    ]
    proc = subprocess.run(command, capture_output=True, cwd=REPO, env=env, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr.decode()
    out = proc.stdout.decode("ascii")  # raises if anything outside ASCII was printed
    assert "\x1b[" not in out
    bars = [line for line in out.splitlines() if line.startswith("ZeRO-3 ") and "|" in line]
    assert bars and all("#" in line for line in bars), out


def test_chart_moves_bars_under_their_labels_when_narrow() -> None:
    bars = [Bar("ZeRO-3 + optim->CPU", 10.0, "10.0", True, "yes"), Bar("DDP / 1 GPU", 90.0, "90.0", False, "no")]
    console = Console(file=io.StringIO(), width=30, color_system=None)
    console.print(MemoryChart(bars, 64.0, "Total per GPU against the usable 64.0 GiB"))
    lines = console.file.getvalue().splitlines()  # type: ignore[attr-defined]
    check_lines(lines, 30)
    check_chart(
        chart_bars(lines, "Total per GPU"), [("ZeRO-3 + optim->CPU", "10.0", "yes"), ("DDP / 1 GPU", "90.0", "no")]
    )


# --- explain without answers -------------------------------------------------------------------


def test_explain_without_answers_says_what_it_needs(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    code, out, err = run_cli(capsys, monkeypatch, "explain")
    assert code == 2 and not out and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err
    assert "--answers FILE" in err and "--set" in err and "for example: backend-wizard explain" in err
    example = err.split("for example: backend-wizard ")[1].rstrip().rstrip(")").split()
    code, out, err = run_cli(capsys, monkeypatch, *example)
    assert code == 0 and "How the decision was made" in out, err


# --- help ---------------------------------------------------------------------------------------


def parsers() -> dict[str, argparse.ArgumentParser]:
    """The main parser and every subcommand's, built the way the command line builds them."""
    found = {"backend-wizard": build_parser()}
    for name in SUBCOMMANDS:
        parser = argparse.ArgumentParser(prog=f"backend-wizard {name}")
        importlib.import_module(f"wizard.commands.{name}").add_arguments(parser)
        found[name] = parser
    return found


@pytest.mark.parametrize("name", sorted(parsers()))
def test_every_option_explains_its_values_and_default(name: str) -> None:
    parser = parsers()[name]
    text = parser.format_help()
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        label = "/".join(action.option_strings) or action.dest
        assert action.help and action.help != argparse.SUPPRESS and action.help.strip(), label
        if action.option_strings and action.nargs != 0:
            # An option that takes a value says what is used without it (a flag is simply off).
            assert "default" in action.help, f"{name} {label}: say what happens without it"
        if action.choices:
            help_line = text[text.index(action.option_strings[0] if action.option_strings else action.dest) :]
            assert all(str(choice) in help_line for choice in action.choices), label
        if "%(default)s" in action.help:
            assert f"default: {action.default}" in text, label


def test_estimate_help_agrees_with_the_decision_tree() -> None:
    from wizard.commands.estimate import _FLAG_HELP

    for key, (metavar, text) in _FLAG_HELP.items():
        question = tree().question(key)
        assert question is not None, key
        if question.choices:
            assert metavar == "{" + ",".join(c.id for c in question.choices) + "}", key
        if isinstance(question.default, int | str) and not isinstance(question.default, bool):
            assert f"default: {question.default}" in text, key
        if question.type == "integer" and question.minimum is not None and question.maximum is not None:
            assert f"{int(question.minimum)}-{int(question.maximum)}" in text, key


# --- host RAM in the estimate, the legend, and the previews ------------------------------------

HOST_SHORT = [
    *("--model", "405B", "--method", "full", "--gpus-per-node", "8", "--num-nodes", "4"),
    *("--gpu-model", "H100", "--cpu-memory-gb", "1024"),
]


def test_estimate_judges_host_ram_as_the_wizard_does(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from wizard.engine.facts import Inputs, derive_facts

    code, raw, _ = run_cli(capsys, monkeypatch, "estimate", *HOST_SHORT, "--output", "json")
    assert code == 0
    data = json.loads(raw)
    code, out, _ = run_cli(capsys, monkeypatch, "estimate", *HOST_SHORT)
    assert code == 0
    lines = out.splitlines()
    answers = {
        **{"target": "accelerate", "hardware": "nvidia", "gpu_model": "H100", "gpu_memory_gb": 79.65},
        **{"model": "405B", "method": "full", "gpus_per_node": 8, "num_nodes": 4, "cpu_memory_gb": 1024},
        **{"sequence_length": 2048, "micro_batch_size": 1, "gradient_checkpointing": True},
    }
    estimates = derive_facts(answers, Inputs()).estimates
    # The wizard's own verdicts, offload by offload: the table never offers what it refuses.
    marks = [fits_mark(estimates[row["id"]]) for row in data["strategies"]]
    assert [json_mark(row) for row in data["strategies"]] == marks
    assert {"zero3_offload_optimizer", "hsdp_offload"} <= {
        row["id"] for row, mark in zip(data["strategies"], marks, strict=True) if mark == "host"
    }
    tokens = table_tokens(lines, "Per GPU in", CAPTION_START, data["strategies"][0]["title"])
    assert tokens[5::6] == marks
    text = " ".join(out.split())
    host = "fits 'host': the GPU has room but host RAM does not: the offload needs more than 80% of cpu_memory_gb"
    assert host in text
    check_chart(
        chart_bars(lines, "Total per GPU against the usable"),
        [(r["title"], str(to_gib(r["gpu_bytes"])), m) for r, m in zip(data["strategies"], marks, strict=True)],
    )
    # Without host RAM given, nothing is judged "host".
    code, out, _ = run_cli(capsys, monkeypatch, "estimate", *HOST_SHORT[:-2])
    assert code == 0
    assert "host" not in table_tokens(out.splitlines(), "Per GPU in", CAPTION_START, "DDP / 1 GPU")


def test_estimate_deepspeed_formula_says_what_its_host_column_is(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    args = ["--model", "70B", "--method", "full", "--gpus-per-node", "8", "--gpu-model", "MI300X"]
    code, out, _ = run_cli(capsys, monkeypatch, "estimate", *args, "--formula", "deepspeed")
    assert code == 0
    text = " ".join(out.split())
    # DeepSpeed has no ZeRO-1 estimator: no row copied from ZeRO-2, and the caption says why.
    assert "ZeRO-1 " not in out.replace("no ZeRO-1 row", "") and "no ZeRO-1 row: DeepSpeed has no estimator" in text
    # Its host figure is not only what is offloaded, and the caption says so.
    assert "with offload what is offloaded, without it the RAM to load the model" in text
    assert "for what is offloaded;" not in text
    code, raw, _ = run_cli(capsys, monkeypatch, "estimate", *args, "--formula", "deepspeed", "--output", "json")
    assert "zero1" not in [row["id"] for row in json.loads(raw)["strategies"]]


def test_summary_table_explains_its_columns_and_labels(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    answers = tmp_path / "answers.json"
    answers.write_text(
        json.dumps(
            {
                **{"target": "accelerate", "hardware": "nvidia", "gpu_model": "H100", "gpus_per_node": 8},
                **{"num_nodes": 4, "model": "405B", "method": "full", "cpu_memory_gb": 1024},
            }
        )
    )
    code, out, _ = run_cli(capsys, monkeypatch, "--answers", str(answers), "--defaults", "--dry-run", "--explain")
    assert code == 4, out  # refused: the host RAM holds none of the offloads
    lines = out.splitlines()
    check_lines(_section(lines, "Memory per GPU", "█"), 80)
    caption = " ".join(" ".join(_section(lines, "model states:", "Total per GPU")).split())
    for meaning in (
        "model states: weights, gradients and optimizer state",
        "other: a fixed 1 GiB for the GPU runtime's context and buffers",
        "host: host RAM per machine for what is offloaded",
        "fits 'host': the GPU has room but host RAM does not: the offload needs more than 80% of cpu_memory_gb",
        "DDP / 1 GPU: a full copy of the training state on every GPU",
        "optim->CPU: optimizer state and gradients in host RAM",
        "all->CPU: DeepSpeed moves weights, gradients and optimizer state to host RAM",
        "HSDP + offload: the same, but each machine holds a whole replica in its host RAM",
    ):
        assert meaning in caption, meaning
    # Every label stays on one line with its colon, and every figure with its unit.
    legend = _section(lines, "model states:", "Total per GPU")
    for label in ("DDP / 1 GPU:", "fits 'host':", "FSDP2 + offload:", "HSDP + offload:", "1 GiB"):
        assert any(label in line for line in legend), (label, legend)
    assert "\u00a0" not in out  # the no-break spaces are printed as plain spaces


def preview_files(lines: list[str]) -> dict[str, list[str]]:
    """Each previewed file's lines as printed: between its "── path ──" line and the closing rule."""
    files: dict[str, list[str]] = {}
    current: list[str] | None = None
    header = ""  # a long path is folded over several header lines, which end with the rule
    for line in lines:
        if current is None and (line.startswith("── /") or header):
            header += line.strip()
            if header.endswith("─"):
                current = files.setdefault(header.strip("─ "), [])
                header = ""
        elif current is not None and set(line) == {"─"}:
            current = None
        elif current is not None:
            current.append(line)
    return files


def test_dry_run_previews_show_each_file_as_it_is_written(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from helpers import decide

    for name in ("a100-7b-full-offload-accelerate.yaml", "a100x4-7b-full-accelerate.yaml"):
        answers = REPO / "examples" / name
        code, out, _ = run_cli(
            capsys, monkeypatch, "--answers", str(answers), "--dry-run", "--output-dir", str(tmp_path)
        )
        assert code == 0
        lines = out.splitlines()
        # The files list's title is one line at 80 columns.
        assert "Would write (dry run, nothing written)" in lines
        shown = preview_files(lines)
        result = decide(__import__("yaml").safe_load(answers.read_text()), tmp_path)
        assert sorted(shown) == sorted(str(tmp_path / f.name) for f in result.files)
        for rendered in result.files:
            # Line for line the file: no border, no indent, and a long line is never broken
            # into a continuation that would read as content (the terminal wraps it). The shared
            # header, which the summary has just printed, is one dimmed line naming its length.
            lines = rendered.text.rstrip("\n").splitlines()
            preview = shown[str(tmp_path / rendered.name)]
            if not any(line.startswith("# Generated by backend-wizard") for line in lines):
                assert preview == lines, rendered.name  # the JSON and answers.yaml have no such header
                continue
            start = next(i for i, line in enumerate(lines) if line.startswith("# Generated by backend-wizard"))
            end = lines.index("#", start)
            assert end - start - 1 >= 6, rendered.name
            marker = f"  [{end - start - 1} more header lines in the file: the reasons and warnings in full]"
            assert preview == [*lines[: start + 1], marker, *lines[end:]], rendered.name
            comments = [line for line in rendered.text.splitlines() if line.lstrip().startswith("# ")]
            assert all(len(line) <= 80 for line in comments if not line.startswith("#   ")), rendered.name


def test_estimate_text_uses_the_full_width(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    # The DeepSpeed table is narrow; its title and legend still wrap at the terminal's width,
    # not at the table's, and a figure never ends a line without its unit.
    args = ("--model", "405B", "--gpu-model", "H100", "--gpus-per-node", "8", "--num-nodes", "4")
    code, out, _ = run_cli(capsys, monkeypatch, "estimate", *args, "--formula", "deepspeed")
    assert code == 0
    lines = out.splitlines()
    check_lines(lines, 80)
    title = _section(lines, "Per GPU in GiB", "┏")
    caption = _section(lines, "host RAM:", "Model states per GPU")
    table_width = max(len(line) for line in lines if line.startswith("┏"))
    assert max(len(line) for line in title + caption) > table_width + 10, title + caption
    for line, after in itertools.pairwise(lines):
        assert not (re.search(r"\d$", line.rstrip()) and re.match(r"\s*(GiB|GB)\b", after)), (line, after)


def test_a_total_beside_its_rounded_parts_is_explained(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # 131072 tokens on 8 H100s: ZeRO-2's parts show 15.0 + 111.6 + 1.0 beside a total of 127.7
    # (each figure rounded from exact bytes, which the decision uses): the caption says so.
    answers = tmp_path / "answers.yaml"
    answers.write_text(
        "target: accelerate\nhardware: nvidia\ngpu_model: H100\ngpus_per_node: 8\nmodel: 8B\n"
        "method: lora\nsequence_length: 131072\n"
    )
    folder = str(tmp_path / "out")
    code, out, _ = run_cli(
        capsys, monkeypatch, "--answers", str(answers), "--dry-run", "--output-dir", folder, "--explain"
    )
    # 9 where the plan is a close call, as its title says (test_exit_not_fit).
    assert code == (
        9 if re.search(r"may run out of memory|likely (?:to run )?out of memory", title_line(out)) else 0
    ), out
    lines = out.splitlines()
    sums = []
    for line in lines:
        cells = [c.strip() for c in line.split("│")[1:-1]]
        if len(cells) == 7 and FIGURE.match(cells[1]) and cells[1] != "-":
            *parts, total = (float(c) for c in cells[1:5])
            sums.append(round(sum(parts), 1) == total)
    assert sums and not all(sums)  # the case this test is about
    legend = " ".join(" ".join(_section(lines, "model states:", "Total per GPU")).split())
    assert "Parts are rounded, so a total can differ from their sum in the last digit." in legend
    # The N-D row is named by the run's sizes, and the legend says what each size means.
    assert re.search(r"FSDP2 \+ [TCE]P \d", out) and "TP/CP/EP" not in out
    assert re.search(r"[TCE]P n: (tensor|context|expert) parallel", legend), legend


# --- what a newcomer reads at 80 columns: hanging indents, whole URLs, one name per column ------

WIDTH = 80
LONE_URL = re.compile(r"^https?://\S+$")
ITEM = re.compile(r"^  \[(\d+)\] \S")


def check_width(out: str, columns: int = WIDTH) -> None:
    """No line past the edge, but a URL longer than the line itself, alone and from the margin."""
    for line in out.splitlines():
        assert len(line) <= columns or (LONE_URL.match(line) and len(line) > columns), line


def _sources(lines: list[str]) -> list[list[str]]:
    """The explain Sources list, one list of printed lines per entry."""
    start = next(i for i, line in enumerate(lines) if line.startswith("Sources"))
    entries: list[list[str]] = []
    for line in lines[start + 1 :]:
        if ITEM.match(line):
            entries.append([line])
        elif entries and (line.startswith(" ") or LONE_URL.match(line)):
            entries[-1].append(line)
        else:
            break
    return entries


def test_explain_sources_hang_under_their_titles_with_every_url_whole(
    representative: list[tuple[Path, Result]], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from wizard.ui.explain_view import shown_trace, source_legend

    checked = 0
    for path, result in representative:
        code, out, err = run_cli(capsys, monkeypatch, "explain", "--answers", str(path))
        assert code == verdict(result), err
        check_width(out)
        rec = result.recommendation
        legend = source_legend(tree(), [tag for entry in shown_trace(rec) for tag in entry.sources])
        entries = _sources(out.splitlines())
        assert len(entries) == len(legend)
        for lines, (_, title, address) in zip(entries, legend, strict=True):
            number = ITEM.match(lines[0])
            assert number is not None
            indent = 2 + len(f"[{number.group(1)}] ")
            text_lines = lines[:-1] if address else lines
            # Every wrapped line of the title starts under the title's first letter.
            for line in text_lines[1:]:
                assert line[:indent].isspace() and not line[indent].isspace(), lines
            assert " ".join(" ".join(text_lines)[indent:].split()) == " ".join(title.split())
            if address:
                # The URL whole on its own line: indented with the title when it fits, else from the margin.
                assert lines[-1] == (" " * indent + address if indent + len(address) <= WIDTH else address), lines
                checked += indent + len(address) > WIDTH
    assert checked, "a URL too long for its indent should be among the paths"


def _assumed(lines: list[str]) -> list[list[str]]:
    """The estimate's Assumed items, one list of printed lines per item."""
    start = next(i for i, line in enumerate(lines) if line.startswith("Assumed"))
    items: list[list[str]] = []
    for line in lines[start + 1 :]:
        if re.match(r"^  [a-z_]+: ", line):
            items.append([line])
        elif items and line.startswith("   "):
            items[-1].append(line)
        else:
            break
    return items


ESTIMATE_RUNS = [
    ["--model", "7B", "--gpu-model", "A100"],
    ["--model", "13B", "--method", "full", "--gpu-model", "A100 80GB", "--cpu-memory-gb", "512"],
    ["--model", "70B", "--gpu-model", "H100", "--gpus-per-node", "8"],
    ["--model", "1B", "--set", "hardware=mps", "--gpu-memory-gb", "16"],
    ["--model", "8B", "--gpu-model", "RTX 4090", "--method", "qlora"],
]


@pytest.mark.parametrize(
    "args",
    # Every example that has GPU memory to estimate (a CPU run has none).
    [["--answers", str(p), "--defaults"] for p in sorted((REPO / "examples").glob("*.yaml")) if "cpu" not in p.name]
    + ESTIMATE_RUNS,
    ids=lambda args: "-".join(a for a in args if not a.startswith("-")).replace("/", "_")[-60:],
)
def test_estimate_assumed_lines_continue_under_their_value(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, args: list[str]
) -> None:
    code, out, err = run_cli(capsys, monkeypatch, "estimate", *args)
    assert code == 0, err
    check_width(out)
    if "Assumed" not in out:
        return
    for item in _assumed(out.splitlines()):
        key = item[0][2:].split(": ", 1)[0]
        column = 2 + len(key) + 2
        for line in item[1:]:
            assert line[:column].isspace() and not line[column].isspace(), item
        # A command-line option never ends a line without its value.
        assert not any(re.search(r"--[a-z-]+$", line) for line in item), item


def _bad_configs(folder: Path) -> list[Path]:
    """Config files with findings of every kind: errors, warnings, long keys and long messages."""
    files = {
        "accelerate.yaml": "distributed_type: DEEPSPEED\nmixed_precision: no\nnum_processes: 2\n"
        "deepspeed_config:\n  zero_stage: 7\n  zero3_init_flg: true\n  offload_optimizer_device: floppy\n",
        "fsdp.yaml": "distributed_type: FSDP\nnum_processes: 3\nfsdp_config:\n  fsdp_version: 5\n"
        "  fsdp_sharding_strategy: EVERYTHING\n  fsdp_auto_wrap_policy: SIZE\n",
        "ds.json": '{"zero_optimization": {"stage": 3, "offload_param": {"device": "nvme"},'
        ' "stage3_gather_16bit_weights_on_model_save": "maybe"}, "train_batch_size": 3,'
        ' "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 5, "bf16": {"enabled": true},'
        ' "fp16": {"enabled": true}}',
        "axolotl.yaml": "base_model: x\nadapter: qlora\nload_in_4bit: false\nmicro_batch_size: 0\n"
        "fsdp_config:\n  fsdp_offload_params: yes\ndeepspeed: nowhere.json\n",
    }
    paths = []
    for name, text in files.items():
        path = folder / name
        path.write_text(text)
        paths.append(path)
    return paths


def test_check_findings_continue_under_their_text(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    seen = 0
    for path in _bad_configs(tmp_path):
        _, raw, _ = run_cli(capsys, monkeypatch, "check", str(path), "--output", "json")
        findings = json.loads(raw)["findings"]
        _, out, _ = run_cli(capsys, monkeypatch, "check", str(path))
        check_width(out)
        lines = out.splitlines()
        lines = lines[next(i for i, line in enumerate(lines) if line.endswith("warning(s)")) + 1 :]
        assert findings and len([line for line in lines if line.startswith("    fix: ")]) == len(findings)
        index = 0
        for finding in findings:
            head = lines[index]
            lead = f"  {finding['severity']} {finding['path'] or '(whole file)'}: "
            assert head.startswith(lead.rstrip()), (head, lead)
            index += 1
            message = [head[len(lead) :]]
            # A wrapped finding goes on under its text, or under its key when the key leaves the
            # text too little room; then the text starts on the key's line all the same.
            columns = {len(lead), 2 + len(finding["severity"]) + 1}
            while not lines[index].startswith("    fix: "):
                column = len(lines[index]) - len(lines[index].lstrip())
                assert column in columns, lines[index]
                columns = {column}
                message.append(lines[index])
                seen += 1
                index += 1
            assert " ".join(" ".join(message).split()) == " ".join(finding["message"].split())
            index += 1
            while index < len(lines) and lines[index].startswith(" " * 9):
                # The fix's wrapped lines go on under the fix's text, after "fix: ".
                assert not lines[index][9].isspace(), lines[index]
                index += 1
    assert seen, "some finding should be long enough to wrap at 80 columns"


def _no_nested_brackets(text: str) -> bool:
    depth = 0
    for char in text:
        depth += char == "("
        if depth > 1:
            return False
        depth -= char == ")"
    return True


def test_memory_captions_use_one_name_and_plain_sentences(
    representative: list[tuple[Path, Result]],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    offloads = 0
    for path, result in representative:
        _, summary, _ = run_cli(
            capsys, monkeypatch, "--answers", str(path), "--dry-run", "--output-dir", str(tmp_path), "--explain"
        )
        _, estimate, _ = run_cli(capsys, monkeypatch, "estimate", "--answers", str(path), "--defaults")
        per = "on the Mac" if result.session.answers.get("hardware") == "mps" else "per GPU"
        for out in (summary, estimate):
            lines = out.splitlines()
            # The column is "model states" wherever it is shown, as in the glossary and the ZeRO paper.
            assert not any(line.startswith("states:") for line in lines)
            caption = " ".join(" ".join(_section(lines, "model states:", f"Total {per}")).split())
            assert caption.startswith("model states: weights, gradients and optimizer state"), caption
            # Each sentence of the legend holds at most one level of brackets.
            for sentence in re.split(r"(?<=\.) (?=[A-Z])", caption):
                assert _no_nested_brackets(sentence), sentence
            if "Host RAM counts 16 bytes per trained parameter:" in caption:
                offloads += 1
    assert offloads
    entry = lookup("model states")
    assert entry is not None and "model states column" in entry.definition


def test_layer_inputs_say_their_total_and_each_share(representative: list[tuple[Path, Result]]) -> None:
    from wizard.ui.console import made_of

    pattern = re.compile(
        r"([\d,.]+) (GiB|MiB) for all (\d+) layers' (?:inputs|activations) together \(([\d,.]+) (GiB|MiB) each\)"
    )
    seen = 0
    for _, result in representative:
        text = made_of(result.recommendation)
        if text is None or "layers'" not in text:
            continue
        match = pattern.search(" ".join(text.split()))
        assert match, text
        mib = {"GiB": 1024.0, "MiB": 1.0}
        total, layers, each = (
            float(match[1].replace(",", "")) * mib[match[2]],
            int(match[3]),
            float(match[4].replace(",", "")) * mib[match[5]],
        )
        # The figure is the sum over the layers: layers x each, within the rounding of both.
        rounding = {"GiB": 0.05 * 1024, "MiB": 0.5}
        assert abs(total - layers * each) <= layers * rounding[match[5]] + rounding[match[2]], text
        assert not re.search(r"(?<![\d.])0\.0 GiB", text), text  # a share too small for GiB is in MiB
        seen += 1
    assert seen
