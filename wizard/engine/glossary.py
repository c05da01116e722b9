"""The glossary (wizard/data/glossary.yaml): lookup, and the terms a text uses."""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from functools import cache
from importlib import resources

from wizard.engine.located_yaml import parse_yaml


@dataclass(frozen=True)
class Term:
    """One glossary entry."""

    term: str
    aliases: tuple[str, ...]
    definition: str
    see: tuple[str, ...]

    @property
    def names(self) -> tuple[str, ...]:
        """The term and its aliases."""
        return (self.term, *self.aliases)


@cache
def glossary() -> tuple[Term, ...]:
    """All entries, in file order."""
    text = resources.files("wizard.data").joinpath("glossary.yaml").read_text(encoding="utf-8")
    return tuple(
        Term(row["term"], tuple(row.get("aliases", ())), " ".join(row["definition"].split()), tuple(row.get("see", ())))
        for row in parse_yaml(text)["terms"]
    )


def lookup(name: str) -> Term | None:
    """The entry whose term or alias matches `name` (case-insensitive)."""
    wanted = name.strip().lower()
    return next((t for t in glossary() if wanted in (n.lower() for n in t.names)), None)


def suggest(name: str) -> str | None:
    """The closest term name, for a did-you-mean."""
    names = [n for t in glossary() for n in t.names]
    close = difflib.get_close_matches(name, names, n=1, cutoff=0.5)
    return close[0] if close else None


@cache
def _patterns() -> tuple[tuple[Term, re.Pattern[str]], ...]:
    result = []
    for term in glossary():
        alternatives = sorted(term.names, key=len, reverse=True)
        body = "|".join(re.escape(n) for n in alternatives)
        # Case-sensitive for acronyms (DDP, GiB), insensitive for words ("sharded", "offload").
        flags = 0 if term.term.isupper() or any(c.isdigit() for c in term.term) else re.IGNORECASE
        result.append((term, re.compile(rf"(?<![\w-])(?:{body})(?![\w-])", flags)))
    return tuple(result)


def terms_in(text: str) -> list[Term]:
    """The glossary terms a text uses, in glossary order."""
    return [term for term, pattern in _patterns() if pattern.search(text)]
