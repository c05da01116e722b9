"""The explanations as a newcomer reads them: `explain`, the summary and "why not X?".

Each property is checked on the real command's output at 80 columns, over a spread of the answer
paths that tests/paths.py walks (every hardware, target, method and offload choice).
"""

from __future__ import annotations

import contextlib
import io
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from helpers import decide, decided_paths, tree
from wizard.app import Result
from wizard.cli import main
from wizard.engine.conditions import iter_compares
from wizard.engine.memory import to_gib

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
        return self.text.split("Why not the other backends")[0].split("Memory per GPU")[0]


def run_cli(*args: str, codes: tuple[int, ...] = (0,)) -> str:
    """What the command prints on a terminal 80 columns wide (run in-process)."""
    buffer = io.StringIO()
    with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stdout(buffer):
        patch.setenv("COLUMNS", "80")
        code = main(list(args))
    assert code in codes, buffer.getvalue()
    return buffer.getvalue()


def explain(folder: Path, answers: dict[str, Any]) -> str:
    path = folder / "answers.json"
    path.write_text(json.dumps(answers))
    return run_cli("explain", "--answers", str(path), "--defaults")


def squeezed(text: str) -> str:
    """The text without spaces, line breaks and tree lines (rich wraps long words anywhere)."""
    return re.sub(r"[\s│├└─]+", "", text)


@pytest.fixture(scope="module")
def paths(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[dict[str, Any], Result]]:
    return decided_paths(tmp_path_factory.mktemp("explanations"), refusals=True)


@pytest.fixture(scope="module")
def sample(paths: list[tuple[dict[str, Any], Result]]) -> list[tuple[dict[str, Any], Result]]:
    """A spread of the paths: every sixth GPU path and every third of the others (CPU time is short)."""
    by_hardware: dict[str, list[tuple[dict[str, Any], Result]]] = {}
    for path in paths:
        by_hardware.setdefault(str(path[0].get("hardware")), []).append(path)
    return [p for hw, group in by_hardware.items() for p in group[:: 6 if hw in GPU_HARDWARE else 3]]


@pytest.fixture(scope="module")
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
        shown = trace.count("✗ does not hold") + trace.count("✓ holds")
        counted = re.findall(r"(\d+) rules for other hardware were skipped", trace)
        assert len(counted) <= 1, trace
        skipped = int(counted[0]) if counted else 0
        assert shown + skipped == decided_at + 1, (item.answers, trace)
        for rule in rules[: decided_at + 1]:
            needs = [
                leaf
                for leaf in iter_compares(rule.when)
                if leaf.kind == "answer" and leaf.name == "hardware" and leaf.op in ("eq", "in")
            ]
            wanted = {v for leaf in needs for v in (leaf.value if leaf.op == "in" else (leaf.value,))}
            if needs and hardware not in wanted:
                assert f" {rule.id} —" not in trace, (hardware, rule.id, trace)
        if hardware in GPU_HARDWARE:
            assert skipped >= 13, trace
            named = [word for word in OTHER_HARDWARE_WORDS if re.search(rf"\b{word}\b", trace)]
            assert not named, (item.answers, named, trace)


def test_a_rule_that_failed_gives_one_plain_reason(explained: list[Explained]) -> None:
    for item in explained:
        text = item.text
        assert "(it is " not in text, text
        assert "not asked for these answers" not in text, text
        before_decision = item.trace.split("✓ holds")[0]
        # A failed rule has exactly one line under it: its first unmet condition.
        assert "\n│   ├── " not in before_decision, before_decision
        for reason in re.findall(r"✗ does not hold [^\n]*\n(?:│   [^\n]*\n)*?│   └── ([^\n]*)", before_decision):
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
            if runner.reason.startswith("It would fit") or runner.reason.startswith("On one GPU, DDP"):
                assert estimate is not None and estimate.fits, runner
                assert f"{to_gib(estimate.total)} GiB" in runner.reason, runner.reason
                if chosen is not None and rec.backend is not None:
                    assert f"{to_gib(chosen.total)} GiB" in runner.reason, (runner.reason, chosen)
            # "why not X?" in the summary and the trace say the same.
            assert squeezed(runner.reason) in squeezed(item.text), runner.reason


def test_codes_are_explained_by_a_legend_of_public_sources(explained: list[Explained]) -> None:
    sources = tree().sources
    for item in explained:
        text = item.text
        body, _, legend = text.partition("Sources (the tags in brackets above)")
        used = set(SOURCE_TAG.findall(body))
        listed = set(re.findall(r"(?:├──|└──) ([AX]-[A-Z]+|WH): ", legend))
        assert used == listed, (used, listed)
        for tag in used - {"WH"}:
            address = sources[tag].split()[-1]
            assert address.startswith(("https://huggingface.co/", "https://docs.axolotl.ai/")), address
            assert squeezed(f"{tag}: {sources[tag][: -len(address)]}— {address}") in squeezed(legend), (tag, legend)
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
        out = run_cli("--answers", str(path), "--dry-run", "--output-dir", str(tmp_path / "out"), codes=(0, 4))
        summary = out.split("Would write")[0]
        assert not SOURCE_TAG.findall(summary) and not GUIDANCE_ID.findall(summary), summary
        assert "Rule " not in summary and not PRIVATE.search(summary), summary
        if not result.recommendation.refused:
            assert "Guideline:" in summary, summary
        if result.recommendation.runner_ups:
            assert "Why not the others" in summary and "prefers this order" not in summary


def test_the_a100_example_reads_plainly(tmp_path: Path) -> None:
    answers = {"target": "accelerate", "hardware": "nvidia", "gpu_model": "A100", "gpus_per_node": 4}
    text = squeezed(explain(tmp_path, {**answers, "model": "7B", "method": "full"}))
    for phrase in (
        "13 rules for other hardware were skipped: they cannot apply to NVIDIA GPUs",
        "needs training code written for Megatron-LM; you said yours is not",
        "needs 2 or more machines; you have 1",
        "DeepSpeed ZeRO: It would fit: ZeRO-3 needs about 28.6 GiB per GPU against 28.6 GiB with FSDP2",
    ):
        assert squeezed(phrase) in text, phrase
    one_gpu = squeezed(explain(tmp_path, {**answers, "gpus_per_node": 1, "model": "7B", "method": "full"}))
    assert squeezed("Megatron-LM (tensor and pipeline parallel): Needs 2 or more GPUs; you have 1.") in one_gpu


def test_figures_are_named_for_what_they_are(explained: list[Explained], tmp_path: Path) -> None:
    long_context = {
        "target": "accelerate",
        "hardware": "nvidia",
        "gpu_model": "H100",
        "gpus_per_node": 8,
        "model": "8B",
        "method": "lora",
        "sequence_length": 131072,
    }
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
