"""What a tree names once and uses in many places: named conditions, groups of values, blocks and
shared texts. A tree using each loads and decides as if it were written out; an undefined name,
an unused definition, a definition that refers to itself and a too-long line are refused with
the file and the line."""

from __future__ import annotations

import pickle
import re
from pathlib import Path

import pytest

from helpers import REPO
from wizard.engine.conditions import Compare, condition_text
from wizard.engine.evaluate import recommend
from wizard.engine.facts import Inputs
from wizard.engine.tree import Tree, load_tree
from wizard.engine.tree_lint import MAX_LINE, check_line_lengths
from wizard.errors import TreeError

TREE = """\
schema_version: 1
sources: {WH: heuristic}
guidance: {G1: one, G2: two}
conditions:
  warm: {answer: kind, in: {group: warm}}
  warm_and_many: {all: [{condition: warm}, {answer: count, gt: 2}]}
groups:
  warm: [a, b]
  far: [y, {group: farther}]
  farther: [z]
blocks:
  not_for_c:
    when: {answer: tool, in: [x, {group: far}]}
    reason: "c is not offered with y or z"
texts:
  many: "{{ count }} of them{% if note %}, {{ note }}{% endif %}"
  kind_line: "kind {{ kind }}: {% include texts.many %}"
backends:
  alpha: {title: Alpha, summary: first}
  beta: {title: Beta, summary: second}
facts: {}
questions:
  - id: tool
    prompt: Which tool?
    help: pick one
    type: choice
    choices:
      - {id: w, title: W, description: the w}
      - {id: x, title: X, description: the x}
      - {id: y, title: Y, description: the y}
      - {id: z, title: Z, description: the z}
  - id: kind
    prompt: Which?
    help: pick one
    type: choice
    choices:
      - {id: a, title: A, description: the a}
      - {id: b, title: B, description: the b}
      - {id: c, title: C, description: the c, disabled: {block: not_for_c}}
  - id: count
    prompt: How many?
    help: a number
    type: integer
    default: 1
    when: {condition: warm}
rules:
  - id: first
    guidance: G1
    sources: [WH]
    when: {condition: warm_and_many}
    outcome: {backend: alpha}
    because: "{% set note = 'counted' %}Many: {% include texts.kind_line %}."
  - id: rest
    guidance: G2
    when: always
    outcome: {backend: beta}
    because: "otherwise"
"""


def load(text: str, lint: bool = True) -> Tree:
    return load_tree(text, "tree.yaml", lint=lint)


def line_of(text: str, needle: str) -> int:
    """The 1-based line of the first line containing `needle`."""
    return next(n for n, line in enumerate(text.splitlines(), 1) if needle in line)


def test_a_tree_using_every_kind_of_name_loads_as_if_written_out() -> None:
    t = load(TREE)
    count = t.question("count")
    assert count is not None and count.when == Compare("answer", "kind", "in", ("a", "b"), line_of(TREE, "warm: {"))
    assert condition_text(t.rules[0].when) == "kind in a, b and count > 2"
    c = t.question("kind").choice("c")  # type: ignore[union-attr]
    assert c is not None and c.disabled_reason == "c is not offered with y or z"
    assert c.disabled_when == Compare("answer", "tool", "in", ("x", "y", "z"), line_of(TREE, "when: {answer: tool"))
    assert set(t.definitions.used["condition"]) == {"warm", "warm_and_many"}
    assert pickle.loads(pickle.dumps(t)) == t  # the parsed tree is kept in the disk cache


def test_a_shared_text_renders_with_the_values_and_sets_of_the_text_including_it() -> None:
    rec = recommend(load(TREE), {"tool": "w", "kind": "b", "count": 3}, Inputs())
    assert rec.rule.id == "first"
    assert rec.because == "Many: kind b: 3 of them, counted."
    assert recommend(load(TREE), {"tool": "w", "kind": "a", "count": 1}, Inputs()).rule.id == "rest"


def replaced(old: str, new: str, text: str = TREE) -> str:
    assert old in text, old
    return text.replace(old, new, 1)


@pytest.mark.parametrize(
    ("old", "new", "message", "at"),
    [
        ("when: {condition: warm}", "when: {condition: wram}", r"unknown condition 'wram'", "when: {condition: wram}"),
        ("in: [x, {group: far}]", "in: [x, {group: fra}]", r"unknown group 'fra'", "when: {answer: tool"),
        ("disabled: {block: not_for_c}", "disabled: {block: not_c}", r"unknown block 'not_c'", "disabled: {block"),
        ("{% include texts.many %}", "{% include texts.lots %}", r"unknown text 'lots'", "  kind_line:"),
        ("{% include texts.many %}", "{{ texts.many }}", r"used only as \{% include texts.NAME %\}", "  kind_line:"),
        ("{% include texts.many %}", "{% include 'many' %}", r"includes only shared texts", "  kind_line:"),
        ("{% include texts.many %}", "{% import 'x' as y %}", r"includes only shared texts", "  kind_line:"),
    ],
)
def test_a_name_that_is_not_defined_is_refused_with_its_line(old: str, new: str, message: str, at: str) -> None:
    text = replaced(old, new)
    with pytest.raises(TreeError, match=message) as caught:
        load(text)
    assert f"tree.yaml, line {line_of(text, at)}:" in str(caught.value)


@pytest.mark.parametrize(
    ("old", "new", "message", "at"),
    [
        ("  warm_and_many:", "  unused: always\n  warm_and_many:", r"conditions: 'unused' is defined", "  unused:"),
        ("  far:", "  cold: [c]\n  far:", r"groups: 'cold' is defined but never used", "  cold:"),
        ("texts:\n", "texts:\n  spare: more\n", r"texts: 'spare' is defined but never used", "  spare:"),
        ("blocks:\n", "blocks:\n  spare: {reason: x}\n", r"blocks: 'spare' is defined but never used", "  spare:"),
    ],
)
def test_a_definition_no_one_uses_is_refused_by_the_linter(old: str, new: str, message: str, at: str) -> None:
    text = replaced(old, new)
    load(text, lint=False)  # unused is a lint finding: the tree itself still works
    with pytest.raises(TreeError, match=message) as caught:
        load(text)
    assert f"tree.yaml, line {line_of(text, at)}:" in str(caught.value)


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ("{condition: warm}, {answer: count", "{condition: warm_and_many}, {answer: count", "warm_and_many -> wa"),
        ("  farther: [z]", "  farther: [z, {group: far}]", r"the group 'far' refers to itself \(far -> farther -> far"),
        (
            'reason: "c is not offered',
            'reason: {block: not_for_c}\n    r: "',
            r"the block 'not_for_c' refers to itself",
        ),
        ('  many: "{{ count }}', '  many: "{% include texts.kind_line %}{{ count }}', r"many -> kind_line -> many"),
    ],
)
def test_a_definition_that_refers_to_itself_is_refused(old: str, new: str, message: str) -> None:
    with pytest.raises(TreeError, match=message):
        load(replaced(old, new))


def test_only_a_rendered_text_may_include_a_shared_text() -> None:
    # A help is shown as written: the include would reach the user as it is.
    text = replaced("help: a number", 'help: "a number {% include texts.many %}"')
    with pytest.raises(TreeError, match=r"question count: 'help' is shown as written, so it cannot include texts.many"):
        load(text)


def test_a_block_may_stand_for_a_whole_section() -> None:
    text = replaced("guidance: {G1: one, G2: two}\n", "guidance: {block: guidance}\n")
    text = replaced("blocks:\n", "blocks:\n  guidance: {G1: one, G2: two}\n", text)
    assert load(text).guidance == {"G1": "one", "G2": "two"}


def test_a_group_is_for_in_lists_only() -> None:
    with pytest.raises(TreeError, match=r"'eq' compares with one value; a group goes with 'in' or 'not_in'"):
        load(replaced("{answer: kind, in: {group: warm}}", "{answer: kind, eq: {group: warm}}"))


def test_an_error_inside_a_shared_text_names_the_shared_text_and_its_line() -> None:
    from wizard.engine.texts import TextError

    text = replaced("{{ count }} of them", "{{ count }} of {{ them }}")
    with pytest.raises(TextError, match=r"line \d+, in shared text 'many' \(tree\.yaml, line (\d+)\)") as caught:
        recommend(load(text), {"tool": "w", "kind": "b", "count": 3}, Inputs())
    assert f"(tree.yaml, line {line_of(text, '  many:')})" in str(caught.value)


def test_tree_lint_refuses_a_line_longer_than_the_limit(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from wizard.cli import main

    long = replaced('reason: "c is not offered', f'reason: "{"." * MAX_LINE}c is not offered')
    with pytest.raises(TreeError, match=rf"tree\.yaml, line {line_of(long, 'reason:')}: \d+ characters, more than"):
        check_line_lengths(long, "tree.yaml")
    path = tmp_path / "tree.yaml"
    path.write_text(long, encoding="utf-8")
    assert main(["tree", "--lint", "--tree", str(path)]) == 3
    assert "more than 120; fold the text" in capsys.readouterr().err
    path.write_text(TREE, encoding="utf-8")
    assert main(["tree", "--lint", "--tree", str(path)]) == 0


def test_the_shipped_tree_has_no_line_over_the_limit() -> None:
    text = (REPO / "decision_tree.yaml").read_text(encoding="utf-8")
    long = [(n, len(line)) for n, line in enumerate(text.splitlines(), 1) if len(line) > MAX_LINE]
    assert not long, long
    check_line_lengths(text, "decision_tree.yaml")


def test_the_shipped_tree_names_what_it_repeats_and_uses_every_name() -> None:
    text = (REPO / "decision_tree.yaml").read_text(encoding="utf-8")
    t = load_tree(text, "decision_tree.yaml", lint=True)
    assert all(t.definitions.lines[kind] for kind in ("condition", "group", "block", "text"))
    # The GPU group is written once: the list itself appears only in its definition.
    assert len(re.findall(r"\[nvidia, amd\]", text)) == 1
