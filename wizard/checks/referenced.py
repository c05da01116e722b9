"""Reading a DeepSpeed JSON that a YAML references, through the caller's ``load_json``."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from wizard.checks._report import Report, show


def load_referenced(
    ref: object, report: Report, *, at: str, load_json: Callable[[str], object] | None
) -> tuple[Mapping[Any, Any], Report] | None:
    """Load the JSON that the key at ``at`` names; report why it could not be.

    Returns:
        The parsed JSON and a report whose paths are prefixed with ``ref`` and a colon, or None
        when there is nothing to check (no loader given, or the file could not be read).
    """
    if not isinstance(ref, str) or not ref.strip():
        report.add(
            "ds-file-invalid",
            at,
            f"the DeepSpeed config path is {show(ref)}, not a file path.",
            "write the path of the DeepSpeed JSON file",
        )
        return None
    if load_json is None:
        return None
    try:
        loaded = load_json(ref)
    except FileNotFoundError:
        report.add(
            "ds-file-missing",
            at,
            f"the DeepSpeed JSON {show(ref)} does not exist.",
            "fix the path (relative to the config file's folder), or create the file",
        )
        return None
    except (ValueError, OSError) as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        report.add(
            "ds-file-invalid",
            at,
            f"the DeepSpeed JSON {show(ref)} cannot be read: {reason}",
            "fix the JSON (one object, no duplicate keys, no comments) or the file's permissions",
        )
        return None
    if not isinstance(loaded, Mapping):
        report.add(
            "ds-file-invalid",
            at,
            f"the DeepSpeed JSON {show(ref)} is not a JSON object (its top level is {type(loaded).__name__}).",
            'write the config as one object: {"zero_optimization": {"stage": 2}, ...}',
        )
        return None
    return loaded, report.child(loaded, at=at, prefix=ref, separator=":")
