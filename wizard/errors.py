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
    SMOKE_FAILED = 7  # `backend-wizard smoke`: the set's run failed (out of memory, a hang, a launch error)
    # `backend-wizard smoke`: the run finished, but what it resolved or held differs from the plan
    SMOKE_DIFFERS = 8
    # Files written (or shown), but by the estimate the plan cannot run as written: a brought DeepSpeed JSON
    # past the GPU's memory, or an offload past the host RAM. A script that checks for 0 should not go on
    # to launch it.
    WRITTEN_WONT_RUN = 9
    INTERRUPTED = 130
    BROKEN_PIPE = 141  # 128 + SIGPIPE: what a shell reports for a command stopped by a closed pipe


class WizardError(Exception):
    """Base class: a one-line message, an optional hint and an exit code."""

    exit_code: ExitCode = ExitCode.BAD_INPUT

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


class SavedAnswers:
    """What became of the answers typed before a run stopped, for the report of its error.

    `resume` is the file they were saved to and the command that goes on from it; `problem` says
    why they could not be saved. A plain class, not a dataclass: `--help` imports this module,
    and dataclasses would add its imports to the start-up time (bench/startup.py).
    """

    __slots__ = ("problem", "resume")

    def __init__(self, resume: tuple[str, str] | None = None, problem: str | None = None) -> None:
        self.resume = resume
        self.problem = problem

    def hint(self, error: WizardError) -> str | None:
        """The error's hint, followed by why the answers could not be saved when they could not."""
        if self.problem is None:
            return error.hint
        note = f"could not save the answers so far: {self.problem}"
        return f"{error.hint}; {note}" if error.hint else note


class InvalidAnswerError(WizardError):
    """An answer (from a prompt, an answers file or --set) that fails validation.

    `source` names where a value that did not come from a prompt was given ("--set", "answers
    file", an option such as "--model"): the message starts with it.
    """

    def __init__(
        self, key: str, value: object, allowed: str, hint: str | None = None, source: str | None = None
    ) -> None:
        said = self._sentence(key, value, allowed)
        if source == f"--{key}":
            # "--model: 'x' ...", not "--model: model: 'x' ..."; "--gpu-memory-gb: gpu_memory_gb: ..."
            # keeps both, the option typed and the answer's own key.
            said = said.removeprefix(f"{key}: ")
        super().__init__(f"{source}: {said}" if source else said, hint)
        self.key = key
        self.value = value
        self.allowed = allowed
        self.source = source

    @staticmethod
    def _sentence(key: str, value: object, allowed: str) -> str:
        return f"{key}: {value!r} is not allowed; {allowed}"

    def given_in(self, source: str) -> InvalidAnswerError:
        """The same error for a value given in `source`, which its message names first."""
        return InvalidAnswerError(self.key, self.value, self.allowed, self.hint, source)


class ModelUnavailableError(InvalidAnswerError):
    """A model the answer names but the wizard could not read (gated, missing, offline).

    Worded as what happened, not as a value that is not allowed: "model: 'org/name' is gated on
    the Hugging Face Hub ...: log in with `hf auth login` ...".
    """

    def __init__(self, value: object, reason: str, hint: str | None = None, source: str | None = None) -> None:
        super().__init__("model", value, reason, hint, source)

    @staticmethod
    def _sentence(key: str, value: object, allowed: str) -> str:
        return f"{key}: {value!r} {allowed}"

    def given_in(self, source: str) -> ModelUnavailableError:
        """The same error for a model given in `source`, which its message names first."""
        return ModelUnavailableError(self.value, self.allowed, self.hint, source)


class MissingAnswerError(WizardError):
    """A required answer that no source supplied.

    `reason` says why the question has no default although it usually derives one (an unknown
    `gpu_model` gives no `gpu_memory_gb`); --defaults cannot help then, so the hint leaves it out.
    """

    def __init__(self, key: str, prompt: str, reason: str | None = None, hint: str | None = None) -> None:
        if reason is None:
            message = f"{key}: no answer given ({prompt})"
            usual = f"add '{key}: ...' to the answers file, pass --set {key}=VALUE, or use --defaults"
        else:
            message = f"{key}: no answer given, and {reason}, so there is no default: {key} must be given ({prompt})"
            usual = f"add '{key}: ...' to the answers file or pass --set {key}=VALUE"
        super().__init__(message, hint=hint or usual)
        self.key = key
        self.prompt = prompt
        self.reason = reason

    def with_hint(self, hint: str) -> MissingAnswerError:
        """The same error with another hint (a command whose options give the answer says which)."""
        return MissingAnswerError(self.key, self.prompt, self.reason, hint)


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

    def __init__(self, message: str, hint: str | None = None, partial: dict[str, object] | None = None) -> None:
        super().__init__(message, hint)
        self.partial = partial
