"""`backend-wizard glossary`: forgiving look-up, readable errors, output that fits 80 columns, and
`terms_in` (the explanations' "Terms used") listing only terms the text really uses."""

from __future__ import annotations

import os
import random
import re
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers import REPO, tree
from wizard.cli import main
from wizard.engine.glossary import Term, glossary, lookup, normalise, suggest, terms_in

WIDTH = 80
URL = re.compile(r"^\s*https?://\S+$")


def cli(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, *args: str) -> tuple[int, str, str]:
    """Run the real CLI at an 80-column console; return the exit code and what the user reads."""
    monkeypatch.setenv("COLUMNS", str(WIDTH))
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def flat(text: str) -> str:
    """Text with line breaks and runs of spaces collapsed, to compare wrapped output with its source."""
    return " ".join(text.split())


# --- look-up -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("typed", "expected"),
    [
        (("zero3",), "ZeRO-3"),
        (("zero-3",), "ZeRO-3"),
        (("ZeRO 3",), "ZeRO-3"),
        (("ZeRO", "3"), "ZeRO-3"),
        (("zero_stage_3",), "ZeRO-3"),
        (("fsdp 2",), "FSDP2"),
        (("fsdp-2",), "FSDP2"),
        (("FSDP",), "FSDP"),  # FSDP1 and FSDP2 differ: FSDP has its own entry
        (("fully shard",), "FSDP2"),
        (("optim->CPU",), "optim->CPU"),
        (("DDP / 1 GPU",), "DDP / 1 GPU"),
        (("other",), "overhead"),
        (("states",), "model states"),
        (("host",), "host RAM"),
        (("q-lora",), "QLoRA"),
        (("q", "lora"), "QLoRA"),
        (("activation", "checkpointing"), "gradient checkpointing"),
        (("Torch.Compile",), "torch.compile"),
        (("no split modules",), "_no_split_modules"),
        (("parallelism-config",), "parallelism_config"),
        (("reshard_after_forward",), "reshard after forward"),
        (("state dicts",), "state dict"),
        (("ranks",), "rank"),
        (("tf-32",), "TF32"),
        (("NVIDIA",), "CUDA"),
        (("full",), "full fine-tune"),
        # Words of the summary a reader looks up as they read them.
        (("for", "a", "moment"), "peak"),
        (("Risk", "line"), "close call"),
    ],
)
def test_lookup_forgives_case_spaces_hyphens_and_underscores(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, typed: tuple[str, ...], expected: str
) -> None:
    code, out, err = cli(capsys, monkeypatch, "glossary", *typed)
    assert (code, err) == (0, "")
    assert out.startswith(f"{expected}\n") or out.startswith(f"{expected} (also:"), out


def test_an_unknown_term_is_one_line_with_a_ranked_did_you_mean(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    code, out, err = cli(capsys, monkeypatch, "glossary", "zeor")
    assert code == 2 and out == ""
    assert err.count("\n") == 1, err  # one line, whatever the width
    assert err.startswith("error: 'zeor' is not in the glossary")
    assert "did you mean 'ZeRO'" in err and "port" not in err
    code, _, err = cli(capsys, monkeypatch, "glossary", "shardin")
    assert code == 2 and "did you mean 'sharding'" in err
    code, _, err = cli(capsys, monkeypatch, "glossary", "xyzzy")
    assert code == 2 and err.count("\n") == 1 and "did you mean" not in err


@pytest.mark.parametrize(
    ("typed", "first"),
    [
        ("zeor", "ZeRO"),
        ("zero4", "ZeRO"),  # there is no stage 4: one edit from ZeRO itself and from every stage
        ("zeor3", "ZeRO-3"),
        ("fdsp2", "FSDP2"),
        ("qlroa", "QLoRA"),
        ("deespeed", "DeepSpeed"),
        ("gradient acumulation", "gradient accumulation"),
        ("grad", "gradients"),
        ("accumulat", "gradient accumulation"),
        ("flashatention", "FlashAttention"),
        ("parallelism", "parallelism_config"),
    ],
)
def test_suggestions_rank_the_closest_normalised_name_first(typed: str, first: str) -> None:
    assert lookup(typed) is None
    found = suggest(typed)
    assert 1 <= len(found) <= 3 and found[0].term == first, [t.term for t in found]


def test_suggestions_stay_quiet_when_nothing_is_close() -> None:
    for typed in ("xyzzy", "tq", "", "  ", "banan split"):
        assert suggest(typed) == [], typed


def test_no_two_entries_share_a_normalised_name() -> None:
    owner: dict[str, str] = {}
    for term in glossary():
        for name in term.names:
            key = normalise(name)
            assert key, (term.term, name)
            assert owner.setdefault(key, term.term) == term.term, f"{name!r}: {owner[key]} and {term.term}"


def _variant(name: str, rng: random.Random) -> str:
    """How someone might type `name`: any case, and separators changed, dropped or added."""
    out = []
    for char in name:
        if char in " -_.":
            out.append(rng.choice(["", " ", "-", "_", ".", "  "]))
            continue
        out.append(char.upper() if rng.random() < 0.5 else char.lower())
        if rng.random() < 0.15:
            out.append(rng.choice([" ", "-", "_", "."]))
    return rng.choice(["", " ", "\t"]) + "".join(out) + rng.choice(["", " "])


@settings(max_examples=60, deadline=None)
@given(st.integers(min_value=0, max_value=2**32 - 1))
def test_every_name_typed_any_way_finds_its_own_entry(seed: int) -> None:
    rng = random.Random(seed)  # one seed per example: hypothesis shrinks a failure to a short seed
    for term in glossary():
        for name in term.names:
            typed = _variant(name, rng)
            assert lookup(typed) is term, (term.term, name, typed)


def test_glossary_see_links_resolve() -> None:
    for term in glossary():
        assert term.definition and term.term not in term.see, term.term
        for name in term.see:
            assert lookup(name) is not None, (term.term, name)


def test_sources_are_public_addresses_with_titles() -> None:
    for term in glossary():
        if term.source is not None:
            assert term.source.title.strip(), term.term
            assert re.fullmatch(r"https://[\w.-]+/\S*", term.source.url), (term.term, term.source.url)


# --- what the user reads ---------------------------------------------------------------------------


def test_without_a_term_the_list_fits_80_columns(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    code, out, err = cli(capsys, monkeypatch, "glossary")
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert all(len(line) <= WIDTH and line == line.rstrip() for line in lines), [ln for ln in lines if len(ln) > WIDTH]
    assert len(lines) < len(glossary())  # compact: several terms to a line
    for term in glossary():
        # Each name whole on one line, not cut at the edge nor broken between lines.
        assert any(re.search(rf"(?:^|\s){re.escape(term.term)}(?:\s|$)", line) for line in lines), term.term
    assert f"{len(glossary())} terms" in flat(out)


def test_all_definitions_print_whole_at_80_columns(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    code, out, err = cli(capsys, monkeypatch, "glossary", "--all")
    assert (code, err) == (0, "")
    lines = out.splitlines()
    for line in lines:
        # Only a URL longer than the line may run past the edge, alone and from the margin:
        # folding it would break the link, so the terminal wraps it.
        assert len(line) <= WIDTH or (URL.match(line) and " " not in line), line
        assert line == line.rstrip(), repr(line)
    text = flat(out)
    for term in glossary():
        assert term.definition in text, term.term
        if term.see:
            assert f"See: {', '.join(term.see)}" in text, term.term
        if term.source is not None:
            # Whole on its own line, indented with the entry where that still fits the width.
            indented = 2 + len(term.source.url) <= WIDTH
            assert (f"  {term.source.url}" if indented else term.source.url) in lines, term.term


def test_one_entry_shows_its_names_definition_links_and_source(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    code, out, _ = cli(capsys, monkeypatch, "glossary", "sdpa")
    entry = lookup("SDPA")
    assert code == 0 and entry is not None and entry.source is not None
    text = flat(out)
    assert text.startswith("SDPA (also: scaled dot-product attention,")
    assert entry.definition in text and "See: FlashAttention" in text
    assert f"Source: {entry.source.title}" in text
    # The URL, longer than the line, alone on its own line from the margin, unbroken.
    assert len(entry.source.url) > WIDTH and entry.source.url in out.splitlines()


def test_glossary_from_a_shell_at_80_columns() -> None:
    env = {**os.environ, "COLUMNS": str(WIDTH), "NO_COLOR": "1"}
    command = [sys.executable, "-m", "wizard", "glossary", "usable", "memory"]
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=REPO, check=False)
    assert done.returncode == 0, done.stderr
    assert all(len(line) <= WIDTH for line in done.stdout.splitlines())
    assert "80% of the memory the driver reports" in flat(done.stdout)
    done = subprocess.run([*command[:4], "zeor"], capture_output=True, text=True, env=env, cwd=REPO, check=False)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "did you mean 'ZeRO'" in done.stderr


# --- the facts the entries state ------------------------------------------------------------------


def test_gib_entry_does_not_equate_the_box_size_with_reported_memory() -> None:
    entry = lookup("GiB")
    assert entry is not None
    # Cards sold as "80GB" differ: the H100 reports 81559 MiB, the A100 81920 MiB.
    assert "81559 MiB = 79.65 GiB" in entry.definition and "81920 MiB = 80 GiB" in entry.definition
    assert "23028 MiB = 22.49 GiB" in entry.definition
    assert round(81559 / 1024, 2) == 79.65 and round(23028 / 1024, 2) == 22.49
    # GB is accepted for look-up but is not a name of GiB in running text.
    assert lookup("GB") is entry and "GB" not in entry.text_names


def test_usable_memory_states_the_fraction_the_estimate_uses() -> None:
    from wizard.engine.memory import FIT_MARGIN, GIB, to_gib

    entry = lookup("usable memory")
    assert entry is not None
    assert f"{round(FIT_MARGIN * 100)}% of the memory the driver reports" in entry.definition
    assert f"gives {to_gib(int(79.65 * GIB * FIT_MARGIN))} GiB usable" in entry.definition


# --- terms_in: the explanations' "Terms used" --------------------------------------------------------


def names_of(text: str) -> list[str]:
    return [t.term for t in terms_in(text)]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # "full" is not "full fine-tune"; "full copy" is a term of its own.
        ("a full copy of the training state", ["full copy", "model states"]),
        ("3B of them active for each token", []),
        ("NVIDIA GPUs and AMD cards", []),
        ("the training processes and their tokens", []),
        ("ray tracing on an ada lovelace", []),  # names with capitals keep their case
        ("Ray on Ada GPUs", ["GPU generation", "Ray"]),
        ("dp_shard_size is 8", ["shard group"]),  # not "shard" inside the key
        ("unsharded weights, resharded", []),  # not inside longer words
        ("ZeRO-3 shards the weights", ["sharding", "ZeRO-3"]),  # not ZeRO inside ZeRO-3
        ("expert parallelism over 8 GPUs", ["expert parallelism"]),  # not MoE's "expert" inside it
        ("with gradient accumulation", ["gradient accumulation"]),  # not also "gradient"
        ("Sharded checkpoints", ["sharding"]),  # lower-case names match at a sentence start
        ("about 40 GiB needed, 63.7 GiB usable per GPU", ["GiB", "usable memory"]),
        ("a profiler trace of packed samples", ["profiler"]),
        ("fsdp_reshard_after_forward: true and SHARDED_STATE_DICT", ["reshard after forward", "state dict"]),
        ("attn_implementation: sdpa", ["SDPA"]),
        ("FlashAttention-2 kernels", ["FlashAttention"]),
        ("the model's _no_split_modules", ["_no_split_modules"]),
    ],
)
def test_terms_in_lists_only_terms_the_text_uses(text: str, expected: list[str]) -> None:
    assert sorted(names_of(text)) == sorted(expected)


def test_terms_in_finds_every_text_name_alone_and_in_a_sentence() -> None:
    for term in glossary():
        for name in term.text_names:
            assert term in terms_in(name), (term.term, name)
            assert term in terms_in(f"We use {name}, then stop."), (term.term, name)


def test_lookup_only_names_never_mark_a_term_as_used() -> None:
    for term in glossary():
        for name in term.lookup_aliases:
            if any(normalise(name) == normalise(n) for n in term.text_names):
                continue  # a spelling variant of a real name (matched under that name)
            if any(re.search(rf"(?<![\w-]){re.escape(n)}(?![\w-])", name, re.IGNORECASE) for n in term.text_names):
                continue  # a phrase around a real name ("bound by compute"): that name marks it, rightly
            assert term not in terms_in(f"Then {name} here."), (term.term, name)


def _uses(text: str, term: Term) -> bool:
    """Whether one of the term's text names stands as a whole word in `text`: a check written
    independently of `terms_in`, case-insensitive so that it only errs towards "uses"."""
    pattern = "|".join(re.escape(n) for n in term.text_names)
    return re.search(rf"(?<![\w-])(?:{pattern})(?![\w-])", text, re.IGNORECASE) is not None


def test_every_term_found_in_the_explanations_is_named_in_that_text() -> None:
    t = tree()
    texts = [q.help for q in t.questions] + list(t.guidance.values()) + [r.because for r in t.rules]
    texts += [f"{b.title}. {b.summary}" for b in t.backends.values()]
    texts += [f.holds + " " + f.fails for f in t.fact_texts.values()]
    for text in texts:
        for term in terms_in(text):
            assert _uses(text, term), (term.term, text)


def test_explain_lists_the_terms_used_in_glossary_order(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "5000")  # no wrapping, so the list stays on one line
    order = {t.term: i for i, t in enumerate(glossary())}
    for example in sorted((REPO / "examples").glob("*.yaml")):
        assert main(["explain", "--answers", str(example)]) == 0
        out = capsys.readouterr().out
        _, _, used = out.partition("Terms used: ")
        # A term found through an alias is listed with the text's words: 'FSDP ("fully sharded ...")'.
        entries = [re.fullmatch(r'(.+?)(?: \("(.+)"\))?', item) for item in used.split(" — ")[0].strip().split(", ")]
        assert used and all(entries), (example.name, used)
        listed = [entry.group(1) for entry in entries if entry]
        assert all(lookup(name) is not None for name in listed), (example.name, listed)
        for entry in entries:
            if entry and entry.group(2):  # the words shown name that same term
                assert lookup(entry.group(2)) is lookup(entry.group(1)), (example.name, entry.group(0))
        assert [order[name] for name in listed] == sorted(order[name] for name in listed), example.name
        assert "full fine-tune" not in listed or "full fine-t" in out.lower(), example.name


def test_aliases_name_the_same_thing_not_a_related_one() -> None:
    # FSDP is not FSDP2 (version 1 differs), MULTI_CPU is a distributed_type rather than a
    # communication backend, and 4-bit is a storage format rather than QLoRA.
    fsdp, fsdp2 = lookup("FSDP"), lookup("FSDP2")
    assert fsdp is not None and fsdp2 is not None and fsdp is not fsdp2
    assert "FSDP1" in fsdp.definition and "FSDP2" in fsdp.see
    gloo, qlora = lookup("gloo"), lookup("QLoRA")
    assert gloo is not None and "MULTI_CPU" not in gloo.text_names
    assert lookup("MULTI_CPU") is lookup("distributed_type")
    assert qlora is not None and "4-bit" not in qlora.text_names
    for term, names in (("GiB", ("MiB",)), ("IP address", ("port", "TCP")), ("torch.compile", ("Triton",))):
        entry = lookup(term)
        assert entry is not None and not set(names) & set(entry.text_names), term


def test_every_memory_table_label_has_an_entry(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from wizard.engine.memory import CONTEXT_OVERHEAD, GIB

    # The short column names and row-label abbreviations the memory tables print.
    labels = ("states", "other", "host", "optim->CPU", "all->CPU", "DDP / 1 GPU", "TP/CP/EP")
    for label in (*labels, "FSDP2 + offload", "HSDP + offload"):
        code, out, err = cli(capsys, monkeypatch, "glossary", label)
        assert code == 0 and not err, label
        assert all(len(line) <= WIDTH for line in out.splitlines()), label
    overhead = lookup("other")
    assert overhead is not None and f"{CONTEXT_OVERHEAD // GIB} GiB" in overhead.definition


@pytest.mark.parametrize(
    ("typed", "entry"),
    [
        ("process group", "process group"),
        ("launcher", "launcher"),
        ("wrapping policy", "wrapping policy"),
        ("auto-wrap", "wrapping policy"),
        ("TRANSFORMER_BASED_WRAP", "wrapping policy"),
        ("all-gather", "all-gather"),
        ("PEFT", "PEFT"),
        ("shift_labels", "shift_labels"),
        ("zero3_init_flag", "zero3_init_flag"),
        ("full copy", "full copy"),
        ("CUDA context", "GPU runtime context"),
        ("FSDP2 + offload", "FSDP2 + offload"),
        ("HSDP + offload", "HSDP + offload"),
    ],
)
def test_the_words_the_output_uses_have_entries(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, typed: str, entry: str
) -> None:
    code, out, err = cli(capsys, monkeypatch, "glossary", typed)
    assert code == 0 and not err, typed
    assert out.splitlines()[0].startswith(entry), out


def test_glossary_no_explains_both_settings_spelled_no(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # "Precision stays 'no'" and "one process is NO": one entry names both meanings.
    for typed in ("no", "NO"):
        code, out, err = cli(capsys, monkeypatch, "glossary", typed)
        text = " ".join(out.split())
        assert code == 0 and not err
        assert "mixed_precision 'no'" in text and "fp32" in text and "distributed_type NO" in text
    # Running text with the word "no" does not list the entry.
    assert "no / NO" not in names_of("no offload, and no other GPU")


# --- several terms at once, and the entries newcomers asked about ----------------------------------


def headings(out: str) -> list[str]:
    """The entry names printed, in order: the unindented lines, without their '(also: ...)'."""
    return [line.split(" (also:")[0] for line in out.splitlines() if line and not line.startswith(" ")]


def test_several_terms_print_each_entry_in_turn(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    code, out, err = cli(capsys, monkeypatch, "glossary", "LoRA", "full copy")
    assert (code, err) == (0, "")
    assert headings(out) == ["LoRA", "full copy"], out
    # Unquoted words that together name one term are still that one term, not "full" + "copy".
    code, out, err = cli(capsys, monkeypatch, "glossary", "LoRA", "full", "copy")
    assert (code, err) == (0, "") and headings(out) == ["LoRA", "full copy"], out
    # The same entry asked twice is printed once.
    code, out, _ = cli(capsys, monkeypatch, "glossary", "zero3", "ZeRO-3")
    assert code == 0 and headings(out) == ["ZeRO-3"], out


def test_an_unknown_term_among_several_is_reported_after_the_known_ones(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    code, out, err = cli(capsys, monkeypatch, "glossary", "LoRA", "zeor")
    assert code == 2
    assert headings(out) == ["LoRA"], out
    assert err.count("\n") == 1, err
    assert err.startswith("error: 'zeor' is not in the glossary") and "did you mean 'ZeRO'" in err
    # Two unknown terms: one line each, the known entry still printed.
    code, out, err = cli(capsys, monkeypatch, "glossary", "xyzzy", "full copy", "qlroa")
    assert code == 2 and headings(out) == ["full copy"], out
    lines = err.splitlines()
    assert len(lines) == 2 and "'xyzzy' is not in the glossary" in lines[0], err
    assert "'qlroa' is not in the glossary" in lines[1] and "did you mean 'QLoRA'" in lines[1], err


def test_the_help_says_several_terms_are_looked_up_in_turn(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", str(WIDTH))
    with pytest.raises(SystemExit) as done:
        main(["glossary", "--help"])
    assert done.value.code == 0
    text = flat(capsys.readouterr().out)
    assert "[TERM ...]" in text and "each in turn" in text
    assert 'Quote a term of several words ("full copy")' in text and "exit code 2" in text


@pytest.mark.parametrize("typed", ["gathering", "gather", "gathered", "gathers", "all gather"])
def test_the_forms_of_gather_find_all_gather(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, typed: str
) -> None:
    code, out, err = cli(capsys, monkeypatch, "glossary", typed)
    assert (code, err) == (0, "")
    assert headings(out) == ["all-gather"], out


@pytest.mark.parametrize("typed", [("traffic",), ("communication",), ("communication traffic",), ("Communication",)])
def test_traffic_says_what_the_gpus_exchange_and_why_it_costs(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, typed: tuple[str, ...]
) -> None:
    code, out, err = cli(capsys, monkeypatch, "glossary", *typed)
    assert (code, err) == (0, "")
    assert headings(out) == ["traffic"], out
    text = flat(out)
    for words in ("DDP", "ZeRO-3 and FSDP2", "ZeRO-1 and ZeRO-2", "host RAM", "PCIe", "NVLink", "between machines"):
        assert words in text, words
    assert "See: all-gather, NVLink, PCIe, offload" in text


def test_unified_memory_says_what_the_estimate_is_judged_against(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from wizard.engine.device import MAC_DEVICE
    from wizard.engine.memory import GIB, MAC_LARGE_FROM, usable_share

    code, out, err = cli(capsys, monkeypatch, "glossary", "unified memory", "--full")
    assert (code, err) == (0, "")
    text = flat(out).lower()
    # The share a Mac's estimate is judged against is macOS's GPU working set, as the code takes
    # it: two thirds up to 32 GB, three quarters above; and the user is shown how to read their own.
    assert usable_share(MAC_DEVICE, 16 * GIB) == pytest.approx(2 / 3)
    assert usable_share(MAC_DEVICE, MAC_LARGE_FROM + GIB) == pytest.approx(3 / 4)
    assert "two thirds on macs up to 32 gb, three quarters on larger ones" in text
    assert "recommendedmaxworkingsetsize" in text and "torch.mps.recommended_max_memory()" in text
    # No advice to shrink gpu_memory_gb: on a Mac it is the Mac's memory, and the share does the rest.
    assert "lower gpu_memory_gb" not in text
    # The usable-memory entry, read mostly by GPU users, points to the Mac's own entry rather than repeating it.
    entry, working = lookup("usable memory"), lookup("working set")
    assert entry is not None and working is not None
    assert "working set" in entry.definition.lower() and "metal" not in entry.definition.lower()
    assert "two thirds of the memory on macs up to 32 gb, three quarters on larger ones" in working.definition.lower()


def test_overhead_and_the_margin_do_not_count_the_same_memory() -> None:
    from wizard.engine.memory import CONTEXT_OVERHEAD, GIB

    overhead, usable = lookup("overhead"), lookup("usable memory")
    assert overhead is not None and usable is not None and lookup("other") is overhead
    assert "other column" in overhead.definition and "workspaces" in overhead.definition
    assert f"{CONTEXT_OVERHEAD // GIB} GiB of overhead" in usable.definition and "overhead" in usable.see
    # What the 20% is for: the sentence naming it lists only what the estimate leaves out.
    margin = usable.definition.split("the other 20% is left for")[1].split(".")[0]
    assert "fragmentation" in margin and "temporary tensors" in margin
    assert "workspace" not in margin and "context" not in margin


def test_shard_group_and_device_mesh_agree_on_context_parallelism() -> None:
    group, mesh = lookup("dp_shard_size"), lookup("dp_shard_cp")
    assert group is not None and mesh is not None and group.term == "shard group"
    for entry in (group, mesh):
        assert "dp_shard_size x cp_size" in entry.definition and "dp_shard_cp" in entry.definition, entry.term


def test_offload_rows_name_their_own_tool_and_keys() -> None:
    optim, all_cpu, fsdp = lookup("optim->CPU"), lookup("all->CPU"), lookup("FSDP2 + offload")
    assert optim is not None and all_cpu is not None and fsdp is not None
    assert "16 bytes per trained parameter" in optim.definition and "gradients" in optim.definition
    assert "16-bit weights stay on the GPU" in optim.definition
    assert "offload_param" in all_cpu.definition and "offload_optimizer" in all_cpu.definition
    assert "fsdp_offload_params" in fsdp.definition and "offload_params" in fsdp.definition
    assert "offload_param " not in fsdp.definition and "fsdp_offload_params" not in all_cpu.definition
    assert all_cpu.definition != fsdp.definition


def test_the_long_context_allowance_is_the_same_factor_in_the_glossary_as_in_the_summary() -> None:
    """The Unsloth entry names the factor the close-call test and the Risk line use, never another."""
    from wizard.engine.glossary import glossary
    from wizard.engine.memory import UNDERSHOOT

    entry = next(e for e in glossary() if e.term == "Unsloth")
    factors = re.findall(r"x(\d\.\d\d) allowance", entry.definition)
    assert factors == [f"{UNDERSHOOT:.2f}"], entry.definition


def test_close_in_plain_prose_is_not_a_close_call() -> None:
    # "close to the usable memory" (a near-limit note) is no close call; the Risk line's name and the term are.
    names = {term.term for term in terms_in("It fits, close to the usable memory: 86% of the 48.0 GiB usable.")}
    assert "close call" not in names, names
    assert "close call" in {term.term for term in terms_in("This run is a close call at 8,192 tokens.")}
    found = lookup("close")
    assert found is not None and found.term == "close call"
