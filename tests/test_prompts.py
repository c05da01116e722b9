"""Interactive mode driven in-process: real questionary prompts fed with keystrokes."""

from __future__ import annotations

import io
import json
import re
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prompt_toolkit.input import create_pipe_input
from prompt_toolkit.output import DummyOutput
from rich.console import Console

from helpers import tree
from test_scenarios import ANSWERS
from wizard.errors import InterruptedByUser
from wizard.session import Session, Sources, Step, collect
from wizard.ui.prompts import QuestionaryPrompter

UP, DOWN, ENTER, BACKSPACE, CTRL_C = "\x1b[A", "\x1b[B", "\r", "\x7f", "\x03"


def drive(keys: str) -> tuple[Session, str]:
    """Run the whole question loop on these keystrokes; return the session and the help text shown."""
    shown = io.StringIO()
    with create_pipe_input() as pipe:
        pipe.send_text(keys)
        pipe.close()  # once the keys run out a prompt ends as on Ctrl-D, instead of waiting for more
        prompter = QuestionaryPrompter(Console(file=shown, width=200), input=pipe, output=DummyOutput())
        try:
            session = collect(tree(), Sources(prompter=prompter))
        except KeyboardInterrupt:
            raise AssertionError(f"the keys ran out; the screen so far:\n{shown.getvalue()[-1500:]}") from None
    return session, shown.getvalue()


# One keystroke group per question of a 4 x A100 accelerate run.
A100X4 = [
    ENTER,  # target: accelerate (default)
    ENTER,  # hardware: nvidia (default)
    "A100" + ENTER,  # gpu_model
    BACKSPACE + "4" + ENTER,  # gpus_per_node (replace the default 1)
    ENTER + ENTER,  # num_nodes: 1; gpu_link: not sure (the default)
    ENTER,  # gpu_memory_gb: 80, derived from the GPU model
    ENTER,  # cpu_memory_gb: skipped
    "7B" + ENTER,  # model
    UP + ENTER,  # method: lora is the default, one up is full
    ENTER,  # objective: supervised fine-tuning (the default)
    ENTER,  # megatron: no (the default)
    ENTER,  # deepspeed_config: skipped
    ENTER,  # offload: auto
    ENTER,  # optimizer: adamw (the default)
    ENTER,  # sequence_length: 2048
    ENTER,  # micro_batch_size: auto (1 unless a typed global batch lets the wizard pick a larger one)
    ENTER,  # global_batch_size: 4, derived (1 x 1 accumulation x 4 GPUs)
    ENTER,  # gradient_checkpointing: default yes for 7B
    ENTER,  # chunked_loss: no (the default)
    ENTER,  # model_parallel: no (the default)
    ENTER,  # tune: no optional add-ons (the default)
]


def test_full_interactive_run_collects_typed_answers() -> None:
    session, shown = drive("".join(A100X4) + ENTER)  # final ENTER: review screen, "looks right"
    assert session.answers == {
        "target": "accelerate",
        "hardware": "nvidia",
        "gpu_model": "A100",
        "gpus_per_node": 4,
        "num_nodes": 1,
        "gpu_link": "unknown",
        "gpu_memory_gb": 80,
        "model": "7B",
        "method": "full",
        "objective": "sft",
        "megatron": False,
        "offload": "auto",
        "optimizer": "adamw",
        "sequence_length": 2048,
        "micro_batch_size": 1,
        "global_batch_size": 4,
        "gradient_checkpointing": True,
        "chunked_loss": False,
        "model_parallel": False,
        "tune": False,
    }
    assert "cpu_memory_gb" in session.skipped and "deepspeed_config" in session.skipped
    # Typed answers are the user's; Enter on the offered default keeps it a default, as the
    # review screen says ("default, kept").
    kept = {qid for qid, origin in session.origins.items() if origin == "default, kept"}
    assert {"target", "hardware", "gpu_memory_gb", "num_nodes", "offload"} <= kept
    assert {"gpu_model", "gpus_per_node", "model", "method"}.isdisjoint(kept)
    # Enter at the micro-batch's prompt is "auto": the wizard's to pick, as a default is.
    assert session.origins["micro_batch_size"] == "default" and session.auto == {"micro_batch_size"}
    assert set(session.origins.values()) == {"prompt", "default, kept", "default"}
    assert "Enter for auto: the wizard picks the largest micro-batch" in shown
    assert re.search(r"Micro-batch per device\s+auto\s+auto: the wizard picks it", shown), shown
    assert "The hardware decides which backends can run" in shown, "each question shows its help"
    assert "Review your answers" in shown


def test_a_known_gpu_model_offers_the_reported_memory() -> None:
    keys = A100X4.copy()
    keys[2] = "a10g" + ENTER
    keys[8] = ENTER + ENTER  # method: lora (the default), then its lora_rank: 16
    session, shown = drive("".join(keys) + ENTER)
    assert session.answers["gpu_memory_gb"] == 22.49, "23028 MiB as nvidia-smi reports an A10G"
    assert "no default:" not in shown


def test_an_unknown_gpu_model_asks_for_the_memory_without_a_default() -> None:
    keys = A100X4.copy()
    keys[2] = "Quadro Z9" + ENTER
    # No default to accept: Enter alone is refused, then the typed number is taken.
    keys[5] = ENTER + "45.5" + ENTER
    session, shown = drive("".join(keys) + ENTER)
    assert session.answers["gpu_model"] == "Quadro Z9"
    assert session.answers["gpu_memory_gb"] == 45.5 and session.origins["gpu_memory_gb"] == "prompt"
    assert "no default: gpu_model 'Quadro Z9' is not a GPU model the wizard knows" in shown


def test_invalid_typed_value_is_explained_and_asked_again() -> None:
    keys = A100X4.copy()
    keys[3] = BACKSPACE + "0" + ENTER + BACKSPACE + "x" + ENTER + BACKSPACE + "2" + ENTER
    session, _ = drive("".join(keys) + ENTER)
    assert session.answers["gpus_per_node"] == 2


def test_disabled_choices_cannot_be_picked() -> None:
    # target: axolotl; on the hardware menu cpu, mps, ... are disabled: DOWN goes from nvidia to
    # amd, then past the disabled ones to "Back", then "The rest of this help", where it stops; UP
    # comes back the same way to nvidia, where it stops too, and one DOWN is amd.
    keys = DOWN + ENTER + DOWN * 9 + UP * 9 + DOWN + ENTER
    with pytest.raises(InterruptedByUser) as info:
        drive(keys + CTRL_C)
    assert info.value.partial is not None
    assert info.value.partial["target"] == "axolotl"
    assert info.value.partial["hardware"] == "amd"


# The review menu: "Looks right" first, then one entry per answered or skipped question, in order.
A100X4_REVIEW = [
    "target",
    "hardware",
    "gpu_model",
    "gpus_per_node",
    "num_nodes",
    "gpu_link",
    "gpu_memory_gb",
    "cpu_memory_gb",
    "model",
    "method",
    "objective",
    "megatron",
    "deepspeed_config",
    "offload",
    "optimizer",
    "sequence_length",
    "micro_batch_size",
    "global_batch_size",
    "gradient_checkpointing",
    "model_parallel",
    "tune",
]


def change(qid: str) -> str:
    """The keys that pick "Change an answer", then <qid>, on the review screen of the A100X4 run."""
    return DOWN + ENTER + DOWN * A100X4_REVIEW.index(qid) + ENTER


def test_review_screen_changes_an_answer() -> None:
    # Without gpus_per_node the GPU count is unknown, so the questions that depend on it (megatron,
    # model_parallel, and the add-ons after the decision) are asked again after the new answer.
    again = ENTER * 3  # megatron: no, model_parallel: no, tune: no
    keys = "".join(A100X4) + change("gpus_per_node") + BACKSPACE + "8" + ENTER + again + ENTER
    session, _ = drive(keys)
    assert session.answers["gpus_per_node"] == 8
    assert session.answers["model"] == "7B", "the other answers are kept"


def test_review_screen_changes_an_answer_the_memory_estimate_needs() -> None:
    # Taking micro_batch_size back leaves the estimate without a number while the add-ons'
    # conditions look at the decision: it must be decided without rendering any explanation.
    keys = "".join(A100X4) + change("micro_batch_size") + BACKSPACE + "2" + ENTER + ENTER + ENTER  # tune, review
    session, _ = drive(keys)
    assert session.answers["micro_batch_size"] == 2
    assert session.answers["model"] == "7B" and session.answers["gpus_per_node"] == 4


def test_a_long_help_shows_its_first_sentences_and_the_rest_on_request() -> None:
    """Typed "?" at a text prompt, or the menu's last line, prints the rest of a folded help; the answer goes on."""
    from wizard.ui.brief_why import sentences
    from wizard.ui.prompts import MORE_TITLE, fold_help

    t = tree()
    folded = [q for q in t.questions if fold_help(q.help)[1]]
    assert len(folded) >= 10, "long helps are folded"
    for q in t.questions:  # every help is shown whole or as a prefix plus the rest, nothing lost or added
        head, rest = fold_help(q.help)
        assert " ".join(f"{head} {rest}".split()) == " ".join(q.help.split()), q.id
        # Up to about four lines at 80 columns, or the first sentence alone where that is longer.
        assert len(head) <= 320 or not rest or head == sentences(q.help)[0], q.id
    gpu_model = next(q for q in t.questions if q.id == "gpu_model")
    head, rest = fold_help(gpu_model.help)
    keys = A100X4.copy()
    keys[2] = "?" + ENTER + "A100" + ENTER if rest else keys[2]
    session, shown = drive("".join(keys) + ENTER)
    assert session.answers["gpu_model"] == "A100"
    flat = " ".join(shown.split())
    if rest:
        assert f"{head} (more: type ?)" in flat and " ".join(rest.split()) in flat
    hardware = next(q for q in t.questions if q.id == "hardware")
    assert fold_help(hardware.help)[1], "the hardware menu's help is long enough to fold"
    assert "(more: the menu's last line)" in flat and MORE_TITLE.startswith("? ")


def test_a_question_mark_at_a_prompt_whose_help_is_whole_says_so_and_is_never_taken_as_the_answer() -> None:
    """ "?" alone asks for more help: where the help was shown whole (the GPU count), it says there is no more, and
    the question is asked again, never refusing "?" as a value (it was read as a file name or a count)."""
    from wizard.ui.prompts import fold_help

    gpus = next(q for q in tree().questions if q.id == "gpus_per_node")
    assert not fold_help(gpus.help)[1], "the GPU count's help is short enough to show whole"
    keys = A100X4.copy()
    keys[3] = "?" + ENTER + keys[3]
    session, shown = drive("".join(keys) + ENTER)
    assert session.answers["gpus_per_node"] == 4
    flat = " ".join(shown.split())
    assert "That is all the help this question has: it is printed above." in flat, flat[-2000:]
    assert "?: " not in flat, "the question mark was refused as an answer"


def test_an_optional_answer_without_a_default_can_be_left_out_again_from_the_review() -> None:
    """Host RAM given on the review, then taken out again with "-": skipped once more, as at first."""
    keys = "".join(A100X4) + change("cpu_memory_gb") + "64" + ENTER
    keys += change("cpu_memory_gb") + BACKSPACE * 2 + "-" + ENTER + ENTER
    session, shown = drive(keys)
    assert "cpu_memory_gb" not in session.answers and "cpu_memory_gb" in session.skipped
    hints = [line for line in shown.splitlines() if "alone to leave it out" in line]
    assert hints == ["(Enter keeps 64; type - alone to leave it out; type < to keep the answer as it was)"], hints


def test_the_review_after_a_change_says_what_else_it_moved() -> None:
    """A changed GPU model works the GPU memory out again: the next review says so, with both values, once."""
    keys = "".join(A100X4) + change("gpu_model") + BACKSPACE * 4 + "V100" + ENTER + ENTER * 6 + ENTER
    session, shown = drive(keys)
    assert session.answers["gpu_model"] == "V100" and session.answers["gpu_memory_gb"] == 31.75
    said = [line for line in shown.splitlines() if "also changed" in line]
    assert said == ["Your change to GPU model also changed: Memory per device (GiB) 80.0 -> 31.75."], said
    # The first review, before any change, says nothing of the kind.
    assert shown.index("also changed") > shown.index("Review your answers")


def test_review_screen_shows_labels_and_yes_no() -> None:
    _, shown = drive("".join(A100X4) + ENTER)
    review = shown[shown.index("Review your answers") :]
    assert "GPUs per machine" in review and "Hugging Face Accelerate" in review and "Full fine-tune" in review
    assert re.search(r"Gradient checkpointing +yes", review)
    for raw in ("True", "False", "None"):
        assert raw not in review, f"the review screen shows {raw!r} to the user"
    # Rows read by their labels; an id appears only where a computed default names the answer it follows.
    for raw in ("gpus_per_node", "gradient_checkpointing"):
        assert not re.search(rf"^\s*{raw}\b", review, re.MULTILINE), f"a review row is labelled {raw!r}"
    assert "(not given)" in review, "a skipped question is listed, so it can be given on the review screen"
    # Every answered row says where its value came from: here all were given at the prompt.
    assert re.search(r"GPUs per machine +4 +your answer", review), review


def test_back_returns_to_the_previous_question_and_keeps_going() -> None:
    # Axolotl first; on the hardware menu Apple silicon is disabled, so go back and take Accelerate.
    back_from_hardware = DOWN * 2 + ENTER  # nvidia -> amd -> "Back"
    keys = DOWN + ENTER + back_from_hardware + UP + ENTER  # target again: up to Accelerate
    keys += DOWN * 3 + ENTER  # hardware: nvidia, amd, cpu, mps
    keys += "16" + ENTER + "1B" + ENTER + ENTER * 6 + ENTER + ENTER  # memory, model, method, lora_rank..base_dtype
    session, _ = drive(keys + ENTER)
    assert session.answers["target"] == "accelerate" and session.answers["hardware"] == "mps"


def test_typing_the_back_mark_in_a_text_question_goes_back() -> None:
    keys = A100X4.copy()
    # gpus_per_node: clear the default, type "<" to go back to gpu_model (pre-filled with the
    # earlier answer), replace it, then answer the GPU count.
    keys[3] = BACKSPACE + "<" + ENTER + BACKSPACE * 4 + "H100" + ENTER + BACKSPACE + "4" + ENTER
    session, _ = drive("".join(keys) + ENTER)
    assert session.answers["gpu_model"] == "H100" and session.answers["gpus_per_node"] == 4
    assert session.answers["gpu_memory_gb"] == pytest.approx(79.65), "the new model's memory is the default"


def test_ctrl_c_keeps_the_answers_so_far() -> None:
    keys = "".join(A100X4[:3]) + CTRL_C
    with pytest.raises(InterruptedByUser) as info:
        drive(keys)
    assert info.value.partial == {"target": "accelerate", "hardware": "nvidia", "gpu_model": "A100"}


class Recorder:
    """A scripted prompter that records the steps it is shown."""

    def __init__(self, answers: dict[str, Any]) -> None:
        self.answers = answers
        self.steps: list[Step] = []

    def ask(self, step: Step) -> Any:
        self.steps.append(step)
        return step.validate(self.answers[step.question.id]) if step.question.id in self.answers else None

    def review(self, tree: Any, answers: Any) -> str | None:
        return None


def steps_for(answers: dict[str, Any]) -> Iterator[Step]:
    recorder = Recorder(answers)
    collect(tree(), Sources(prompter=recorder))
    yield from recorder.steps


def test_step_counter_and_disabled_reasons() -> None:
    steps = list(
        steps_for(
            {
                "target": "axolotl",
                "hardware": "nvidia",
                "gpus_per_node": 1,
                "gpu_memory_gb": 24,
                "model": "7B",
                "method": "lora",
                "offload": "auto",
                "sequence_length": 4096,
                "micro_batch_size": 1,
                "gradient_checkpointing": True,
            }
        )
    )
    numbers = [s.number for s in steps]
    assert numbers == list(range(1, len(steps) + 1))
    hardware = next(s for s in steps if s.question.id == "hardware")
    assert set(hardware.disabled) == {"cpu", "mps", "tpu", "hpu", "xpu", "npu", "mlu", "musa"}
    assert "(CUDA) and AMD (ROCm) GPUs only, but Accelerate supports this hardware" in hardware.disabled["cpu"]


def test_cpu_run_asks_no_gpu_questions() -> None:
    cpu = {**ANSWERS[6], "cpu_processes": 2, "micro_batch_size": 1}
    steps = {s.question.id: s for s in steps_for(cpu)}
    assert not {"gpus_per_node", "offload", "gpu_memory_gb", "deepspeed_config"} & set(steps)
    assert "qlora" in steps["method"].disabled


def test_prompted_path_answer_is_checked_inline(tmp_path: Path) -> None:
    bad = tmp_path / "ds.json"
    bad.write_text('{"zero_optimization": {"stage": 2, "offload_param": {"device": "cpu"}}}')
    good = tmp_path / "good.json"
    good.write_text('{"zero_optimization": {"stage": 3}}')
    keys = A100X4.copy()
    keys[11] = str(bad) + ENTER + BACKSPACE * len(str(bad)) + str(good) + ENTER
    del keys[17]  # no model_parallel question once a DeepSpeed JSON is given,
    del keys[12]  # and no offload question
    session, _ = drive("".join(keys) + ENTER)
    assert session.answers["deepspeed_config"] == str(good)
    assert session.inputs.deepspeed is not None and session.inputs.deepspeed.stage == 3


def test_each_section_is_announced_once_at_80_columns() -> None:
    _, shown = drive("".join(A100X4) + ENTER)
    headers = [line for line in shown.splitlines() if "(part " in line]
    names = [h.split("(part")[0].strip(" ─") for h in headers]
    assert names == ["Tool and hardware", "Model and method", "Memory", "Parallel layout", "Options"]
    assert [h.split("(part ")[1][:1] for h in headers] == ["1", "2", "3", "4", "5"]
    # Each part after the first starts after a blank line, apart from the last answer of the one before.
    lines = shown.splitlines()
    later = [i for i, line in enumerate(lines) if "(part " in line and "─" in line][1:]
    assert later and all(lines[i - 1].strip() == "" for i in later), [lines[i - 1] for i in later]


class ChangeOnce(Recorder):
    """Answers from a mapping; on the first review asks to change one answer, to `new`."""

    def __init__(self, answers: dict[str, Any], change: str, new: Any) -> None:
        super().__init__(answers)
        self.change, self.new, self.reviews = change, new, 0

    def review(self, tree: Any, answers: Any) -> str | None:
        self.reviews += 1
        if self.reviews == 1:
            self.answers[self.change] = self.new
            return self.change
        return None


@pytest.mark.parametrize("change", ["model", "method", "gpus_per_node", "sequence_length", "micro_batch_size"])
def test_every_review_edit_with_a_brought_json_asks_again_and_goes_on(change: str) -> None:
    # Taking an answer back leaves the estimate incomplete while the add-ons look at the decision:
    # it must be decided without rendering any explanation text.
    ds = str(Path(__file__).parent / "assets" / "ds_zero3.json")
    answers = {**ANSWERS[13], "deepspeed_config": ds, "tune": False, "moe_layer_cls_names": None}
    new = {"model": "13B", "method": "lora", "gpus_per_node": 8, "sequence_length": 4096, "micro_batch_size": 2}
    prompter = ChangeOnce(answers, change, new[change])
    session = collect(tree(), Sources(prompter=prompter))  # type: ignore[arg-type]
    assert session.answers[change] == new[change]
    assert session.answers["deepspeed_config"] == ds and prompter.reviews == 2


def drive80(keys: str, sources: Sources | None = None) -> tuple[Session, str]:
    """`drive` with an 80-column console; `sources` may bring file answers."""
    shown = io.StringIO()
    with create_pipe_input() as pipe:
        pipe.send_text(keys)
        pipe.close()
        prompter = QuestionaryPrompter(Console(file=shown, width=80), input=pipe, output=DummyOutput())
        given = sources or Sources()
        given.prompter = prompter
        try:
            session = collect(tree(), given)
        except (KeyboardInterrupt, InterruptedByUser):
            raise KeysRanOut(shown.getvalue()) from None
    return session, shown.getvalue()


class KeysRanOut(AssertionError):
    """The keys ended before the run did; `screen` is everything shown so far."""

    def __init__(self, screen: str) -> None:
        super().__init__(f"the keys ran out; the screen so far:\n{screen[-1500:]}")
        self.screen = screen


def test_choice_descriptions_and_unavailable_reasons_are_printed_whole_at_80_columns() -> None:
    keys = DOWN + ENTER + ENTER  # Axolotl; hardware: NVIDIA (the rest runs out)
    with pytest.raises(KeysRanOut) as info:
        drive80(keys)
    screen = info.value.screen
    assert all(len(line) <= 80 for line in screen.splitlines())
    words = " ".join(screen.split())
    reason = tree().question("hardware").choice("mps").disabled_reason  # type: ignore[union-attr]
    assert "NVIDIA GPUs (CUDA): A100, H100" in words, "the available choices with their descriptions"
    # One line for the reason, naming every hardware it rules out, wrapped, not cut at the edge.
    assert "Not available: CPU only, Apple silicon (MPS), Google TPU (XLA)" in words
    said = str(reason)[:1].upper() + str(reason)[1:]  # it opens its own sentence
    assert words.count(said) == 1 and f"Moore Threads GPUs (MUSA). {said}." in words


def test_typing_replaces_a_default_and_a_refused_value_is_explained_in_full() -> None:
    keys = A100X4.copy()
    keys[3] = "4" + ENTER  # no Backspace: the default 1 is a placeholder, not text to append to
    keys[7] = "7Q" + ENTER + "7B" + ENTER
    session, shown = drive80("".join(keys) + ENTER)
    assert session.answers["gpus_per_node"] == 4 and session.answers["model"] == "7B"
    words = " ".join(shown.split())
    assert "7Q: not allowed:" in words and "such as 7B" in words
    assert all(len(line) <= 80 for line in shown.splitlines())


def test_the_review_screen_says_where_each_answer_came_from_and_what_a_change_dropped() -> None:
    # From a file: 4 A100s; typed on the review screen: 1 GPU, which drops the Megatron question.
    given = Sources(file_values={"target": "accelerate", "hardware": "nvidia", "gpu_model": "A100", "gpus_per_node": 4})
    # The global batch followed the GPU count (a derived default): asked again with its new value; on 1 GPU
    # the optimizer is asked (Enter keeps AdamW); then the review screen again (Enter).
    keys = "".join(A100X4[4:]) + DOWN + ENTER + DOWN * 3 + ENTER + "1" + ENTER + ENTER + ENTER + ENTER
    session, shown = drive80(keys, given)
    assert session.answers["gpus_per_node"] == 1 and "megatron" not in session.answers
    first, second = shown.split("Review your answers")[1:3]
    assert re.search(r"GPU model +A100 +from your answers file", first)
    # The legend names that source too, apart from the "from X" of an answer worked out from others.
    assert "from your answers file or from --set = given there, not asked" in " ".join(first.split())
    assert "No longer asked after your change: Code written for Megatron-LM (was no)" in " ".join(second.split())


def test_a_part_with_no_questions_is_named_when_it_is_passed_over() -> None:
    # One A10G: no parallel layout to ask about on one GPU, so part 4 is passed over, and said so.
    keys = [ENTER, ENTER, "A10G" + ENTER, ENTER, ENTER, ENTER, ENTER, "7B" + ENTER]
    # method, lora_rank, objective, DeepSpeed JSON, offload, optimizer, sequence, micro-batch, global batch,
    # checkpointing, chunked loss, extras
    keys += [ENTER] * 12
    session, shown = drive80("".join(keys) + ENTER)
    assert session.answers["gpus_per_node"] == 1 and "model_parallel" not in session.answers
    # With why its first question was not asked, in the words the explanations use.
    assert (
        "No questions in Parallel layout (part 4 of 5) for these answers: needs 2 or more GPUs; this run has 1."
        in " ".join(shown.split())
    )
    # Where to look up a term is said once, under the first part's header, before the first question.
    hint = "A term you do not know: backend-wizard glossary TERM, in another terminal."
    assert shown.count(hint) == 1, shown[:600]
    assert shown.index("(part 1 of 5)") < shown.index(hint) < shown.index("(part 2 of 5)")


def test_the_resume_command_is_cut_only_between_options() -> None:
    from wizard.ui.console import command_lines

    command = shlex.join(
        [
            *("backend-wizard", "--answers", "partial answers.yaml", "--ask-missing", "--output-dir", "a b/" * 12),
            *("--explain", "--tree", "/opt/trees/decision_tree.yaml", "--force"),
        ]
    )
    for width in (40, 60, 78, 200):
        lines = command_lines(command, width)
        joined = " ".join(line.strip().removesuffix("\\") for line in lines)
        assert shlex.split(joined) == shlex.split(command), "the lines paste into a shell as the same command"
        assert all(line.rstrip().endswith("\\") for line in lines[:-1])
        assert all(line.split()[0].startswith(("backend-wizard", "--")) for line in lines)


def test_answers_that_could_not_be_saved_are_said_after_the_errors_own_hint() -> None:
    from wizard.errors import SavedAnswers, WizardError
    from wizard.report import error_envelope
    from wizard.ui.console import print_error

    error = WizardError("boom", hint="do this")
    failed = SavedAnswers(problem="disk full")
    body = error_envelope(error, failed)["error"]
    assert body["hint"] == "do this; could not save the answers so far: disk full" and "resume" not in body
    assert error.hint == "do this"  # the error itself stays as it was raised
    alone = error_envelope(WizardError("boom"), failed)["error"]
    assert alone["hint"] == "could not save the answers so far: disk full"
    saved = SavedAnswers(resume=("answers-partial.yaml", "backend-wizard --answers answers-partial.yaml"))
    assert error_envelope(error, saved)["error"] == {
        "type": "WizardError",
        "exit_code": 2,
        "message": "boom",
        "hint": "do this",
        "resume": {"file": "answers-partial.yaml", "command": "backend-wizard --answers answers-partial.yaml"},
    }
    console = Console(file=io.StringIO(), width=200)
    print_error(console, error, saved)
    printed = console.file.getvalue()  # type: ignore[attr-defined]
    assert "error: boom (hint: do this)" in printed and "answers so far saved to answers-partial.yaml" in printed


def test_a_question_picked_on_the_review_screen_offers_back_as_keeping_the_answer() -> None:
    # Before the review, "<" goes back to the previous question; on a picked question it cancels
    # the change, and the hint says so in those words.
    keys = "".join(A100X4) + change("micro_batch_size") + "<" + ENTER + ENTER
    session, shown = drive(keys)
    before, after = shown.split("Review your answers", 1)
    assert "type < to go back" in before and "keep the answer as it was" not in before
    assert "type < to keep the answer as it was" in after
    assert session.answers["micro_batch_size"] == 1, "the answer is kept as it was"


def test_a_detected_value_the_answers_rule_out_is_not_announced_as_the_default() -> None:
    # Axolotl first, then a Mac detected: Apple silicon is disabled for Axolotl, so the screen
    # says what was found and why it is not offered, and the menu starts on an enabled choice.
    shown = io.StringIO()
    with create_pipe_input() as pipe:
        pipe.send_text(DOWN + ENTER + ENTER + CTRL_C)  # axolotl, then Enter on the hardware menu
        pipe.close()
        prompter = QuestionaryPrompter(Console(file=shown, width=200), input=pipe, output=DummyOutput())
        sources = Sources(prompter=prompter, detected={"hardware": ("mps", "platform: arm64 macOS")})
        with pytest.raises((KeyboardInterrupt, InterruptedByUser)):
            collect(tree(), sources)
        text = " ".join(shown.getvalue().split())
    assert "default detected on this machine" not in text, text
    assert "detected on this machine (platform: arm64 macOS): Apple silicon" in text, text
    assert "which is not available for these answers" in text


# --- every question fits an 80-column terminal -------------------------------------------------


def _shown_lines(message: str, instruction: str | None) -> list[str]:
    """The lines questionary draws for a question: "? ", the message, then the instruction."""
    lines = f"? {message}".split("\n")
    if instruction:
        lines[-1] += f" {instruction}"
    return lines


def test_every_question_fits_80_columns_or_wraps_under_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    import questionary

    from wizard.ui.prompts import QMARK, prompt_lines

    asked: list[tuple[str, str | None]] = []
    for name in ("select", "text", "confirm"):
        real = getattr(questionary, name)

        def record(message: str, *args: Any, _real: Any = real, **kwargs: Any) -> Any:
            asked.append((message, kwargs.get("instruction")))
            return _real(message, *args, **kwargs)

        monkeypatch.setattr(questionary, name, record)
    shown = io.StringIO()
    with create_pipe_input() as pipe:
        pipe.send_text("n" + ENTER + "".join(A100X4) + ENTER)
        pipe.close()
        prompter = QuestionaryPrompter(Console(file=shown, width=80), input=pipe, output=DummyOutput())
        prompter.offer_detect()
        collect(tree(), Sources(prompter=prompter))
    # The offer, every question of the run, then the review.
    assert len(asked) > len(A100X4) and asked[0][1] and asked[-1][0] == "Anything to change?"
    menus = [instruction for message, instruction in asked[1:-1] if instruction is not None]
    assert menus and set(menus) == {" "}, menus  # no hint on the question's line: the menu's first line has it
    for message, instruction in asked:
        # A yes/no question is typed after its instruction, on the same line: one more column.
        for line in _shown_lines(message, instruction):
            assert len(line) + 1 <= 80, (message, instruction)
    # The help, the choices and the review screen above the prompts fit too, and a choice's
    # wrapped description goes on under its own first word ("Apple silicon (MPS): a Mac ...").
    screen = [line.rstrip() for line in shown.getvalue().splitlines()]
    assert all(len(line) <= 80 for line in screen), [line for line in screen if len(line) > 80]
    mps = next(i for i, line in enumerate(screen) if line.startswith("  Apple silicon (MPS): "))
    assert screen[mps + 1].startswith(" " * len("  Apple silicon (MPS): ")) and screen[mps + 1].strip()
    assert any(line.startswith("Review your answers") for line in screen)
    # The same for every question of the tree at the highest step count an interview reaches, with
    # the room a text prompt leaves for typing: a line too long is broken between words and goes on
    # under the question's first word.
    for question in tree().questions:
        message = f"(question {len(tree().questions)}) {question.prompt}"
        lines = prompt_lines(message, 80, 13).split("\n")
        assert all(len(QMARK) + len(line) <= 80 for line in lines), lines
        assert len(QMARK) + len(lines[-1]) + 13 <= 80, lines
        # Only the last line keeps that room: a line above it is as full as the next word allows.
        for index in range(len(lines) - 2):  # the last two: the one before the last may give it words
            assert len(QMARK) + len(lines[index].strip()) + 1 + len(lines[index + 1].split()[0]) > 80, lines
        assert all(line.startswith(" " * len(QMARK)) and line[len(QMARK)] != " " for line in lines[1:]), lines
        assert " ".join(line.strip() for line in lines) == message


def test_an_answer_chosen_again_on_the_review_screen_is_the_users_and_a_derived_one_says_so() -> None:
    """Re-picking the default on the review screen makes it the user's answer; the GPU memory taken from the
    GPU model reads "derived", not "default"."""
    # Method changed to LoRA, then its new question, lora_rank, kept at 16.
    keys = "".join(A100X4) + DOWN + ENTER + DOWN * 9 + ENTER + DOWN + ENTER + ENTER + ENTER
    session, shown = drive80(keys)
    assert session.answers["method"] == "lora" and session.origins["method"] == "prompt"
    last = shown.split("Review your answers")[-1]
    assert re.search(r"Training method +LoRA +your answer", last)
    # Worked out from another answer: said as that alone, kept at its prompt or not.
    assert re.search(r"Memory per device \(GiB\) +80\.0 +kept \(from GPU model\) *\n", last), last
    # A question asked and kept with Enter reads "kept", never "default" (which means not asked);
    # a computed default names the answer it follows, and one that follows none is a default.
    assert re.search(r"Tool +Hugging Face Accelerate +kept", last)
    assert re.search(r"Sequence length +2048 +kept", last) and "default, kept" not in last
    # The global batch kept with Enter is planned as the user's batch, and said to be kept.
    assert re.search(r"Global batch \(sequences\) +\d+ +kept, planned as yours", last), last
    # Enter at the micro-batch's prompt left it to the wizard: "auto", said as such.
    assert re.search(r"Micro-batch per device +auto +auto: the wizard picks it", last), last
    # Every source word the list uses is said once under it.
    legend = " ".join(last.split())
    for meaning in (
        "kept = asked, and you took the value offered",
        "from GPU model = worked out from the answers named",
    ):
        assert meaning in legend, legend


def test_parts_with_no_questions_at_the_end_are_said_before_the_review() -> None:
    """A Mac LoRA run ends its questions early: the review says the later parts had none, and why."""
    keys = ENTER + DOWN * 3 + ENTER + "16" + ENTER + "1B" + ENTER + ENTER * 12
    session, shown = drive80(keys)
    assert session.answers["hardware"] == "mps" and session.answers["method"] == "lora"
    announced = re.findall(r"\(part (\d) of (\d)\) ─", shown)
    parts = int(announced[0][1])
    asked = {int(number) for number, _ in announced}
    said = re.findall(r"No questions in (.+?) \(part \d of \d\) for these answers", " ".join(shown.split()))
    # The reason is this run's: the Mac run fits, so no part is said to wait for a fit.
    assert "none fits these answers" not in " ".join(shown.split())
    from helpers import tree as shipped

    sections = shipped().sections
    # Every part is either announced with its questions or said to have none: none passes in silence.
    assert {sections.index(name) + 1 for name in said} | asked == set(range(1, parts + 1)), (said, asked)
    assert max(asked) < parts  # this run's last parts had no questions, and the review said so
    review = shown.index("Review your answers")
    assert all(shown.index(f"No questions in {name}") < review for name in said)
    # The legend's example of a worked-out default is one this list shows (a Mac has no GPU model).
    listed = " ".join(shown[review:].split())
    example = re.search(r"; (from [^;]+?) = worked out from the answers named", listed)
    assert example is not None and "GPU model" not in example.group(1), listed
    assert listed.count(example.group(1)) >= 2, listed


def test_a_menu_that_opens_below_its_first_line_says_whose_choice_that_is() -> None:
    """Training method opens on LoRA, the default: said above the menu, so it is not read as picked."""
    session, shown = drive80("".join(A100X4) + ENTER)
    assert session.answers["method"] == "full"
    text = " ".join(shown.split())
    assert "The menu starts on LoRA, the default." in text
    # The tool menu opens on its first line: nothing to say there.
    assert "The menu starts on Hugging Face Accelerate" not in text


def test_a_yes_no_menu_that_opens_on_no_says_so_and_every_menu_has_its_keys() -> None:
    """Yes/No menus list Yes first: one that opens on No says whose choice that is, as other menus do.

    The key hint is the first line of every menu (a separator), so the question keeps its whole line
    and the hint is in the same place on every menu.
    """
    session, shown = drive80("".join(A100X4) + ENTER)
    text = " ".join(shown.split())
    assert session.answers.get("tune") is False
    assert "The menu starts on No, the default." in text
    wide_session, wide = drive("".join(A100X4) + ENTER)
    assert wide_session.answers == session.answers
    # The hint is the menu's first line, never printed above the question.
    assert "(arrow keys, Enter)" not in text and "(arrow keys, Enter)" not in " ".join(wide.split())


def test_a_default_worked_out_from_many_answers_names_what_works_it_out() -> None:
    """Past three answers, the review names what works the default out and the kinds of answer it reads."""
    from wizard.engine.tree import Ref
    from wizard.ui.prompts import derived_from

    answers = {"gpus_per_node": 2, "num_nodes": 1, "gpu_memory_gb": 24.0, "model": "7B", "method": "lora"}
    sections = {"gpus_per_node": "Tool and hardware", "num_nodes": "Tool and hardware", "gpu_memory_gb": "Memory"}
    sections |= {"model": "Model and method", "method": "Model and method"}
    ref = Ref("answer", "gpus_per_node")
    assert derived_from(ref, answers, sections) == "gpus_per_node"
    from wizard.engine.facts import FACTS

    spec = next(name for name, fact in FACTS.items() if fact.basis and len([n for n in fact.needs if n in answers]) > 3)
    said = derived_from(Ref("fact", spec), answers, sections)
    # What works it out and the kinds of answer it reads: a count ("and 10 more") told a reader nothing.
    assert said == f"{FACTS[spec].basis} of your hardware, model and training answers", said


def test_every_default_worked_out_from_many_answers_says_what_works_it_out() -> None:
    """A count of answers explains nothing: every question default that reads more than three
    answers names its basis ("the memory estimate") and the kinds of answer it reads, never a count."""
    from wizard.engine.facts import FACTS
    from wizard.engine.tree import Ref
    from wizard.ui.prompts import derived_from

    many = {
        q.default.name
        for q in tree().questions
        if isinstance(q.default, Ref)
        and q.default.kind == "fact"
        and len([n for n in FACTS[q.default.name].needs if n != "hardware"]) > 3
    }
    assert many, "no default reads more than three answers"
    for name in sorted(many):
        spec = FACTS[name]
        assert spec.basis, name
        answers = dict.fromkeys(spec.needs, 1)
        said = derived_from(Ref("fact", name), answers, dict.fromkeys(spec.needs, "Memory"))
        assert said == f"{spec.basis} of your hardware, model and training answers", said
        assert not re.search(r"\d+ more", said), said


def test_every_worked_out_default_names_its_answers_by_their_labels_on_the_review() -> None:
    """The review names the answers a default follows as its own rows do ("GPU model"), never by an
    answers-file key ("gpu_model"), for every question whose default is worked out from others."""
    from wizard.engine.tree import Ref
    from wizard.ui.prompts import derived_from

    shipped = tree()
    keys = {q.id for q in shipped.questions}
    for hardware in ("nvidia", "mps"):
        labels = {q.id: q.label_on(hardware) for q in shipped.questions}
        for question in shipped.questions:
            if not isinstance(question.default, Ref):
                continue
            answers = {key: 1 for key in keys} | {"hardware": hardware}
            said = derived_from(question.default, answers, labels=labels)
            words = set(re.findall(r"[a-z0-9_]+", said))
            assert not words & {key for key in keys if "_" in key}, (question.id, said)
            assert not said or any(label.lower() in said.lower() for label in labels.values()), (question.id, said)


def test_extras_asked_for_but_not_offered_are_named_with_why() -> None:
    """Yes to the performance extras on 4 x A100, full fine-tune: FP8 is not asked, and the screen says why."""
    keys = "".join(A100X4[:-1]) + UP + ENTER + ENTER * 12  # tune: yes, then the defaults
    session, shown = drive(keys)
    assert session.answers["tune"] is True and "fp8" not in session.answers
    said = " ".join(shown.split())
    assert "Not offered for these answers:" in said
    assert "FP8: needs FP8 tensor cores" in said and "which the A100 does not have" in said
    assert "8-bit base model: for LoRA only" in said
    assert said.count("Not offered for these answers:") == 1  # said once, not before every extra


def run_on_keys(keys: str, folder: Path) -> tuple[Any, str]:
    """A whole dry run (questions, then the decision) on these keystrokes: the result and the screen's words."""
    from wizard.app import run

    shown = io.StringIO()
    with create_pipe_input() as pipe:
        pipe.send_text(keys)
        pipe.close()
        prompter = QuestionaryPrompter(Console(file=shown, width=200), input=pipe, output=DummyOutput())
        result = run(tree(), Sources(prompter=prompter), folder / "out", force=False, dry_run=True)
    return result, " ".join(shown.getvalue().split())


def test_auto_at_the_micro_batch_prompt_picks_as_a_file_without_it_does(tmp_path: Path) -> None:
    """Enter at the micro-batch's prompt is "auto": with a global batch typed after it, the wizard
    picks the micro-batch exactly as for an answers file that leaves micro_batch_size out, says so
    among the defaults, and leaves it out of answers.yaml; a number typed there, even the offered 1,
    stays."""
    import yaml

    from helpers import decide

    typed_global = BACKSPACE + "32" + ENTER
    auto, screen = run_on_keys("".join(A100X4[:16]) + typed_global + "".join(A100X4[17:]) + ENTER, tmp_path / "auto")
    answers = {k: v for k, v in auto.session.answers.items() if k != "micro_batch_size"}
    from_file = decide({k: v for k, v in answers.items() if auto.session.origins.get(k) != "default"}, tmp_path / "f")
    assert auto.session.answers["micro_batch_size"] == from_file.session.answers["micro_batch_size"]
    plan, file_plan = auto.recommendation.facts.batch, from_file.recommendation.facts.batch
    assert plan is not None and file_plan is not None and plan.micro == file_plan.micro > 1, (plan, file_plan)
    assert plan.micro * plan.accumulation * plan.data_parallel == 32
    assert re.search(r"Micro-batch per device\s+auto\s+auto: the wizard picks it", screen), screen
    from wizard.ui.console import _assumed

    said = " ".join(_assumed(tree(), auto).split())
    assert f"micro_batch_size {plan.micro} (the largest power of two that divides global_batch_size 32" in said, said
    # Left to the wizard at its prompt, it is said as picked on request, not among the assumed defaults.
    picked, _, assumed = said.partition("Defaults used")
    assert picked.startswith("Picked for you, as you asked (auto): micro_batch_size"), said
    assert "micro_batch_size" not in assumed, said
    saved = yaml.safe_load(next(f.text for f in auto.files if f.name == "answers.yaml"))["answers"]
    assert "micro_batch_size" not in saved and saved["global_batch_size"] == 32

    one = BACKSPACE + "1" + ENTER  # typed, though it is the value offered
    typed, _ = run_on_keys("".join(A100X4[:15]) + one + typed_global + "".join(A100X4[17:]) + ENTER, tmp_path / "one")
    assert typed.session.answers["micro_batch_size"] == 1 and "micro_batch_size" not in typed.session.auto
    plan = typed.recommendation.facts.batch
    assert plan is not None and (plan.micro, plan.accumulation, plan.data_parallel) == (1, 8, 4)


def test_a_typed_global_batch_the_gpus_cannot_split_is_asked_again_with_the_nearest_values(tmp_path: Path) -> None:
    """6 sequences over 4 GPUs at micro-batch 1 has no whole accumulation: the question comes back, with why."""
    retyped = BACKSPACE * 3 + "8" + ENTER
    one = BACKSPACE + "1" + ENTER  # micro-batch 1, typed (Enter would leave it to the wizard)
    keys = "".join(A100X4[:15]) + one + BACKSPACE + "6" + ENTER + "".join(A100X4[17:]) + retyped + ENTER
    result, screen = run_on_keys(keys, tmp_path)
    assert "nearest: 4 or 8" in screen, screen[-2000:]
    answers = result.session.answers
    assert answers["global_batch_size"] == 8 and result.session.origins["global_batch_size"] == "prompt"
    plan = result.recommendation.facts.batch
    assert plan is not None and (plan.micro, plan.accumulation, plan.data_parallel) == (1, 2, 4)


@pytest.mark.parametrize("micro", ["auto", 2])
def test_a_brought_json_offers_auto_for_the_micro_batch_exactly_where_it_leaves_it_auto(
    tmp_path: Path, micro: Any
) -> None:
    """A JSON whose train_micro_batch_size_per_gpu is "auto" leaves the pick to the wizard, as no JSON does."""
    data = json.loads((Path(__file__).parent / "assets" / "ds_zero3.json").read_text(encoding="utf-8"))
    ds = tmp_path / "ds.json"
    ds.write_text(json.dumps({**data, "train_micro_batch_size_per_gpu": micro}), encoding="utf-8")
    answers = {**ANSWERS[13], "deepspeed_config": str(ds), "tune": False, "moe_layer_cls_names": None}
    answers.pop("micro_batch_size", None)
    step = next(s for s in steps_for(answers) if s.question.id == "micro_batch_size")
    assert bool(step.auto) is (micro == "auto"), step
    assert step.default == (1 if micro == "auto" else micro)


@pytest.mark.parametrize("in_file", [True, False])
def test_the_micro_batch_auto_hint_says_given_when_the_global_batch_is_already_given(in_file: bool) -> None:
    """With --ask-missing and a global batch in the file, "auto" divides the batch given, not one asked next."""
    answers = {**ANSWERS[13], "tune": False, "moe_layer_cls_names": None}
    answers.pop("micro_batch_size", None)
    answers.pop("global_batch_size", None)
    recorder = Recorder(dict(answers))
    file_values = {"global_batch_size": 32} if in_file else {}
    collect(tree(), Sources(prompter=recorder, file_values=file_values))
    step = next(s for s in recorder.steps if s.question.id == "micro_batch_size")
    assert step.auto, step
    # Only the micro-batch offers auto: every other question is answered as asked.
    assert [s.question.id for s in recorder.steps if s.auto] == ["micro_batch_size"], recorder.steps
    assert ("divides the global batch given" in step.auto) is in_file, step.auto
    assert ("divides the global batch you give next" in step.auto) is not in_file, step.auto


def test_the_layer_offloading_question_shows_the_runs_figures_with_and_without_it() -> None:
    """The default (yes where only layer offloading fits) is shown with the figures it follows."""
    from wizard.engine.facts import derive_facts
    from wizard.engine.memory import to_gib

    answers = {
        "target": "axolotl", "hardware": "nvidia", "gpu_model": "A10G", "gpus_per_node": 1, "num_nodes": 1,
        "cpu_memory_gb": 64, "model": "llama-3.1-8b", "method": "lora", "sequence_length": 4096, "tune": False,
        "offload": "auto", "objective": "sft", "optimizer": "adamw", "micro_batch_size": 1,
        "gradient_checkpointing": True,
        "gpu_memory_gb": 22.49, "global_batch_size": 4,
    }  # fmt: skip
    recorder = Recorder(dict(answers))
    session = collect(tree(), Sources(prompter=recorder))
    step = next(s for s in recorder.steps if s.question.id == "layer_offloading")
    estimates = derive_facts(session.answers, session.inputs).estimates
    plain, layer = estimates["ddp"], estimates["ddp_layer_offload"]
    assert step.default is True and not plain.fits and layer.fits, step
    # The figures are the estimate's own, as the summary's memory table prints them.
    assert step.note == (
        f"Your run by the memory estimate, at micro_batch_size {session.answers['micro_batch_size']}: without layer"
        " offloading about"
        f" {to_gib(plain.total)} GiB per GPU (past the usable line), with it about {to_gib(layer.total)} GiB and"
        f" {to_gib(layer.host_per_node)} GiB of host RAM (fits), of {to_gib(plain.budget)} GiB usable."
    ), step.note


def test_a_questions_figures_say_they_may_grow_where_the_micro_batch_is_still_auto() -> None:
    """Figures at micro-batch 1 shown while the micro-batch is auto: the summary's may be at a larger one, said."""
    from wizard.session import AUTO, AUTO_MICRO_NOTE

    class AutoRecorder(Recorder):
        def ask(self, step: Step) -> Any:
            if self.answers.get(step.question.id) is AUTO:
                self.steps.append(step)
                return AUTO
            return super().ask(step)

    answers: dict[str, Any] = {
        "target": "axolotl", "hardware": "nvidia", "gpu_model": "A10G", "gpus_per_node": 1, "num_nodes": 1,
        "cpu_memory_gb": 64, "model": "llama-3.1-8b", "method": "lora", "sequence_length": 2048, "tune": False,
        "offload": "auto", "objective": "sft", "optimizer": "adamw", "gradient_checkpointing": True,
        "gpu_memory_gb": 22.49, "global_batch_size": 16,
    }  # fmt: skip
    for micro, said in ((AUTO, True), (1, False)):
        recorder = AutoRecorder({**answers, "micro_batch_size": micro})
        collect(tree(), Sources(prompter=recorder))
        step = next(s for s in recorder.steps if s.question.id == "layer_offloading")
        assert step.note.startswith("Your run by the memory estimate, at micro_batch_size 1"), step.note
        assert step.note.endswith(AUTO_MICRO_NOTE) is said, step.note


def test_every_menu_opens_with_the_key_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each menu's first line says how to choose, in the same place on every menu, never selectable."""
    import questionary

    from wizard.ui.prompts import KEY_HINT

    menus: list[list[Any]] = []
    real = questionary.select

    def record(message: str, *args: Any, **kwargs: Any) -> Any:
        menus.append(list(kwargs.get("choices") or []))
        return real(message, *args, **kwargs)

    monkeypatch.setattr(questionary, "select", record)
    drive80("".join(A100X4) + ENTER)
    questions = [choices for choices in menus if choices and isinstance(choices[0], questionary.Separator)]
    assert len(questions) >= 8, menus
    for choices in questions:
        assert choices[0].title == KEY_HINT and not isinstance(choices[1], questionary.Separator), choices


def test_an_extra_left_out_by_the_decision_names_the_backend_it_is_for() -> None:
    """An add-on asked only for some backends says which, and what these answers lead to: never "none fits"."""
    from wizard.engine.evaluate import decided_outcome, make_lookup, text_context
    from wizard.engine.facts import Inputs, derive_facts
    from wizard.session import _reason

    answers = {
        "target": "accelerate", "hardware": "nvidia", "gpu_model": "A100", "gpus_per_node": 4, "num_nodes": 1,
        "gpu_memory_gb": 80, "model": "7B", "method": "full", "objective": "sft", "megatron": False,
        "offload": "auto", "optimizer": "adamw", "sequence_length": 2048, "micro_batch_size": 1,
        "global_batch_size": 4, "gradient_checkpointing": True, "tune": True,
    }  # fmt: skip
    facts = derive_facts(answers, Inputs())
    outcome = decided_outcome(tree(), answers, Inputs())
    assert outcome.get("backend") == "fsdp2"
    hook = tree().question("ddp_comm_hook")
    assert hook is not None
    reason = _reason(tree(), hook, make_lookup(answers, facts, outcome), text_context(tree(), answers, facts))
    assert (
        reason == "only for DDP (distributed data parallel); these answers lead to FSDP2 (fully sharded data parallel)"
    )


def test_an_extra_dropped_by_a_change_names_the_backend_the_answers_now_lead_to() -> None:
    """Layer offloading turned off on the review screen: the 8-bit base (asked for one GPU) is dropped, and said why."""
    answers = {
        "target": "axolotl", "hardware": "nvidia", "gpu_model": "A10G", "gpus_per_node": 1, "num_nodes": 1,
        "gpu_memory_gb": 22.49, "cpu_memory_gb": 64, "model": "llama-3.1-8b", "method": "lora", "objective": "sft",
        "offload": "auto", "optimizer": "adamw", "sequence_length": 4096, "micro_batch_size": 1,
        "global_batch_size": 16, "gradient_checkpointing": True, "tune": True, "load_in_8bit": False,
    }  # fmt: skip
    prompter = ChangeOnce(dict(answers), "layer_offloading", False)
    session = collect(tree(), Sources(prompter=prompter))  # type: ignore[arg-type]
    dropped = {qid: why for qid, why in session.dropped_why.items() if qid in tree().addon_ids}
    for why in dropped.values():
        assert "once a backend is decided" not in why and "none fits" not in why, dropped
        assert "these answers lead to" in why or "not for" in why or why, dropped


def test_an_extra_left_out_by_a_refusal_says_no_backend_fits_in_words() -> None:
    """The extras hang on a backend fitting: where none does, the reason says so, never the raw outcome value."""
    from wizard.engine.evaluate import decided_outcome, make_lookup, text_context
    from wizard.engine.facts import Inputs, derive_facts
    from wizard.session import _reason

    answers = {
        "target": "accelerate", "hardware": "nvidia", "gpu_model": "RTX 4090", "gpus_per_node": 1, "num_nodes": 1,
        "gpu_memory_gb": 23.99, "model": "70B", "method": "full", "objective": "sft", "megatron": False,
        "offload": "none", "sequence_length": 2048, "micro_batch_size": 1, "gradient_checkpointing": True,
    }  # fmt: skip
    facts = derive_facts(answers, Inputs())
    outcome = decided_outcome(tree(), answers, Inputs())
    assert outcome.get("refused") is True
    lookup, context = make_lookup(answers, facts, outcome), text_context(tree(), answers, facts)
    said = {q.id: _reason(tree(), q, lookup, context) for q in tree().questions if q.id in tree().addon_ids}
    assert "asked only where a backend fits, and none fits these answers" in said.values(), said
    assert not any("False" in why or "True" in why for why in said.values()), said


def test_changing_an_auto_micro_batch_on_the_review_screen_says_what_enter_takes() -> None:
    """An answer left to the wizard ("auto") and changed on the review screen: Enter takes the number auto
    picked, and the hint says so, never "Enter keeps" (nothing typed is kept)."""
    keys = "".join(A100X4) + change("micro_batch_size") + ENTER + ENTER
    session, shown = drive80(keys)
    asked_again = shown.split("Review your answers")[1]
    assert "(Enter takes 1, what auto picked; or type a number" in " ".join(asked_again.split()), asked_again
    assert "Enter keeps 1" not in asked_again
    assert session.answers["micro_batch_size"] == 1 and "micro_batch_size" not in session.auto


def test_every_review_label_fits_its_column_on_one_line() -> None:
    """Invariant over the tree: every question's review label (and its per-hardware variants) fits the review's
    label column, and on the 80-column review screen each label is printed whole on one line."""
    from wizard.ui.prompts import REVIEW_LABEL_WIDTH

    for question in tree().questions:
        for label in (question.label, *question.labels_on_hardware.values()):
            assert not label or len(label) <= REVIEW_LABEL_WIDTH, (question.id, label)
    _, shown = drive80("".join(A100X4) + ENTER)
    review = shown.split("Review your answers")[-1]
    for qid in A100X4_REVIEW:
        label = tree().question(qid).label
        assert any(line.startswith(label) for line in review.splitlines()), (label, review)
    assert all(len(line.rstrip()) <= 80 for line in review.splitlines()), review
    # No word of a wrapped cell is lost at the right edge (min/max column widths once cut them).
    flat = " ".join(review.split())
    assert "auto: the wizard picks it" in flat, review


def test_the_layer_offloading_question_on_two_gpus_weighs_it_against_fsdp2() -> None:
    """Two 4090s a whole LoRA copy does not fit: the question defaults to yes and its note gives the
    full copy, layer offloading beside DDP (with host RAM and step) and FSDP2, the estimate's figures."""
    from wizard.engine.facts import derive_facts
    from wizard.engine.memory import sum_gib, to_gib
    from wizard.engine.speed import band_text

    answers = {
        "target": "axolotl", "hardware": "nvidia", "gpu_model": "RTX 4090", "gpus_per_node": 2, "num_nodes": 1,
        "gpu_link": "pcie", "cpu_memory_gb": 62, "model": "mistral-7b", "method": "lora", "sequence_length": 12288,
        "tune": False, "offload": "auto", "objective": "sft", "optimizer": "adamw", "micro_batch_size": 1,
        "gradient_checkpointing": True, "gpu_memory_gb": 23.99, "global_batch_size": 16, "model_parallel": False,
    }  # fmt: skip
    recorder = Recorder(dict(answers))
    session = collect(tree(), Sources(prompter=recorder))
    step = next(s for s in recorder.steps if s.question.id == "layer_offloading")
    facts = derive_facts({k: v for k, v in session.answers.items() if k != "layer_offloading"}, session.inputs)
    assert step.default is True and facts.get("layer_offload_beside_ddp") is True, step
    plain, sharded = facts.estimates["ddp"], facts.estimates["fsdp2"]
    assert step.note == (
        f"Your run by the memory estimate, at micro_batch_size {session.answers['micro_batch_size']}, of"
        f" {to_gib(plain.budget)} GiB"
        f" usable per GPU: a full copy needs about {to_gib(plain.total)} GiB (past the usable line); with layer"
        f" offloading beside DDP about {facts.get('layer_offload_gib')} GiB and"
        f" {facts.get('layer_offload_host_gib')} GiB of host RAM per machine (a step of about"
        f" {facts.get('layer_offload_step')}); sharded with FSDP2 instead about"
        f" {to_gib(sharded.total)} GiB ({band_text(facts.speeds['fsdp2'])}"
        + (
            f", a close call: {sum_gib(sharded.total, sharded.transient)} GiB for a moment as the backward pass"
            " starts, and at this long context "
            + (
                "even 32% more (the kinder end of the 32%-39% allowance), about"
                f" {round(float(sum_gib(sharded.total, sharded.transient)) / 0.76, 1)} GiB, would"
                " pass the GPU's 23.99 GiB, so it would likely run out of memory there"
                if sharded.close_call_likely
                else f"39% more, about {round(float(sum_gib(sharded.total, sharded.transient)) * 1.39, 1)} GiB, would"
                " pass the GPU's 23.99 GiB, so it may run out of memory there"
            )
            if sharded.close_call
            else ""
        )
        + ")."
    ), step.note


def test_the_base_dtype_question_shows_both_precisions_figures() -> None:
    """On a Mac the base-precision question shows the run's figure with a bf16 base and with an fp32 one,
    the estimate's own, at the micro-batch it names; the bf16 one is the smaller."""
    from dataclasses import replace

    from wizard.engine.facts import derive_facts
    from wizard.engine.memory import estimate, to_gib

    answers = {
        "target": "accelerate", "hardware": "mps", "gpu_memory_gb": 64, "model": "llama-3.2-3b", "method": "lora",
        "objective": "sft", "sequence_length": 2048, "micro_batch_size": 2, "global_batch_size": 16,
        "gradient_checkpointing": True,
    }  # fmt: skip
    recorder = Recorder(dict(answers))
    session = collect(tree(), Sources(prompter=recorder))
    step = next(s for s in recorder.steps if s.question.id == "base_dtype")
    facts = derive_facts({k: v for k, v in session.answers.items() if k != "base_dtype"}, session.inputs)
    work = facts.workload
    assert work is not None and step.note is not None
    figures = {half: estimate(replace(work, half_precision=half), "ddp", 64.0, None).total for half in (True, False)}
    assert figures[True] < figures[False]
    assert f"at micro_batch_size 2: with a bf16 base about {to_gib(figures[True])} GiB" in step.note, step.note
    assert f"with an fp32 base about {to_gib(figures[False])} GiB" in step.note, step.note


@pytest.mark.parametrize(
    ("keys", "expected"),
    [(DOWN * 5 + ENTER, "c"), (DOWN * 5 + UP + ENTER, "b"), (UP * 2 + ENTER, "a"), (DOWN + UP * 4 + ENTER, "a")],
)
def test_a_menu_cursor_stops_at_its_first_and_last_choice_instead_of_wrapping_around(keys: str, expected: str) -> None:
    """Down past the last choice (a disabled one after it is skipped) stays there, and Up past the first stays there:
    with questionary's wrapping, Down once too often on "? The rest of this help" picked the first answer, "Yes"."""
    from questionary import Choice, Separator, select

    from wizard.ui.prompts import _ask

    with create_pipe_input() as pipe:
        pipe.send_text(keys)
        pipe.close()
        choices = [Separator("(arrow keys, Enter)"), "a", Separator(), "b", "c", Choice("d", disabled="not here")]
        assert _ask(select("Pick one", choices=choices, input=pipe, output=DummyOutput())) == expected


def test_a_part_skipped_for_two_reasons_names_both_with_their_questions(tmp_path: Path) -> None:
    """A 4-GPU run with a DeepSpeed JSON and short sequences skips the parallel-layout part for two reasons, one
    per question: a sequence too short for context parallel, and the JSON, which fixes the layout. The skip line
    names both; a run whose two questions fail for the same reason says it once, without labels."""
    import wizard.session as ws
    from wizard.engine.facts import derive_facts

    ds = tmp_path / "ds.json"
    ds.write_text('{"zero_optimization": {"stage": 2}}', encoding="utf-8")
    four = {
        "target": "accelerate", "hardware": "nvidia", "gpu_model": "A100 40GB", "gpus_per_node": 4, "num_nodes": 1,
        "model": "13B", "method": "full", "sequence_length": 2048, "deepspeed_config": str(ds),
    }  # fmt: skip
    one = {**four, "gpus_per_node": 1, "deepspeed_config": None}
    said = {}
    for name, answers in (("four", four), ("one", one)):
        session = Session()
        session.answers.update({k: v for k, v in answers.items() if v is not None})
        facts = derive_facts(session.answers, session.inputs)
        lookup = ws.make_lookup(session.answers, facts, None)
        said[name] = ws._sections_without_answers(tree(), ["Parallel layout"], session, lookup, facts)[
            "Parallel layout"
        ]
    assert said["four"] == (
        '"Context parallel size" not asked: only for sequences of 16,384 tokens or more; this run\'s are 2,048.'
        f' "Tensor parallel set by hand" not asked: this run brings a DeepSpeed JSON ({ds})'
    ), said
    assert said["one"] == "needs 2 or more GPUs; this run has 1", said


def test_the_global_batchs_enter_hint_says_what_the_default_is_and_that_fine_tuning_takes_more() -> None:
    """A typed question with a default_note says it beside "Enter keeps N": a newcomer who presses Enter on
    the global batch is told it is the files' own batch, below what fine-tuning usually takes."""
    question = tree().question("global_batch_size")
    assert question is not None and "16 to 128" in question.default_note
    _, shown = drive80("".join(A100X4) + ENTER)
    flat = " ".join(shown.split())
    assert re.search(r"\(Enter keeps \d+, " + re.escape(question.default_note), flat), flat[-3000:]
    # A question without a note says "Enter keeps N" alone (the sequence length here).
    assert re.search(r"\(Enter keeps 2048[;)]", flat), flat[-3000:]
    # Changed from the review screen after typing 64: Enter offers 64 back, the answer given, and the note
    # (which speaks of the files' own batch) is not said of it.
    keys = "".join(A100X4[:-5]) + "64" + ENTER + "".join(A100X4[-4:]) + change("global_batch_size") + ENTER + ENTER
    session, shown = drive80(keys)
    again = " ".join(shown.split("Review your answers")[1].split())
    assert "(Enter keeps 64;" in again and question.default_note not in again, again[-2000:]
    assert session.answers["global_batch_size"] == 64


def test_a_number_typed_where_enter_means_auto_is_the_users_answer() -> None:
    """The micro-batch prompt offers "auto" on Enter; typing 1, even the number auto would pick, is an answer:
    the review says "your answer", never "kept" (the value offered was auto, not 1)."""
    index = A100X4_REVIEW.index("micro_batch_size") - 1  # the keys list has num_nodes and gpu_link in one entry
    keys = [*A100X4]
    assert keys[index] == ENTER
    keys[index] = "1" + ENTER
    session, shown = drive80("".join(keys) + ENTER)
    review = shown.split("Review your answers")[-1]
    assert re.search(r"Micro-batch per device +1 +your answer", review), review
    assert session.answers["micro_batch_size"] == 1 and "micro_batch_size" in session.given


@pytest.mark.parametrize(("keys", "taken"), [("y" + ENTER, True), ("n" + ENTER, False), (ENTER, True)])
def test_the_offer_to_plan_the_suggested_json_is_answered_by_keystrokes_at_80_columns(keys: str, taken: bool) -> None:
    """Real prompts: y or n then Enter (Enter alone takes the default, yes); what it does is said before the question,
    naming the folder, and every line fits 80 columns."""
    shown = io.StringIO()
    with create_pipe_input() as pipe:
        pipe.send_text(keys)
        pipe.close()
        prompter = QuestionaryPrompter(Console(file=shown, width=80), input=pipe, output=DummyOutput())
        assert prompter.offer_suggested("/runs/out-suggested") is taken
    screen = shown.getvalue()
    assert all(len(line) <= 80 for line in screen.splitlines()), screen
    assert "Your JSON cannot run on these GPUs" in " ".join(screen.split())
    assert "/runs/out-suggested" in screen


def test_a_gpu_or_model_name_the_wizard_matched_is_said_at_once() -> None:
    """A typed GPU name and a catalogue model name are echoed with what they matched (the card and its memory; the
    model, its parameter count and its Hub repository), right after the answer; a size names no model and says none."""
    from wizard.engine.catalog import lookup_gpu
    from wizard.engine.model_size import shape_for_catalog
    from wizard.ui.prompts import recognised

    keys = A100X4.copy()
    _, shown = drive("".join(keys) + ENTER)
    flat = " ".join(shown.split())
    gpu = lookup_gpu("A100")
    assert gpu is not None
    assert f"Recognised: {gpu.name}, {gpu.memory_gib} GiB as its driver reports it." in flat
    assert "Recognised: " not in flat.split("7B", 1)[1].split("Training method", 1)[0], "a size matches no model"
    keys[7] = "Llama 3.2 3B" + ENTER
    _, shown = drive("".join(keys) + ENTER)
    flat = " ".join(shown.split())
    params = shape_for_catalog("llama-3.2-3b").params
    said = (
        f"Recognised: llama-3.2-3b from the bundled catalog, {params:,} parameters"
        " (its weights are meta-llama/Llama-3.2-3B on the Hub)."
    )
    assert said in flat, flat[-2000:]
    assert recognised("gpu_model", "Quadro Z9") is None and recognised("model", "7B") is None


def test_a_review_change_says_which_worked_out_answers_came_out_the_same() -> None:
    """After a change on the review screen, an answer the wizard works out from the changed one (a fact default that
    reads it, kept) and that came out the same is named as worked out again, so "kept" never reads as "not looked at
    again"; one that does not read the changed answer, or is left to the wizard (auto), is not named."""
    change = DOWN + ENTER + DOWN * A100X4_REVIEW.index("sequence_length") + ENTER + BACKSPACE * 4 + "4096" + ENTER
    session, shown = drive80("".join(A100X4) + change + ENTER)
    assert session.answers["sequence_length"] == 4096
    flat = " ".join(shown.split())
    said = flat.split("Worked out again after your change to Sequence length, the same as before: ", 1)
    assert len(said) == 2, flat[-1500:]
    listed = said[1].split(". ", 1)[0]
    # The checkpointing default reads the model and the sequence length; the GPU's memory reads the GPU model only.
    assert listed.startswith("Gradient checkpointing yes"), listed
    assert "Memory per device" not in listed and "Micro-batch" not in listed, listed


@pytest.mark.parametrize("gpu_seen", [True, False])
def test_the_offer_to_read_this_machine_leans_to_no_where_it_shows_no_gpu(gpu_seen: bool) -> None:
    """Enter alone takes the offer's default: yes where this machine shows a GPU tool (or is a Mac), no where it
    shows none, since the run is then most likely planned for another machine; the line above says which, and that
    a plan for another machine answers n."""
    shown = io.StringIO()
    with create_pipe_input() as pipe:
        pipe.send_text(ENTER)
        pipe.close()
        prompter = QuestionaryPrompter(Console(file=shown, width=80), input=pipe, output=DummyOutput())
        taken = prompter.offer_detect(gpu_seen=gpu_seen)
    flat = " ".join(shown.getvalue().split())
    assert taken is gpu_seen
    assert "Planning for another machine (a cloud GPU, a cluster)? Answer n." in flat
    assert ("This machine shows no GPU, so n is the default." in flat) is (not gpu_seen)
