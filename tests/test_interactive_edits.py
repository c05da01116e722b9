"""Properties of the interactive loop over every path of the walk (tests/paths.py).

Every answer can be changed on the review screen, whether it was typed or came from a file; an
edit that makes a later answer invalid asks that answer again; going back always returns to the
question asked just before; and progress never moves backwards during a forward run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from paths import enumerate_paths

from helpers import tree
from wizard.engine.batch import GLOBAL_BATCH
from wizard.errors import WizardError
from wizard.session import AUTO, BACK, KEPT_DEFAULT, Session, Sources, Step, collect


class Scripted:
    """Answers from a mapping (the question's default otherwise) and records every step."""

    def __init__(self, answers: dict[str, Any]) -> None:
        self.answers = answers
        self.steps: list[Step] = []
        self.reviews = 0
        self.edit: str | None = None  # asked to change on the first review
        self.after_review = 0  # questions asked after the first review screen

    def ask(self, step: Step) -> Any:
        self.steps.append(step)
        self.after_review += self.reviews > 0
        value = self.answers.get(step.question.id, step.default)
        return None if value is None else step.validate(value)

    def review(self, tree: Any, session: Session) -> str | None:
        self.reviews += 1
        return self.edit if self.reviews == 1 else None


def walk(folder: Path) -> list[dict[str, Any]]:
    """The walk's answer sets that a plain (non-interactive) run accepts."""
    found = []
    for answers in enumerate_paths(folder):
        try:
            collect(tree(), Sources(file_values=answers, use_defaults=True))
        except WizardError:
            continue
        found.append(answers)
    return found


@pytest.fixture(scope="module")
def paths(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    return walk(tmp_path_factory.mktemp("paths"))


def test_progress_only_moves_forward_on_every_path(paths: list[dict[str, Any]]) -> None:
    assert len(paths) > 500
    for answers in paths:
        prompter = Scripted(answers)
        collect(tree(), Sources(prompter=prompter))
        numbers = [s.number for s in prompter.steps]
        parts = [s.part for s in prompter.steps]
        assert numbers == list(range(1, len(numbers) + 1)), answers  # each question's place in the walk
        assert parts == sorted(parts) and all(1 <= p <= s.parts for p, s in zip(parts, prompter.steps, strict=True)), (
            answers
        )
        assert [s.can_go_back for s in prompter.steps] == [False] + [True] * (len(numbers) - 1)
        # Before the review screen, back goes to the previous question, never "cancel this change".
        assert not any(s.back_cancels for s in prompter.steps), answers


@pytest.mark.parametrize("origin", ["prompt", "file"])
def test_every_answer_can_be_changed_on_the_review_screen(paths: list[dict[str, Any]], origin: str) -> None:
    """Picking any answered or skipped question on the review screen asks it again, then goes on."""
    picked: set[str] = set()
    checked = 0
    # Every 16th path (the two origins take alternate ones), and for each answer those leave out a path that
    # gives it: each question of each sampled path is edited, so every answer any path gives is picked at least
    # once.
    sample = paths[(0 if origin == "prompt" else 8) :: 16]
    covered = {key for answers in sample for key in answers}
    for answers in paths:
        if set(answers) - covered:
            sample.append(answers)
            covered |= set(answers)
    for answers in sample:
        first = Scripted(answers)
        reference = collect(tree(), Sources(prompter=first))
        for qid in [*reference.answers, *reference.skipped]:
            prompter = Scripted(answers)
            prompter.edit = qid
            file_values = dict(reference.answers) if origin == "file" else {}
            session = collect(tree(), Sources(file_values=file_values, prompter=prompter))
            asked_again = [s.question.id for s in prompter.steps[len(prompter.steps) - prompter.after_review :]]
            # Re-giving the same answer asks nothing else: its followers are kept, not asked again.
            assert asked_again == [qid], f"picking {qid} ({origin}) on the review screen asked {asked_again}"
            # The picked question offers back as "keep the answer as it was" (it cancels the change).
            assert prompter.steps[-1].back_cancels and prompter.steps[-1].can_go_back, qid
            assert prompter.reviews == 2, "after the edit the review screen comes back"
            assert session.answers == reference.answers, (qid, origin)
            checked += 1
            picked.add(qid)
    assert checked > 400
    # Every answer some path gives was picked on the review screen at least once.
    given = {key for answers in paths for key in answers}
    assert given <= picked, sorted(given - picked)


def test_an_edit_that_disables_a_later_answer_asks_that_answer_again() -> None:
    # Apple silicon with Accelerate; on the review screen the tool becomes Axolotl, which does
    # not run on Apple silicon: the hardware question comes back instead of an unchecked decision.
    answers = {"target": "accelerate", "hardware": "mps", "gpu_memory_gb": 16, "model": "1B"}
    prompter = Scripted(dict(answers))
    prompter.edit = "target"
    original_ask = prompter.ask

    def ask(step: Step) -> Any:
        if step.question.id == "target" and prompter.reviews == 1:
            prompter.answers.update(target="axolotl", hardware="nvidia", gpus_per_node=1)
        return original_ask(step)

    prompter.ask = ask  # type: ignore[method-assign]
    session = collect(tree(), Sources(file_values=answers, prompter=prompter))
    hardware_steps = [s for s in prompter.steps if s.question.id == "hardware"]
    assert hardware_steps and "mps" in hardware_steps[-1].disabled
    after_edit = [s.question.id for s in prompter.steps[len(prompter.steps) - prompter.after_review :]]
    assert after_edit[:2] == ["target", "hardware"], "the answer made impossible is asked at once"
    assert "Axolotl trains on NVIDIA" in str(hardware_steps[-1].again), "and the user is told why"
    assert session.answers["target"] == "axolotl" and session.answers["hardware"] == "nvidia"


def test_back_returns_to_the_question_asked_just_before_on_every_path(paths: list[dict[str, Any]]) -> None:
    """Going back once at every question asks the one before it again, and the run ends the same."""
    for answers in paths[::16]:
        reference = Scripted(answers)
        expected = collect(tree(), Sources(prompter=reference)).answers
        order = [s.question.id for s in reference.steps]
        for index in range(1, len(order)):
            prompter = Scripted(answers)
            went_back = False

            def ask(step: Step, prompter: Scripted = prompter, index: int = index) -> Any:
                nonlocal went_back
                if not went_back and len(prompter.steps) == index:
                    went_back = True
                    prompter.steps.append(step)
                    return BACK
                return Scripted.ask(prompter, step)

            prompter.ask = ask  # type: ignore[method-assign]
            session = collect(tree(), Sources(prompter=prompter))
            asked = [s.question.id for s in prompter.steps]
            assert asked[index + 1] == order[index - 1], (answers, order[index], asked)
            assert session.answers == expected


A100 = {
    "target": "accelerate",
    "hardware": "nvidia",
    "gpu_model": "A100",
    "gpus_per_node": 4,
    "model": "7B",
    "method": "lora",
}


def test_changing_the_gpu_model_asks_its_memory_again_with_the_new_default() -> None:
    prompter = Scripted(dict(A100))
    prompter.edit = "gpu_model"
    original_ask = prompter.ask

    def ask(step: Step) -> Any:
        if step.question.id == "gpu_model" and prompter.reviews == 1:
            prompter.answers["gpu_model"] = "H100"
        return original_ask(step)

    prompter.ask = ask  # type: ignore[method-assign]
    session = collect(tree(), Sources(prompter=prompter))
    memory = [s for s in prompter.steps if s.question.id == "gpu_memory_gb"]
    assert len(memory) == 2 and memory[-1].default == pytest.approx(79.65)
    assert session.answers["gpu_memory_gb"] == pytest.approx(79.65), "not the A100's 80 taken as a default before"


def test_a_question_keeps_its_number_when_going_back_and_a_change_has_none() -> None:
    """Invariant: the number is the question's place in the walk; a change after the review is not a step."""
    prompter = Scripted(dict(A100))
    prompter.edit = "gpu_model"
    went_back = False
    original_ask = prompter.ask

    def ask(step: Step) -> Any:
        nonlocal went_back
        if step.question.id == "model" and not went_back:
            went_back = True
            prompter.steps.append(step)
            return BACK
        return original_ask(step)

    prompter.ask = ask  # type: ignore[method-assign]
    collect(tree(), Sources(prompter=prompter))
    first: dict[str, int] = {}
    for step in prompter.steps:
        if step.number == 0:
            continue
        assert first.setdefault(step.question.id, step.number) == step.number, step.question.id
    before = [s for s in prompter.steps if s.number]
    assert [s.number for s in before] == sorted(s.number for s in before) or went_back
    # Going back from "model" asks the question before it again, under its own number.
    model = next(i for i, s in enumerate(prompter.steps) if s.question.id == "model")
    assert prompter.steps[model + 1].number == prompter.steps[model].number - 1
    changes = [s for s in prompter.steps if s.number == 0]
    assert changes and changes[0].question.id == "gpu_model"  # the review screen's change, unnumbered


def test_enter_on_a_kept_default_after_going_back_keeps_it_a_default() -> None:
    """Going back re-asks the previous question; Enter on the default it had kept is still "kept"."""
    prompter = Scripted(dict(A100))
    went_back: list[str] = []
    original_ask = prompter.ask

    def ask(step: Step) -> Any:
        last = prompter.steps[-1] if prompter.steps else None
        # Back from the question after the first one answered by Enter on its offered default.
        if not went_back and last is not None and last.default is not None and last.question.id not in A100:
            went_back.append(last.question.id)  # the question going back reopens
            return BACK
        return original_ask(step)

    prompter.ask = ask  # type: ignore[method-assign]
    session = collect(tree(), Sources(prompter=prompter))
    reopened = went_back[0]
    assert reopened not in A100, reopened  # answered with Enter on its default, both times
    assert session.origins[reopened] == KEPT_DEFAULT, (reopened, session.origins[reopened])


def test_back_at_a_review_edit_puts_the_answer_back() -> None:
    prompter = Scripted(dict(A100))
    prompter.edit = "gpus_per_node"
    original_ask = prompter.ask

    def ask(step: Step) -> Any:
        if step.question.id == "gpus_per_node" and prompter.reviews == 1:
            assert step.can_go_back, "the picked question offers a way back to the review screen"
            prompter.reviews += 1  # the next review ends the run
            return BACK
        return original_ask(step)

    prompter.ask = ask  # type: ignore[method-assign]
    session = collect(tree(), Sources(file_values={"model": "7B"}, prompter=prompter))
    assert session.answers["gpus_per_node"] == 4 and prompter.reviews == 3
    assert session.origins["model"] == "answers file"


def test_a_computed_default_kept_at_the_prompt_still_follows_the_answers(paths: list[dict[str, Any]]) -> None:
    """Enter on a default computed from other answers keeps it a default, on every path.

    The levers ("To get a different answer") re-derive such defaults after their change, so an
    interactive run that only pressed Enter gets the same levers as the same answers from a file
    that leaves those keys out (the RTX 4090 13B LoRA run keeps layer offloading and is still
    offered QLoRA on the GPU alone).
    """
    from wizard.engine.tree import Ref

    checked = 0
    for answers in paths[::7]:
        prompter = KeepsComputedDefaults(answers)
        interactive = collect(tree(), Sources(prompter=prompter))
        kept = {q for q, origin in interactive.origins.items() if origin == "default, kept"}
        for step in prompter.steps:
            if isinstance(step.question.default, Ref) and step.default is not None:
                # The global batch is the exception: answered at its prompt, kept or typed, it is the
                # batch the user wants, planned as an answers file's (the micro-batch picked for it).
                if step.question.id == GLOBAL_BATCH:
                    assert GLOBAL_BATCH in interactive.given, answers
                    continue
                if step.auto:
                    # Enter meant "auto": the wizard's to pick, a default as an answers file leaves it.
                    assert interactive.origins[step.question.id] == "default", (answers, step.question.id)
                    continue
                assert step.question.id in kept, (answers, step.question.id)
        assert not kept & interactive.given
        if not kept:
            continue
        # What the user gave (typed, or chosen in a menu); Enter on a default or on "auto" gives nothing.
        typed = {k: v for k, v in interactive.answers.items() if k in interactive.given}
        via_file = collect(tree(), Sources(file_values=typed, use_defaults=True))
        assert via_file.answers == interactive.answers, answers
        assert via_file.given == interactive.given, answers
        checked += 1
    assert checked > 20


class KeepsComputedDefaults(Scripted):
    """Presses Enter on every default computed from other answers; answers the rest from the mapping."""

    def ask(self, step: Step) -> Any:
        if _computed(step.question.id) and step.default is not None:
            self.steps.append(step)
            # Where Enter means "auto" (the micro-batch on the first walk), Enter is AUTO, as the prompter
            # returns it; typing the number would be an answer of one's own.
            return AUTO if step.auto else step.validate(step.default)
        return super().ask(step)


def _computed(qid: str) -> bool:
    """Whether the question's default is computed from other answers (a Ref)."""
    from wizard.engine.tree import Ref

    question = tree().question(qid)
    return question is not None and isinstance(question.default, Ref)


def test_keeping_layer_offloading_at_the_prompt_keeps_the_qlora_lever(tmp_path: Path) -> None:
    """One RTX 4090, 13B LoRA with Axolotl: Enter on layer offloading, and QLoRA is still offered."""
    from wizard.app import run

    answers = {
        "target": "axolotl",
        "hardware": "nvidia",
        "gpu_model": "RTX 4090",
        "gpus_per_node": 1,
        "cpu_memory_gb": 64,
        "model": "13B",
        "method": "lora",
        "sequence_length": 4096,
    }
    result = run(tree(), Sources(prompter=Scripted(answers)), tmp_path, force=False, dry_run=True)
    assert result.session.answers["layer_offloading"] is True
    assert result.session.origins["layer_offloading"] == "default, kept"
    assert any(lever.change == "QLoRA instead of LoRA" for lever in result.levers), [
        lever.change for lever in result.levers
    ]


def test_a_default_a_change_moved_is_offered_as_the_default_not_as_the_earlier_answer() -> None:
    """One A10G, Axolotl LoRA of an 8B model: layer offloading is kept at its default, Yes. Cut Cross
    Entropy turned on at the review screen makes the run fit without it, so its default becomes No and it
    is asked again: the menu opens on No as the default after the change (it was yes), never as "your
    earlier answer", which was Yes. Invariant: a step whose default is called the earlier answer offers
    the value the answer had before the change."""
    answers = {
        "target": "axolotl", "hardware": "nvidia", "gpu_model": "A10G", "gpus_per_node": 1,
        "model": "llama-3.1-8b", "method": "lora",
    }  # fmt: skip
    first = Scripted(dict(answers))
    reference = collect(tree(), Sources(prompter=first))
    assert reference.answers["layer_offloading"] is True and reference.origins["layer_offloading"] == KEPT_DEFAULT

    class Changing(Scripted):
        def ask(self, step: Step) -> Any:
            if self.reviews and step.question.id == "cut_cross_entropy":
                self.steps.append(step)
                self.after_review += 1
                return step.validate(True)
            return super().ask(step)

    prompter = Changing(dict(answers))
    prompter.edit = "cut_cross_entropy"
    session = collect(tree(), Sources(prompter=prompter))
    again = [s for s in prompter.steps[len(prompter.steps) - prompter.after_review :]]
    moved = [s for s in again if s.question.id == "layer_offloading"]
    assert len(moved) == 1, [s.question.id for s in again]
    assert moved[0].default is False and moved[0].moved_from is True and not moved[0].default_is_earlier_answer
    assert session.answers["layer_offloading"] is False and session.answers["cut_cross_entropy"] is True
    # Taken with Enter (the scripted prompter keeps a default), the moved default reads "kept", not "your answer".
    assert session.origins["layer_offloading"] == KEPT_DEFAULT, session.origins["layer_offloading"]
    for step in again:
        if step.default_is_earlier_answer:
            assert step.default == reference.answers.get(step.question.id), step.question.id
