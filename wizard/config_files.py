"""Reading config files for `check`, and the DeepSpeed JSON they point to."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from wizard.engine.deepspeed_json import parse_deepspeed_text
from wizard.engine.located_yaml import YamlProblem, parse_yaml
from wizard.errors import DeepSpeedConfigError, WizardError
from wizard.inputs import MAX_JSON_BYTES, read_text


class ConfigFileError(WizardError):
    """A config file given to `check` cannot be read or parsed (exit 2)."""


def load_config_file(path: Path) -> object:
    """Parse a YAML or JSON config; errors name the file, line and column."""
    text = read_text(path, MAX_JSON_BYTES, "config file", ConfigFileError)
    if path.suffix.lower() == ".json":
        try:
            return parse_deepspeed_text(text, str(path))
        except DeepSpeedConfigError as exc:
            if "top level must be" not in exc.message:
                raise ConfigFileError(exc.message) from None
            return json.loads(text)
    try:
        return parse_yaml(text)
    except YamlProblem as exc:
        raise ConfigFileError(f"{path}, line {exc.line}, column {exc.column}: {exc.reason}") from None


def make_json_loader(config_path: Path) -> Callable[[str], object]:
    """A loader for a DeepSpeed JSON a config points to.

    Relative paths resolve from the config's folder, then from the current directory (where
    `accelerate launch` resolves them).
    """

    def load(name: str) -> object:
        candidates = [Path(name)] if Path(name).is_absolute() else [config_path.parent / name, Path(name)]
        for candidate in candidates:
            if candidate.is_file():
                try:
                    text = read_text(candidate, MAX_JSON_BYTES, "DeepSpeed config")
                    return parse_deepspeed_text(text, name)
                except WizardError as exc:
                    raise ValueError(exc.message) from None
        raise FileNotFoundError(f"{name} not found next to {config_path.name} or in the current directory")

    return load
