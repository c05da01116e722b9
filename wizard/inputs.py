"""Reading what the user points at: the answers file, --set values, the model, DeepSpeed JSON.

The model is a local config.json or folder (counted from its safetensors headers when it holds
them, `wizard.checkpoint`) or a Hub id (`wizard.hub_model`: the local cache, else the Hub).
Every file is read through `wizard.user_files` (with the writer's own reads, the only code that
opens a user's file): a pipe, a device or an over-long name is refused before anything is read, and
no read goes past its size limit. Every failure is a `WizardError` with one readable line.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

from wizard.engine.answers import looks_like_path
from wizard.engine.deepspeed_json import DeepSpeedSummary, parse_deepspeed_text, summarize
from wizard.engine.facts import Inputs
from wizard.engine.hub_id import HubId, parse_hub_id
from wizard.engine.located_yaml import parse_yaml_or_raise
from wizard.engine.model_origin import ModelOrigin
from wizard.engine.strict_json import JsonProblem, loads_strict
from wizard.errors import AnswersFileError, DeepSpeedConfigError, InvalidAnswerError, TreeError, WizardError
from wizard.model_config import check_model_config, parse_model_config, weights_note
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
        # Refuses duplicate keys, aliases and tags.
        data = parse_yaml_or_raise(text, f"answers file {shown(path)}", AnswersFileError)
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


def without_unset(
    set_values: Mapping[str, str], file_values: Mapping[str, Any], known: Collection[str]
) -> tuple[dict[str, str], dict[str, Any]]:
    """--set KEY= (nothing after the =) drops KEY: from the answers file's values and from --set.

    No answer takes empty text, so an empty value can only mean "as if the file did not say it":
    the question's default, or its prompt, applies again (a brought deepspeed_config left out
    without editing the file). Only a `known` key is dropped: an unknown one stays, for the
    validation's error that names it.
    """
    dropped = {key for key, value in set_values.items() if value == "" and key in known}
    kept = {key: value for key, value in set_values.items() if key not in dropped}
    return kept, {key: value for key, value in file_values.items() if key not in dropped}


def hub_reference(value: str) -> HubId | None:
    """The Hub id a `model` answer names, or None for a local path.

    "org/name" names a local folder when one of that name exists here, as in transformers'
    `from_pretrained`; otherwise it is a Hub id ("org/name@revision" always is).
    """
    hub = parse_hub_id(value)
    if hub is None or (hub.revision is None and os.path.lexists(user_path(value))):
        return None
    return hub


def load_model(value: str) -> tuple[str, dict[str, Any], ModelOrigin]:
    """A `model` answer that names a model (a local path or a Hub id): the value to save, config.json, origin.

    A local path is saved absolute, so saved answers replay from any directory; a Hub id as the id.
    """
    hub = hub_reference(value)
    if hub is not None:
        from wizard.hub_model import load_hub_model  # only for a Hub id: it reads the HF cache or the Hub

        config, origin = load_hub_model(hub, value)
        return str(hub), config, origin
    path = os.path.abspath(user_path(value))
    config, origin = load_local_model(path)
    return path, config, origin


def load_local_model(value: str) -> tuple[dict[str, Any], ModelOrigin]:
    """A local model: its config.json (the file, or the folder holding it) and where its count comes from.

    Beside *.safetensors files or model.safetensors.index.json, the count is the exact one of
    the checkpoint's headers (`wizard.checkpoint`); otherwise config.json is counted by its
    architecture.
    """
    path = user_path(value)
    try:
        if is_user_folder(path, "model config", AnswersFileError):
            path = path / "config.json"
        text = read_text(path, MAX_JSON_BYTES, "model config")
    except WizardError as exc:
        raise InvalidAnswerError(
            "model", value, f"a size such as 7B, a Hub id, or a readable config.json: {exc.message}"
        ) from None
    config = parse_model_config(text, value, shown(path))
    from wizard.checkpoint import local_weights  # only for a model folder or config.json

    weights = local_weights(path.parent, config, value)
    origin = ModelOrigin(name=value, source="config")
    if weights is not None:
        origin = ModelOrigin(
            name=value,
            source="safetensors",
            counted_from="safetensors headers",
            params=weights.params,
            note=weights_note(weights),
        )
    check_model_config(config, value, shown(path), origin.params)
    return config, origin


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
    model_config, origin = None, None
    model = answers.get("model")
    if isinstance(model, str) and looks_like_path(model):
        _, model_config, origin = load_model(model)
    ds_data, ds_summary = None, None
    if answers.get("deepspeed_config"):
        ds_data, ds_summary = load_deepspeed(str(answers["deepspeed_config"]))
    return Inputs(model_config=model_config, deepspeed=ds_summary, deepspeed_data=ds_data, model_origin=origin)
