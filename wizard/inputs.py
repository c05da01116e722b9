"""Reading what the user points at: the answers file, --set values, config.json, DeepSpeed JSON.

Every file is read through `wizard.user_files` (with the writer's own reads, the only code that
opens a user's file): a pipe, a device or an over-long name is refused before anything is read, and
no read goes past its size limit. Every failure is a `WizardError` with one readable line.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from wizard.engine.answers import looks_like_path
from wizard.engine.deepspeed_json import DeepSpeedSummary, parse_deepspeed_text, summarize
from wizard.engine.facts import Inputs
from wizard.engine.located_yaml import YamlProblem, parse_yaml
from wizard.engine.model_size import MAX_PARAMS, MIN_PARAMS, ModelSizeError, shape_from_config
from wizard.engine.strict_json import JsonProblem, loads_strict
from wizard.errors import AnswersFileError, DeepSpeedConfigError, InvalidAnswerError, TreeError, WizardError
from wizard.user_files import is_user_folder, read_user_text, shown, user_path

MAX_ANSWERS_BYTES = 256 * 1024
MAX_JSON_BYTES = 1024 * 1024
MAX_TREE_BYTES = 1024 * 1024
ANSWERS_SCHEMA_VERSION = 1


def read_text(path: Path, limit: int, what: str, error: type[WizardError] = AnswersFileError) -> str:
    """A user's UTF-8 text file, at most ``limit`` bytes (see `wizard.user_files`); errors are one line."""
    return read_user_text(path, limit, what, error)


def read_tree_text(path: Path) -> str:
    """The text of a decision tree file (errors exit with the tree's own code)."""
    return read_text(path, MAX_TREE_BYTES, "decision tree", TreeError)


def load_answers_file(path: Path) -> dict[str, Any]:
    """Answers from YAML or JSON: a flat mapping, or the saved form {schema_version, answers}."""
    text = read_text(path, MAX_ANSWERS_BYTES, "answers file")
    if path.suffix.lower() == ".json":
        # Parsed as JSON, not as YAML: JSON's \ud83e\udd16-style escapes are not YAML.
        data = _parse_json_answers(text, path)
    else:
        try:
            data = parse_yaml(text)  # refuses duplicate keys, aliases and tags
        except YamlProblem as exc:
            raise AnswersFileError(
                f"answers file {shown(path)}, line {exc.line}, column {exc.column}: {exc.reason}"
            ) from None
    if data is None:
        raise AnswersFileError(f"answers file {shown(path)} is empty", hint="see examples/ for answers files")
    if not isinstance(data, dict):
        kind = "list" if isinstance(data, list) else type(data).__name__
        raise AnswersFileError(f"answers file {shown(path)} must be a mapping of answers (key: value), not a {kind}")
    if "schema_version" in data:
        version = data["schema_version"]
        if type(version) is not int or version != ANSWERS_SCHEMA_VERSION or set(data) - {"schema_version", "answers"}:
            raise AnswersFileError(
                f"answers file {shown(path)}: schema_version must be {ANSWERS_SCHEMA_VERSION}, "
                "with the answers under 'answers'"
            )
        data = data.get("answers")
        if not isinstance(data, dict):
            raise AnswersFileError(f"answers file {shown(path)}: 'answers' must be a mapping")
    for key, value in data.items():
        if not key.isprintable():  # a line break in a key would split the one-line error that names it
            raise AnswersFileError(f"answers file {shown(path)}: unknown key {key!r}")
        if isinstance(value, dict | list):
            raise InvalidAnswerError(key, value, "expected a single value, not a mapping or list")
    return dict(data)


def _parse_json_answers(text: str, path: Path) -> Any:
    try:
        return loads_strict(text)
    except JsonProblem as exc:
        raise AnswersFileError(f"answers file {shown(path)}: {exc}") from None


def parse_set_values(items: Sequence[str]) -> dict[str, str]:
    """--set key=value pairs (values stay text; the validator converts them)."""
    values: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise AnswersFileError(f"--set {item!r}: expected key=value")
        if not key.strip().isprintable():  # a line break in a key would split the one-line error that names it
            raise AnswersFileError(f"--set {item!r}: unknown key {key.strip()!r}")
        values[key.strip()] = value
    return values


def load_model_config(value: str) -> dict[str, Any]:
    """A model's config.json (or the folder holding one), parsed, with its parameter count checked."""
    path = user_path(value)
    try:
        if is_user_folder(path, "model config", AnswersFileError):
            path = path / "config.json"
        text = read_text(path, MAX_JSON_BYTES, "model config")
    except WizardError as exc:
        raise InvalidAnswerError(
            "model", value, f"a size such as 7B or a readable config.json: {exc.message}"
        ) from None
    try:
        config = loads_strict(text)
    except JsonProblem as exc:
        raise InvalidAnswerError("model", value, f"{shown(path)}: {exc}") from None
    if not isinstance(config, dict):
        raise InvalidAnswerError("model", value, f"{shown(path)} must hold a JSON object")
    text_config = config.get("text_config")
    if isinstance(text_config, dict) and "hidden_size" not in config:
        config = text_config
    archs = config.get("architectures")
    if archs and not isinstance(archs, list):  # the shape reads archs[0]: a dict or `true` would crash
        raise InvalidAnswerError("model", value, f"{shown(path)}: 'architectures' must be a list of class names")
    try:
        shape = shape_from_config(config)
    except ModelSizeError as exc:
        raise InvalidAnswerError("model", value, str(exc)) from None
    if not all(MIN_PARAMS <= count <= MAX_PARAMS for count in (shape.params, shape.active_params)):
        # The same bounds as a typed size: far larger counts overflow the float memory estimate.
        raise InvalidAnswerError(
            "model", value, f"{shown(path)} gives a parameter count outside {MIN_PARAMS:,} to 100T"
        )
    return config


def load_deepspeed(value: str) -> tuple[dict[str, Any], DeepSpeedSummary]:
    """A user's DeepSpeed JSON, parsed and summarized (errors carry line and column)."""
    path = user_path(value)
    text = read_text(path, MAX_JSON_BYTES, "DeepSpeed config", DeepSpeedConfigError)
    data = parse_deepspeed_text(text, shown(path))
    return data, summarize(data, shown(path))


def check_nvme_path(value: str) -> None:
    """NVMe offload paths must be absolute: they are used on every node as written."""
    if not value.startswith("/"):
        raise InvalidAnswerError("nvme_path", value, "expected an absolute path such as /local_nvme")


def resolve_inputs(answers: Mapping[str, Any]) -> Inputs:
    """Read every file the answers point to (config.json, DeepSpeed JSON)."""
    model_config = None
    model = answers.get("model")
    if isinstance(model, str) and looks_like_path(model):
        model_config = load_model_config(model)
    ds_data, ds_summary = None, None
    if answers.get("deepspeed_config"):
        ds_data, ds_summary = load_deepspeed(str(answers["deepspeed_config"]))
    return Inputs(model_config=model_config, deepspeed=ds_summary, deepspeed_data=ds_data)
