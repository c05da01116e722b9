"""The short summary and a glossary look-up say less, never something else.

Properties, over every decided path of the walk:

* a note with a short form (`Note`) is shorter than its whole text, and every figure its short form names is a
  figure of the whole text: the short form leaves out, it never says a number the long one does not;
* the short summary prints each note's short form and --explain (like the files' heads) its whole text;
* every sentence of the short "Why not the others" is a sentence --explain prints too, and where sentences were
  left out the short form says how many and where they are;
* a glossary entry looked up without --full opens with its definition's first sentences, says how many more there
  are and how to read them, and with --full prints the definition whole.
"""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
from rich.console import Console

from helpers import decided_paths, tree
from wizard.cli import main
from wizard.engine.glossary import glossary
from wizard.engine.note import Note
from wizard.engine.sentences import sentences
from wizard.ui.console import grouped_runner_ups, print_result

# A figure as the notes write it: 12.8, 1,043.1, 94%, 2e8.
FIGURE = re.compile(r"\d+(?:,\d{3})*(?:\.\d+)?%?")


def _flat(text: str) -> str:
    """Text with its line breaks and box borders gone, words single-spaced, as a reader reads a paragraph."""
    return " ".join(re.sub(r"[│╭╮╰╯]", " ", text).split())


def _bare(text: str) -> str:
    """Text with no whitespace at all: a long word (a path) folds at 80 columns where the text has no space."""
    return "".join(_flat(text).split())


def _summary(result: object, *, detail: bool) -> str:
    out = io.StringIO()
    print_result(Console(file=out, width=80), tree(), result, dry_run=False, detail=detail)  # type: ignore[arg-type]
    return out.getvalue()


def test_a_notes_short_form_is_shorter_and_names_only_its_figures(tmp_path: Path) -> None:
    kinds: set[str] = set()
    for answers, result in decided_paths(tmp_path):
        for warning in result.warnings:
            if not isinstance(warning, Note) or warning.brief == str(warning):
                continue
            kinds.add(" ".join(warning.split()[:3]))
            assert len(warning.brief.split()) < len(warning.split()), (answers, warning.brief)
            whole = set(FIGURE.findall(warning))
            strange = [figure for figure in FIGURE.findall(warning.brief) if figure not in whole]
            assert not strange, (answers, strange, warning.brief, str(warning))
    # The notes shortened across the walk: the script's calls, the offload's host RAM, the near-limit and loss notes,
    # DeepSpeed's CPU Adam, loading under ZeRO-3, the save, FSDP2's changes.
    assert len(kinds) >= 10, sorted(kinds)


def test_the_short_summary_prints_short_forms_and_explain_the_whole(tmp_path: Path) -> None:
    shortened = 0
    for answers, result in decided_paths(tmp_path)[::5]:
        notes = [w for w in result.warnings if isinstance(w, Note) and w.brief != str(w)]
        if not notes:
            continue
        short, long = _flat(_summary(result, detail=False)), _flat(_summary(result, detail=True))
        for note in notes:
            if note.startswith("the loss peak may take"):
                continue  # a close call's note has a short form of the summary's own (test_loss_memory)
            # The list capitalises each item's first letter.
            assert _bare(note.brief)[1:] in _bare(short), (answers, note.brief)
            assert _bare(str(note))[1:] not in _bare(short), (answers, str(note)[:120])
            assert _bare(str(note))[1:] in _bare(long), (answers, str(note)[:120])
            shortened += 1
    assert shortened > 50, shortened


def test_the_short_why_not_says_sentences_of_the_long_one_and_counts_the_rest(tmp_path: Path) -> None:
    trimmed = 0
    for answers, result in decided_paths(tmp_path)[::6]:
        if not result.recommendation.runner_ups:
            continue
        section = _summary(result, detail=False).split("Why not the others", 1)[-1]
        short = _flat(re.split(r"\n(?:To |Before the first|Install where|Files|Would write|Next)", section)[0])
        # Where every reason opens with the brought JSON's precedence, it is said once, above them.
        short = short.split("each of the others loses on its own account: ", 1)[-1]
        # What trimming keeps is sentences of each backend's reason (its short form where it has one).
        reasons = _flat(" ".join(runner.brief or runner.reason for runner in result.recommendation.runner_ups))
        left = re.search(r"(\d+) more sentences? on these: add --explain\.", short)
        if left is not None:
            trimmed += 1
            short = short[: left.start()]
        for sentence in sentences(short):
            # "Also, as for X above: ..." points at sentences said under an earlier backend: its own words.
            if sentence.startswith("Also, as for") or sentence.startswith('"'):
                continue
            # A backend's title opens its first sentence: "FSDP2 (fully sharded data parallel): It would fit ...".
            titled = [title for title, _ in grouped_runner_ups(result.recommendation)]
            for title in sorted(titled, key=len, reverse=True):
                sentence = sentence.removeprefix(f"{title}: ")
            said = sentence.removeprefix("The same as for ")
            # Spaces aside: a long path folds at 80 columns where no space is.
            # Case aside too: below the JSON's line each reason opens with its first letter capitalised.
            assert _bare(said.rstrip(".")).lower() in _bare(reasons).lower() or sentence.startswith(
                "The same as for"
            ), (
                answers,
                sentence,
            )
    assert trimmed > 10, trimmed


def test_a_glossary_entry_opens_short_and_full_prints_it_whole(capsys: pytest.CaptureFixture[str]) -> None:
    long_entries = [term for term in glossary() if len(term.definition) > 900]
    assert len(long_entries) >= 5, [t.term for t in long_entries]
    for term in long_entries:
        name = term.term
        assert main(["glossary", name]) == 0
        shown = _flat(capsys.readouterr().out)
        said = sentences(term.definition)
        assert _flat(said[0]) in shown, name
        assert _flat(said[-1]) not in shown, name
        more = re.search(r"\((\d+) more sentences?: backend-wizard glossary (.+?) --full\)", shown)
        assert more is not None, (name, shown[-300:])
        kept = [s for s in said if _flat(s) in shown]
        assert int(more.group(1)) == len(said) - len(kept), name
        assert more.group(2).strip('"') == name
        assert main(["glossary", name, "--full"]) == 0
        whole = _flat(capsys.readouterr().out)
        assert _flat(term.definition) in whole, name
        assert "--full)" not in whole, name


@pytest.mark.parametrize(("ram", "short"), [(2048, True), (4096, False)])
def test_the_load_note_says_where_an_fp32_load_would_not_fit_the_machine(tmp_path: Path, ram: int, short: bool) -> None:
    """Loading before the Accelerator exists holds a whole copy per process: in 16 bit it fits 2 TB here, in fp32
    (a Transformers version that does not read the checkpoint's dtype) it does not, and both forms of the note say
    so exactly where it does not."""
    from helpers import decide

    answers = {
        "target": "accelerate",
        "hardware": "nvidia",
        "gpu_model": "H100",
        "gpus_per_node": 8,
        "num_nodes": 2,
        "model": "70B",
        "method": "full",
        "cpu_memory_gb": ram,
    }
    result = decide(answers, tmp_path / str(ram))
    note = next(w for w in result.warnings if w.startswith("Create the Accelerator before"))
    said = f"more than the {ram} GiB of each machine"
    assert isinstance(note, Note)
    assert (said in note) is short and (said in note.brief) is short, note.brief
    assert "in 16 bit" in note.brief and "fp32, twice that" in note.brief
