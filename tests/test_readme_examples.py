"""The generated parts of README.md and docs/*.md are the wizard's real output.

Each example block is marked

    <!-- example: ANSWERS FILE [from "FIRST LINE"] ... -->
    ```lang
    ...
    ```
    <!-- example:end -->

and must equal FILE as the wizard renders it from the answers file ANSWERS (a path from the repo
root), or, with `from`, the end of FILE starting at the line FIRST LINE. Each output block (see
OUTPUT below) must equal what the command prints, and the rule table in docs/decisions.md must
list every rule of the shipped tree. A template, tree or output change that alters one makes its
test fail; `python tests/test_readme_examples.py` pastes the current output into every page (the
examples, the outputs, the rule table, and the checks table and tree diagram that
tests/test_checks_cli.py and tests/test_teaching.py compare).
"""

from __future__ import annotations

import re
import sys
import tempfile
from pathlib import Path

import pytest
import yaml

# Run as a script: the tests' helpers and the wizard itself are imported from this checkout.
sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parent.parent)]

from helpers import REPO, decide, file, tree  # noqa: E402
from wizard.engine.conditions import iter_compares  # noqa: E402
from wizard.engine.tree import Tree  # noqa: E402

README = REPO / "README.md"
DOCS = REPO / "docs"
DECISIONS = DOCS / "decisions.md"


def pages() -> list[Path]:
    """README.md and every page under docs/, the files whose generated blocks are kept current."""
    return [README, *sorted(DOCS.glob("*.md"))]


def page_name(path: Path) -> str:
    return str(path.relative_to(REPO))


EXAMPLE = re.compile(
    r'(?P<head><!-- example: (?P<answers>\S+) (?P<name>\S+)(?: from "(?P<start>[^"]+)")?[^\n]*-->\n```\w*\n)'
    r"(?P<body>.*?)"
    r"(?P<tail>```\n<!-- example:end -->)",
    re.S,
)


def rendered(answers: str, name: str, start: str | None) -> str:
    """FILE as the wizard renders it from the answers file, or its end from the line `start`."""
    values = yaml.safe_load((REPO / answers).read_text(encoding="utf-8"))
    with tempfile.TemporaryDirectory() as folder:
        text = file(decide(values, Path(folder) / "out"), name).text
    if start is None:
        return text
    lines = text.splitlines(keepends=True)
    first = [line.rstrip("\n") for line in lines].index(start)  # ValueError: the line is gone
    return "".join(lines[first:])


# A command's terminal output, as a reader at 80 columns sees it:
#     <!-- output: ARGS [until "LINE"] [from "LINE"] -->
#     ```
#     $ backend-wizard ARGS
#     ...
#     ```
#     <!-- output:end -->
# ARGS run in a fresh folder (paths in them and in the output are from the repo root), without colour. An excerpt
# keeps the lines before the first one that starts with `until` and from the first one (after
# those) that starts with `from` to the end; one line says how many were left out between.
OUTPUT = re.compile(
    r'(?P<head><!-- output: (?P<args>[^\n]*?)(?: until "(?P<until>[^"]+)")?(?: from "(?P<start>[^"]+)")? -->\n```\n)'
    r"(?P<body>.*?)(?P<tail>```\n<!-- output:end -->)",
    re.S,
)


def command_output(args: str, until: str | None = None, start: str | None = None) -> str:
    """What `backend-wizard ARGS` prints at 80 columns, after a "$ backend-wizard ARGS" line."""
    import contextlib
    import io
    import os
    import shlex

    import wizard.installed
    from wizard.cli import main

    words = [str(REPO / w) if (REPO / w).is_file() and "/" in w else w for w in shlex.split(args)]
    out = io.StringIO()
    # The pages show the summary of a machine without the tools (its "install first" lines), whatever this one has.
    installed = wizard.installed.requirement_installed
    wizard.installed.requirement_installed = lambda modules, commands: False  # type: ignore[assignment]
    saved = (os.getcwd(), os.environ.get("COLUMNS"), os.environ.get("HF_HUB_CACHE"))
    with tempfile.TemporaryDirectory() as folder:
        os.chdir(folder)
        os.environ["COLUMNS"] = "80"
        # A Hugging Face cache laid out on disk, as huggingface_hub leaves it: the Hub ids the
        # pages use are read from it, offline.
        os.environ["HF_HUB_CACHE"] = str(REPO / "tests" / "assets" / "hub_cache")
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
                main(words)
        finally:
            wizard.installed.requirement_installed = installed  # type: ignore[assignment]
            os.chdir(saved[0])
            for name, value in (("COLUMNS", saved[1]), ("HF_HUB_CACHE", saved[2])):
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
    # Paths into the checkout (the shipped tree's) read as they do from the repo root.
    lines = [line.rstrip().replace(f"{REPO}/", "") for line in out.getvalue().splitlines()]
    return f"$ backend-wizard {args}\n" + "\n".join(excerpt(lines, until, start)) + "\n"


def excerpt(lines: list[str], until: str | None, start: str | None) -> list[str]:
    """The lines before the one starting with `until`, and those from the one starting with `start`.

    A line that is not there raises ValueError, so a block whose anchor is gone fails its test.
    """
    if until is None and start is None:
        return lines
    head = lines
    if until is not None:
        cut = next((i for i, line in enumerate(lines) if line.startswith(until)), None)
        if cut is None:
            raise ValueError(f"no output line starts with {until!r}")
        head = lines[:cut]
    tail: list[str] = []
    if start is not None:
        found = [i for i, line in enumerate(lines) if i >= len(head) and line.startswith(start)]
        if not found:
            raise ValueError(f"no output line after the excerpt's head starts with {start!r}")
        tail = lines[found[0] :]
    left_out = len(lines) - len(head) - len(tail)
    return [*head, f"[... {left_out} lines left out ...]", *tail] if left_out else [*head, *tail]


def outputs() -> list[tuple[Path, re.Match[str]]]:
    return [(page, m) for page in pages() for m in OUTPUT.finditer(page.read_text(encoding="utf-8"))]


@pytest.mark.parametrize(
    ("page", "match"), outputs(), ids=lambda v: page_name(v) if isinstance(v, Path) else v["args"].split()[0]
)
def test_command_output_is_current(page: Path, match: re.Match[str]) -> None:
    assert match["body"] == command_output(match["args"], match["until"], match["start"]), (
        f"{page_name(page)}: output of '{match['args']}' is stale: run python tests/test_readme_examples.py"
    )


def test_the_pages_show_the_commands_newcomers_meet() -> None:
    shown = {m["args"].split()[0] for _, m in outputs()}
    assert shown >= {"--answers", "estimate", "explain", "glossary"}, shown
    # The README's own example is a real run too.
    assert any(page == README and m["args"].startswith("--answers examples/") for page, m in outputs())


def test_an_excerpt_keeps_its_ends_and_counts_what_it_leaves_out() -> None:
    lines = ["a", "b", "Key x", "c", "Files", "d"]
    assert excerpt(lines, None, None) == lines
    assert excerpt(lines, "Key", "Files") == ["a", "b", "[... 2 lines left out ...]", "Files", "d"]
    assert excerpt(lines, "Key", None) == ["a", "b", "[... 4 lines left out ...]"]
    assert excerpt(lines, "Key", "Key") == ["a", "b", "Key x", "c", "Files", "d"]
    for until, start in (("gone", None), (None, "gone"), ("Files", "a")):
        with pytest.raises(ValueError, match="no output line"):
            excerpt(lines, until, start)


def examples() -> list[tuple[Path, re.Match[str]]]:
    return [(page, m) for page in pages() for m in EXAMPLE.finditer(page.read_text(encoding="utf-8"))]


def test_the_pages_have_the_examples() -> None:
    shown = {(m["answers"], m["name"]) for _, m in examples()}
    assert shown >= {
        ("tests/assets/readme_two_nodes.yaml", "accelerate_config.yaml"),
        ("tests/assets/readme_two_nodes.yaml", "launch.sh"),
        ("tests/assets/readme_two_nodes.yaml", "slurm.sbatch"),
        ("tests/assets/readme_ray.yaml", "axolotl.yaml"),
        ("tests/assets/readme_ray.yaml", "launch.sh"),
    }


@pytest.mark.parametrize(
    ("page", "match"),
    examples(),
    ids=lambda v: page_name(v) if isinstance(v, Path) else f"{Path(v['answers']).stem}-{v['name']}",
)
def test_example_is_current(page: Path, match: re.Match[str]) -> None:
    assert match["body"] == rendered(match["answers"], match["name"], match["start"]), (
        f"{page_name(page)}: example {match['name']} from {match['answers']} is stale: "
        "run python tests/test_readme_examples.py"
    )


# --- the rule table of docs/decisions.md ---------------------------------------------------------

RULES = re.compile(r"(?P<head><!-- rules:begin[^\n]*-->\n)(?P<body>.*?)(?P<tail><!-- rules:end -->)", re.S)


def rules_table(tree: Tree) -> str:
    """Every rule of the tree in order (first match wins): id, guideline, title, outcome; then the guidelines."""
    rows = ["| # | rule | guideline | what it decides | outcome |", "| --- | --- | --- | --- | --- |"]
    for number, rule in enumerate(tree.rules, 1):
        if rule.outcome.refuse:
            outcome = "refusal: no config (exit 4)"
        else:
            backend = tree.backends[str(rule.outcome.backend)]
            # A rule for one hardware reads the backend's title on it ("one device (MPS)", not "One GPU").
            hardware = [c.value for c in iter_compares(rule.when) if c.name == "hardware" and c.op == "eq"]
            outcome = f"`{backend.id}`: {backend.title_on(hardware[0]) if len(hardware) == 1 else backend.title}"
            strategy = rule.outcome.settings.get("strategy")
            if isinstance(strategy, str):
                outcome += f", layout `{strategy}`"
        title = (rule.title or rule.id).replace("|", "\\|")
        rows.append(f"| {number} | `{rule.id}` | {rule.guidance} | {title} | {outcome} |")
    used = list(dict.fromkeys(rule.guidance for rule in tree.rules))
    legend = [f"- **{tag}**: {tree.guidance[tag]}" for tag in used]
    return "\n".join([*rows, "", "Guidelines:", "", *legend]) + "\n"


def shipped_tree() -> Tree:
    from wizard.app import load

    return load()


def test_the_rule_table_lists_every_rule_of_the_tree() -> None:
    block = RULES.search(DECISIONS.read_text(encoding="utf-8"))
    assert block, "docs/decisions.md has no generated rule table (<!-- rules:begin --> ... <!-- rules:end -->)"
    tree = shipped_tree()
    assert block["body"] == rules_table(tree), (
        "docs/decisions.md rule table is stale: run python tests/test_readme_examples.py"
    )
    listed = re.findall(r"^\| \d+ \| `(\w+)` \|", block["body"], re.M)
    assert listed == [rule.id for rule in tree.rules]


def test_the_rule_table_names_each_outcome() -> None:
    tree = shipped_tree()
    table = rules_table(tree)
    for rule in tree.rules:
        row = next(line for line in table.splitlines() if line.startswith(f"| {tree.rules.index(rule) + 1} | "))
        assert ("refusal" in row) == rule.outcome.refuse, row
        if rule.outcome.backend:
            backend = tree.backends[rule.outcome.backend]
            # The title on the rule's one hardware where it names one (Apple silicon's), else the plain one.
            titles = {backend.title, *backend.titles.values()}
            assert any(f"`{rule.outcome.backend}`: {title}" in row for title in titles), row
            if rule.id == "apple_mps":
                assert backend.title_on("mps") in row and backend.title_on("mps") != backend.title, row


# --- regeneration --------------------------------------------------------------------------------

CHECKS = re.compile(r"(?P<head><!-- checks:begin[^\n]*-->\n)(?P<body>.*?)(?P<tail>\n<!-- checks:end -->)", re.S)
DIAGRAM = re.compile(
    r"(?P<head><!-- tree:begin[^\n]*-->\n```mermaid\n)(?P<body>.*?)(?P<tail>```\n<!-- tree:end -->)", re.S
)


def update() -> None:
    """Paste the current output into every generated block of README.md and docs/*.md."""
    from wizard.checks import checks_table
    from wizard.render.mermaid import tree_to_mermaid

    tree = shipped_tree()
    for page in pages():
        text = page.read_text(encoding="utf-8")
        new = EXAMPLE.sub(lambda m: m["head"] + rendered(m["answers"], m["name"], m["start"]) + m["tail"], text)
        new = OUTPUT.sub(lambda m: m["head"] + command_output(m["args"], m["until"], m["start"]) + m["tail"], new)
        new = RULES.sub(lambda m: m["head"] + rules_table(tree) + m["tail"], new)
        new = CHECKS.sub(lambda m: m["head"] + checks_table() + m["tail"], new)
        new = DIAGRAM.sub(lambda m: m["head"] + tree_to_mermaid(tree) + m["tail"], new)
        if new != text:
            page.write_text(new, encoding="utf-8")


if __name__ == "__main__":
    update()


def test_the_readme_shows_the_model_prompt_and_summary_as_they_are(tmp_path: Path) -> None:
    """The README's typed Hub id: the model question as the tree asks it, and the summary's words."""
    import os

    readme = README.read_text(encoding="utf-8")
    prompt = next(q.prompt for q in tree().questions if q.id == "model")
    assert f"? {prompt} Qwen/Qwen2.5-7B" in readme
    answers = {
        "target": "axolotl",
        "hardware": "nvidia",
        "gpu_model": "RTX 4090",
        "gpus_per_node": 1,
        "model": "Qwen/Qwen2.5-7B",
        "method": "qlora",
    }
    saved = os.environ.get("HF_HUB_CACHE")
    os.environ["HF_HUB_CACHE"] = str(REPO / "tests" / "assets" / "hub_cache")
    try:
        result = decide(answers, tmp_path / "out")
    finally:
        if saved is None:
            os.environ.pop("HF_HUB_CACHE", None)
        else:
            os.environ["HF_HUB_CACHE"] = saved
    from wizard.engine.advice import model_assumption

    said = " ".join(model_assumption(result.session.answers, result.recommendation.facts).split())
    quoted = " ".join(readme.split("The summary then says `", 1)[1].split("`", 1)[0].split())
    assert said.startswith(quoted), (said, quoted)
    assert "base_model: Qwen/Qwen2.5-7B" in file(result, "axolotl.yaml").text
