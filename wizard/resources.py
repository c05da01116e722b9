"""Where the decision tree and the templates live: in the installed wheel, or in the checkout."""

from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent
_BUNDLED = _PACKAGE / "_bundled"  # filled by the wheel build (pyproject: force-include)
_CHECKOUT = _PACKAGE.parent


def _first_existing(name: str) -> Path:
    for base in (_BUNDLED, _CHECKOUT):
        candidate = base / name
        if candidate.exists():
            return candidate
    return _BUNDLED / name


def default_tree_path() -> Path:
    """The shipped decision_tree.yaml."""
    return _first_existing("decision_tree.yaml")


def templates_dir() -> Path:
    """The shipped jinja2 templates folder."""
    return _first_existing("templates")
