"""A choice may be given by the words its menu shows as well as by its key, from a file or --set.

The invariant, over every choice question of the shipped tree: each choice's menu title, in any case, is taken
as that choice's key (the offload menu's "Never" is none); a word that is neither is refused with the allowed keys.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers import FOUR_A100_40GB_13B_FULL, decide, tree
from wizard.engine.answers import coerce_answer
from wizard.errors import InvalidAnswerError


def test_every_menu_title_is_taken_as_its_key() -> None:
    lookup = lambda kind, name: None  # noqa: E731 - no other answer: no choice is disabled by one
    checked = 0
    for question in tree().questions:
        if question.type != "choice":
            continue
        for choice in question.choices:
            if not choice.title or choice.disabled_when is not None:
                continue
            for typed in (choice.title, choice.title.upper(), choice.title.lower()):
                assert coerce_answer(question, typed, lookup) == choice.id, (question.id, typed)
            checked += 1
    assert checked >= 20, checked
    offload = tree().question("offload")
    assert offload is not None
    with pytest.raises(InvalidAnswerError) as refused:
        coerce_answer(offload, "sometimes", lookup)
    assert "allowed: auto, none, cpu, nvme" in str(refused.value)


def test_never_from_the_menu_rules_out_offload_in_a_run(tmp_path: Path) -> None:
    result = decide({**FOUR_A100_40GB_13B_FULL, "offload": "Never"}, tmp_path)
    assert result.session.answers["offload"] == "none"
    assert result.recommendation.refused or "offload" not in str(result.recommendation.settings.get("strategy"))
