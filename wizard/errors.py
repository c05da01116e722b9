"""Typed, user-facing errors and the exit codes they map to.

Every failure a user can cause is one of these. The CLI catches `WizardError` only and prints
`message` on one line (plus `hint` when there is one); anything else is a bug and may show a
traceback.
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    """Documented process exit codes (README, "Exit codes")."""

    OK = 0
    NOT_OVERWRITTEN = 1
    BAD_INPUT = 2
    BAD_TREE = 3
    REFUSED = 4
    WRITE_FAILED = 5
    SELF_CHECK_FAILED = 6
    INTERRUPTED = 130
    BROKEN_PIPE = 141  # 128 + SIGPIPE: what a shell reports for a command stopped by a closed pipe


class WizardError(Exception):
    """Base class: a one-line message, an optional hint and an exit code."""

    exit_code: ExitCode = ExitCode.BAD_INPUT

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        # Where the answers typed so far were saved, and the command that goes on from them.
        self.resume: tuple[str, str] | None = None


class InvalidAnswerError(WizardError):
    """An answer (from a prompt, an answers file or --set) that fails validation."""

    def __init__(self, key: str, value: object, allowed: str, hint: str | None = None) -> None:
        super().__init__(f"{key}: {value!r} is not allowed; {allowed}", hint)
        self.key = key
        self.value = value
        self.allowed = allowed


class ModelUnavailableError(InvalidAnswerError):
    """A model the answer names but the wizard could not read (gated, missing, offline).

    Worded as what happened, not as a value that is not allowed: "model: 'org/name' is gated on
    the Hugging Face Hub ...: log in with `hf auth login` ...".
    """

    def __init__(self, value: object, reason: str, hint: str | None = None) -> None:
        super().__init__("model", value, reason, hint)
        self.message = f"model: {value!r} {reason}"
        self.args = (self.message,)


class MissingAnswerError(WizardError):
    """A required answer that no source supplied.

    `reason` says why the question has no default although it usually derives one (an unknown
    `gpu_model` gives no `gpu_memory_gb`); --defaults cannot help then, so the hint leaves it out.
    """

    def __init__(self, key: str, prompt: str, reason: str | None = None) -> None:
        if reason is None:
            message = f"{key}: no answer given ({prompt})"
            hint = f"add '{key}: ...' to the answers file, pass --set {key}=VALUE, or use --defaults"
        else:
            message = f"{key}: no answer given, and {reason}, so there is no default: {key} must be given ({prompt})"
            hint = f"add '{key}: ...' to the answers file or pass --set {key}=VALUE"
        super().__init__(message, hint=hint)
        self.key = key


class AnswersFileError(WizardError):
    """The answers file cannot be read or is not a mapping."""


class DeepSpeedConfigError(WizardError):
    """The user's DeepSpeed JSON is unreadable, malformed or self-contradictory."""


class InteractiveSessionError(WizardError):
    """Prompts were needed but there is no terminal to ask on."""


class TreeError(WizardError):
    """The decision tree file is broken; the message names file, line and reason."""

    exit_code = ExitCode.BAD_TREE


class RefusedError(WizardError):
    """The guidance gives no backend for these answers; the message says why."""

    exit_code = ExitCode.REFUSED


class OverwriteRefusedError(WizardError):
    """An existing file with other content would be overwritten without --force."""

    exit_code = ExitCode.NOT_OVERWRITTEN


class SelfCheckError(WizardError):
    """A generated config fails the wizard's own checks: a bug, so nothing is written."""

    exit_code = ExitCode.SELF_CHECK_FAILED


class OutputPathError(WizardError):
    """The output folder's name, or what stands at a name in it, cannot take the output.

    A control character in --output-dir, or a named pipe, a device or a socket where a file
    of the set goes: bad input (exit 2), refused before anything is read or written.
    """


class WriteError(WizardError):
    """An output file could not be written (permissions, full disk, ...)."""

    exit_code = ExitCode.WRITE_FAILED


class InterruptedByUser(WizardError):
    """Ctrl-C during the prompts; `partial` holds the answers given so far."""

    exit_code = ExitCode.INTERRUPTED
    partial: dict[str, object] | None = None
