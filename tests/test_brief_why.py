"""The summary says why in a few sentences; --explain and the config file's head say it in full.

Properties over every path of the walk: the short Why is the opening of the decision's own text,
sentence for sentence; it stays within its length unless one sentence is longer; it never drops
the wizard's own "Warning:"; and every part it leaves out is named by its label, so a reader knows
what --explain adds. End to end: what a user reads at 80 columns, with and without --explain, and
the written file's head.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml
from test_explanations import run_cli

from helpers import REPO, decided_paths
from wizard.ui.brief_why import BRIEF_CHARS, LABEL_CHARS, brief_why, paragraph_label, rest_of_reason, sentences
from wizard.ui.console import split_header


def _flat(text: str) -> str:
    return " ".join(text.split())


def test_sentences_end_outside_brackets_and_not_inside_numbers() -> None:
    text = (
        "On one GPU the 13.0B run needs about 196.1 GiB (80% of 80.0 GiB. The rest is margin), so it must"
        " offload. DeepSpeed keeps the weights. 4 GPUs would fit."
    )
    assert sentences(text) == [
        "On one GPU the 13.0B run needs about 196.1 GiB (80% of 80.0 GiB. The rest is margin), so it must offload.",
        "DeepSpeed keeps the weights.",
        "4 GPUs would fit.",
    ]


def test_a_label_is_the_words_before_the_first_colon_outside_brackets() -> None:
    assert paragraph_label("Host RAM: the gradients") == "Host RAM"
    assert paragraph_label("GPU memory: ZeRO-2 keeps") == "GPU memory"
    assert paragraph_label("To run ZeRO-2 instead (if it matters (PCIe boards)): save") == "To run ZeRO-2 instead"
    assert paragraph_label("The run needs 3.0 GiB: more than") is None
    assert paragraph_label("A paragraph with no colon at all.") is None


def test_the_short_why_keeps_whole_sentences_up_to_its_length_and_names_the_rest() -> None:
    first = "A" + "a" * 300 + "."
    second = "B" + "b" * 200 + "."
    third = "C" + "c" * 200 + "."
    why = brief_why(f"{first} {second} {third}\nHost RAM: more.\nSpeed: more.")
    assert why.text == f"{first} {second}"
    assert why.left_out == (f'1 more sentence of the Why, from "{third[:-1]}"', '"Host RAM"', '"Speed"')
    # A longer cut sentence is named by its opening words.
    long = brief_why(f"{first} {second} Without it, each GPU would hold a full copy {'x' * 300}. And more.")
    assert long.left_out == ('2 more sentences of the Why, from "Without it, each GPU would hold a full..."',)
    assert brief_why(first).left_out == ()
    compared = brief_why(f"{first}\nWhy FSDP2 over DeepSpeed: ZeRO-2 fits too.\nHost RAM: more.")
    assert compared.text == f"{first}\nWhy FSDP2 over DeepSpeed: ZeRO-2 fits too." and compared.left_out == (
        '"Host RAM"',
    )
    # A warning further on is kept, whatever the length.
    warned = brief_why(f"{first} {second} {third} Warning: it may not fit. Measure first.")
    assert warned.text.endswith("Warning: it may not fit. Measure first.") and third not in warned.text


def test_over_every_path_the_short_why_is_the_decisions_own_opening(tmp_path: Path) -> None:
    for answers, result in decided_paths(tmp_path, refusals=True):
        because = result.recommendation.because
        opening, *rest = [part for part in because.split("\n") if part.strip()]
        why = brief_why(because)
        said = sentences(opening)
        opening_said, *compared = why.text.split("\n")
        kept = sentences(opening_said)
        # The "Why X over Y:" paragraphs, the comparison the "why not" list defers to, stay whole; a "Why QLoRA matters
        # here:" paragraph explains the method, not the choice between backends, and is left out by name.
        assert compared == [part for part in rest if re.match(r"why .+ over ", paragraph_label(part) or "", re.I)]
        # Sentence for sentence the opening's first ones, then at most its "Warning:" sentences to the end.
        prefix = 0
        while prefix < min(len(kept), len(said)) and kept[prefix] == said[prefix]:
            prefix += 1
        tail = kept[prefix:]
        assert prefix >= 1, (answers, why.text)
        assert not tail or (tail[0].startswith("Warning:") and tail == said[said.index(tail[0]) :]), (answers, tail)
        assert len(opening_said) <= BRIEF_CHARS or len(kept) == 1 or "Warning:" in opening_said, (answers, why.text)
        assert ("Warning:" in opening) <= ("Warning:" in why.text), answers
        # Every later paragraph opens with a label a reader can look for in --explain.
        labels = [paragraph_label(part) for part in rest]
        assert all(label is not None and len(label) <= LABEL_CHARS for label in labels), (answers, rest)
        others = {f'"{label}"' for label in labels if label is not None and not re.match(r"why .+ over ", label, re.I)}
        # The cut part of the opening, named by the first words of its first sentence.
        left = [sentence for sentence in said[prefix:] if sentence not in kept]
        cut = (
            {rest_of_reason(said[prefix], count=len(left))}
            if prefix < len(said) and said[prefix] not in kept
            else set()
        )
        assert set(why.left_out) == others | cut, (answers, why.left_out)


def test_the_summary_prints_the_short_why_and_explain_and_the_file_the_whole(tmp_path: Path) -> None:
    answers = yaml.safe_load((REPO / "examples" / "a100x4-7b-full-accelerate.yaml").read_text())
    answers["global_batch_size"] = 64
    path = tmp_path / "answers.json"
    path.write_text(json.dumps(answers), encoding="utf-8")
    short = run_cli("--answers", str(path), "--output-dir", str(tmp_path / "out"))
    full = run_cli("--answers", str(path), "--output-dir", str(tmp_path / "out2"), "--dry-run", "--explain")
    panel = _flat(re.sub(r"[│╭╮╰╯─]", " ", short.split("Key settings")[0]))
    # The opening and the comparison with ZeRO-2 in the panel, how to run ZeRO-2 only named there.
    assert "Why: A 7.0B full fine-tune run needs about 107.3 GiB per GPU" in panel, panel
    assert "where both fit, the wizard's own tie-break takes FSDP2" in panel
    assert "a choice for simplicity, not for speed." in panel and "ZeRO-2 fits too" in panel
    assert "save {" not in panel
    assert (
        "More on this (add --explain, or read the head of accelerate_config.yaml):"
        ' the paragraph "To run ZeRO-2 instead".' in panel
    )
    assert "To run ZeRO-2 instead" in _flat(re.sub(r"[│╭╮╰╯─]", " ", full))
    written = (tmp_path / "out" / "accelerate_config.yaml").read_text()
    head = _flat(written.split("\ncompute_environment")[0].replace("\n#", "\n"))
    assert "where both fit, the wizard's own tie-break takes FSDP2" in head
    # The warnings: one numbered list, each written in full at the head of the config file too.
    listed = _flat(short.split("Before the first launch (also at the head of accelerate_config.yaml)")[1])
    assert listed.startswith("1. ") and " 2. " in listed
    # FSDP2: the accumulation syncs each micro-batch, so the gradients stay sharded as estimated.
    assert "GradientAccumulationPlugin(num_steps=16, sync_each_batch=True)" in listed
    assert "GradientAccumulationPlugin(num_steps=16, sync_each_batch=True)" in head
    # The Key settings batch row points at that item instead of repeating it.
    settings = _flat(short.split("Key settings")[1].split("Defaults used")[0])
    assert "set by your training script: the list below says how" in settings
    assert "gradient_accumulation_steps" not in settings


def test_a_dry_run_preview_leaves_out_the_header_it_has_just_printed() -> None:
    header = ["# Generated by backend-wizard. Backend: X", *[f"# reason {n}" for n in range(8)], "#", "key: 1"]
    head, left_out, body = split_header("\n".join(["#!/usr/bin/env bash", *header]) + "\n")
    assert head == "#!/usr/bin/env bash\n# Generated by backend-wizard. Backend: X\n"
    assert left_out == 8 and body == "#\nkey: 1\n"
    # A short header is shown whole; a file without one too.
    assert split_header("# Generated by backend-wizard. Backend: X\n# one\n#\nkey: 1\n")[1] == 0
    assert split_header('{"a": 1}\n') == ('{"a": 1}\n', 0, "")


def test_the_warnings_are_listed_by_kind_each_numbered() -> None:
    from rich.console import Console

    from wizard.ui.console import warnings_list

    warnings = [
        "the loss peak takes this run past the usable memory.",
        "ignored 'gpus_per_node': it does not apply to these answers",
        "install first: flash-attn: pip install flash-attn",
        "accelerate_config.yaml: fsdp_config.x is set.",
    ]
    console = Console(width=80, record=True, color_system=None)
    console.print(warnings_list(warnings, "accelerate_config.yaml"))
    lines = [line.rstrip() for line in console.export_text().splitlines()]
    assert lines == [
        "Before the first launch (also at the head of accelerate_config.yaml)",
        " 1. The loss peak takes this run past the usable memory.",
        " 2. accelerate_config.yaml: fsdp_config.x is set.",
        "Install where it trains (missing on this machine; check the one that trains)",
        " 1. flash-attn: pip install flash-attn",
        "Not used from your answers",
        " 1. 'gpus_per_node': it does not apply to these answers",
    ]
    # Without files (a refusal) the same warnings are notes: there is no launch to come.
    console = Console(width=80, record=True, color_system=None)
    console.print(warnings_list(warnings[:1]))
    assert console.export_text().splitlines()[0] == "Notes"


def test_no_text_of_any_path_shows_escapes_or_template_syntax(tmp_path: Path) -> None:
    """A quote escaped for YAML inside a folded block stays a backslash and a quote on screen:
    every reason, runner-up, lever, warning and written file the walk prints is free of such marks, of
    template syntax, and of a Python format field left unfilled ("{UNDERSHOOT}" in a string not made f)."""
    unfilled = re.compile(r"(?<![$\w])\{[A-Za-z_][A-Za-z0-9_]*(?:\[[^]]*\])?\}")
    seen = 0
    for answers, result in decided_paths(tmp_path, refusals=True):
        rec = result.recommendation
        texts = [
            rec.because,
            *(r.reason for r in rec.runner_ups),
            *(lever.change for lever in result.levers),
            *result.warnings,
            # Not train_snippet.py: its own f-strings are Python, compiled by test_addons.
            *(f.text for f in result.files if not f.name.endswith(".py")),
        ]
        for text in texts:
            assert '\\"' not in text and "{{" not in text and "{%" not in text, (answers, text)
            assert not unfilled.search(text), (answers, unfilled.search(text), text[:300])
            seen += 1
    assert seen


def test_a_main_reason_is_printed_once_in_why_not(tmp_path: Path) -> None:
    """Over the walk: in "Why not the others" no backend's first paragraph repeats one printed above;
    a later backend with the same main reason points to the earlier one by its short name."""
    import io

    from rich.console import Console

    from wizard.engine.evaluate import JSON_FIRST
    from wizard.ui.console import _runner_up_table

    pointed = 0
    for _answers, result in decided_paths(tmp_path, refusals=True):
        # The short form of each reason, as the summary prints it (the long clauses are --explain's).
        reasons = [(runner.brief or runner.reason).split("\n")[0] for runner in result.recommendation.runner_ups]
        if len(reasons) == len(set(reasons)):
            continue
        out = io.StringIO()
        # The section as the summary prints it (its short form), alone: the rest of the summary is not the point.
        Console(file=out, width=80).print(_runner_up_table(result.recommendation, brief=True))
        text = _flat(out.getvalue())
        section = text.split("Why not the others", 1)[-1].split("Why each backend does not fit", 1)[-1]
        for reason in set(reasons):
            # A reason shared by backends that lost alike and had nothing more is grouped under both titles;
            # one with more of its own points back instead. Either way its text is there once (after the
            # brought JSON's precedence, which a list where every reason opens with it says once above).
            if all(runner.after_json for runner in result.recommendation.runner_ups):
                reason = reason[len(JSON_FIRST) :]
            assert section.count(_flat(reason)[1:120]) == 1, (reason, section[:2000])
        pointed += "The same as for " in section
    assert pointed, "no walk path with a main reason shared by two backends of different detail"


def test_a_brought_jsons_precedence_is_said_once_above_the_why_nots(tmp_path: Path) -> None:
    """Over the walk: where every runner-up's reason opens with the brought JSON's precedence, "Why not
    the others" says it once, as its first line, and no entry repeats it; elsewhere no lead line."""
    import io

    from rich.console import Console

    from wizard.engine.evaluate import JSON_FIRST
    from wizard.ui.console import _runner_up_table

    seen = 0
    for _answers, result in decided_paths(tmp_path, lambda a: "deepspeed_config" in a):
        runners = result.recommendation.runner_ups
        if not runners:
            continue
        out = io.StringIO()
        Console(file=out, width=80).print(_runner_up_table(result.recommendation, brief=True))
        text = _flat(out.getvalue())
        lead = _flat(JSON_FIRST.rstrip(", ") + " that, each of the others loses on its own account:")
        every = bool(runners) and all(runner.after_json for runner in runners)
        assert (f"Why not the others {lead}" in text) is every, text[:3000]
        if every:
            assert text.count(_flat(JSON_FIRST)) == 0, text
            seen += 1
    assert seen, "no brought JSON whose runner-ups all open with its precedence"


def test_why_not_in_the_menu_adds_to_the_summary_and_never_repeats_it(tmp_path: Path) -> None:
    """Over the walk: what the interactive "why not X?" prints after the summary's short form holds no
    paragraph that form printed, and gives X's figures beside the chosen layout's wherever X has an
    estimate row of its own; after the long form (--explain) it adds the figures only."""
    import io

    from rich.console import Console

    from wizard.engine.json_fit import suggested_lever
    from wizard.ui.console import _runner_up_table, grouped_runner_ups, runner_up_beyond

    figures = 0
    for _answers, result in decided_paths(tmp_path):
        rec = result.recommendation
        out = io.StringIO()
        Console(file=out, width=10_000).print(_runner_up_table(rec, brief=True))
        section = _flat(out.getvalue())
        chosen = str(rec.settings.get("strategy"))
        if (est := (rec.facts.estimates or {}).get(chosen)) is not None and not est.fits:
            # A brought JSON past the usable memory is weighed against the edit suggested for it.
            chosen = suggested_lever(chosen, rec.facts.estimates) or chosen
        for _title, reason in grouped_runner_ups(rec):
            added = runner_up_beyond(rec, reason)
            for part in added:
                assert _flat(part) not in section, (part, section[:2000])
            rows = {
                str(r.strategy)
                for r in rec.runner_ups
                if r.reason == reason and r.strategy != chosen and str(r.strategy) in (rec.facts.estimates or {})
            }
            said = [part for part in added if " in figures: " in part]
            assert len(said) == len(rows), (rows, said)
            for part in said:
                # Beside the chosen layout, or beside the suggested edit where a brought JSON does not fit.
                assert part.endswith(".") and ("; the chosen " in part or "(your JSON as written does not fit)" in part)
            figures += len(said)
            # After the long form every paragraph was printed already: only the figures are new.
            assert runner_up_beyond(rec, reason, brief=False) == said
    assert figures > 500, figures


def test_the_short_tables_legend_names_the_chosen_rows_abbreviations_and_points_to_the_rest(tmp_path: Path) -> None:
    """The summary's table explains the chosen row's abbreviations only, and says where the other rows'
    names are explained exactly where they use abbreviations it leaves out (--explain's table explains them
    all: test_explanations reads it)."""
    import io

    from rich.console import Console

    from wizard.ui.console import BRIEF_ROW_NAMES, decision_memory_table, offloads_to_nvme
    from wizard.ui.estimate_view import label_legend

    pointed = 0
    for _answers, result in decided_paths(tmp_path):
        rec = result.recommendation
        # An NVMe run's chosen row is shown renamed (all->NVMe), with its own legend item.
        if not rec.facts.estimates or not rec.settings.get("strategy") or offloads_to_nvme(rec):
            continue
        chosen = rec.facts.estimates[str(rec.settings["strategy"])].label
        every = [est.label for est in rec.facts.estimates.values()]
        out = io.StringIO()
        Console(file=out, width=600).print(decision_memory_table(rec, brief=True))
        texts = {True: _flat(out.getvalue())}
        mine, all_of_them = label_legend([chosen], brief=True), label_legend(every, brief=True)
        for item in all_of_them:
            # Some other label's meaning may repeat words of the chosen one's: compare whole legend items.
            assert (_flat(item) in texts[True]) is (item in mine), (chosen, item)
        others = set(all_of_them) - set(mine)
        assert (BRIEF_ROW_NAMES[1:] in texts[True]) is bool(others), chosen
        if others:
            # The example it gives is a name the short legend left out.
            example = texts[True].split(BRIEF_ROW_NAMES[1:] + " (glossary ", 1)[1].split(", say)")[0]
            assert any(_flat(item).startswith(f"{example}:") for item in others), (example, others)
            # An offload row's name where one is left out: "1 GPU" only restates its row.
            offload_names = [item for item in others if "->" in item.split(":")[0] or "+" in item.split(":")[0]]
            assert ("->" in example or "+" in example) is bool(offload_names), (example, others)
        pointed += bool(others)
    assert pointed, "no path leaves a row's abbreviation out of the short legend"


def test_a_sentence_said_under_an_earlier_backend_is_named_by_its_opening(tmp_path: Path) -> None:
    """Over the walk: where "Why not the others" leaves out sentences printed under an earlier backend, it names
    each by its first words, which open a sentence of that backend's paragraph above: never a bare "otherwise",
    which would also cover what is the earlier backend's own."""
    import io

    from rich.console import Console

    from wizard.ui.console import _runner_up_table

    named = 0
    for _answers, result in decided_paths(tmp_path):
        out = io.StringIO()
        Console(file=out, width=80).print(_runner_up_table(result.recommendation, brief=True))
        text = _flat(out.getvalue())
        assert "Otherwise as for" not in text
        for earlier, openings in re.findall(r'Also, as for (.+?) above: ((?:"[^"]+\.\.\."(?: and )?)+)', text):
            before = text.split(f"Also, as for {earlier} above:", 1)[0]
            # From the earlier backend's title (its short name opens it) to the pointer.
            assert earlier in before, (earlier, text[:800])
            paragraph = before[before.index(earlier) :]
            for opening in re.findall(r'"([^"]+)\.\.\."', openings):
                assert opening in paragraph, (opening, paragraph[:800])
                named += 1
    assert named, "no walk path with a sentence said under two backends"
