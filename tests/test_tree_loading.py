"""Loading decision_tree.yaml: the shipped tree is valid, and every kind of broken tree is refused
with the file, the line and the reason."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from helpers import REPO, tree
from wizard.engine.facts import Inputs, derive_facts
from wizard.engine.tree import Ref, load_tree
from wizard.errors import TreeError

SHIPPED = (REPO / "decision_tree.yaml").read_text(encoding="utf-8")

MINIMAL = """\
schema_version: 1
sources: {WH: heuristic}
guidance: {G1: one, G2: two}
backends:
  alpha: {title: Alpha, summary: first}
  beta: {title: Beta, summary: second}
facts: {}
questions:
  - id: kind
    prompt: Which?
    help: pick one
    type: choice
    choices:
      - {id: a, title: A, description: the a}
      - {id: b, title: B, description: the b}
  - id: count
    prompt: How many?
    help: a number
    type: integer
    when: {answer: kind, eq: b}
rules:
  - id: first
    guidance: G1
    sources: [WH]
    when: {answer: kind, eq: a}
    outcome: {backend: alpha}
    because: "kind is {{ kind }}"
  - id: rest
    guidance: G2
    when: always
    outcome: {backend: beta}
    because: "otherwise"
"""


# MINIMAL plus an add-on: a question asked after the decision, only when it chose alpha.
ADDON = MINIMAL.replace(
    "rules:\n",
    """addons:
  - id: extra
    prompt: Add the extra?
    help: only for alpha
    type: yesno
    default: false
    when: {all: [{outcome: backend, in: [alpha]}, {answer: kind, eq: a}]}
rules:
""",
)


def load(text: str) -> object:
    return load_tree(text, "tree.yaml")


def test_shipped_tree_loads_and_names_every_question_of_the_answers_contract() -> None:
    t = tree()
    contract = {
        "target",
        "hardware",
        "gpu_model",
        "gpus_per_node",
        "num_nodes",
        "gpu_memory_gb",
        "cpu_memory_gb",
        "model",
        "method",
        "deepspeed_config",
        "offload",
        "nvme_path",
        "sequence_length",
        "micro_batch_size",
        "base_model",
    }
    assert contract <= set(t.question_ids)
    assert [c.id for c in t.question("target").choices] == ["accelerate", "axolotl"]
    assert [c.id for c in t.question("hardware").choices] == [
        "nvidia",
        "amd",
        "cpu",
        "mps",
        "tpu",
        "hpu",
        "xpu",
        "npu",
        "mlu",
        "musa",
    ]
    assert [c.id for c in t.question("method").choices] == ["full", "lora", "qlora"]
    assert [c.id for c in t.question("offload").choices] == ["auto", "none", "cpu", "nvme"]
    assert t.question("sequence_length").default == 2048
    # One sample per GPU, unless a brought DeepSpeed JSON gives its own micro-batch.
    assert t.question("micro_batch_size").default == Ref("fact", "micro_batch_default")
    assert derive_facts({"target": "accelerate"}, Inputs()).get("micro_batch_default") == 1


def test_every_rule_names_a_guidance_tag_and_a_because() -> None:
    for rule in tree().rules:
        assert rule.guidance in tree().guidance
        assert rule.because.strip()


def test_minimal_tree_loads() -> None:
    t = load(MINIMAL)
    assert [r.id for r in t.rules] == ["first", "rest"]  # type: ignore[attr-defined]


def broken(old: str, new: str) -> str:
    assert old in MINIMAL, old
    return MINIMAL.replace(old, new, 1)


def line_of(text: str, needle: str) -> int:
    return text.splitlines().index(next(line for line in text.splitlines() if needle in line)) + 1


@pytest.mark.parametrize(
    ("text", "reason", "needle"),
    [
        (
            broken("  - id: count", "  - id: kind"),
            "duplicate question id 'kind'",
            "  - id: kind\n    prompt: How many?",
        ),
        (broken("  - id: rest", "  - id: first"), "duplicate rule id 'first'", None),
        (broken("{answer: kind, eq: a}", "{answer: knd, eq: a}"), "unknown answer 'knd'", None),
        (broken("{answer: kind, eq: a}", "{answer: kind, eq: c}"), "'c' is not a choice of kind", None),
        (broken("{answer: kind, eq: a}", "{fact: fits_everything, eq: true}"), "unknown fact 'fits_everything'", None),
        (
            broken("when: {answer: kind, eq: b}", "when: {all: [{answer: kind, eq: a}, {answer: kind, eq: b}]}"),
            "question count can never be asked",
            None,
        ),
        (
            broken(
                "  - id: rest\n",
                "  - id: dead\n    guidance: G1\n    when: {all: [{answer: kind, eq: a}, "
                "{answer: kind, eq: b}]}\n    outcome: {backend: beta}\n    because: never\n  - id: rest\n",
            ),
            "rule dead can never fire",
            None,
        ),
        (
            broken(
                "    when: {answer: kind, eq: a}\n    outcome: {backend: alpha}",
                "    when: always\n    outcome: {backend: alpha}",
            ),
            "rule rest can never fire",
            None,
        ),
        (
            broken("    when: always\n", "    when: {answer: kind, eq: b}\n").replace(
                "when: {answer: kind, eq: a}\n    outcome", "when: {answer: kind, eq: b}\n    outcome"
            ),
            "no rule applies to the answers kind=a",
            None,
        ),
        (broken("{backend: beta}", "{backend: gamma}"), "unknown backend 'gamma'", None),
        (
            broken("  beta: {title: Beta", "  beta: {traits: {accelerate_type: MULTI_GPUS}, title: Beta"),
            "backend beta: traits.accelerate_type: 'MULTI_GPUS' is not an Accelerate distributed_type; allowed: ",
            "  beta:",
        ),
        (
            broken("  beta: {title: Beta", "  beta: {traits: {shards: some}, title: Beta"),
            "backend beta: traits.shards: 'some' is not allowed; allowed: none, zero, all, model",
            "  beta:",
        ),
        (
            broken("  beta: {title: Beta", "  beta: {traits: {shard: all}, title: Beta"),
            "backend beta: traits: unknown trait 'shard'; allowed: accelerate_type, shards, offload,",
            "  beta:",
        ),
        (
            broken(
                "  beta: {title: Beta", "  beta: {traits: {accelerate_type: MULTI_GPU, deepspeed_json: true}, title: B"
            ),
            "backend beta: traits.deepspeed_json True needs traits.accelerate_type DEEPSPEED, not MULTI_GPU",
            None,
        ),
        (broken("type: integer", "type: float"), "type must be one of", None),
        (broken("    sources: [WH]", "    sources: [XX]"), "unknown source tag 'XX'", None),
        (broken("    guidance: G2", "    guidance: G9"), "unknown guidance id 'G9'", None),
        (broken('because: "otherwise"', 'because: "{{ oops"'), "bad template", None),
        (
            broken("    when: {answer: kind, eq: b}\n", "    when: {answer: count, gt: 1}\n"),
            "depends on 'count', which is asked later",
            None,
        ),
        (broken("type: choice", "type: choice\n    colour: red"), "unknown key(s) colour", None),
        (
            broken("    prompt: Which?", "    prompt: Which?\n    on_hardware: {mps: {prompt: Mac?, help: h}}"),
            "on_hardware names 'mps', not a choice of the hardware question",
            None,
        ),
        (
            broken("    prompt: Which?", "    prompt: Which?\n    on_hardware: {mps: {prompt: Mac?, title: t}}"),
            "on_hardware mps: unknown key(s) title",
            None,
        ),
        (broken("schema_version: 1", "schema_version: 7"), "schema_version must be 1", None),
        (
            broken("  alpha: {title: Alpha", "  alpha: &a {title: Alpha").replace(
                "  beta: {title: Beta, summary: second}", "  beta: *a"
            ),
            "anchors and aliases are not supported",
            None,
        ),
        (broken("facts: {}", "facts: {}\nfacts: {}"), "duplicate key 'facts'", None),
        (
            broken("    prompt: Which?", "    prompt: !!python/object:os.system Which?"),
            "could not determine a constructor",
            None,
        ),
        ("questions: [\n", "line", None),
        (
            broken("    when: {answer: kind, eq: b}\n", "    when: {outcome: backend, eq: beta}\n"),
            "only add-ons (asked after the decision) may",
            None,
        ),
        (broken("when: {answer: kind, eq: a}", "when: {outcome: backend, eq: alpha}"), "only add-on questions", None),
        (ADDON.replace("in: [alpha]", "in: [gamma]"), "'gamma' is not a backend", None),
        (ADDON.replace("{outcome: backend,", "{outcome: colour,"), "unknown outcome 'colour'", None),
        # A summary for a layout no rule decides for the backend would never be shown.
        (
            broken(
                "  alpha: {title: Alpha, summary: first}",
                "  alpha: {title: Alpha, summary: first, summaries: {zero3: x}}",
            ),
            "backend alpha: 'summaries' names layout(s) no rule decides for it: zero3",
            None,
        ),
        (
            ADDON.replace("when: {answer: kind, eq: a}", "when: {answer: extra, eq: true}"),
            "depends on the add-on 'extra'",
            None,
        ),
        (ADDON.replace("{answer: kind, eq: a}]", "{answer: kind, eq: x}]"), "'x' is not a choice of kind", None),
        (
            ADDON.replace(
                "when: {all: [{outcome: backend, in: [alpha]}, {answer: kind, eq: a}]}",
                "when: {answer: count, gt: 1000}",
            )
            .replace("    when: {answer: kind, eq: b}\n", "    when: {answer: kind, eq: b}\n", 1)
            .replace("when: {answer: count, gt: 1000}", "when: {all: [{answer: kind, eq: a}, {answer: kind, eq: b}]}"),
            "question extra can never be asked",
            None,
        ),
    ],
)
def test_broken_tree_names_file_line_and_reason(text: str, reason: str, needle: str | None) -> None:
    with pytest.raises(TreeError) as info:
        load(text)
    message = info.value.message
    assert message.startswith("tree.yaml, line "), message
    assert reason in message, message
    if needle is not None:
        assert f"line {text[: text.index(needle)].count(chr(10)) + 1}:" in message


def test_error_line_points_at_the_offending_rule() -> None:
    text = broken("{backend: beta}", "{backend: gamma}")
    with pytest.raises(TreeError) as info:
        load(text)
    assert f"line {line_of(text, '- id: rest')}:" in info.value.message


def test_tree_file_from_the_cli_is_checked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from wizard.cli import main

    bad = tmp_path / "tree.yaml"
    bad.write_text(broken("{backend: beta}", "{backend: gamma}"), encoding="utf-8")
    code = main(
        [
            "--tree",
            str(bad),
            "--answers",
            str(REPO / "examples" / "a100x4-7b-full-accelerate.yaml"),
            "--output-dir",
            str(tmp_path / "out"),
        ]
    )
    err = capsys.readouterr().err
    assert code == 3
    assert "unknown backend 'gamma'" in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()


DEAD_RULE = broken(
    "  - id: rest\n",
    "  - id: dead\n    guidance: G1\n    when: {all: [{answer: kind, eq: a}, "
    "{answer: kind, eq: b}]}\n    outcome: {backend: beta}\n    because: never\n  - id: rest\n",
)


def test_the_shipped_tree_passes_the_full_lint() -> None:
    # A run loads the shipped tree without the linter (start-up time): this is what lints it.
    t = load_tree(SHIPPED, "decision_tree.yaml", lint=True)
    assert len(t.rules) > 30 and "hardware" in t.question_ids


def test_loading_without_lint_skips_the_linter_but_not_the_schema() -> None:
    assert [r.id for r in load_tree(DEAD_RULE, "tree.yaml", lint=False).rules] == ["first", "dead", "rest"]
    with pytest.raises(TreeError, match="rule dead can never fire"):
        load_tree(DEAD_RULE, "tree.yaml")
    with pytest.raises(TreeError, match="type must be one of"):
        load_tree(broken("type: integer", "type: float"), "tree.yaml", lint=False)


def test_tree_lint_says_the_shipped_tree_is_clean_and_refuses_a_broken_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from wizard.cli import main

    assert main(["tree", "--lint"]) == 0
    out = capsys.readouterr().out
    assert re.fullmatch(r".*decision_tree\.yaml: no problems \(\d+ questions, \d+ rules\)\n", out), out
    bad = tmp_path / "tree.yaml"
    bad.write_text(DEAD_RULE, encoding="utf-8")
    assert main(["tree", "--lint", "--tree", str(bad)]) == 3
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert captured.out == "" and len(lines) == 1 and "rule dead can never fire" in lines[0], captured.err


def test_a_dead_rule_in_a_users_tree_stops_a_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from wizard.cli import main

    bad = tmp_path / "tree.yaml"
    bad.write_text(DEAD_RULE, encoding="utf-8")
    code = main(["--tree", str(bad), "--set", "kind=a", "--dry-run", "--output-dir", str(tmp_path / "out")])
    assert code == 3 and "rule dead can never fire" in capsys.readouterr().err


def test_addons_are_asked_after_the_decision_and_only_when_their_outcome_holds() -> None:
    from wizard.engine.evaluate import prune, recommend
    from wizard.engine.facts import Inputs
    from wizard.session import Sources, collect

    t = load_tree(ADDON, "tree.yaml")
    assert t.addon_ids == {"extra"} and t.question_ids[-1] == "extra"
    inputs = Inputs()
    # kind=a decides alpha, so the add-on is asked (and takes its default); kind=b decides beta,
    # so it never is.
    alpha = collect(t, Sources(set_values={"kind": "a"}))
    assert alpha.answers == {"kind": "a", "extra": False} and alpha.origins["extra"] == "default"
    assert collect(t, Sources(set_values={"kind": "b", "count": 2})).answers == {"kind": "b", "count": 2}
    # The add-on's answer does not change the decision, and a changed decision drops it.
    assert recommend(t, {"kind": "a", "extra": True}, inputs).backend == "alpha"
    assert prune(t, {"kind": "b", "count": 2, "extra": True}, inputs) == {"kind": "b", "count": 2}
    assert prune(t, {"kind": "a", "extra": True}, inputs) == {"kind": "a", "extra": True}


def test_an_addon_in_an_answers_file_is_used_or_reported_as_ignored_by_the_decision() -> None:
    from wizard.session import Sources, collect

    t = load_tree(ADDON, "tree.yaml")
    kept = collect(t, Sources(file_values={"kind": "a", "extra": True}))
    assert kept.answers == {"kind": "a", "extra": True} and kept.ignored == []
    dropped = collect(t, Sources(file_values={"kind": "b", "count": 3, "extra": True}))
    assert dropped.answers == {"kind": "b", "count": 3} and dropped.ignored == ["extra"]
