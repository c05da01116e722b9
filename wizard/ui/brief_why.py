"""The short form of a decision's reasoning, for the summary; `explain` and the files keep the long one.

A decision's text opens with a paragraph saying why this backend, and may go on with labelled
paragraphs ("Why FSDP2 over DeepSpeed:", "Host RAM:", "Speed:"), each one line of the text. The
summary shows the opening's first sentences only and names what it leaves out, so a newcomer
reads the reason in a few lines and knows where the rest is.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from wizard.engine.sentences import leading_sentences, more_sentences, sentences

# `sentences` is re-exported: the tests of the short Why split sentences as it does.
__all__ = ["BriefWhy", "brief_why", "paragraph_label", "rest_of_reason", "sentences"]

# About eight lines at 80 columns: the first sentence always, the next ones while they fit.
BRIEF_CHARS = 600
# A label is short: a paragraph whose first colon comes later opens with a sentence, not a label.
LABEL_CHARS = 60
# "Why FSDP2 over DeepSpeed", "Why DeepSpeed over FSDP2's offload": a paragraph that weighs two layouts.
_COMPARISON = re.compile(r"why .+ over ", re.IGNORECASE)


@dataclass(frozen=True)
class BriefWhy:
    """The reason as the summary prints it, and the topics it leaves to the long form."""

    text: str
    left_out: tuple[str, ...]


def paragraph_label(paragraph: str) -> str | None:
    """The label a paragraph opens with, its brackets left out ("Host RAM").

    "To run ZeRO-2 instead (if the shorter step matters more to you): save ..." gives "To run
    ZeRO-2 instead"; a paragraph that opens with a sentence gives None.
    """
    depth, label = 0, list[str]()
    for char in paragraph:
        if char == "(":
            depth += 1
        elif char == ")":
            depth = max(depth - 1, 0)
        elif depth == 0 and char == ":":
            words = " ".join("".join(label).split())
            if not words or "." in words or len(words) > LABEL_CHARS:
                return None
            return words
        elif depth == 0:
            label.append(char)
    return None


def brief_why(because: str, limit: int = BRIEF_CHARS) -> BriefWhy:
    """The opening paragraph's first sentences (at least one, then up to `limit` characters).

    A sentence that opens with "Warning:" is kept wherever it stands: the summary must not drop
    the wizard's own doubt about its answer; a "Why X over Y:" paragraph is kept whole. What is
    left out is named: a cut opening by its next sentence's first words, then each other
    paragraph by its label.
    """
    opening, *rest = [part for part in because.split("\n") if part.strip()] or [""]
    said = sentences(opening)
    kept = leading_sentences(said, limit)
    cut = said[len(kept) :]
    warning = next((i for i, sentence in enumerate(cut) if sentence.startswith("Warning:")), None)
    if warning is not None:
        kept += cut[warning:]
        cut = cut[:warning]
    # A "Why FSDP2 over DeepSpeed:" paragraph is the comparison with the runner-up, which the "why
    # not" list defers to ("weighed against FSDP2 ... in the decision above"): it stays whole.
    compared = [part for part in rest if kept_whole(part)]
    left_out = ([rest_of_reason(cut[0], count=len(cut))] if cut else []) + [
        _topic(paragraph_label(part) or "more") for part in rest if not kept_whole(part)
    ]
    return BriefWhy("\n".join([" ".join(kept), *compared]), tuple(dict.fromkeys(left_out)))


def rest_of_reason(sentence: str, words: int = 8, *, count: int = 1) -> str:
    """The cut part of the opening as the list names it: how many sentences, and the first one's opening words.

    A reader then knows what more there is to read; "the rest of the reason" told them nothing, and
    a bare quote read as a sentence they had missed on screen.
    """
    said = sentence.split()
    head = " ".join(said[:words]).rstrip(",;:.")
    quoted = f'"{head}..."' if len(said) > words else f'"{head}"'
    return f"{more_sentences(count)} of the Why, from {quoted}"


def kept_whole(paragraph: str) -> bool:
    """Whether the short form keeps a later paragraph whole: a "Why X over Y:" comparison.

    Only a comparison with the runner-up: "Why QLoRA matters here:" explains the method, not the
    backend, and is left to the long form like any other paragraph.
    """
    label = paragraph_label(paragraph)
    return label is not None and _COMPARISON.match(label) is not None


def _topic(label: str) -> str:
    """A paragraph's label as the list names it: in quotes, as the long form prints it ("Host RAM")."""
    return f'"{label}"'
