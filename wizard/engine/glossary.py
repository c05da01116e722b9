"""The glossary (wizard/data/glossary.yaml): forgiving look-up, suggestions, and the terms a text uses.

People type a term the way they remember it: "zero3", "ZeRO 3", "fsdp-2", "q lora". Look-up
therefore compares normalised names (case folded; spaces, hyphens, underscores and dots removed),
and an unknown name gets up to three suggestions ranked by edit distance on those normalised
forms, so a typo such as "zeor" is answered with ZeRO rather than with whatever shares the most
letters. Finding the terms an explanation uses is stricter: a name must stand as a whole word in
the text, names with a capital letter must match their case, and `lookup_aliases` (ordinary words
such as "full" or related names such as "NVIDIA") are never matched in running text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache

from wizard.engine.catalog import data_text
from wizard.engine.located_yaml import parse_yaml

# What look-up ignores: people write "ZeRO-3", "zero 3", "zero_3" and "torch.compile" interchangeably.
_IGNORED = re.compile(r"[\s\-_.]+")
# A name never matches inside a longer word: not "shard" in "dp_shard_size", not "ZeRO" in "ZeRO-3".
_BEFORE = r"(?<![\w-])"
_AFTER = r"(?![\w-])"
SUGGESTIONS = 3


@dataclass(frozen=True)
class Source:
    """A public document that explains a term."""

    title: str
    url: str


@dataclass(frozen=True)
class Term:
    """One glossary entry."""

    term: str
    aliases: tuple[str, ...]
    definition: str
    see: tuple[str, ...]
    lookup_aliases: tuple[str, ...] = ()
    source: Source | None = None

    @property
    def names(self) -> tuple[str, ...]:
        """Every name look-up accepts: the term, its aliases and its look-up-only spellings."""
        return (self.term, *self.aliases, *self.lookup_aliases)

    @property
    def text_names(self) -> tuple[str, ...]:
        """The names that mark the term as used when they appear in a text."""
        return (self.term, *self.aliases)


def normalise(name: str) -> str:
    """The form look-up compares: case folded, without spaces, hyphens, underscores and dots."""
    return _IGNORED.sub("", name).casefold()


@cache
def glossary() -> tuple[Term, ...]:
    """All entries, in file order."""
    text = data_text("glossary.yaml")
    terms = []
    for row in parse_yaml(text)["terms"]:
        source = row.get("source")
        terms.append(
            Term(
                term=row["term"],
                aliases=tuple(row.get("aliases", ())),
                definition=" ".join(row["definition"].split()),
                see=tuple(row.get("see", ())),
                lookup_aliases=tuple(row.get("lookup_aliases", ())),
                source=Source(source["title"], source["url"]) if source else None,
            )
        )
    return tuple(terms)


@cache
def _index() -> dict[str, Term]:
    """Normalised name -> entry. The first entry wins a clash; the tests forbid clashes."""
    index: dict[str, Term] = {}
    for term in glossary():
        for name in term.names:
            index.setdefault(normalise(name), term)
    return index


def lookup(name: str) -> Term | None:
    """The entry one of whose names equals `name` once both are normalised; a plural "s" may be dropped."""
    wanted = normalise(name)
    if not wanted:
        return None
    index = _index()
    found = index.get(wanted)
    if found is None and len(wanted) > 3 and wanted.endswith("s"):
        found = index.get(wanted[:-1])  # "ranks", "state dicts", "adapters" with the s left off
    return found


def _edit_distance(a: str, b: str) -> int:
    """Optimal string alignment distance: insertions, deletions, substitutions and swaps of neighbours.

    A swap counts once because the commonest typo is two letters in the wrong order ("zeor").
    """
    previous2: list[int] = []
    previous = list(range(len(b) + 1))
    for i, char_a in enumerate(a, 1):
        current = [i] + [0] * len(b)
        for j, char_b in enumerate(b, 1):
            current[j] = min(
                previous[j] + 1,
                current[j - 1] + 1,
                previous[j - 1] + (char_a != char_b),
            )
            if i > 1 and j > 1 and char_a == b[j - 2] and a[i - 2] == char_b:
                current[j] = min(current[j], previous2[j - 2] + 1)
        previous2, previous = previous, current
    return previous[len(b)]


def _tolerance(length: int) -> int:
    """Edits allowed for a typed name of this length, more for longer names.

    None for two letters, where one edit reaches half the acronyms (TP, CP, EP, SP, PP); up to
    three for long names, where a few slips still leave the word recognisable.
    """
    if length <= 2:
        return 0
    if length <= 4:
        return 1
    if length <= 7:
        return 2
    return 3


def suggest(name: str, limit: int = SUGGESTIONS) -> list[Term]:
    """Entries close to an unknown name, best first: for a did-you-mean.

    Ranked by edit distance between normalised names (within a tolerance that grows with the
    length typed), then names that start with what was typed ("grad" -> gradients, gradient
    checkpointing), then names that contain it ("accumulation"); ties keep glossary order.
    """
    wanted = normalise(name)
    if not wanted:
        return []
    tolerance = _tolerance(len(wanted))
    ranked: list[tuple[tuple[int, int, int], Term]] = []
    for order, term in enumerate(glossary()):
        best: tuple[int, int, int] | None = None
        for candidate in {normalise(n) for n in term.names}:
            distance = _edit_distance(wanted, candidate)
            if distance <= tolerance:
                score = (0, distance, order)
            elif len(wanted) >= 3 and candidate.startswith(wanted):
                score = (1, 0, order)
            elif len(wanted) >= 4 and wanted in candidate:
                score = (2, 0, order)
            else:
                continue
            best = score if best is None else min(best, score)
        if best is not None:
            ranked.append((best, term))
    ranked.sort(key=lambda item: item[0])
    return [term for _, term in ranked[:limit]]


def _text_pattern(name: str) -> str:
    """One alternative of the text matcher: case-sensitive for names with a capital letter."""
    body = re.escape(name)
    # "ZeRO", "AMD", "Ada" keep their case (so "ada" or "ray" in prose do not count); lower-case
    # names ("sharded", "fp16") also match at the start of a sentence.
    return body if any(c.isupper() for c in name) else f"(?i:{body})"


@cache
def _text_matcher() -> re.Pattern[str]:
    """Every text name of every entry in one alternation, longest first.

    One alternation scanned left to right takes the longest name at each position and never
    reuses its characters, so "expert parallelism" counts once (not also as MoE's "expert"), and
    "gradient accumulation" is not also "gradient".
    """
    names = sorted({n for t in glossary() for n in t.text_names}, key=lambda n: (-len(n), n))
    body = "|".join(_text_pattern(n) for n in names)
    return re.compile(rf"{_BEFORE}(?:{body}){_AFTER}")


def terms_in(text: str) -> list[Term]:
    """The glossary terms a text uses, in glossary order."""
    return [term for term, _ in term_mentions(text)]


def term_mentions(text: str) -> list[tuple[Term, str]]:
    """The glossary terms a text uses, in glossary order, each with the words it first appears as.

    A term found through an alias ("mesh" for device mesh) is listed with those words, so that a
    reader can find it in the text.
    """
    index = _index()
    found: dict[str, str] = {}
    for match in _text_matcher().finditer(text):
        found.setdefault(index[normalise(match.group(0))].term, match.group(0))
    return [(term, found[term.term]) for term in glossary() if term.term in found]


def term_as_listed(term: Term, words: str) -> str:
    """A term for a "Terms used" line: with the text's words beside it when they look different."""
    a, b = normalise(term.term), normalise(words)
    return term.term if a in b or b in a else f'{term.term} ("{words}")'
