"""The lines at the head of the summary panel: what they say follows the estimate, on every path.

- Memory: where the chosen layout offloads to host RAM and cpu_memory_gb was given, the line gives
  both figures (what the offload needs and the usable 80%), and calls the fit close exactly where
  less than 5% of the usable host RAM is left.
- Your JSON: see test_brought_json.py (over every path that brings one); here, one run's exact line.
"""

from __future__ import annotations

import re
import tempfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from helpers import decide, decided_paths, title_line
from helpers import tree as helpers_tree
from wizard.engine.advice import LOSS_PEAK_WARNINGS
from wizard.engine.evaluate import Recommendation, offloads_to_nvme
from wizard.engine.memory import FIT_MARGIN, HOST_CLOSE_SHARE, OFFLOAD_STRATEGIES, Estimate, memory_gib, sum_gib, to_gib
from wizard.engine.speed import StepTime, band_text
from wizard.ui.brief_why import brief_why
from wizard.ui.console import verdict_lines


def _memory_lines() -> Iterator[tuple[Recommendation, Estimate, str]]:
    """Every decided path of the walk with an estimate: its decision, the chosen layout's estimate and Memory line."""
    for _, result in decided_paths(Path(tempfile.mkdtemp())):
        rec = result.recommendation
        est = rec.facts.estimates.get(str(rec.settings.get("strategy"))) if rec.facts.estimates else None
        if est is not None:
            yield rec, est, dict(verdict_lines(rec, result.session.answers))["Memory"]


def _step_lines() -> Iterator[tuple[Recommendation, StepTime, str]]:
    """Every decided path of the walk with a step band: its decision, the chosen layout's step and Step line, flat."""
    for _, result in decided_paths(Path(tempfile.mkdtemp())):
        rec = result.recommendation
        step = rec.facts.speeds.get(str(rec.settings.get("strategy")))
        lines = dict(verdict_lines(rec, result.session.answers))
        est = rec.facts.estimates[str(rec.settings.get("strategy"))] if step is not None else None
        # A layout past the GPU itself (a brought JSON as written) cannot start: no step time is given for it.
        assert est is None or ("Step" in lines) is (est.total <= est.gpu_memory), lines
        if step is not None and "Step" in lines:
            yield rec, step, " ".join(lines["Step"].split())


def test_the_memory_line_gives_host_ram_against_its_usable_part_and_a_close_fit_where_it_is() -> None:
    said = Counter()
    for rec, est, memory in _memory_lines():
        if not est.host_per_node or offloads_to_nvme(rec):
            assert "host RAM" not in memory, memory
            continue
        if not est.host_memory:
            assert f"about {to_gib(est.host_per_node)} GiB of host RAM per machine" in memory, memory
            said["unknown"] += 1
            continue
        usable = int(FIT_MARGIN * est.host_memory)
        if est.host_fits is False:
            assert f", more than the {to_gib(usable)} GiB usable there" in memory, memory
            said["short"] += 1
            continue
        assert f"about {to_gib(est.host_per_node)} of {to_gib(usable)} GiB of host RAM usable per machine" in memory
        close = re.search(
            r"\(([\d.]+) GiB to spare: a close fit; it stops fitting below about ([\d.]+) GiB of RAM\)", memory
        )
        assert (close is not None) is (est.host_per_node > HOST_CLOSE_SHARE * usable), memory
        if close is not None:
            # The spare is the difference of the two figures shown, as a reader would work it out; the RAM where the
            # plan stops fitting is the one whose usable part is exactly the offload, within the RAM given.
            assert abs(float(close.group(1)) - (to_gib(usable) - to_gib(est.host_per_node))) < 0.05, memory
            cliff = float(close.group(2))
            assert abs(cliff * FIT_MARGIN - float(to_gib(est.host_per_node))) < 0.1, memory
            assert cliff <= float(to_gib(est.host_memory)), memory
        said["close" if close else "within"] += 1
    assert said["within"] and said["unknown"] and said["short"], said


def test_the_json_verdict_for_four_a100s_short_of_host_ram_is_a_close_call(tmp_path: Path) -> None:
    ds = tmp_path / "ds.json"
    ds.write_text('{"train_micro_batch_size_per_gpu": "auto", "zero_optimization": {"stage": 2}}', encoding="utf-8")
    answers = {
        "target": "accelerate", "hardware": "nvidia", "gpu_model": "A100 40GB", "gpus_per_node": 4,
        "cpu_memory_gb": 256, "model": "13B", "method": "full", "sequence_length": 4096,
        "deepspeed_config": str(ds),
    }  # fmt: skip
    result = decide(answers, tmp_path / "out")
    verdict = dict(verdict_lines(result.recommendation, result.session.answers))["Your JSON"]
    rec = result.recommendation
    suggested = rec.facts.estimates["zero2_offload_optimizer"]
    band = band_text(rec.facts.speeds["zero2_offload_optimizer"])
    assert verdict == (
        "change it: as written it does not fit the GPU; ds_config.suggested.json (ZeRO-2 + optim->CPU) fits the"
        " GPU, and host RAM is short only by DeepSpeed's 1.5x allowance (290.6 GiB with it, 193.7 GiB without it,"
        " against 204.8 GiB usable): worth a try, its first steps show whether it holds (watch free -g)."
        f" ds_config.suggested.json's layout: about {to_gib(suggested.total)} GiB per GPU, about {band} per"
        " optimizer step, at micro_batch_size 1; planned with this JSON, the wizard may take a larger micro-batch"
        " where the GPU has room, and these figures change with it"
    )


def test_the_no_json_row_says_its_refusal_rests_on_the_allowance_the_json_line_calls_worth_a_try(
    tmp_path: Path,
) -> None:
    """A 13B full fine-tune on 4 x A100 40GB with a ZeRO-2 JSON: the JSON line calls ZeRO-2 + optim->CPU worth a try
    (host RAM short only by DeepSpeed's 1.5x allowance), and the run without the JSON is refused on that same
    allowance, which its row says rather than standing beside "worth a try" unexplained."""
    from wizard.ui.console import without_json

    ds = tmp_path / "ds.json"
    ds.write_text('{"train_micro_batch_size_per_gpu": "auto", "zero_optimization": {"stage": 2}}', encoding="utf-8")
    answers = {
        "target": "accelerate", "hardware": "nvidia", "gpu_model": "A100 40GB", "gpus_per_node": 4,
        "cpu_memory_gb": 251, "model": "13B", "method": "full", "sequence_length": 2048, "global_batch_size": 64,
        "deepspeed_config": str(ds),
    }  # fmt: skip
    result = decide(answers, tmp_path / "out")
    verdict = dict(verdict_lines(result.recommendation, result.session.answers))["Your JSON"]
    assert "ds_config.suggested.json (ZeRO-2 + optim->CPU)" in verdict and "worth a try" in verdict, verdict
    row = without_json(result)
    assert row is not None and row[1].startswith("the wizard's own pick without your JSON: no backend fits either"), row
    assert row[1].endswith(
        " either, since it counts DeepSpeed's 1.5x allowance for pinned buffers in full: ZeRO-2 + optim->CPU is short"
        " of host RAM by that allowance alone, the same offload the Your JSON line calls worth a try (the refusal,"
        " run without deepspeed_config, lists what else would make the run fit)"
    ), row
    # "Why not FSDP2?" gives FSDP2's offload, short of host RAM by the same allowance alone, its step time too, so
    # that it can be weighed against the suggested JSON's, not only the memory.
    from wizard.ui.console import grouped_runner_ups, runner_up_beyond

    rec = result.recommendation
    fsdp2 = next(reason for titles, reason in grouped_runner_ups(rec) if titles.startswith("FSDP2"))
    figures = " ".join(" ".join(runner_up_beyond(rec, fsdp2)).split())
    assert "FSDP2 + offload in figures: about" in figures, figures
    assert "(short only by the 1.5x allowance), about" in figures and "per optimizer step with" in figures, figures


def test_a_run_whose_real_peak_may_pass_the_card_is_called_a_close_call_beside_its_loss_note() -> None:
    """Invariant, over every decided path: the Memory line calls a GPU run a close call exactly where it fits,
    runs 8,192 tokens or more per sequence on each GPU with the ordinary loss's moment, and that peak with the
    loss note's calibration (39% more) passes the card, whether or not the peak passes the usable line
    (no cliff there); the loss-peak note is there then. Below 8,192 tokens the calibration is not applied."""
    from wizard.engine.advice import UNDERSHOOT
    from wizard.engine.device import GPU_DEVICE
    from wizard.engine.memory import layout_tokens, memory_gib, sequences_per_micro_batch, sum_gib

    said = Counter()
    for rec, est, line in _memory_lines():
        memory = " ".join(line.split())
        work = rec.facts.workload
        assert work is not None
        long = layout_tokens(work, est.strategy) >= 8192 * sequences_per_micro_batch(work)
        past = float(sum_gib(est.total, est.transient)) * UNDERSHOOT > float(memory_gib(est.gpu_memory))
        close = est.fits and est.device == GPU_DEVICE and long and est.transient > 0 and past
        # A close call, or one past the card even at the calibration's kinder end (76%): said as likely.
        likely = close and float(sum_gib(est.total, est.transient)) / 0.76 > float(memory_gib(est.gpu_memory))
        # One verdict, the Risk line's word: "may pass ... (a close call)", or "would likely pass".
        card = memory_gib(est.gpu_memory)
        may = f"At this long context that moment may pass the GPU's {card} GiB (a close call): see Risk"
        assert (may in memory) is (close and not likely), memory
        assert (
            f"At this long context that moment would likely pass the GPU's {card} GiB: see Risk" in memory
        ) is likely
        if close:
            assert f"{sum_gib(est.total, est.transient)} GiB for a moment as the backward pass starts" in memory, memory
            assert any(w.startswith(LOSS_PEAK_WARNINGS) for w in rec.warnings)
            said["close, past the usable line" if est.tight else "close, within the usable line"] += 1
        elif est.fits and est.device == GPU_DEVICE and past and est.tight:
            said["short context: tight, not close"] += 1
        said[close] += 1
    assert said[True] >= 5 and said[False] >= 100, said


def test_a_close_call_gets_one_verdict_and_its_ways_out_on_every_path() -> None:
    """Invariant, over every decided path whose chosen layout is a close call (a long context, and 39% more
    passes the card): no sentence of the run calls that layout merely "tight"; a decision kept without offload
    says why, with the first way out; the summary lists ways out, each with room at its peak; and Accelerate's
    DeepSpeed offload takes such a layout only where none of its CPU offloads has room."""
    from wizard.engine.facts import DEEPSPEED_CPU_OFFLOADS
    from wizard.ui.console import close_call_risk

    said = Counter()
    folder = Path(tempfile.mkdtemp())
    # The walk's one-GPU runs are at short contexts: a QLoRA of an 8B model at 8,192 tokens on one 24 GB
    # card, with each tool, is the one-GPU close call.
    one_gpu = {
        "hardware": "nvidia", "gpu_model": "RTX 4090", "gpus_per_node": 1, "model": "llama-3.1-8b",
        "method": "qlora", "sequence_length": 8192,
    }  # fmt: skip
    extra = [{**one_gpu, "target": target} for target in ("accelerate", "axolotl")]
    runs = decided_paths(folder) + [(answers, decide(answers, folder / f"extra{i}")) for i, answers in enumerate(extra)]
    for answers, result in runs:
        rec = result.recommendation
        strategy = str(rec.settings.get("strategy"))
        est = rec.facts.estimates.get(strategy) if rec.facts.estimates else None
        if est is None:
            continue
        if strategy in DEEPSPEED_CPU_OFFLOADS and answers.get("deepspeed_config") is None and not offloads_to_nvme(rec):
            room = rec.facts.get("deepspeed_offload_room")
            # The lightest offload with room is taken; without one, the lightest that fits (the old order).
            assert room in (strategy, "none"), (strategy, room, answers)
            assert not est.close_call or room == "none", (strategy, answers)
        risk = close_call_risk(result)
        assert (risk is not None) is est.close_call, (risk, answers)
        if not est.close_call:
            continue
        peak = sum_gib(est.total, est.transient)
        assert risk is not None
        card = float(memory_gib(est.gpu_memory))
        if peak / 0.76 > card:
            # Past the card even where the estimate came to 76% of the real peak: likely, with both ends of the range.
            assert "as configured it will likely run out of memory" in risk[1].lower(), risk
            real = f"{round(peak / 0.76, 1)} to {round(peak * 1.39, 1)} GiB"
            assert f"its {peak} GiB would really be about {real}" in risk[1]
            assert f"more than the GPU's {memory_gib(est.gpu_memory)} GiB" in risk[1]
        else:
            assert "as configured it may run out of memory" in risk[1].lower(), risk
            assert (
                f"its peak of {peak} GiB may really be up to 39% higher, about {round(peak * 1.39, 1)} GiB" in risk[1]
            )
            assert (
                "by the estimate's calibration at long contexts (against Unsloth's published limits), more than"
                in " ".join(risk[1].split())
            )
        because = " ".join(rec.because.split())
        assert f"tight: about {sum_gib(est.total, est.transient)} GiB" not in because, because
        if strategy == "ddp":
            # Offload is named as the way after the chunked loss exactly where an offload has room at the peak
            # (the loss's moment stays on the GPU whatever is offloaded) and offload is not ruled out.
            target = answers.get("target")
            room = (
                rec.facts.get("deepspeed_offload_room") != "none"
                if target != "axolotl"
                else "fsdp2_offload" in rec.facts.estimates
                and rec.facts.estimates["fsdp2_offload"].fits
                and not rec.facts.estimates["fsdp2_offload"].close_call
            )
            offered = room and answers.get("offload", "auto") != "none"
            assert ("so the wizard plans this layout, not an offload." in because) is offered, because
            assert ("is the way after it:" in because) is offered, because
            assert ("Offload does not take the doubt away here" in because) is (
                not offered and answers.get("offload") != "none"
            )
            # The summary's short Why leaves that paragraph to --explain, by name: the Risk line above it says the
            # doubt and the first fix.
            brief = brief_why(rec.because)
            assert '"Close call"' in brief.left_out and "Close call:" not in brief.text, brief
            first = "cut_cross_entropy: true" if answers.get("target") == "axolotl" else "chunked_loss: yes"
            assert f"({first})" in because, because
        levers = result.levers
        assert levers, answers
        for lever in levers:
            # A lever's figures call its own layout a close call exactly where it is one.
            assert ("a close call" in lever.size) is lever.close_call, lever
            if strategy not in OFFLOAD_STRATEGIES and "deepspeed_config" not in answers:
                # Kept without offload: the list is of ways out, each with room at its peak.
                assert lever.backend is not None and not lever.close_call, lever
        said[rec.rule.id] += 1
    assert said["single_gpu"] >= 2 and said["data_parallel"] and sum(said.values()) >= 25, said


def test_the_step_line_gives_the_x8_band_exactly_where_pcie_lanes_change_it() -> None:
    """Invariant, over every decided path: with several PCIe cards in a machine, a layout that moves state over PCIe
    has its band on x8 lanes said beside the x16 one, with the engine's own x8 figure, where they differ; never else."""
    from wizard.engine.facts import step_on_x8

    said = Counter()
    for rec, step, line in _step_lines():
        strategy = str(rec.settings.get("strategy"))
        links = rec.facts.links
        narrow = step_on_x8(rec.facts, strategy)
        several = int(rec.settings.get("num_processes") or 1) > int(rec.settings.get("num_machines") or 1)
        expected = (
            links is not None
            and links.gpu_link_words.startswith("PCIe")
            and several
            and step.host_bytes > 0
            and narrow is not None
            and band_text(narrow) != band_text(step)
        )
        assert ("where each gets x8" in line) is expected, line
        if expected:
            assert narrow is not None and line.endswith(f"about {band_text(narrow)})"), line
        said[expected] += 1
    assert said[True] >= 3 and said[False] >= 100, said


def test_a_brought_json_is_answered_keep_or_switch_with_the_wizards_own_pick_beside_it() -> None:
    """Invariant, over every decided path that brings a DeepSpeed JSON: the summary's "No JSON" row is the run
    decided again without the file (its lever's title and figures), present exactly where that lever is."""
    from io import StringIO

    from rich.console import Console

    from wizard.ui.console import print_result, without_json

    said = Counter()
    for answers, result in decided_paths(Path(tempfile.mkdtemp())):
        if "deepspeed_config" not in answers:
            assert without_json(result) is None
            continue
        lever = next((x for x in result.levers if x.change.startswith("your DeepSpeed JSON left out")), None)
        row = without_json(result)
        assert (row is None) is (lever is None), (row, lever)
        if row is not None and lever is not None:
            assert row == ("No JSON", f"the wizard's own pick without your JSON: {lever.title}{lever.size}")
            # Where the JSON line calls an offload short of host RAM only by DeepSpeed's allowance worth a try, a
            # refusal without the file says it is that allowance, counted in full, that it refuses on.
            verdict = dict(verdict_lines(result.recommendation, result.session.answers)).get("Your JSON", "")
            allowance = "the same offload the Your JSON line calls worth a try" in row[1]
            assert allowance is ("worth a try" in verdict and lever.title.startswith("no backend fits")), (row, verdict)
            said["allowance"] += allowance
            if said["printed"] < 3:
                out = StringIO()
                print_result(Console(file=out, width=80), helpers_tree(), result, dry_run=True)
                flat = " ".join(out.getvalue().split()).replace("│ ", "").replace(" │", "")
                assert "No JSON: the wizard's own pick without your JSON:" in flat, flat[:600]
                said["printed"] += 1
        said[row is not None] += 1
    assert said[True] >= 5, said


def test_a_cost_close_behind_the_one_that_bounds_the_step_is_named_on_every_path() -> None:
    """Invariant, over every decided path with a step band: the Step line names as "close behind" exactly the
    costs (other than the bounds themselves) within 10% of the bounding cost at an end of the band."""
    from wizard.engine.speed import BOUND_WORDS, CLOSE_BEHIND

    said = Counter()
    for _, step, line in _step_lines():
        bounds = {BOUND_WORDS[step.bound_at(end)] for end in (0, 1)}
        expected = set()
        for end in (0, 1):
            costs = step.costs(end)
            first = max(costs.values())
            expected |= {
                BOUND_WORDS[name]
                for name, cost in costs.items()
                if BOUND_WORDS[name] not in bounds and first > 0 and cost >= CLOSE_BEHIND * first
            }
        named = set()
        if (match := re.search(r", with (.+?) close behind", line)) is not None:
            # "the network", "the GPU links", and "compute" bare, as the bound names it.
            named = {word.removeprefix("the ") for word in match.group(1).split(" and ")}
            assert ("the compute" in match.group(1)) is False, line
        assert named == expected, (line, expected)
        said[bool(named)] += 1
    assert said[True] >= 1 and said[False] >= 100, said


def test_the_step_line_says_the_cpu_optimizer_share_exactly_where_an_offload_steps_on_the_cpu() -> None:
    """Invariant, over every decided path with a step band: the Step line gives the optimizer step on the CPU, with
    the step-time model's own figures, exactly where the layout runs it there (optimizer offload): the cost that
    nothing hides, which "bound by compute" alone left out."""
    from wizard.engine.speed import seconds_text

    said = Counter()
    for _, step, line in _step_lines():
        expected = (
            f"; about {seconds_text(step.cpu_s[0])}-{seconds_text(step.cpu_s[1])} s of it is the optimizer step on"
            " the CPU, which runs after the backward pass with nothing to hide behind"
        )
        assert (expected in line) is bool(step.cpu_s[0]), line
        assert ("optimizer step on the CPU" in line) is bool(step.cpu_s[0]), line
        # The rate behind it (the wizard's own figure) is the long form's, beside the step-time table: not here.
        assert "billion parameters a second" not in line, line
        said[bool(step.cpu_s[0])] += 1
    assert said[True] >= 20 and said[False] >= 100, said


def test_a_close_call_says_so_in_the_panel_title_and_colour(tmp_path: Path) -> None:
    """The QLoRA 8B run at 8,192 tokens on an RTX 4090 is a close call: the panel's title says so, in yellow, where
    the eye lands first; the same run at 2,048 tokens, with room at its peak, keeps the plain green title. At 80
    columns the longest close-call title of every path keeps its whole form or a shorter one, never a cut one."""
    from io import StringIO

    from rich.console import Console

    from wizard.ui.console import print_result

    answers = {
        "target": "accelerate", "hardware": "nvidia", "gpu_model": "RTX 4090", "gpus_per_node": 1,
        "cpu_memory_gb": 32, "model": "llama-3.1-8b", "method": "qlora", "sequence_length": 8192,
    }  # fmt: skip
    for length, close in ((8192, True), (2048, False)):
        result = decide({**answers, "sequence_length": length}, tmp_path / str(length))
        out = StringIO()
        print_result(Console(file=out, width=80, force_terminal=True), helpers_tree(), result, dry_run=True)
        first = title_line(out.getvalue())
        assert ("(likely to run out of memory: see Risk)" in first) is close, first  # 21.7 GiB / 0.76 > 23.99
        assert first.rstrip().endswith("╮\x1b[0m"), repr(first)  # the border closes: nothing cut
        assert ("\x1b[1;33m" in first) is close, repr(first)  # bold yellow, as a run past its fit
    from wizard.ui.console import CLOSE_CALL_TITLES, LIKELY_TITLES, _fitting_title

    longest = "FSDP2 (fully sharded data parallel): FSDP2 + offload"  # the longest close-call title of the walk
    for titles in (CLOSE_CALL_TITLES, LIKELY_TITLES):
        added = _fitting_title(longest, 80, titles)
        assert added in titles and len(longest + added) <= 74, added
