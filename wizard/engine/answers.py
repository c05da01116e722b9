"""One validator for every answer, whatever its source (prompt, answers file, --set).

`coerce_answer` turns a raw value into the typed value the engine uses, or raises
`InvalidAnswerError` naming the key, the value and what is allowed. Strings are accepted for
numbers and yes/no so that ``--set gpus_per_node=8`` and ``--set offload=cpu`` work the same as
the answers file.
"""

from __future__ import annotations

import ipaddress
import math
import re
from collections.abc import Iterable
from typing import Any

from wizard.engine.conditions import Lookup, evaluate
from wizard.engine.model_size import ModelSizeError, parse_model_size
from wizard.engine.parallel import check_size
from wizard.engine.suggest import closest
from wizard.engine.tree import Question, Tree
from wizard.errors import InvalidAnswerError

MAX_TEXT = 500
_TRUE = {"yes", "y", "true", "on", "1"}
_FALSE = {"no", "n", "false", "off", "0"}
# C0 and C1 control characters except tab and newline. C1 matters too: YAML reads U+0085 (NEL)
# as a line break and folds it to a space, so such a value would not survive answers.yaml.
# One label of a host name; underscores are kept because cluster node names use them.
_HOST_LABEL = re.compile(r"[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?")
# Python class names, comma-separated ("MixtralSparseMoeBlock" or "A, B"): exact, case-sensitive.
_CLASS_NAMES = re.compile(r"\s*[A-Za-z_][A-Za-z0-9_]*\s*(?:,\s*[A-Za-z_][A-Za-z0-9_]*\s*)*")
# Validators that compare a parallel size with the world size and the sizes answered before it.
_SIZE_RULES = ("divides_world_size", "divides_gpus_per_node")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
# Lone surrogates are how Python carries undecodable bytes of a non-UTF-8 argument (--set);
# they cannot be written to a UTF-8 file.
_SURROGATE = re.compile(r"[\ud800-\udfff]")


def looks_like_path(value: str) -> bool:
    """Whether a `model` answer names a file or folder rather than a size."""
    return value.endswith(".json") or "/" in value or value.startswith(".")


def disabled_reason(question: Question, choice_id: str, lookup: Lookup) -> str | None:
    """Why a choice is unavailable for the current answers, or None if it is available."""
    choice = question.choice(choice_id)
    if choice is None or choice.disabled_when is None:
        return None
    return choice.disabled_reason if evaluate(choice.disabled_when, lookup) else None


def coerce_answer(question: Question, raw: Any, lookup: Lookup) -> Any:
    """Validate and convert one answer; `lookup` sees earlier answers and facts."""
    key = question.id
    kind = question.type
    if kind == "choice":
        return _choice(question, raw, lookup)
    if kind == "yesno":
        if isinstance(raw, bool):
            return raw
        if isinstance(raw, str) and raw.strip().lower() in _TRUE | _FALSE:
            return raw.strip().lower() in _TRUE
        raise InvalidAnswerError(key, raw, "allowed: yes or no (true/false)")
    if kind in ("integer", "number"):
        number = _number(question, raw)
        if question.validate in _SIZE_RULES and isinstance(number, int):
            reason = check_size(key, question.validate, number, lookup)
            if reason is not None:
                raise InvalidAnswerError(key, raw, reason)
        return number
    return _text(question, raw)


def _choice(question: Question, raw: Any, lookup: Lookup) -> str:
    ids = [c.id for c in question.choices]
    value = raw.strip() if isinstance(raw, str) else raw
    # The menu's own words are an answer too: "Never" is what the offload menu shows for none.
    titles = {c.title.strip().lower(): c.id for c in question.choices if c.title}
    if isinstance(value, str) and value not in ids and value.lower() in titles:
        value = titles[value.lower()]
    if not isinstance(value, str) or value not in ids:
        hint = None
        if isinstance(value, str):
            close = closest(value.lower(), ids)
            hint = f"did you mean '{close}'?" if close else None
        raise InvalidAnswerError(question.id, raw, f"allowed: {', '.join(ids)}", hint)
    reason = disabled_reason(question, value, lookup)
    if reason:
        raise InvalidAnswerError(question.id, raw, f"not available here: {reason}")
    return value


def _number(question: Question, raw: Any) -> int | float:
    key, integer = question.id, question.type == "integer"
    what = "a whole number" if integer else "a number"
    value: Any = raw
    if isinstance(raw, str):
        text = raw.strip().replace("_", "")
        try:
            value = int(text) if integer or re.fullmatch(r"[+-]?\d+", text) else float(text)
        except ValueError:
            unit = re.fullmatch(r"([\d.]+)\s*([A-Za-z]+)", text)
            hint = f" (the number alone, such as {unit.group(1)})" if unit else ""
            if unit and unit.group(2).lower() == "k" and re.fullmatch(r"\d+", unit.group(1)):
                # "4k" of tokens is 4,096: the count written out, not the 4 before the suffix.
                hint = f" (write {text} as the number, {int(unit.group(1)) * 1024})"
            raise InvalidAnswerError(key, raw, f"expected {what}{_range(question)}{hint}") from None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidAnswerError(key, raw, f"expected {what}{_range(question)}")
    if integer and isinstance(value, float):
        if not value.is_integer():
            raise InvalidAnswerError(key, raw, f"expected {what}{_range(question)}")
        value = int(value)
    if isinstance(value, float) and not math.isfinite(value):
        raise InvalidAnswerError(key, raw, f"expected a finite number{_range(question)}")
    low, high = question.minimum, question.maximum
    too_low = low is not None and (value <= low if question.exclusive_minimum else value < low)
    if too_low or (high is not None and value > high):
        raise InvalidAnswerError(key, raw, f"expected {what}{_range(question)}")
    result: int | float = value
    return result


def _range(question: Question) -> str:
    low, high = question.minimum, question.maximum
    low_text = f"{'more than' if question.exclusive_minimum else 'at least'} {_num(low)}" if low is not None else ""
    high_text = f"at most {_num(high)}" if high is not None else ""
    parts = [p for p in (low_text, high_text) if p]
    return f" ({' and '.join(parts)})" if parts else ""


def _num(value: float | None) -> str:
    if value is None:
        return ""
    return str(int(value)) if float(value).is_integer() else str(value)


def _text(question: Question, raw: Any) -> str:
    key = question.id
    if isinstance(raw, bool) or not isinstance(raw, str | int | float):
        raise InvalidAnswerError(key, raw, "expected text")
    text = str(raw) if not isinstance(raw, str) else raw
    if not text.strip():
        raise InvalidAnswerError(key, raw, "expected non-empty text")
    if len(text) > MAX_TEXT:
        raise InvalidAnswerError(key, f"{text[:40]}...", f"text is limited to {MAX_TEXT} characters")
    if _CONTROL.search(text):
        raise InvalidAnswerError(key, raw, "control characters are not allowed")
    if _SURROGATE.search(text):
        raise InvalidAnswerError(key, raw, "expected UTF-8 text (it holds undecodable bytes)")
    if question.validate == "model_size" and not looks_like_path(text.strip()):
        try:
            parse_model_size(text)
        except ModelSizeError as exc:
            raise InvalidAnswerError(key, raw, str(exc)) from None
        return text.strip()
    if question.validate == "host":
        problem = host_problem(text.strip())
        if problem is not None:
            raise InvalidAnswerError(key, raw, problem)
    if question.validate == "class_names":
        if not _CLASS_NAMES.fullmatch(text):
            raise InvalidAnswerError(
                key, raw, "expected Python class names, comma-separated, such as MixtralSparseMoeBlock"
            )
        return ",".join(name.strip() for name in text.split(","))
    if question.type == "path" and "\n" in text:
        raise InvalidAnswerError(key, raw, "a path cannot contain a line break")
    return text if question.type == "text" and question.validate is None else text.strip()


def unknown_keys(tree: Tree, keys: Iterable[str]) -> list[tuple[str, str | None]]:
    """Keys that are not question ids, each with a did-you-mean suggestion (or None)."""
    ids = list(tree.question_ids)
    result = []
    for key in keys:
        if key not in ids:
            result.append((key, closest(key, ids)))
    return result


def host_problem(text: str) -> str | None:
    """Why `text` is not a machine address the launchers can use, or None.

    An IPv4 address or a host name, without a port (main_process_port holds it): torchrun's
    --rdzv_endpoint is "HOST:PORT", so an address with a port or an IPv6 address (which would need
    brackets there) cannot be written as it is.
    """
    if ":" in text:
        return "expected a host name or IPv4 address without a port (the port is main_process_port)"
    if re.fullmatch(r"[0-9.]+", text):
        try:
            ipaddress.IPv4Address(text)
        except ValueError:
            return "expected an IPv4 address such as 10.0.0.1 (four numbers from 0 to 255) or a host name"
        return None
    if len(text) > 253 or not all(_HOST_LABEL.fullmatch(label) for label in text.split(".")):
        return "expected a host name (letters, digits, '-' and '_' between dots) or an IPv4 address"
    return None
