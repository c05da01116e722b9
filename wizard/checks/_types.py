"""The two records of the checker: a finding about a file, and the catalogue entry of a check."""

from __future__ import annotations

from dataclasses import dataclass

ERROR = "error"
WARNING = "warning"
INFO = "info"
SEVERITIES = (ERROR, WARNING, INFO)

ACCELERATE = "accelerate"
DEEPSPEED = "deepspeed"
AXOLOTL = "axolotl"
ANY = "any"
FORMATS = (ACCELERATE, DEEPSPEED, AXOLOTL)
# What detection says of a file that is none of the three formats: nothing in it is checked.
NOT_A_CONFIG = "none"


@dataclass(frozen=True)
class Finding:
    """One problem found in a config file.

    Attributes:
        severity: "error" (the tool rejects it or the run breaks), "warning" (probably not what
            was meant) or "info".
        path: Key path inside the file ("deepspeed_config.zero_stage"); "" for the whole file.
            Findings about a referenced DeepSpeed JSON start with that path as written and a
            colon ("ds_config.json:zero_optimization.stage").
        message: What is wrong, naming the value.
        fix: What to write instead.
        tag: Whose behaviour the check stands on, a key of `wizard.checks.catalog.SOURCES` ("accelerate").
        check: The id of the `CheckInfo` that produced it.
    """

    severity: str
    path: str
    message: str
    fix: str
    tag: str
    check: str = ""


@dataclass(frozen=True)
class CheckInfo:
    """One check of the catalogue (``wizard.checks.CHECKS``).

    Attributes:
        id: Stable identifier ("acc-zero-stage").
        severity: The severity of every finding it produces.
        tool: The format it applies to: "accelerate", "deepspeed", "axolotl" or "any".
        summary: What it flags, in a few words.
        tag: Whose behaviour the check stands on, a key of `SOURCES` in `wizard.checks.catalog`.
    """

    id: str
    severity: str
    tool: str
    summary: str
    tag: str
