"""JSON parsing that refuses duplicate keys (as DeepSpeed does) and reports one readable reason."""

from __future__ import annotations

import json
from typing import Any

from wizard.engine.nesting import MAX_DEPTH, deepest


class JsonProblem(ValueError):
    """Why a JSON text could not be parsed, ready to follow "FILE: "."""


def loads_strict(text: str) -> Any:
    """Parse JSON; duplicate keys, syntax errors, huge numbers and deep nesting raise `JsonProblem`."""

    def no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        result: dict[str, Any] = {}
        for key, value in pairs:
            if key in result:
                raise JsonProblem(f"duplicate key '{key}'")
            result[key] = value
        return result

    try:
        data = json.loads(text, object_pairs_hook=no_duplicates)
    except JsonProblem:
        raise
    except json.JSONDecodeError as exc:
        raise JsonProblem(f"invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}") from None
    except ValueError as exc:  # an integer past Python's 4300-digit limit
        raise JsonProblem(f"unreadable number: {str(exc).split(';')[0]}") from None
    except RecursionError:  # far past the limit: the parser itself ran out of stack
        raise JsonProblem(f"nesting deeper than {MAX_DEPTH} levels") from None
    if deepest(data) > MAX_DEPTH:  # the same limit as YAML's, so every reader gives one answer
        raise JsonProblem(f"nesting deeper than {MAX_DEPTH} levels")
    return data
