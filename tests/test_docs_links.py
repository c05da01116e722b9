"""Every relative link in README.md and docs/*.md leads somewhere: a file of the repository, and for
a `#anchor` a heading of that file, named as GitHub names it. The README stays a short front page
that links every page of docs/."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote

import pytest

from helpers import REPO

README = REPO / "README.md"
PAGES = [README, *sorted((REPO / "docs").glob("*.md"))]

FENCE = re.compile(r"^ {0,3}(```|~~~)")
INLINE_CODE = re.compile(r"(`+)(?:(?!\1).)+?\1")
# [text](target) and ![alt](target), with an optional "title"; reference definitions: [id]: target
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+\"[^\"]*\")?\s*$")
HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
HTML_ANCHOR = re.compile(r"<a\s+(?:name|id)=\"([^\"]+)\"")


def prose_lines(text: str) -> list[str]:
    """The lines outside fenced code blocks (a `# comment` there is no heading, a link no link)."""
    lines, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            lines.append(line)
    return lines


def github_anchor(heading: str) -> str:
    """The id GitHub gives a heading: its text as rendered, lower case, punctuation dropped, spaces as hyphens.

    Markdown markup is rendered first (code spans keep their text, links their label, emphasis
    markers go); then every character that is not a letter, a digit, an underscore, a hyphen or a
    space is removed, and each space becomes a hyphen.
    """
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # links and images: their text
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML
    text = text.replace("`", "").replace("*", "")
    text = re.sub(r"(?<!\w)_+|_+(?!\w)", "", text)  # _emphasis_, not snake_case
    return re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """The anchors of a Markdown file: one per heading (a repeated one gets -1, -2, ...), and HTML ones."""
    found: set[str] = set()
    seen: dict[str, int] = {}
    for line in prose_lines(path.read_text(encoding="utf-8")):
        found.update(HTML_ANCHOR.findall(line))
        heading = HEADING.match(line)
        if not heading:
            continue
        slug = github_anchor(heading.group(2))
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    return found


def links(path: Path) -> list[str]:
    """The targets of the links of a Markdown file, outside code."""
    targets: list[str] = []
    for line in prose_lines(path.read_text(encoding="utf-8")):
        reference = REFERENCE.match(line)
        if reference:
            targets.append(reference.group(1))
            continue
        targets += LINK.findall(INLINE_CODE.sub("", line))
    return targets


def is_relative(target: str) -> bool:
    return not re.match(r"[a-z][a-z0-9+.-]*:", target, re.I) and not target.startswith("//")


def relative_links() -> list[tuple[Path, str]]:
    return [(page, target) for page in PAGES for target in links(page) if is_relative(target)]


def broken(page: Path, target: str) -> str | None:
    """Why a relative link of `page` leads nowhere, or None."""
    name, _, anchor = target.partition("#")
    destination = (page.parent / unquote(name)).resolve() if name else page
    if not destination.exists():
        return f"{destination} does not exist"
    if REPO.resolve() not in (destination, *destination.parents):
        return "it leads out of the repository"
    if anchor and destination.suffix == ".md" and unquote(anchor) not in anchors(destination):
        return f"{destination.relative_to(REPO.resolve())} has no heading with the anchor #{anchor}"
    return None


@pytest.mark.parametrize(
    ("page", "target"), relative_links(), ids=lambda v: str(v.relative_to(REPO)) if isinstance(v, Path) else v
)
def test_relative_link_resolves(page: Path, target: str) -> None:
    reason = broken(page, target)
    assert reason is None, f"{page.relative_to(REPO)}: link ({target}) is broken: {reason}"


def test_every_page_has_relative_links() -> None:
    # The scan finds the links at all (a change to the parsing that found none would pass above).
    found = {page for page, _ in relative_links()}
    assert README in found and len(found) >= 3, found


def test_github_anchor_rule() -> None:
    assert github_anchor("Exit codes") == "exit-codes"
    assert github_anchor("Options and output") == "options-and-output"
    assert github_anchor("Multi-node, SLURM and Ray") == "multi-node-slurm-and-ray"
    assert github_anchor("`backend-wizard explain --answers FILE`") == "backend-wizard-explain---answers-file"
    learn = "Learn why: `estimate`, `explain`, `tree`, `glossary`"
    assert github_anchor(learn) == "learn-why-estimate-explain-tree-glossary"
    assert github_anchor("Checks: `backend-wizard check FILE...`") == "checks-backend-wizard-check-file"
    assert github_anchor("How to add a **rule**") == "how-to-add-a-rule"
    assert github_anchor("`snake_case` and _emphasis_") == "snake_case-and-emphasis"
    assert github_anchor("Memory → files") == "memory--files"


def test_a_repeated_heading_gets_a_numbered_anchor(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("# A\n\n## Files\n\n```bash\n# Files\n```\n\n## Files\n", encoding="utf-8")
    assert anchors(page) == {"a", "files", "files-1"}


def test_a_broken_link_is_found(tmp_path: Path) -> None:
    assert broken(README, "docs/usage.md#exit-codes") is None
    assert broken(README, "docs/usage.md#no-such-heading") is not None
    assert broken(README, "docs/no-such-page.md") is not None
    assert broken(README, "#where-to-go-next") is None
    assert broken(REPO / "docs" / "usage.md", "../examples") is None


def test_readme_is_a_short_front_page_that_links_every_docs_page() -> None:
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 200, "README.md is the front page: the reference belongs in docs/"
    linked = {(README.parent / target.partition("#")[0]).resolve() for target in links(README) if is_relative(target)}
    assert set(PAGES[1:]) <= linked, sorted(str(p.relative_to(REPO)) for p in set(PAGES[1:]) - linked)
