"""One nesting limit for every structured file a user brings (answers, config.json, DeepSpeed JSON, YAML).

Parsed data is walked recursively further on (the checks, the renderer, ``copy.deepcopy``,
``json.dumps``); a document nested a few hundred levels deep passes a parser and then fails there
with a RecursionError. No real config comes near the limit: DeepSpeed's deepest block is three
levels down.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

MAX_DEPTH = 64


def deepest(value: Any) -> int:
    """How deep the deepest value sits: 0 for a scalar, 1 for the items of a top-level list or mapping.

    A loop with a stack, not recursion, so any depth a parser could build is measured safely.
    """
    most = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        most = max(most, depth)
        if isinstance(item, Mapping):
            stack.extend((child, depth + 1) for child in item.values())
        elif isinstance(item, list | tuple):
            stack.extend((child, depth + 1) for child in item)
    return most
