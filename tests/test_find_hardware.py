"""`estimate --find-hardware`: the fewest GPUs of each card, by the tree's own decision, end to end."""

from __future__ import annotations

import json
from typing import Any

import pytest

from helpers import tree
from wizard.cli import main
from wizard.engine.catalog import gpu_catalog, lookup_gpu
from wizard.engine.evaluate import decided_outcome
from wizard.engine.facts import derive_facts
from wizard.engine.hardware_search import HardwareSearch, gpu_name, searched_gpus, sizes
from wizard.session import Sources, collect


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def search_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    code, out, err = cli(capsys, "estimate", *args, "--find-hardware", "--output", "json")
    assert code == 0, err
    data: dict[str, Any] = json.loads(out)
    return data


def tree_at(answers: dict[str, Any], row: dict[str, Any], gpus: int) -> tuple[dict[str, Any], bool]:
    """The decision and whether its layout fits, for `gpus` of the row's card, through a real session."""
    size = next(s for s in sizes() if s.gpus == gpus)
    card = lookup_gpu(row["gpu_model"])
    assert card is not None
    values = {
        **answers,
        "hardware": card.vendor,
        "gpu_model": row["gpu_model"],
        "gpus_per_node": size.per_machine,
        "num_nodes": size.machines,
        "offload": "auto" if row["offload"] else "none",
        "cpu_memory_gb": row["cpu_memory_gb"] if row["cpu_memory_gb"] else 128 * size.per_machine,
    }
    session = collect(tree(), Sources(set_values=values, use_defaults=True))
    decision = decided_outcome(tree(), session.answers, session.inputs)
    facts = derive_facts(session.answers, session.inputs)
    chosen = facts.estimates.get(str(decision["strategy"]))
    runs = not decision["refused"] and chosen is not None and chosen.fits and chosen.host_fits is not False
    return dict(decision), runs


JOBS = [
    ({"model": "70B", "method": "full"}, ()),
    ({"model": "8B", "method": "qlora"}, ()),
    ({"model": "8B", "method": "lora", "sequence_length": 32768}, ("--gpu", "A10G", "--gpu", "H100", "--gpu", "T4")),
    ({"model": "13B", "method": "lora", "target": "axolotl"}, ("--gpu", "RTX 4090", "--gpu", "A100 40GB")),
]


def _args(answers: dict[str, Any]) -> list[str]:
    args = ["--model", answers["model"], "--method", answers["method"]]
    args += [f"--set={key}={value}" for key, value in answers.items() if key not in ("model", "method")]
    return args


@pytest.mark.parametrize(("answers", "cards"), JOBS)
def test_every_row_is_the_trees_own_answer_and_the_fewest(
    capsys: pytest.CaptureFixture[str], answers: dict[str, Any], cards: tuple[str, ...]
) -> None:
    """For each row that fits: the tree, asked through a session at that size, picks the printed backend
    and layout, which fits; at the next smaller size searched it does not run. Rows that do not fit:
    the tree does not run at the cap."""
    data = search_json(capsys, *_args(answers), *cards)
    ladder = [s.gpus for s in sizes()]
    assert data["hardware"]
    for row in data["hardware"]:
        if not row["fits"]:
            assert row["gpus"] is None and row["within_machines"] == 64
            _, runs = tree_at(answers, row, ladder[-1])
            assert not runs, row
            continue
        decision, runs = tree_at(answers, row, row["gpus"])
        assert runs, row
        assert decision["backend"] == row["backend"] and decision["strategy"] == row["strategy"], (decision, row)
        assert row["gpus"] == row["machines"] * row["gpus_per_machine"] and row["gpus_per_machine"] <= 8
        smaller = ladder.index(row["gpus"])
        if smaller:
            _, below = tree_at(answers, row, ladder[smaller - 1])
            assert not below, (row, ladder[smaller - 1])


def test_seventy_b_full_on_sixteen_a10g(capsys: pytest.CaptureFixture[str]) -> None:
    """The question users ask: no without offload, what dominates, and what it needs."""
    args = ("estimate", "--model", "70B", "--method", "full", "--find-hardware", "--gpu", "A10G", "--gpus", "16")
    code, text, _ = cli(capsys, *args)
    assert code == 0
    flat = " ".join(text.split())
    assert "70B full on 16 x A10G (2 machines of 8): no without offload" in flat
    assert "model states of one copy alone need" in flat and "16 x 22.49 GiB = 360 GiB in all" in flat
    data = search_json(capsys, "--model", "70B", "--method", "full", "--gpu", "A10G", "--gpus", "16")
    question = data["hardware_question"]
    assert question["without_offload"]["fits"] is False and question["dominant"] == "model_states"
    plain = next(r for r in data["hardware"] if not r["offload"])
    assert plain["fits"] and plain["gpus"] > 16
    assert f"Needs, without offload: {plain['gpus']} x A10G ({plain['machines']} machines of 8)" in flat
    # The states that dominate are the estimate's own: one copy's, more than all 16 GPUs' usable memory.
    ddp = next(s for s in data["strategies"] if s["id"] == "ddp")
    assert ddp["model_states_bytes"] > 16 * 22.49 * 2**30 * 0.8
    if question["with_offload"]["fits"]:
        assert "With CPU offload: yes" in flat


def test_json_contract(capsys: pytest.CaptureFixture[str]) -> None:
    data = search_json(capsys, "--model", "7B", "--method", "lora", "--gpu", "A10G", "--price", "A10G=1.5")
    assert data["schema_version"] == 2 and data["formula"] == "wizard"
    assert "sequence 2,048 tokens" in data["hardware_assumed"]
    for row in data["hardware"]:
        assert {"gpu_model", "gpu_memory_gb", "gpus", "machines", "offload", "backend", "fits"} <= set(row)
        assert row["cost"]["usd_per_hour"] == pytest.approx(1.5 * row["gpus"])
        low, high = row["cost"]["usd_per_step"]
        step = row["step_time"]
        assert low == pytest.approx(1.5 * row["gpus"] * step["low_seconds"] / 3600) and low <= high
    code, out, _ = cli(capsys, "estimate", "--model", "7B", "--gpu-model", "A10G", "--output", "json")
    plain = json.loads(out)
    assert code == 0 and plain["schema_version"] == 2 and plain["hardware"] is None


def test_rows_sorted_fewest_gpus_then_memory(capsys: pytest.CaptureFixture[str]) -> None:
    data = search_json(capsys, "--model", "70B", "--method", "full")
    keys = [(r["gpus"] or 10**9, r["gpu_memory_gb"]) for r in data["hardware"]]
    assert keys == sorted(keys)
    fitting = [r for r in data["hardware"] if r["fits"]]
    assert fitting and all(r["backend"] for r in fitting)


def test_text_at_80_columns_cuts_nothing(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    args = ("--model", "70B", "--method", "full", "--price", "A10G=1.01", "--price", "H100=3.5")
    code, text, _ = cli(capsys, "estimate", *args, "--find-hardware")
    assert code == 0
    assert all(len(line) <= 80 for line in text.splitlines()), text
    assert "…" not in text
    data = search_json(capsys, *args)
    for row in data["hardware"]:
        if row["fits"] and row["gpus"] > 8:
            assert f"{row['gpus']} ({row['machines']}x8)" in text
    assert "$/hour" in text
    code, text, _ = cli(capsys, "estimate", "--model", "70B", "--method", "full", "--find-hardware")
    assert "$/hour" not in text


def test_search_asks_the_tree_rarely_and_every_card_round_trips() -> None:
    """About two decisions per card and offload mode (the size found and the one below), not one per size."""
    values = {"model": "70B", "method": "full", "gpu_model": "H100"}
    session = collect(tree(), Sources(set_values=values, use_defaults=True))
    given = {k: session.answers[k] for k in ("model", "method")}
    search = HardwareSearch(tree(), given, session.inputs)
    cards = searched_gpus(tree(), "full")
    for card in cards:
        assert lookup_gpu(gpu_name(card)) is card
        search.search(card, False)
        search.search(card, True)
    assert search.evaluations <= 3 * 2 * len({(c.vendor, c.memory_mib, c.bf16) for c in cards})
    assert {c.vendor for c in cards} == {"nvidia", "amd"}
    assert len(cards) == len([c for c in gpu_catalog() if c.vendor in ("nvidia", "amd")])


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (("--gpu", "A11"), ("--gpu", "'A11'", "allowed")),
        (("--price", "A10G=abc"), ("--price", "'A10G=abc'", "US dollars")),
        (("--price", "A10G=-1"), ("--price", "above 0")),
        (("--price", "A10G"), ("--price", "NAME=USD")),
        (("--price", "Z9=1"), ("--price", "'Z9'", "allowed")),
        (("--gpus", "16"), ("--gpus", "exactly one --gpu")),
        (("--gpu", "A10G", "--gpus", "12"), ("--gpus 12", "multiple of 8")),
        (("--gpu", "A10G", "--gpus", "x"), ("--gpus", "whole number")),
        (("--gpu-model", "A10G"), ("--gpu-model", "--find-hardware")),
        (("--set", "offload=cpu"), ("offload", "--find-hardware")),
        (("--gpu", "Gaudi 2"), ("Gaudi", "not searched")),
    ],
)
def test_bad_input_gets_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], args: tuple[str, ...], fragments: tuple[str, ...]
) -> None:
    code, out, err = cli(capsys, "estimate", "--model", "7B", "--find-hardware", *args)
    assert code == 2 and out == "" and "Traceback" not in err
    assert err.count("\n") == 1 and err.startswith("error: "), err
    for fragment in fragments:
        assert fragment in err, (fragment, err)


def test_search_options_need_find_hardware(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = cli(capsys, "estimate", "--model", "7B", "--gpu-model", "A10G", "--gpu", "A10G")
    assert code == 2 and "--gpu" in err and "--find-hardware" in err and err.count("\n") == 1


def test_an_answers_file_for_one_machine_serves_the_search(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    """The wizard's own answers.yaml names its GPUs: the search sets those aside, says which, and decides the same."""
    monkeypatch.setenv("COLUMNS", "80")
    answers = tmp_path / "answers.yaml"
    answers.write_text(
        "target: axolotl\nhardware: nvidia\ngpu_model: A10G\ngpus_per_node: 2\ngpu_link: pcie\n"
        "model: llama-3.1-8b\nmethod: lora\n"
    )
    code, text, err = cli(capsys, "estimate", "--answers", str(answers), "--find-hardware", "--output", "json")
    assert code == 0, err
    from_file = json.loads(text)
    plain = search_json(capsys, "--model", "llama-3.1-8b", "--method", "lora", "--set", "target=axolotl")
    assert from_file["hardware"] == plain["hardware"]
    code, text, _ = cli(capsys, "estimate", "--answers", str(answers), "--find-hardware")
    said = " ".join(text.split())
    assert code == 0 and "not used (the search sets them): hardware, gpu_model, gpus_per_node, gpu_link" in said
    # Typed on the command line, the same key is still refused: the user asked for it there.
    code, _, err = cli(capsys, "estimate", "--answers", str(answers), "--find-hardware", "--set", "gpu_link=nvlink")
    assert code == 2 and "--set gpu_link" in err


def _two_digits(value: float) -> str:
    """A rate as the table prints it: two significant digits, thousands separated."""
    if value < 10:
        return f"{value:.1f}"
    digits = len(str(int(value))) - 2
    return f"{round(value, -digits):,.0f}"


def test_rows_compare_by_the_rate_the_step_column_cannot_give(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each row's tokens/s is its step's tokens over its step band; the legend says why the steps do not compare."""
    monkeypatch.setenv("COLUMNS", "200")
    args = ("--model", "70B", "--method", "full")
    code, text, _ = cli(capsys, "estimate", *args, "--find-hardware")
    assert code == 0
    header = next(line for line in text.splitlines() if line.lstrip().startswith("GPU "))
    assert header.split()[-2:] == ["step", "tokens/s"]
    last = [line.split()[-1] for line in text.splitlines()]
    timed = [row for row in search_json(capsys, *args)["hardware"] if row["step_time"]]
    assert len({row["step_time"]["tokens_per_step"] for row in timed}) > 1, "one batch for every size shows nothing"
    for row in timed:
        step = row["step_time"]
        slow = _two_digits(step["tokens_per_step"] / step["high_seconds"])
        fast = _two_digits(step["tokens_per_step"] / step["low_seconds"])
        assert (slow if slow == fast else f"{slow}-{fast}") in last, (row["gpu_model"], slow, fast)
    assert "compare sizes by tokens/s" in " ".join(text.split())


def test_a_brought_json_says_its_layout_bounds_the_search(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    """With a DeepSpeed JSON every card runs the JSON as written: the search says offload was not tried, claims no
    "even with offload", and, without the JSON, finds a card fewer GPUs through an offload layout."""
    monkeypatch.setenv("COLUMNS", "80")
    ds = tmp_path / "ds.json"
    ds.write_text(json.dumps({"zero_optimization": {"stage": 2}, "train_micro_batch_size_per_gpu": 1}))
    args = ["estimate", "--model", "13B", "--method", "full", "--set", f"deepspeed_config={ds}", "--find-hardware"]
    code, text, err = cli(capsys, *args, "--cpu-memory-gb", "512")
    said = " ".join(text.split())
    assert code == 0, err
    assert "so layouts it does not set (offload among them) are not searched" in said
    assert "with your DeepSpeed JSON as written:" in said and "(even with offload)" not in said
    with_json = search_json(capsys, *args[1:-1], "--cpu-memory-gb", "512")
    without = search_json(capsys, "--model", "13B", "--method", "full", "--cpu-memory-gb", "512")

    def fewest(data: dict[str, Any], card: str) -> int:
        return min(row["gpus"] for row in data["hardware"] if row["gpu_model"] == card and row["gpus"])

    assert not any(row["offload"] and row["gpus"] for row in with_json["hardware"])
    assert fewest(without, "A100 40GB") < fewest(with_json, "A100 40GB")
