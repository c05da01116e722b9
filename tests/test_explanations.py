"""The explanations as a newcomer reads them: `explain`, the summary and "why not X?".

Each property is checked on the real command's output at 80 columns, over a spread of the answer
paths that tests/paths.py walks (every hardware, target, method and offload choice).
"""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from test_step_comparisons import TWO_H100_MACHINES_70B

from helpers import ONE_A100_13B_FULL, REPO, decide, decided_paths, parsed, title_line, tree
from realtools import trainer_deepspeed_precision
from wizard.app import SHARDED_STRATEGIES as SHARDED
from wizard.app import Result
from wizard.cli import main
from wizard.engine.conditions import iter_compares
from wizard.engine.memory import OFFLOAD_STRATEGIES, Estimate, sum_gib, to_gib

GPU_HARDWARE = ("nvidia", "amd")
OTHER_HARDWARE_WORDS = ("TPU", "XLA", "Gaudi", "HPU", "XPU", "NPU", "MLU", "MUSA", "Apple", "MPS", "CPU only")
SOURCE_TAG = re.compile(r"\b(?:[AX]-[A-Z]+|WH)\b")
GUIDANCE_ID = re.compile(r"\b(?:[BH]\d|T5|NOFIT)\b")
PRIVATE = re.compile(r"skill|guidance document|triage|\b[\w-]+\.md\b|validate_backend_config|check_distributed", re.I)


@dataclass(frozen=True)
class Explained:
    """One answer path: its answers, the decision and what `explain` printed."""

    answers: dict[str, Any]
    result: Result
    text: str

    @property
    def trace(self) -> str:
        """The "How the decision was made" part."""
        # The memory table's title names the device: "Memory per GPU", or "Memory on the Mac".
        return re.split(r"Memory (?:per GPU|on the Mac)", self.text.split("Why not the other backends")[0])[0]


def run_cli(*args: str, codes: tuple[int, ...] = (0, 9)) -> str:
    """What the command prints on a terminal 80 columns wide (run in-process).

    Exit 9 (written, but the run does not fit as written) is a plan printed like any other; test_exit_not_fit says
    where it comes.
    """
    buffer = io.StringIO()
    with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stdout(buffer):
        patch.setenv("COLUMNS", "80")
        code = main(list(args))
    assert code in codes, buffer.getvalue()
    return buffer.getvalue()


def explain(folder: Path, answers: dict[str, Any]) -> str:
    path = folder / "answers.json"
    path.write_text(json.dumps(answers))
    return run_cli("explain", "--answers", str(path), "--defaults", codes=(0, 4, 9))  # 4: refused, as the run is


def squeezed(text: str) -> str:
    """The text without spaces, line breaks and tree lines (rich wraps long words anywhere)."""
    return re.sub(r"[\s│├└─]+", "", text)


# Session-scoped: explaining the sample is the costliest setup of the suite, and a module
# fixture is rebuilt whenever a worker interleaves another module's tests between these.
@pytest.fixture(scope="session")
def paths(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[dict[str, Any], Result]]:
    return decided_paths(tmp_path_factory.mktemp("explanations"), refusals=True)


@pytest.fixture(scope="session")
def sample(paths: list[tuple[dict[str, Any], Result]]) -> list[tuple[dict[str, Any], Result]]:
    """A spread of the paths: every twentieth GPU path and every third of the others (CPU time is short)."""
    by_hardware: dict[str, list[tuple[dict[str, Any], Result]]] = {}
    for path in paths:
        by_hardware.setdefault(str(path[0].get("hardware")), []).append(path)
    return [p for hw, group in by_hardware.items() for p in group[:: 20 if hw in GPU_HARDWARE else 3]]


@pytest.fixture(scope="session")
def explained(sample: list[tuple[dict[str, Any], Result]], tmp_path_factory: pytest.TempPathFactory) -> list[Explained]:
    folder = tmp_path_factory.mktemp("explained")
    return [Explained(answers, result, explain(folder, answers)) for answers, result in sample]


def test_the_sample_covers_every_hardware_and_outcome(sample: list[tuple[dict[str, Any], Result]]) -> None:
    hardware = {answers.get("hardware") for answers, _ in sample}
    assert hardware >= {"nvidia", "amd", "cpu", "mps", "tpu", "hpu", "xpu", "npu", "mlu", "musa"}, hardware
    backends = {result.recommendation.backend for _, result in sample}
    assert {"ddp", "fsdp2", "deepspeed", "single_gpu", None} <= backends, backends


def test_the_trace_stays_on_the_users_hardware(explained: list[Explained]) -> None:
    rules = tree().rules
    for item in explained:
        hardware = item.answers["hardware"]
        trace = item.trace
        rec = item.result.recommendation
        decided_at = [r.id for r in rules].index(rec.rule.id)
        # Rules that failed for one reason, next to each other, are grouped: the reason once, a line per rule under it.
        groups = len(re.findall(r"^[├└]── ✗ \d+ rules, for the same reason: ", trace, re.M))
        shown = (
            len(re.findall(r"^[├└]── [✗✓] ", trace, re.M)) - groups + len(re.findall(r"^│   [├└]── ✗ ", trace, re.M))
        )
        counted = re.findall(r"(\d+) rules for other hardware were skipped", trace)
        assert len(counted) <= 1, trace
        skipped = int(counted[0]) if counted else 0
        # Rules for the other tool are counted the same way, on a line of their own.
        tools = re.findall(
            r"(\d+) rules? for (Accelerate|Axolotl) runs only (?:was|were) skipped: this run launches"
            r" with (Accelerate|Axolotl)\.",
            " ".join(trace.replace("│", " ").split()),
        )
        assert len(tools) <= 1 and all(other != mine for _, other, mine in tools), trace
        if tools:
            assert tools[0][2].lower() == item.answers["target"], trace
        skipped += int(tools[0][0]) if tools else 0
        assert shown + skipped == decided_at + 1, (item.answers, trace)
        # The rules after the decision are counted too, so that the counts add up to the tree.
        untested = re.findall(r"(\d+) later (?:rules\s+were|rule\s+was)\s+not\s+tested", trace)
        for count, noun in re.findall(r"(\d+) later (rules?)\s", trace):
            assert (noun == "rule") == (count == "1"), trace
        assert [int(n) for n in untested] == ([len(rules) - decided_at - 1] if decided_at + 1 < len(rules) else [])
        for rule in rules[: decided_at + 1]:
            needs = [
                leaf
                for leaf in iter_compares(rule.when)
                if leaf.kind == "answer" and leaf.name == "hardware" and leaf.op in ("eq", "in")
            ]
            wanted = {v for leaf in needs for v in (leaf.value if leaf.op == "in" else (leaf.value,))}
            if needs and hardware not in wanted:
                assert not re.search(rf"\b{rule.id}\b", trace), (hardware, rule.id, trace)
        if hardware in GPU_HARDWARE:
            assert skipped >= 13, trace
            named = [word for word in OTHER_HARDWARE_WORDS if re.search(rf"\b{word}\b", trace)]
            assert not named, (item.answers, named, trace)


def test_a_rule_that_failed_gives_one_plain_reason(explained: list[Explained]) -> None:
    for item in explained:
        text = item.text
        assert "(it is " not in text, text
        assert "not asked for these answers" not in text, text
        before_decision = re.split(r"^[├└]── ✓ ", item.trace, flags=re.M)[0]
        titles = {r.title for r in tree().rules}
        # A failed rule is one item: "✗ <title>: <its first unmet condition>", nothing under it; rules next to
        # each other that failed for the same reason are one item, "✗ N rules, for the same reason: <reason>",
        # with only their titles under it.
        for header, reason, members in re.findall(
            r"^[├└]── ✗ (\d+) rules, for the same reason: (\S[^\n]*)((?:\n│   [^\n]*)*)", before_decision, re.M
        ):
            named = re.findall(r"^│   [├└]── ✗ ([^\n]+(?:\n│   [│ ]   [^\n]*)*)", members.strip("\n"), re.M)
            assert len(named) == int(header) >= 2, (members, before_decision)
            for title in named:
                spoken = " ".join(title.replace("│", " ").split())
                assert spoken[:1].lower() + spoken[1:] in titles or spoken in titles, (spoken, before_decision)
            assert reason.strip(), before_decision
        alone = re.sub(
            r"^[├└]── ✗ \d+ rules, for the same reason: [^\n]*(?:\n│   [^\n]*)*", "", before_decision, flags=re.M
        )
        assert not re.search(r"^│   [├└]── ", alone, re.M), alone
        for title, reason in re.findall(r"^[├└]── ✗ ([^:\n]+(?:\n│   [^:\n]*)*): (\S[^\n]*)", alone, re.M):
            spoken = " ".join(title.replace("│", " ").split())
            assert spoken[:1].lower() + spoken[1:] in titles or spoken in titles, (spoken, before_decision)
            assert reason.strip(), before_decision


def test_why_not_compares_and_is_never_circular(explained: list[Explained]) -> None:
    guidance = tree().guidance
    for item in explained:
        rec = item.result.recommendation
        assert "prefers this order" not in item.text
        chosen = rec.facts.estimates.get(str(rec.settings.get("strategy")))
        for runner in rec.runner_ups:
            assert guidance[rec.rule.guidance] not in runner.reason, runner.reason
            assert runner.reason[:1].isupper() and runner.reason.endswith("."), runner.reason
            estimate = rec.facts.estimates.get(runner.strategy or "")
            if runner.reason.startswith("On one GPU, DDP") and "so it does not fit either" in runner.reason:
                # DDP on one GPU that does not fit: the one-GPU figure is the decision's, not DDP's fault.
                assert estimate is not None and not estimate.fits, runner
                assert rec.facts.get("world_size") == 1, runner
                figure = (
                    rf"about {re.escape(str(to_gib(estimate.total)))} GiB( at this micro_batch_size \d+)?, more than"
                )
                assert re.search(figure, runner.reason), runner.reason
            elif runner.reason.startswith("It would fit") or runner.reason.startswith("On one GPU, DDP"):
                assert estimate is not None and estimate.fits, runner
                assert f"{to_gib(estimate.total)} GiB" in runner.reason, runner.reason
                if chosen is not None and rec.backend is not None:
                    assert f"{to_gib(chosen.total)} GiB" in runner.reason, (runner.reason, chosen)
            # "why not X?" in the summary and the trace say the same.
            assert squeezed(runner.reason) in squeezed(item.text), runner.reason


def test_codes_are_explained_by_a_legend_of_public_sources(explained: list[Explained]) -> None:
    # Sources are cited by number; every number cited is listed once, with a public address, and
    # no internal tag or rule id reaches the reader.
    sources = tree().sources
    public = {text.split()[-1] for text in sources.values() if text.split()[-1].startswith("https://")}
    for item in explained:
        text = item.text
        body, _, legend = text.partition("Sources (the numbers in brackets above)")
        trace = squeezed(body.split("Why not the other backends")[0])
        cited = {int(n) for group in re.findall(r"\[(\d+(?:,\d+)*)\]", trace) for n in group.split(",")}
        listed = [int(n) for n in re.findall(r"^  \[(\d+)\] ", legend, re.M)]
        assert listed == list(range(1, len(listed) + 1)), listed
        assert cited == set(listed), (cited, listed)
        addresses = set(re.findall(r"https://[^\[]+", squeezed(legend)))
        assert all(any(a.startswith(p) for p in public) for a in addresses), addresses
        assert not SOURCE_TAG.findall(text), SOURCE_TAG.findall(text)
        assert not GUIDANCE_ID.findall(text), GUIDANCE_ID.findall(text)
        assert not PRIVATE.search(text), PRIVATE.search(text)


def test_every_tree_sentence_exists_for_what_the_rules_ask() -> None:
    # The generic fallback wording ("needs x is y; yours is z") never reaches a user of the
    # shipped tree: every answer and fact a rule tests, and every answer that decides whether
    # such a question is asked, has a sentence of its own.
    t = tree()
    subjects = {leaf.name for rule in t.rules for leaf in iter_compares(rule.when)}
    gates = [t.question(name) for name in subjects]
    subjects |= {leaf.name for q in gates if q is not None and q.when for leaf in iter_compares(q.when)}
    assert sorted(subjects - set(t.fact_texts)) == []


def test_the_summary_names_no_code(sample: list[tuple[dict[str, Any], Result]], tmp_path: Path) -> None:
    for answers, result in sample[::8]:
        path = tmp_path / "answers.json"
        path.write_text(json.dumps(answers))
        # A refusal prints the same summary and exits 4.
        out = run_cli("--answers", str(path), "--dry-run", "--output-dir", str(tmp_path / "out"), codes=(0, 4, 9))
        summary = out.split("Would write")[0]
        assert not SOURCE_TAG.findall(summary) and not GUIDANCE_ID.findall(summary), summary
        assert "Rule " not in summary and not PRIVATE.search(summary), summary
        # The guideline restates the Why in general words: explain and the file headers carry it.
        assert "Guideline:" not in summary, summary
        if result.recommendation.runner_ups:
            # After a refusal every backend listed failed: none is a runner-up to a choice.
            heading = "Why each backend does not fit" if result.recommendation.refused else "Why not the others"
            assert heading in summary and "prefers this order" not in summary, summary


def test_the_a100_example_reads_plainly(tmp_path: Path) -> None:
    answers = {"target": "accelerate", "hardware": "nvidia", "gpu_model": "A100", "gpus_per_node": 4}
    text = squeezed(explain(tmp_path, {**answers, "model": "7B", "method": "full"}))
    for phrase in (
        "13 rules for other hardware were skipped: they cannot apply to NVIDIA GPUs",
        "needs training code written for Megatron-LM; this run's code is taken as ordinary PyTorch or"
        " Transformers code (megatron: no)",
        "needs 2 or more machines; this run has 1",
        # ZeRO-3 shards as FSDP2 does: it is the one compared, the difference in its figure is said,
        # and ZeRO-2 (less traffic), which the decision itself weighs against FSDP2, is pointed back to.
        "DeepSpeed ZeRO: It would fit: ZeRO-3 needs about 28.6 GiB per GPU against 29.4 GiB with FSDP2: the same"
        " training state sharded over the same 4 GPUs",
        "the two figures differ only in what each holds unsharded at once: ZeRO-3 its largest layer and a buffer as"
        " large, 0.5 GiB, as DeepSpeed's estimator counts, FSDP2 the embeddings and output head for the whole step"
        " and two decoder layers, 1.3 GiB",
        # The rule first, then the runner-up's figures.
        "Why FSDP2 over DeepSpeed: both are valid here",
        "where both fit, the wizard's own tie-break takes FSDP2: it is part of PyTorch",
        "ZeRO-2 fits too, at about 37.9 GiB per GPU against 29.4 GiB, since it keeps the weights whole on every GPU",
        "ZeRO-2 fits too (about 37.9 GiB per GPU): the decision above gives its memory and step time beside"
        " FSDP2's, and why the wizard keeps FSDP2",
    ):
        assert squeezed(phrase) in text, phrase
    # Said once: the step comparison of the decision is not repeated under "Why not".
    assert text.count(squeezed("ZeRO-2 fits too, at about")) == 1, text
    assert text.count(squeezed("By the step-time model, taking each kind of link on its own")) == 1, text
    one_gpu = squeezed(explain(tmp_path, {**answers, "gpus_per_node": 1, "model": "7B", "method": "full"}))
    assert squeezed("Megatron-LM (tensor and pipeline parallel): Needs 2 or more GPUs; this run has 1.") in one_gpu


def test_figures_are_named_for_what_they_are(explained: list[Explained], tmp_path: Path) -> None:
    from test_near_limit_levers import LONG as long_context

    cases = [(item.result, " ".join(item.text.split())) for item in explained]
    result = decide(long_context, tmp_path / "long")
    rec = result.recommendation
    prose = " ".join([rec.because, *(r.reason for r in rec.runner_ups), *(s for e in rec.trace for s in e.sentences)])
    cases.append((result, prose))
    for result, text in cases:
        estimates = result.recommendation.facts.estimates.values()
        activations = {to_gib(e.activations) for e in estimates}
        states = {to_gib(e.model_states) for e in estimates}
        for figure in re.findall(r"(\d+(?:\.\d+)?) GiB of it activations", text):
            assert float(figure) in activations, (figure, text)
        for figure in re.findall(r"activations \((\d+(?:\.\d+)?) GiB", text):
            assert float(figure) in activations, (figure, text)
        for figure in re.findall(r"weights(?: alone)? \((\d+(?:\.\d+)?) GiB\)", text):
            assert float(figure) in states, (figure, text)
        assert "16-bit weights alone" not in text
    zero2 = rec.facts.estimates["zero2_offload_optimizer"]
    assert to_gib(zero2.activations) > to_gib(zero2.model_states), "the long run is activation-bound"


# --- why not X: every layout of the losing backend, read from the CLI text ------------------

SAID_AS_A_CHOICE = re.compile(r"\byou (?:chose|said|asked|brought|ruled|set|launch|train)\b|\byours is\b", re.I)
CIRCULAR = ("which is what", "was chosen for", "so it is no faster", "means FSDP2", "derived the shard size")


def _usable_layouts(rec: Any, backend_id: str) -> tuple[list[str], list[str]]:
    """(layouts that fit and are allowed, layouts that fit only by an offload this run rules out)."""
    backend = tree().backends[backend_id]
    offload_none = rec.settings is not None and rec.facts.values.get("offload") == "none"
    fitting = [
        name
        for name in backend.layouts
        if name in rec.facts.estimates
        and rec.facts.estimates[name].fits
        and rec.facts.estimates[name].host_fits is not False
    ]
    ruled_out = [name for name in fitting if offload_none and name.endswith(("offload", "_all", "_optimizer"))]
    return [name for name in fitting if name not in ruled_out], ruled_out


def test_why_not_looks_at_every_layout_of_the_losing_backend(explained: list[Explained]) -> None:
    # A losing backend with a layout that fits is compared with the winner (its figures in the
    # text); one that fits only by offloading is said to be ruled out by offload: none; a rule's
    # unrelated first failure ("needs offload: nvme") never stands for a backend that would fit.
    for item in explained:
        rec = item.result.recommendation
        offload = item.answers.get("offload", "auto")
        text = " ".join(item.text.split())
        for runner in rec.runner_ups:
            backend = tree().backends[runner.backend]
            estimates = [rec.facts.estimates[n] for n in backend.layouts if n in rec.facts.estimates]
            usable = [e for e in estimates if e.fits and e.host_fits is not False]
            allowed = [e for e in usable if offload != "none" or e.host_per_node == 0]
            if allowed and rec.backend is not None:
                first = allowed[0]
                # An offload layout may be preceded by why the backend's layouts without offload
                # do not fit (their figures), a paragraph of its own.
                lead = (
                    runner.reason.split("\n", 1)[-1] if runner.reason.startswith("Without offload") else runner.reason
                )
                assert lead.startswith(("It would fit", "On one GPU, DDP")), (item.answers, runner.reason)
                if lead is not runner.reason:
                    assert first.strategy in OFFLOAD_STRATEGIES, (item.answers, runner.reason)
                assert f"{to_gib(first.total)} GiB" in runner.reason, (runner.reason, first.strategy)
                # The layout compared is the one that shards as the winner does (ZeRO-3 against
                # FSDP2: both gather, and offload alike), else one that needs what the winner needs,
                # else the lightest-traffic one that fits.
                chosen = rec.facts.estimates.get(str(rec.settings.get("strategy")))
                ties = [e for e in allowed if chosen is not None and to_gib(e.total) == to_gib(chosen.total)]

                def kind(e: Estimate) -> tuple[bool, bool]:
                    offloads = e.strategy in OFFLOAD_STRATEGIES
                    return offloads, offloads and e.model_states == e.gathered

                alike = [
                    e
                    for e in allowed
                    if chosen is not None
                    and e.gathered
                    and chosen.gathered
                    and chosen.strategy in ("fsdp2", "fsdp2_offload")
                    and kind(e) == kind(chosen)
                ]
                assert runner.strategy == (alike or ties or allowed)[0].strategy, (runner.strategy, first.strategy)
            elif usable and not allowed:
                assert "rules out (offload: none)" in runner.reason, (item.answers, runner.reason)
            if usable:
                assert "Needs offload: nvme" not in runner.reason, (item.answers, runner.reason)
            assert squeezed(runner.reason) in squeezed(text)


def test_the_reported_runs_read_as_the_table_shows(tmp_path: Path) -> None:
    # Axolotl QLoRA 70B on two RTX 4090: DeepSpeed's full offload fits as well as the chosen
    # FSDP2 offload, so it is compared, not dismissed for NVMe.
    qlora = {"target": "axolotl", "hardware": "nvidia", "gpu_model": "RTX 4090", "gpus_per_node": 2}
    text = squeezed(explain(tmp_path, {**qlora, "model": "70B", "method": "qlora"}))
    assert squeezed("DeepSpeed ZeRO: Without offload it does not fit:") in text
    assert (
        squeezed("It would fit with CPU offload: ZeRO-3 + all->CPU needs about 8.9 GiB per GPU against 9.7 GiB") in text
    )
    assert squeezed("Needs offload: nvme") not in text
    # One RTX 4090, 70B full, offload: none: the offload layouts fit, but offload is ruled out.
    refused = {**qlora, "target": "accelerate", "gpus_per_node": 1, "model": "70B", "method": "full", "offload": "none"}
    path = tmp_path / "refused.json"
    path.write_text(json.dumps(refused))
    out = run_cli("explain", "--answers", str(path), "--defaults", codes=(4,))
    text = squeezed(out)
    for backend in ("DeepSpeed ZeRO", "FSDP2 (fully sharded data parallel)"):
        assert squeezed(f"{backend}: It would fit only with CPU offload, which this run rules out") in text, backend
    assert squeezed("Needs 2 or more GPUs; this run has 1") not in text.split(squeezed("FSDP2 (fully"))[-1][:80]
    # The levers say how many GPUs and how much host RAM.
    assert re.search(r"addGPUs\(about\d+inall", text), out
    assert re.search(r"allowCPUoffload\(offload:auto\),whichneedsabout[\d.]+GiBofhostRAM", text), out


def test_no_sentence_is_circular_or_calls_a_default_a_choice(explained: list[Explained]) -> None:
    # The sample runs with --defaults: whatever came from a default must not read as the
    # user's choice, and no reason may restate the decision ("which is what X was chosen for").
    for item in explained:
        body = " ".join(item.text.split("Sources (the numbers")[0].split())
        assert not SAID_AS_A_CHOICE.search(body), (item.answers, SAID_AS_A_CHOICE.search(body))
        for phrase in CIRCULAR:
            assert phrase not in body, (item.answers, phrase)


def test_sums_name_every_part(explained: list[Explained]) -> None:
    # "about X GiB in all" and "come to about X GiB" follow a list of parts that includes the
    # overhead (the table's "other" column), so the parts add up to the figure.
    for item in explained:
        text = " ".join(item.text.split())
        for match in re.finditer(r"(?:GiB in all|come to about)", text):
            before = text[max(0, match.start() - 220) : match.start()]
            assert "overhead" in before, (item.answers, before)
        assert "a full copy of the training state does not fit" not in text


def test_hsdp_and_long_context_say_what_was_chosen_and_why(tmp_path: Path) -> None:
    hsdp = {"target": "accelerate", "hardware": "nvidia", "gpu_model": "H100", "gpus_per_node": 8, "num_nodes": 2}
    answers = {**hsdp, "model": "13B", "method": "full"}
    rec = decide(answers, tmp_path / "hsdp").recommendation
    assert rec.settings["strategy"] == "hsdp"
    hsdp_gib, flat_gib = (to_gib(rec.facts.estimates[s].total) for s in ("hsdp", "fsdp2"))
    trace = " ".join(s for entry in rec.trace for s in entry.sentences)
    # Every "fits without offload" sentence quotes the layout the decision uses (8-way HSDP).
    assert f"sharded over 16 GPUs with FSDP2 it needs about {flat_gib}" not in trace, trace
    assert f"replicated across the 2 machines, needs about {hsdp_gib} GiB" in trace, trace
    assert f"Sharding over all 16 GPUs would need less memory ({flat_gib} GiB" in rec.because
    path = tmp_path / "hsdp.json"
    path.write_text(json.dumps(answers))
    summary = run_cli("--answers", str(path), "--dry-run", "--defaults", "--output-dir", str(tmp_path / "out"))
    assert "FSDP2 (fully sharded data parallel): HSDP" in title_line(summary), summary
    long_context = {**hsdp, "num_nodes": 1, "model": "8B", "method": "lora", "sequence_length": 131072}
    rec = decide(long_context, tmp_path / "long").recommendation
    fsdp2 = rec.facts.estimates["fsdp2"]
    assert "context parallel 4 is the default the wizard picked, the smallest size that fits" in " ".join(
        rec.because.lower().split()
    ), rec.because
    assert f"the activations alone take about {to_gib(fsdp2.activations)} GiB" in rec.because, rec.because
    assert not rec.because.startswith("Tensor, context and expert"), rec.because


def test_host_ram_is_said_as_installed_ram_in_the_users_unit(paths: list[tuple[dict[str, Any], Result]]) -> None:
    refusals = [(a, r) for a, r in paths if r.recommendation.refused and r.recommendation.facts.estimates]
    assert refusals
    for answers, result in refusals:
        because = result.recommendation.because
        if "add host RAM" in because:
            assert re.search(r"add host RAM \(about [\d.]+ GiB per machine as free -g's total", because), because
            assert f"{answers['cpu_memory_gb']} GiB this run has (cpu_memory_gb)" in because, because
            assert " GB " not in because, because
        if "allow CPU offload (offload: auto)" in because:
            # The offloads the wizard would use for this tool: DeepSpeed's for Accelerate, FSDP2's for Axolotl.
            estimates = result.recommendation.facts.estimates
            used = ("zero2_offload_optimizer", "zero3_offload_optimizer", "zero3_offload_all")
            if answers["target"] == "axolotl":
                used = ("fsdp2_offload", "hsdp_offload")
            offloads = [estimates[n] for n in used if n in estimates and estimates[n].fits]
            if offloads:
                assert "of host RAM per machine" in because.split("allow CPU offload")[1], because


def test_explain_prints_the_summarys_warnings(explained: list[Explained]) -> None:
    shown = 0
    for item in explained[::3]:
        for warning in item.result.warnings:
            # Listed under headings ("Install first", "Not used from your answers") without the
            # prefix that names their kind, each with a capital: compared without either.
            said = warning.removeprefix("install first: ").removeprefix("install unchecked: ").removeprefix("ignored ")
            assert squeezed(said).lower() in squeezed(item.text).lower(), (item.answers, warning)
            shown += 1
    assert shown, "the sample has warnings to compare"


def test_a_refusal_names_itself_on_stderr_in_one_short_line(tmp_path: Path) -> None:
    answers = {"target": "accelerate", "hardware": "nvidia", "gpu_model": "RTX 4090", "model": "70B"}
    path = tmp_path / "refused.json"
    path.write_text(json.dumps({**answers, "method": "full", "offload": "none"}))
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        run_cli("--answers", str(path), "--dry-run", "--defaults", "--output-dir", str(tmp_path / "out"), codes=(4,))
    lines = [line for line in err.getvalue().splitlines() if line.strip()]
    assert len(lines) == 1 and len(lines[0]) <= 80, lines  # one line at 80 columns
    assert "no backend fits, so nothing was written" in lines[0]


def test_a_summary_that_offloads_or_refuses_shows_what_would_change_the_answer(tmp_path: Path) -> None:
    """Offload is slow and a refusal ends the run: the summary names the levers (QLoRA, more GPUs, ...)."""
    from io import StringIO

    from rich.console import Console

    from wizard.engine.memory import OFFLOAD_STRATEGIES
    from wizard.engine.what_if import what_if
    from wizard.ui.console import print_result

    seen = 0
    for _, result in decided_paths(tmp_path, refusals=True)[::8]:
        rec = result.recommendation
        offloads = any(rec.settings.get(k) not in (None, "none") for k in ("offload_optimizer", "offload_param"))
        # Axolotl's layer offloading is offload too, though it sets no backend offload key.
        offloads = offloads or rec.settings.get("strategy") in OFFLOAD_STRATEGIES
        session = result.session
        levers = what_if(tree(), session.answers, session.inputs, rec, session.given)
        # A sharded run is shown only the levers that would let a full copy fit on each GPU.
        sharded = [lever for lever in levers if lever.backend in ("ddp", "single_gpu")]
        # A brought JSON decides before any memory rule: its levers (the wizard's own pick among them) always show.
        brought = "deepspeed_config" in session.answers
        # A close call kept without offload is shown its ways out: the levers with room at their peak.
        chosen = rec.facts.estimates.get(str(rec.settings.get("strategy"))) if rec.facts.estimates else None
        room = [lever for lever in levers if lever.backend is not None and not lever.close_call]
        expected = (
            levers
            if rec.refused or offloads or brought
            else room
            if chosen is not None and chosen.close_call
            else sharded
            if rec.settings.get("strategy") in SHARDED
            else []
        )
        assert result.levers == expected
        out = StringIO()
        # The long form says each lever in words (the short one sets them side by side: test_levers_table).
        print_result(Console(file=out, width=80), tree(), result, dry_run=True, detail=True)
        words = " ".join(out.getvalue().split())
        heading = "To give it room at its peak" if expected and expected is room and levers != room else ""
        assert ("To get a different answer" in words or "To give it room at its peak" in words) == bool(expected)
        if heading:
            assert heading in words, words
        for lever in expected:
            assert f"with {lever.change}: {lever.title}" in words
        seen += bool(expected)
    assert seen > 10


def flat(text: str) -> str:
    """The text as one line of words (tree lines, panel borders and wrapping undone)."""
    return " ".join(re.sub(r"[│├└─╭╮╰╯┃]+", " ", text).split())


def test_no_tie_is_settled_by_the_guideline_and_no_figure_meets_itself(explained: list[Explained]) -> None:
    # A tie in memory and traffic is broken by a concrete property of the winner, never by
    # "the guideline prefers"; and a figure is never set against itself ("15.6 against 15.6").
    for item in explained:
        text = flat(item.text)
        assert "guideline prefers" not in text, text
        for runner in item.result.recommendation.runner_ups:
            same = re.search(r"about (\d+\.\d) GiB[^.;]*? against \1 GiB", runner.reason)
            assert same is None, runner.reason


def test_a_zero3_tie_is_compared_and_the_lighter_stage_named(explained: list[Explained]) -> None:
    # When ZeRO-3 shards as the chosen FSDP2 does, ZeRO-3 is what a reader weighs against it, with
    # where the two figures differ; the ZeRO stage with less traffic that fits too gets one
    # sentence of its own.
    seen = 0
    for item in explained:
        rec = item.result.recommendation
        chosen = rec.facts.estimates.get(str(rec.settings.get("strategy")))
        zero3 = rec.facts.estimates.get("zero3")
        runner = next((r for r in rec.runner_ups if r.backend == "deepspeed"), None)
        if (
            chosen is None
            or zero3 is None
            or runner is None
            or rec.settings.get("strategy") != "fsdp2"
            or not zero3.fits
        ):
            continue
        seen += 1
        assert runner.strategy == "zero3", runner.reason
        if to_gib(zero3.total) == to_gib(chosen.total):
            assert "ZeRO-3 needs the same" in runner.reason, runner.reason
        else:
            said = f"ZeRO-3 needs about {to_gib(zero3.total)} GiB per GPU against {to_gib(chosen.total)} GiB with FSDP2"
            assert said in runner.reason, runner.reason
            assert (
                f"ZeRO-3 its largest layer and a buffer as large, {to_gib(zero3.gathered)} GiB" in runner.reason
                and f"two decoder layers, {to_gib(chosen.gathered)} GiB" in runner.reason
            ), runner.reason
        lighter = [n for n in ("zero2", "zero1") if rec.facts.estimates[n].fits]
        if lighter:
            name = {"zero2": "ZeRO-2", "zero1": "ZeRO-1"}[lighter[0]]
            assert f"{name} fits too" in runner.reason, runner.reason
    assert seen


def test_every_rule_has_a_title_of_its_own_and_the_trace_names_it(explained: list[Explained]) -> None:
    titles = [rule.title for rule in tree().rules]
    assert all(titles) and len(set(titles)) == len(titles), titles
    for item in explained:
        rec = item.result.recommendation
        trace = flat(item.trace)
        decided = rec.rule.title
        assert f"✓ {decided[:1].upper() + decided[1:]}" in trace, (decided, trace)
        assert "does not hold" not in trace and "holds " + rec.rule.id not in trace


def test_the_linter_refuses_two_rules_with_one_title(tmp_path: Path) -> None:
    from wizard.app import load
    from wizard.errors import TreeError

    text = (REPO / "decision_tree.yaml").read_text(encoding="utf-8")
    twice = text.replace(
        '"one GPU and it fits → no distributed backend"', '"several GPUs and a full copy fits on each → DDP"'
    )
    assert twice != text
    path = tmp_path / "tree.yaml"
    path.write_text(twice, encoding="utf-8")
    with pytest.raises(TreeError, match="title"):
        load(path)


def test_device_words_fit_the_device(explained: list[Explained]) -> None:
    # No CUDA wording on Apple silicon, AMD or the CPU; precision is said in words; a lone Apple
    # device says why nothing else is compared instead of leaving the section out.
    for item in explained:
        hardware = item.answers["hardware"]
        text = flat(item.text)
        if hardware in ("mps", "amd", "cpu"):
            assert "CUDA context" not in text and "for the CUDA" not in text, text
        assert "Precision stays 'no'" not in text
        rec = item.result.recommendation
        if hardware == "mps" and not rec.refused:
            assert "no distributed backend runs on Apple silicon (MPS)" in text, text


def test_method_and_tool_names_are_written_as_people_write_them(explained: list[Explained]) -> None:
    for item in explained:
        text = flat(item.text)
        assert not re.search(r"\d\.\dB (?:lora|qlora|full) run", text), text
        target = item.answers.get("target")
        if target == "accelerate":
            assert "Accelerate and Axolotl run" not in text and "which Axolotl runs" not in text
        assert "are not CPU execution targets" not in text


def test_long_context_and_moe_traces_say_what_was_considered(tmp_path: Path) -> None:
    h100 = {"target": "accelerate", "hardware": "nvidia", "gpu_model": "H100", "gpus_per_node": 8}
    long = flat(explain(tmp_path, {**h100, "model": "8B", "method": "lora", "sequence_length": 131072}))
    # FSDP2 shards over the shard group and the context-parallel GPUs together (dp_shard_cp).
    assert "FSDP2 shards them over all 8 GPUs (data-parallel shard size 2 x context parallel 4" in long, long
    assert "still shards the model states over all" not in long
    assert "Accelerate runs these parallel sizes only on top of FSDP2" in long
    # Each requirement of context parallel is a short sentence of its own, none left unfinished.
    assert "is)" not in long and "Pad every batch to a multiple of 8 tokens (2 x cp_size): sequence_length" in long
    a100 = {"target": "axolotl", "hardware": "nvidia", "gpu_model": "A100 40GB", "gpus_per_node": 2}
    sixteen_k = flat(explain(tmp_path, {**a100, "model": "13B", "method": "lora", "sequence_length": 16384}))
    assert "context parallel was considered for the 16,384-token sequences and is not needed" in sixteen_k
    a10g = {"target": "axolotl", "hardware": "nvidia", "gpu_model": "A10G", "gpus_per_node": 4}
    mixtral = flat(explain(tmp_path, {**a10g, "model": "8x7B", "method": "qlora"}))
    assert "expert-parallel plugin does not support this model's expert layout" in mixtral, mixtral


def test_a_brought_json_says_its_stage_and_whether_it_fits(tmp_path: Path) -> None:
    answers = {"target": "accelerate", "hardware": "nvidia", "gpu_model": "A100", "gpus_per_node": 4}
    for stage in (1, 3):
        config = tmp_path / f"ds{stage}.json"
        config.write_text(
            json.dumps(
                {
                    "zero_optimization": {"stage": stage},
                    "bf16": {"enabled": "auto"},
                    "train_micro_batch_size_per_gpu": "auto",
                }
            ),
            encoding="utf-8",
        )
        path = tmp_path / "answers.json"
        path.write_text(json.dumps({**answers, "model": "13B", "method": "full", "deepspeed_config": str(config)}))
        out = flat(run_cli("--answers", str(path), "--dry-run", "--defaults", "--output-dir", str(tmp_path / "o")))
        assert f"DeepSpeed ZeRO: ZeRO-{stage}" in out, out
        assert "over several GPUs by stage (ZeRO-1 the optimizer state" in out and "(stage 3) weights" not in out
        assert "It fits:" in out or "it does not fit" in out, out


def test_refusals_count_whole_machines_and_offload_levers_name_their_host_ram(tmp_path: Path) -> None:
    big = {"target": "accelerate", "hardware": "nvidia", "gpu_model": "H100", "gpus_per_node": 8, "num_nodes": 4}
    path = tmp_path / "big.json"
    path.write_text(json.dumps({**big, "model": "405B", "method": "full", "cpu_memory_gb": 1024}))
    out = flat(
        run_cli("--answers", str(path), "--dry-run", "--defaults", "--output-dir", str(tmp_path / "o"), codes=(4,))
    )
    machines = re.search(r"about (\d+) machines, (\d+) GPUs in all, sharded without offload", out)
    assert machines is not None and int(machines.group(2)) == 8 * int(machines.group(1)), out
    one = {"target": "accelerate", "hardware": "nvidia", "gpu_model": "RTX 4090", "gpus_per_node": 1}
    path.write_text(json.dumps({**one, "model": "70B", "method": "full", "offload": "none"}))
    for command in (("--dry-run", "--explain"), ("explain",)):
        args = (*command, "--answers", str(path), "--defaults")
        if command[0] == "--dry-run":
            args = (*args, "--output-dir", str(tmp_path / "o"))
        text = flat(run_cli(*args, codes=(0, 4, 9)))
        lever = re.search(r"with CPU offload allowed \(offload: auto\): [^)]*\([^)]*\)\)?[^)]*\)", text)
        assert lever is not None and "GiB of host RAM per machine" in lever.group(0), text
    assert "weights and optimizer state needs" not in out


# Rendered summaries by result: a dozen tests read the same walk's summaries. The result is kept
# beside its text, so its id cannot be reused by another result while the entry lives.
_SUMMARIES: dict[tuple[int, bool], tuple[Result, str]] = {}


def _summary_text(result: Result, detail: bool = False) -> str:
    """The summary at 80 columns: the short one, or with `detail` the one --explain prints (rendered once)."""
    from rich.console import Console

    from wizard.ui.console import print_result

    cached = _SUMMARIES.get((id(result), detail))
    if cached is not None and cached[0] is result:
        return cached[1]
    out = io.StringIO()
    print_result(Console(file=out, width=80), tree(), result, dry_run=True, detail=detail)
    _SUMMARIES[(id(result), detail)] = (result, out.getvalue())
    return out.getvalue()


def test_no_number_is_split_from_its_unit_or_left_alone_on_a_line(explained: list[Explained]) -> None:
    # At 80 columns a figure stays with its unit ("106.3 GiB") and a closing figure with the
    # words before it ("this run has 1."); no no-break space reaches the terminal.
    for item in explained:
        for text in (item.text, _summary_text(item.result), _summary_text(item.result, detail=True)):
            assert "\u00a0" not in text
            lines = [re.sub(r"^[\s│├└─┃╭╰]+", "", line) for line in text.splitlines()]
            for line, following in itertools.pairwise(lines):
                if re.search(r"\d$", line.rstrip(" │")):
                    assert not re.match(r"(?:GiB|GB|MiB|s)\b", following), (line, following)
            for line in lines:
                assert not re.fullmatch(r"\d+(?:\.\d+)?[.;:)]\s*│?", line.strip()), text


def test_a_deepspeed_layout_that_fits_with_less_traffic_is_not_turned_down_for_memory(tmp_path: Path) -> None:
    # A lighter-traffic ZeRO stage that fits is a fine alternative, not "more memory"; the checkpoint
    # format is no reason either (ZeRO-3 saves per-GPU shards without a gather too).
    seen = 0
    for _, result in decided_paths(tmp_path)[::3]:
        for runner in result.recommendation.runner_ups:
            words = " ".join(runner.reason.split())
            assert "more memory" not in words, words
            assert "saves as a sharded state dict" not in words, words
            if (
                runner.backend == "deepspeed"
                and "gathers no weights" in words
                and "across the network" not in words
                and result.recommendation.backend == "fsdp2"
            ):
                # It is offered as the run's other choice, with the way to take it.
                assert "bring a DeepSpeed JSON with that stage (deepspeed_config)" in words, words
                assert (
                    "If the shorter step matters more to you" in words
                    or "fine alternative where the all-gather traffic matters" in words
                ), words
                seen += 1
    assert seen


def test_levers_read_as_with_a_change(tmp_path: Path) -> None:
    from wizard.engine.what_if import LEVERS

    for label, _ in LEVERS:
        assert not label.split()[0].endswith("ing"), label
    answers = {
        "target": "accelerate",
        "hardware": "nvidia",
        "gpu_model": "RTX 4090",
        "gpus_per_node": 1,
        "model": "70B",
        "method": "full",
        "offload": "none",
    }
    path = tmp_path / "answers.json"
    path.write_text(json.dumps(answers))
    text = flat(run_cli("explain", "--answers", str(path), "--defaults", codes=(0, 4, 9)))
    assert "with CPU offload allowed (offload: auto)" in text, text


def test_the_memory_table_says_when_host_ram_was_not_checked(tmp_path: Path) -> None:
    checked = unchecked = 0
    for answers, result in decided_paths(tmp_path)[::5]:
        estimates = result.recommendation.facts.estimates
        if not any(e.host_per_node for e in estimates.values()):
            continue
        words = flat(_summary_text(result))
        # The short table says it in a few words ("Host RAM not checked: ..."), --explain's as it counts.
        said = "host ram not checked: cpu_memory_gb not given" in words.lower()
        assert said == (answers.get("cpu_memory_gb") in (None, 0)), (answers, words)
        checked += not said
        unchecked += said
    assert checked and unchecked


def test_an_accelerate_run_cites_no_axolotl_page(paths: list[tuple[dict[str, Any], Result]]) -> None:
    # A rule shared by both targets cites the Axolotl pages only to Axolotl users: in the written
    # files' headers and in the explanation's trace, over every path.
    axolotl_tags = {tag for tag, target in tree().source_targets.items() if target == "axolotl"}
    assert axolotl_tags
    cited = {"accelerate": 0, "axolotl": 0}
    for answers, result in paths:
        rec = result.recommendation
        target = str(answers["target"])
        traced = {tag for entry in rec.trace for tag in entry.sources}
        headers = " ".join(f.text for f in result.files)
        if target == "accelerate":
            assert not traced & axolotl_tags, (answers, traced)
            assert "docs.axolotl.ai" not in headers, (answers, headers)
        cited[target] += bool(traced & axolotl_tags) or "docs.axolotl.ai" in headers
    assert cited["axolotl"], "Axolotl runs still cite the Axolotl pages"


def test_backends_that_lose_for_one_reason_are_named_together(paths: list[tuple[dict[str, Any], Result]]) -> None:
    from wizard.ui.console import grouped_runner_ups

    merged = 0
    for answers, result in paths:
        rec = result.recommendation
        grouped = grouped_runner_ups(rec)
        reasons = [reason for _, reason in grouped]
        assert len(reasons) == len(set(reasons)), (answers, reasons)
        # Nothing is lost: every backend that lost is named once, with its own reason.
        named = " ".join(title for title, _ in grouped)
        for runner in rec.runner_ups:
            assert named.count(runner.title) == 1 and (runner.title, runner.reason) in [
                (t, r) for title, r in grouped for t in [runner.title] if runner.title in title
            ], (answers, grouped)
        merged += len(grouped) < len(rec.runner_ups)
    assert merged


def test_the_n_d_row_is_named_by_the_run_sizes(paths: list[tuple[dict[str, Any], Result]]) -> None:
    seen = 0
    for answers, result in paths:
        estimate = result.recommendation.facts.estimates.get("fsdp2_nd")
        workload = result.recommendation.facts.workload
        if estimate is None or workload is None:
            continue
        sizes = {"TP": workload.tensor_parallel, "CP": workload.context_parallel, "EP": workload.expert_parallel}
        named = dict((k, int(v)) for k, v in re.findall(r"([TCE]P) (\d+)", estimate.label))
        assert named == {k: v for k, v in sizes.items() if v > 1}, (answers, estimate.label)
        assert estimate.label in _summary_text(result), answers
        seen += 1
    assert seen


def test_a_long_context_run_hears_of_deepspeed_sequence_parallelism(tmp_path: Path) -> None:
    h100 = {"target": "accelerate", "hardware": "nvidia", "gpu_model": "H100", "gpus_per_node": 8}
    rec = decide({**h100, "model": "8B", "method": "lora", "sequence_length": 131072}, tmp_path).recommendation
    assert rec.settings.get("cp_size", 1) > 1
    deepspeed = next(r for r in rec.runner_ups if r.backend == "deepspeed")
    assert "sequence parallelism (Ulysses" in deepspeed.reason, deepspeed.reason
    short = decide({**h100, "model": "8B", "method": "lora"}, tmp_path / "short").recommendation
    assert all("Ulysses" not in r.reason for r in short.runner_ups)


def test_the_host_column_says_why_it_holds_more_than_the_gpu_did(tmp_path: Path) -> None:
    answers = {"target": "accelerate", "hardware": "nvidia", "gpu_model": "A100 80GB", "gpus_per_node": 1}
    result = decide({**answers, "model": "7B", "method": "full", "cpu_memory_gb": 256}, tmp_path)
    rec = result.recommendation
    offloaded = rec.facts.estimates["zero2_offload_optimizer"]
    # 16 bytes per trained parameter with DeepSpeed's 1.5x buffers: more than the GPU's 14 bytes
    # of gradients and optimizer state, and the text says why.
    assert offloaded.host_per_node > rec.facts.estimates["ddp"].model_states
    words = flat(_summary_text(result, detail=True))
    assert (
        "16 bytes per trained parameter: the fp32 master weights, the fp32 gradients and Adam's two fp32 moments,"
        " 4 bytes each" in words
    )
    assert "ZeRO-3 with the optimizer on the CPU fits too" in " ".join(rec.because.split())


def test_the_summary_names_every_default_it_used(paths: list[tuple[dict[str, Any], Result]]) -> None:
    # A default must not pass for the user's answer: the summary lists each one, and only those.
    seen = 0
    for answers, result in paths[::9]:
        if result.recommendation.refused:
            continue
        words = flat(_summary_text(result))
        defaults = [q for q in tree().question_ids if result.session.origins.get(q) == "default"]
        defaults = [q for q in defaults if result.session.answers.get(q) is not None]
        # A default global batch is named too, as the split the files make.
        if "global_batch_size" in defaults:
            # The short summary names the split; --explain also says what a global batch left out means.
            assert "global_batch_size " in words and " accumulation" in words, words
            long = flat(_summary_text(result, detail=True))
            assert ": what the run trains when it is not given" in long, long
        line = re.search(
            r"(?:Defaults used \(not in your answers\): (.*?))?(?:\.? ?Worked out from your other answers: (.*?))?;"
            r" change one with --set KEY=VALUE\.",
            words,
        )
        if not defaults:
            assert line is None or not any(line.groups()), (answers, words)
            continue
        assert line is not None, (answers, words)
        named = [item.split(" ")[0] for item in (line.group(1) or "").split(", ") if item]
        worked = [item.split(" ")[0] for item in (line.group(2) or "").split(", ") if item]
        assert sorted(named + worked) == sorted(defaults) and not set(named + worked) & set(answers), (answers, named)
        # Worked out: a card's memory from its name, offloading by the estimate, a micro-batch fitted to a given
        # global batch, checkpointing by the model's size and the sequence length; never a fixed default.
        assert set(worked) <= {"gpu_memory_gb", "layer_offloading", "micro_batch_size", "gradient_checkpointing"}
        assert ("gradient_checkpointing" in worked) is ("gradient_checkpointing" in defaults), worked
        assert ("gpu_memory_gb" in worked) is ("gpu_memory_gb" in defaults and bool(answers.get("gpu_model")))
        seen += 1
    assert seen


def test_the_table_names_only_the_decided_row_as_chosen(paths: list[tuple[dict[str, Any], Result]]) -> None:
    # The note under the table and the bold row are the decision's layout, and nothing on a refusal.
    seen = refused = 0
    for answers, result in paths[::7]:
        rec = result.recommendation
        if not rec.facts.estimates:
            continue
        words = flat(_summary_text(result))
        # The short table names its layout: "The chosen layout (bold in a terminal): X." (--explain words it apart).
        # A brought JSON that does not fit is the JSON's layout, not one the wizard chose: named so instead.
        from wizard.engine.evaluate import runs_past_fit

        lead = "Your JSON's layout, as written" if runs_past_fit(rec) else "The chosen layout"
        named = re.findall(re.escape(lead) + r" \(bold in a terminal\): (.+?)\. ", words)
        if rec.refused:
            assert not named, (answers, named)
            refused += 1
            continue
        if len(rec.facts.estimates) == 1:
            assert not named, (answers, named)  # one row: nothing to point out
            continue
        label = rec.facts.estimates[str(rec.settings["strategy"])].label
        if rec.backend == "ddp" and not label.startswith("DDP + "):
            label = "DDP"  # the "DDP / 1 GPU" row, named for what was decided ("DDP + layer offload" names itself)
        if "nvme" in (rec.settings.get("offload_param"), rec.settings.get("offload_optimizer")):
            # The row is named for the drive its states go to, in the table, the chart and the note.
            label = label.replace("->CPU", "->NVMe")
            assert f"{label} " in words and "->NVMe" in label, (answers, label)
        assert named == [label], (answers, named, label)
        seen += 1
    assert seen and refused


def test_a_lever_is_a_change_the_wizard_would_take(tmp_path: Path) -> None:
    # On Apple silicon QLoRA is refused as an answer (bitsandbytes needs CUDA): no lever offers it.
    from wizard.engine.facts import Inputs
    from wizard.engine.what_if import what_if

    mac = {"target": "accelerate", "hardware": "mps", "gpu_memory_gb": 16, "model": "8B", "method": "lora"}
    result = decide(mac, tmp_path)
    levers = what_if(tree(), result.session.answers, Inputs(), result.recommendation)
    assert not [lever for lever in levers if "QLoRA" in lever.change], levers
    nvidia = {"target": "accelerate", "hardware": "nvidia", "gpu_model": "RTX 4090", "gpus_per_node": 1}
    result = decide({**nvidia, "model": "13B", "method": "lora"}, tmp_path / "nv")
    levers = what_if(tree(), result.session.answers, Inputs(), result.recommendation)
    assert [lever for lever in levers if "QLoRA" in lever.change], "QLoRA stays a lever where it runs"


def test_every_cpu_offload_says_what_it_moves_over_pcie(paths: list[tuple[dict[str, Any], Result]]) -> None:
    # The cost of offload is time: each decision that offloads to CPU names the traffic per step.
    from wizard.engine.memory import OFFLOAD_STRATEGIES, pcie_bytes_per_step

    seen = 0
    for answers, result in paths:
        rec = result.recommendation
        strategy = rec.settings.get("strategy")
        if rec.refused or strategy not in OFFLOAD_STRATEGIES or "nvme" in str(rec.settings.get("offload_param")):
            continue
        if rec.facts.workload is None or answers.get("deepspeed_config"):
            continue  # a brought JSON is run as written; its sentence names the stage and offload
        moved = to_gib(pcie_bytes_per_step(rec.facts.workload, str(strategy)))
        words = " ".join(rec.because.split())
        step = rec.facts.speeds.get(str(strategy))
        if step is not None and strategy in ("zero3_offload_all", "fsdp2_offload", "hsdp_offload"):
            # With a step time, per optimizer step: into the GPU and out, as the step-time model counts them.
            moved = to_gib(step.host_in)
            assert f"and {to_gib(step.host_bytes - step.host_in)} GiB out" in words, (answers, words)
        assert f"about {moved} GiB" in words and "over PCIe" in words, (answers, words)
        seen += 1
    assert seen


def test_a_lighter_offload_row_is_said_to_cost_traffic(paths: list[tuple[dict[str, Any], Result]]) -> None:
    # When the decided layout keeps everything on the GPU, the table still shows offload rows far
    # below it: the first losing backend that has one says what it would cost (its PCIe traffic per
    # step), the next ones refer to it, and no decision that offloads gets the sentence.
    from wizard.engine.memory import OFFLOAD_STRATEGIES

    seen = 0
    for answers, result in paths[::5]:
        rec = result.recommendation
        if rec.refused or not rec.facts.estimates:
            continue
        reasons = [r.reason for r in rec.runner_ups]
        said = [r for r in reasons if "With offload, " in r]
        chosen = rec.facts.estimates.get(str(rec.settings.get("strategy")))
        if chosen is None or str(rec.settings.get("strategy")) in OFFLOAD_STRATEGIES:
            assert not said, (answers, said)
            continue
        if not said:
            continue
        seen += 1
        kept = ("offload pays only when a run does not fit without it", "offload for runs that do not fit")
        full = [r for r in said if any(phrase in r for phrase in kept)]
        assert len(full) == 1 and said.index(full[0]) == 0, (answers, said)
        moved = r"each GPU would move about [\d.]+ GiB between it and host RAM every (?:step|micro-batch)"
        chosen_name = str(rec.settings.get("strategy"))
        if chosen_name in rec.facts.speeds:
            # With a step-time band the cost is the ratio of the two bands' middles, as printed.
            from wizard.engine.speed import shown_middle

            named = re.search(r"With offload, (.+?) would need", full[0])
            assert named, full[0]
            offload = next(s for s, e in rec.facts.estimates.items() if e.label == named.group(1))
            # Beside step times per optimizer step, the traffic is per optimizer step too, as the
            # step-time model counts it (every micro-batch's transfers of the step).
            # In and out, each rounded as the texts give them, then added.
            timed = rec.facts.speeds[offload]
            per_step = sum_gib(timed.host_in, timed.host_bytes - timed.host_in)
            moved = rf"each GPU would move about {per_step} GiB between it and host RAM per optimizer step"
            ratio = shown_middle(rec.facts.speeds[offload]) / shown_middle(rec.facts.speeds[chosen_name])
            if ratio < 1.1:
                assert re.search(moved + ", at about the same step time", full[0]), full[0]
                # No time lost: what it costs instead. Never "a way out" of a tight run: offload: cpu
                # picks the offload that needs the least host RAM, which need not be this one.
                close = rec.facts.estimates[chosen_name].close_call
                ending = "fits by the estimate but is a close call" if close else "already fits"
                assert f"of host RAM per machine, pinned, for a run that {ending}" in full[0], full[0]
                assert "a way out" not in full[0], full[0]
            elif ratio < 1.25:
                # The share said as a figure, by the same middles the wizard compares.
                longer = f", with a step about {round((ratio - 1) * 100)}% longer by the middles of the bands"
                assert re.search(moved + re.escape(longer), full[0]), full[0]
            else:
                mine, theirs = rec.facts.speeds[offload], rec.facts.speeds[chosen_name]
                least, most = sorted((mine.low / theirs.low, mine.high / theirs.high))
                shown = (
                    f"about {least:.1f}x as long"
                    if f"{least:.1f}" == f"{most:.1f}"
                    else f"{least:.1f}x to {most:.1f}x as long"
                )
                assert re.search(moved + f", and its step would take {re.escape(shown)}", full[0]), full[0]
        else:
            assert re.search(moved + r" \(at least [\d.]+ s", full[0]), (answers, full[0])
        for later in said[1:]:
            assert "trades the same way as" in later and "less GPU memory for time over PCIe" in later, (answers, later)
    assert seen


def test_nvme_is_offered_only_where_its_swap_buffers_fit(paths: list[tuple[dict[str, Any], Result]]) -> None:
    # A refusal for want of host RAM may suggest NVMe offload only when DeepSpeed's pinned swap
    # buffers (which NVMe still needs in host RAM) fit in the usable part of it.
    offered = 0
    for answers, result in paths:
        rec = result.recommendation
        if not rec.refused or "offload to a local NVMe drive instead" not in rec.because:
            continue
        assert rec.facts.get("nvme_buffers_fit_host") is True, answers
        offered += 1
    assert offered


def test_every_question_can_say_why_it_is_not_asked(paths: list[tuple[dict[str, Any], Result]]) -> None:
    # The interview names why a part has no questions and why a change dropped an answer: the
    # reason for every question that does not apply renders for every path (a condition over a
    # list of values, such as method in [lora, qlora], included) and reads as a sentence.
    from wizard.engine.evaluate import is_applicable, make_lookup, text_context, why_not

    said = 0
    for answers, result in paths[::4]:
        facts = result.recommendation.facts
        kept = result.session.answers
        lookup = make_lookup(kept, facts, None)
        context = text_context(tree(), kept, facts)
        for question in tree().questions:
            if question.when is None or is_applicable(question, kept, facts):
                continue
            reason = why_not(tree(), question.when, lookup, context)[1]
            assert not re.search(r"\['|'\]", reason), (answers, question.id, reason)
            said += bool(reason)
    assert said


def test_a_refusal_under_offload_none_names_layer_offloading_as_allowed(tmp_path: Path) -> None:
    """offload: none leaves Axolotl's layer offloading off but does not forbid it: the refusal says so."""
    answers = {
        "target": "axolotl",
        "hardware": "nvidia",
        "gpu_model": "RTX 4090",
        "gpus_per_node": 1,
        "cpu_memory_gb": 64,
        "model": "13B",
        "method": "lora",
        "sequence_length": 4096,
        "offload": "none",
    }
    result = decide(answers, tmp_path / "out")
    rec = result.recommendation
    assert rec.refused
    reasons = " ".join(" ".join(r.reason.split()) for r in rec.runner_ups)
    assert "(set layer_offloading: true)" in reasons, reasons
    assert "layer_offloading: true" in [lever.change for lever in result.levers]
    allowed = decide({**answers, "layer_offloading": True}, tmp_path / "out2").recommendation
    assert not allowed.refused and allowed.settings["strategy"] == "ddp_layer_offload"


def test_every_axolotl_summary_says_the_packing_and_attention_it_wrote(tmp_path: Path) -> None:
    """Sample packing changes what a batch holds: the summary says what axolotl.yaml turned on."""
    from io import StringIO

    from rich.console import Console

    from wizard.ui.console import print_result

    seen = set()
    for answers, result in decided_paths(tmp_path, lambda a: a["target"] == "axolotl"):
        written = parsed(result, "axolotl.yaml")
        out = StringIO()
        # The long form says each lever in words (the short one sets them side by side: test_levers_table).
        print_result(Console(file=out, width=80), tree(), result, dry_run=True, detail=True)
        words = " ".join(out.getvalue().split())
        packing = written.get("sample_packing")
        said = (
            "sample packing yes (short samples share each"
            if packing
            else "sample packing no (one pair per row"
            if written.get("rl") == "dpo"
            else "sample packing no (one sample per row"
        )
        assert said in words, answers
        assert f"attention {written['attn_implementation']} (attn_implementation in axolotl.yaml" in words, answers
        seen.add(bool(packing))
    assert seen == {True, False}


def test_defaults_used_name_a_choice_as_its_menu_does(tmp_path: Path) -> None:
    """ "offload auto" is "Only if needed" in the menu: the summary's defaults line gives both."""
    from io import StringIO

    from rich.console import Console

    from wizard.ui.console import print_result

    checked = 0
    for _, result in decided_paths(tmp_path)[::7]:
        out = StringIO()
        # The long form says each lever in words (the short one sets them side by side: test_levers_table).
        print_result(Console(file=out, width=80), tree(), result, dry_run=True, detail=True)
        words = " ".join(out.getvalue().split())
        for qid, origin in result.session.origins.items():
            question = tree().question(qid)
            if origin != "default" or question is None or question.type != "choice":
                continue
            value = result.session.answers.get(qid)
            title = next(c.title for c in question.choices if c.id == value)
            shown = title[0].lower() + title[1:] if title[:2].istitle() else title
            said = f"{qid} {value} ({shown}" if title.lower().replace(" ", "_") != str(value) else f"{qid} {value}"
            # The menu's title closes its bracket, or goes on after a colon (a card that names no board).
            assert re.search(re.escape(said) + (r"[):]" if "(" in said else r"\b"), words), (said, words[:400])
            checked += 1
    assert checked > 20


def test_key_settings_say_where_gradient_checkpointing_is_switched_on(tmp_path: Path) -> None:
    """An Accelerate run that counts on checkpointing is told who turns it on: FSDP's config key, or the script."""
    from wizard.ui.console import checkpointing_setting

    seen = set()
    for answers, result in decided_paths(tmp_path, lambda a: a["target"] == "accelerate"):
        rows = dict(checkpointing_setting(result))
        said = rows.get("gradient checkpointing")
        if not result.session.answers.get("gradient_checkpointing"):
            assert said is None, answers
            continue
        config = parsed(result, "accelerate_config.yaml")
        by_fsdp = (config.get("fsdp_config") or {}).get("fsdp_activation_checkpointing") is True
        if by_fsdp:
            assert said is not None and said.startswith("on, by FSDP (fsdp_activation_checkpointing"), answers
            seen.add("fsdp")
        elif result.recommendation.traits.checkpointing == "script":
            assert said is not None and said.startswith("on in your training script"), answers
            snippet = any(f.name == "train_snippet.py" for f in result.files)
            assert ("train_snippet.py shows where" in said) is snippet
            seen.add("script")
    assert seen == {"fsdp", "script"}, seen


def test_the_zero2_json_the_why_offers_runs_as_zero2(tmp_path: Path) -> None:
    """Run what the text writes: the JSON the FSDP2 decision offers for ZeRO-2, given back as
    deepspeed_config, is taken as it is, and the run becomes ZeRO-2 with its precision resolved."""
    answers = {
        "target": "accelerate",
        "hardware": "nvidia",
        "gpu_model": "A100 80GB",
        "gpus_per_node": 4,
        "model": "8B",
        "method": "full",
    }
    because = " ".join(decide(answers, tmp_path / "fsdp2").recommendation.because.split())
    found = re.search(r"save (\{.*?\}\}) as deepspeed.json and give it as deepspeed_config", because)
    assert found, because
    path = tmp_path / "zero2.json"
    path.write_text(found.group(1), encoding="utf-8")
    result = decide({**answers, "deepspeed_config": str(path)}, tmp_path / "zero2", write=True)
    rec = result.recommendation
    assert (rec.backend, rec.settings["strategy"], rec.settings["zero_stage"]) == ("deepspeed", "zero2", 2)
    config = yaml.safe_load((tmp_path / "zero2" / "accelerate_config.yaml").read_text(encoding="utf-8"))
    assert config["deepspeed_config"]["deepspeed_config_file"] == "ds_config.json"
    # The JSON names bf16 itself, so even a plain `accelerate launch --config_file` without
    # launch.sh's --mixed_precision bf16 trains in bf16: the wizard's own check finds nothing.
    assert '"bf16": {"enabled": true}' in found.group(1)
    assert rec.settings["mixed_precision"] == "bf16"
    assert "--mixed_precision bf16" in (tmp_path / "zero2" / "launch.sh").read_text(encoding="utf-8")
    checked = run_cli("check", str(tmp_path / "zero2" / "accelerate_config.yaml"))
    assert "0 error(s), 0 warning(s)" in checked, checked


def test_the_deepspeed_offload_json_an_axolotl_offload_offers_runs_as_that_offload(tmp_path: Path) -> None:
    """Invariant, over every Axolotl FSDP2-offload decision of the walk and the two-machine 70B run:
    where the Why offers DeepSpeed's offload as a JSON to save (its step shorter by the step-time
    table), that JSON given back as deepspeed_config is decided as DeepSpeed with the stage and
    offload the text named, and DeepSpeed's own config parser takes the written copy."""
    from wizard.engine.memory import STRATEGY_TITLES

    pattern = re.compile(
        r"Why FSDP2's offload over DeepSpeed's: (.+?) fits too, and its step is shorter.*?"
        r"To run DeepSpeed's offload instead: save (\{.*?\}\}) as deepspeed.json"
    )
    cases = [
        (a, r)
        for a, r in decided_paths(tmp_path, lambda a: a.get("target") == "axolotl")
        if r.recommendation.settings.get("strategy") == "fsdp2_offload"
    ]
    cases.append((dict(TWO_H100_MACHINES_70B), decide(dict(TWO_H100_MACHINES_70B), tmp_path / "two_h100")))
    titles = {title: layout for layout, title in STRATEGY_TITLES.items()}
    tried = 0
    for n, (answers, result) in enumerate(cases):
        found = pattern.search(" ".join(result.recommendation.because.split()))
        if found is None:
            continue
        layout = titles[found.group(1)]
        path = tmp_path / f"ds{n}.json"
        path.write_text(found.group(2), encoding="utf-8")
        again = decide({**answers, "deepspeed_config": str(path)}, tmp_path / f"again{n}", write=True)
        rec = again.recommendation
        assert rec.backend == "deepspeed" and rec.settings["strategy"] == layout, (answers, rec.settings)
        assert rec.settings["offload_optimizer"] == "cpu"
        assert rec.settings.get("offload_param") == ("cpu" if layout == "zero3_offload_all" else "none"), rec.settings
        axolotl = yaml.safe_load((tmp_path / f"again{n}" / "axolotl.yaml").read_text(encoding="utf-8"))
        written = json.loads((tmp_path / f"again{n}" / axolotl["deepspeed"]).read_text(encoding="utf-8"))
        # Through Transformers' Trainer, as Axolotl runs it: no mismatch with bf16, and the engine in bf16.
        resolved = trainer_deepspeed_precision(
            written, bf16=bool(axolotl.get("bf16")), fp16=False, world_size=int(rec.facts.get("world_size", 1))
        )
        assert resolved == {"mismatches": [], "precision": "bf16"}, resolved
        tried += 1
    assert tried, "no Axolotl offload decision offered DeepSpeed's"


def test_the_json_a_deepspeed_runner_up_offers_runs_as_that_stage(tmp_path: Path) -> None:
    """Invariant, over every decision of the walk: where "why not DeepSpeed" offers a JSON to run its
    stage all the same (a runner-up that fits without offload), that JSON given back as deepspeed_config
    is decided as DeepSpeed at that stage with nothing offloaded, and the precision the training process
    resolves from the written copy is the run's own (Transformers' Trainer for Axolotl, Accelerate's
    DeepSpeed plugin for Accelerate)."""
    pattern = re.compile(
        r"Not advised, for the reasons above; to run ZeRO-(\d) anyway: save (\{.*?\}\}) as deepspeed.json"
    )
    tried: set[tuple[str, int]] = set()
    for n, (answers, result) in enumerate(decided_paths(tmp_path)):
        if answers.get("deepspeed_config"):
            continue
        reasons = [r.reason for r in result.recommendation.runner_ups if r.backend == "deepspeed"]
        found = pattern.search(" ".join(" ".join(reasons).split()))
        if found is None:
            continue
        stage, text = int(found.group(1)), found.group(2)
        key = (answers["target"], stage)
        if key in tried:
            continue
        path = tmp_path / f"stage{n}.json"
        path.write_text(text, encoding="utf-8")
        again = decide({**answers, "deepspeed_config": str(path)}, tmp_path / f"again{n}", write=True)
        rec = again.recommendation
        assert rec.backend == "deepspeed" and rec.settings["zero_stage"] == stage, (answers, rec.settings)
        assert rec.settings.get("offload_optimizer", "none") == "none", rec.settings
        written_dir = tmp_path / f"again{n}"
        if answers["target"] == "axolotl":
            axolotl = yaml.safe_load((written_dir / "axolotl.yaml").read_text(encoding="utf-8"))
            written = json.loads((written_dir / axolotl["deepspeed"]).read_text(encoding="utf-8"))
            bf16 = bool(axolotl.get("bf16"))
            resolved = trainer_deepspeed_precision(
                written, bf16=bf16, fp16=not bf16, world_size=int(rec.facts.get("world_size", 1))
            )
            assert resolved == {"mismatches": [], "precision": "bf16" if bf16 else "fp16"}, (answers, resolved)
        else:
            assert rec.settings["mixed_precision"] in {"bf16", "fp16"}, rec.settings
            assert f'"{rec.settings["mixed_precision"]}": {{"enabled": true}}' in text
        tried.add(key)
    assert tried >= {("accelerate", 2), ("accelerate", 3), ("axolotl", 2), ("axolotl", 3)}, tried


def _close_call_json(because: str) -> str | None:
    """The JSON a refusal offers to try a close call with, if it offers one."""
    found = re.search(r"To try it anyway, save (\{.*?\}\}) as deepspeed.json", " ".join(because.split()))
    return found.group(1) if found else None


def test_a_close_call_refusal_offers_a_json_that_runs_as_that_offload(tmp_path: Path) -> None:
    """Invariant: a refusal that calls its host RAM shortfall a close call (the offload fits the usable RAM
    without DeepSpeed's 1.5x allowance) offers a way to try it, and that JSON given back as deepspeed_config
    is decided as that offload, with the same host RAM figure and the close call said in the decision,
    never "it fits" alone. Checked over every refusal of the walk and the 13B-on-one-A100 case."""
    persona = dict(ONE_A100_13B_FULL)
    cases = [(a, r) for a, r in decided_paths(tmp_path, refusals=True) if r.recommendation.refused]
    cases.append((persona, decide(persona, tmp_path / "persona")))
    tried = 0
    for n, (answers, result) in enumerate(cases):
        because = result.recommendation.because
        offered = _close_call_json(because)
        assert ("allowance, not a certain failure" in because) == (offered is not None) or answers.get(
            "target"
        ) != "accelerate", (answers, because)
        if offered is None:
            continue
        path = tmp_path / f"close{n}.json"
        path.write_text(offered, encoding="utf-8")
        tried_answers = {k: v for k, v in answers.items() if k != "offload"}
        rec = decide({**tried_answers, "deepspeed_config": str(path)}, tmp_path / f"try{n}").recommendation
        assert not rec.refused, (answers, rec.because)
        assert (rec.settings["strategy"], rec.settings["offload_optimizer"]) == ("zero2_offload_optimizer", "cpu")
        said = " ".join(rec.because.split())
        assert (
            "It fits the GPU" in said
            and "Short only by DeepSpeed's allowance" in said
            and "estimate it fits:" not in said
        ), said
        host = re.search(r"host RAM would have to hold about ([\d.]+) GiB", " ".join(because.split()))
        assert host and f"about {host.group(1)} GiB per machine" in said, said
        tried += 1
    assert tried >= 1


def test_the_offload_traffic_sentence_counts_the_accumulation(tmp_path: Path) -> None:
    """Invariant over the walk and a 70B run at a global batch of 128: where a decision says what an optimizer
    offload moves over PCIe, with several micro-batches per optimizer step the figure is the step-time model's
    per-step traffic (gradients out every micro-batch, weights back once), never the one-micro-batch figure."""
    from wizard.engine.memory import pcie_bytes_per_step, to_gib

    big = {
        "target": "accelerate",
        "hardware": "nvidia",
        "gpu_model": "H100",
        "gpus_per_node": 8,
        "num_nodes": 2,
        "main_process_ip": "10.0.0.1",
        "model": "70B",
        "method": "full",
        "sequence_length": 4096,
        "cpu_memory_gb": 1024,
        "global_batch_size": 128,
    }
    cases = [*decided_paths(tmp_path), (big, decide(big, tmp_path / "big"))]
    seen = {"many": 0, "one": 0}
    for answers, result in cases:
        rec = result.recommendation
        said = " ".join(rec.because.split())
        strategy = str(rec.settings.get("strategy"))
        step = rec.facts.speeds.get(strategy)
        many = re.search(r"about ([\d.]+) GiB per GPU per optimizer step", said)
        one = re.search(r"back over PCIe, about ([\d.]+) GiB per GPU, half each way", said)
        if many:
            assert rec.facts.accumulation > 1 and step is not None, answers
            assert float(many.group(1)) == to_gib(step.host_bytes), (answers, said)
            seen["many"] += 1
        if one:
            assert rec.facts.accumulation == 1 and rec.facts.workload is not None, answers
            assert float(one.group(1)) == to_gib(pcie_bytes_per_step(rec.facts.workload, strategy)), answers
            seen["one"] += 1
    assert seen["many"] and seen["one"], seen


def test_a_backend_passed_over_for_a_refusal_points_at_the_refusals_reason(tmp_path: Path) -> None:
    """Over every path: under a refusal, no "why not" names a condition the refusal's rule met.

    Such a condition holds ("target is accelerate"): it says nothing of what is wrong. The
    refusal's own reason, printed above the list, is what stops every backend.
    """
    pointed = 0
    for answers, result in decided_paths(tmp_path, refusals=True):
        rec = result.recommendation
        for runner in rec.runner_ups:
            if rec.refused:
                assert "an earlier rule applies first" not in runner.reason, (answers, runner.reason)
            pointed += "refused for the reason above" in runner.reason
            assert rec.refused or "refused for the reason above" not in runner.reason, (answers, runner.reason)
    assert pointed, "the walk has refusals whose backends would fit"


def test_layer_offloading_in_axolotl_yaml_is_a_key_settings_row(tmp_path: Path) -> None:
    """Wherever axolotl.yaml sets layer_offloading: true, the summary's Key settings says layer offloading is on.

    Over every Axolotl path of the walk, and the case where it is asked for but host RAM is short:
    the estimate then plans the frozen layers on the GPU, and the file leaves the line out, so the
    file, the settings and the estimate say the same.
    """
    lee = {
        "target": "axolotl", "hardware": "nvidia", "gpu_model": "RTX 4090", "gpu_memory_gb": 24,
        "gpus_per_node": 2, "num_nodes": 1, "cpu_memory_gb": 32, "model": "mistral-7b", "method": "lora",
        "sequence_length": 4096, "global_batch_size": 16, "layer_offloading": True,
    }  # fmt: skip
    short = decide(lee, tmp_path / "short")
    assert short.recommendation.settings["strategy"] == "ddp"  # not the layer-offload row: host RAM is short
    # Left out of the file, as the estimate plans it; the settings say why the answer was not taken.
    assert not re.search(r"^layer_offloading: true$", file_text(short, "axolotl.yaml"), re.MULTILINE)
    short_text = " ".join(_summary_text(short).split())
    assert "layer offloading no: asked for, but host RAM is short" in short_text, short_text
    assert "so axolotl.yaml does not set it" in short_text
    walk = decided_paths(tmp_path)
    paths = [result for _, result in walk if any(f.name == "axolotl.yaml" for f in result.files)]
    checked = 0
    for result in [short, *paths]:
        written = re.search(r"^layer_offloading: true$", file_text(result, "axolotl.yaml"), re.MULTILINE)
        settings = _summary_text(result).split("Key settings", 1)[-1].split("Defaults used", 1)[0]
        # One row says it: the frozen layers as what leaves the GPU, with the key that does it.
        row = re.search(r"^  weight offload +the frozen layers, in CPU RAM \(Axolotl's", settings, re.MULTILINE)
        assert bool(written) == bool(row), (result.recommendation.settings.get("strategy"), settings)
        checked += bool(written)
    assert checked >= 2, checked


def file_text(result: Result, name: str) -> str:
    """One rendered file's text."""
    return next(f.text for f in result.files if f.name == name)


def test_a_runner_ups_traffic_is_a_cost_only_where_it_is_larger(tmp_path: Path) -> None:
    """Beside layer offloading, an offload's PCIe traffic is said as its cost only where it moves more.

    Layer offloading sends each frozen layer in twice a micro-batch, which can be more than a whole
    offload moves: then the runner-up's line says it moves less and names what it does cost. Over
    every path of the walk with such a runner-up, and an A10G LoRA run (where the offload moves less).
    """
    a10g_lora = {
        "target": "axolotl", "hardware": "nvidia", "gpu_model": "A10G", "gpu_memory_gb": 22.49, "gpus_per_node": 1,
        "num_nodes": 1, "cpu_memory_gb": 32, "model": "llama-3.1-8b", "method": "lora", "sequence_length": 2048,
        "global_batch_size": 16,
    }  # fmt: skip
    unit = r"(?:every micro-batch|every step|per GPU per optimizer step)"
    cost = re.compile(rf"Over PCIe it moves about ([\d.]+) GiB {unit}, nearly all of it into the GPU, against"
                      r" ([\d.]+) GiB")  # fmt: skip
    less = re.compile(rf"It moves less over PCIe[^,]*, about ([\d.]+) GiB {unit} against ([\d.]+) GiB")
    results = [decide(a10g_lora, tmp_path / "a10g"), *(result for _, result in decided_paths(tmp_path))]
    said = {"cost": 0, "less": 0}
    for result in results:
        for runner in result.recommendation.runner_ups:
            text = " ".join(runner.reason.split())
            for pattern, key in ((cost, "cost"), (less, "less")):
                for moved, against in pattern.findall(text):
                    assert (float(moved) >= float(against)) == (key == "cost"), text
                    said[key] += 1
            assert not (cost.search(text) and less.search(text)), text
            if less.search(text):
                # The adapters' optimizer step on the CPU is small: the cost named is the backend, not it.
                assert "so traffic is not where it loses. It loses on what it adds: a sharding backend" in text, text
    assert said["less"] >= 2, said


def test_beside_ddp_with_layer_offload_plain_ddp_is_named_as_such(tmp_path: Path) -> None:
    """Where DDP + layer offload won, a runner-up's "DDP fits too" says which DDP: the one without layer offloading."""
    lee = {
        "target": "axolotl", "hardware": "nvidia", "gpu_model": "RTX 4090", "gpu_memory_gb": 24, "gpus_per_node": 2,
        "num_nodes": 1, "cpu_memory_gb": 64, "model": "mistral-7b", "method": "lora", "sequence_length": 4096,
        "global_batch_size": 16, "layer_offloading": True,
    }  # fmt: skip
    results = [decide(lee, tmp_path / "lee"), *(result for _, result in decided_paths(tmp_path))]
    named = 0
    for result in results:
        rec = result.recommendation
        if rec.settings.get("strategy") != "ddp_layer_offload":
            continue
        for runner in rec.runner_ups:
            text = " ".join(runner.reason.split())
            assert not re.search(r"(?<![\w-])DDP fits too", text), text
            named += "DDP without layer offloading fits too" in text
    assert named >= 1, named


def test_fsdp2_fitting_only_by_offloading_is_weighed_by_its_fastest_offload(tmp_path: Path) -> None:
    """Invariant, over every decided path: where a losing backend's layout that fits offloads, the why-not
    names the one of its fitting offload layouts with the shortest step (FSDP2's over all the GPUs, not
    HSDP's, which runs the optimizer over a full copy on each machine's CPU), the one the Why weighs too."""
    two_h100 = {**TWO_H100_MACHINES_70B, "target": "accelerate"}  # 2 x 8 H100, a 70B full fine-tune
    runs = [*decided_paths(tmp_path), (two_h100, decide(two_h100, tmp_path / "two_h100"))]
    weighed = 0
    for answers, result in runs:
        rec = result.recommendation
        for runner in rec.runner_ups:
            # DeepSpeed's why-not weighs the layout like the chosen one where there is one (evaluate._tie_layout).
            if runner.backend != "fsdp2" or runner.strategy not in OFFLOAD_STRATEGIES:
                continue
            backend = tree().backends[runner.backend]
            fitting = [
                name
                for name in backend.layouts
                if name in OFFLOAD_STRATEGIES
                and name in rec.facts.speeds
                and (est := rec.facts.estimates.get(name)) is not None
                and est.fits
                and est.host_fits is not False
            ]
            if len(fitting) < 2 or runner.strategy not in fitting:
                continue
            fastest = min(rec.facts.speeds[name].middle for name in fitting)
            assert rec.facts.speeds[runner.strategy].middle == fastest, (answers, runner.strategy, fitting)
            weighed += 1
    assert weighed, "no path had two offloads of one losing backend to choose from"
