"""Reading config files for `check`, and the DeepSpeed JSON they point to."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from wizard.engine.deepspeed_json import parse_deepspeed_text
from wizard.engine.located_yaml import parse_yaml_or_raise
from wizard.engine.strict_json import loads_strict
from wizard.errors import DeepSpeedConfigError, WizardError
from wizard.inputs import MAX_JSON_BYTES
from wizard.user_files import read_user_text, shown, stat_user_path


class ConfigFileError(WizardError):
    """A config file given to `check` cannot be read or parsed (exit 2)."""


def load_config_file(path: Path, duplicates: list[tuple[str, int]] | None = None) -> object:
    """Parse a YAML or JSON config; errors name the file, line and column.

    With ``duplicates``, a repeated key of a YAML file is not an error: the later value wins (as
    PyYAML's ``safe_load`` does for Accelerate and Axolotl) and (key path, line) is appended to it.
    A JSON file's repeated key stays an error: DeepSpeed refuses it when it reads the file.
    """
    text = read_user_text(path, MAX_JSON_BYTES, "config file", ConfigFileError)
    if path.suffix.lower() == ".json":
        try:
            return parse_deepspeed_text(text, shown(path))
        except DeepSpeedConfigError as exc:
            if "top level must be" not in exc.message:
                raise ConfigFileError(exc.message) from None
            return loads_strict(text)  # valid JSON, only not an object: the format check says so
    return parse_yaml_or_raise(text, shown(path), ConfigFileError, duplicates=duplicates)


def make_json_loader(config_path: Path) -> Callable[[str], object]:
    """A loader for a DeepSpeed JSON a config points to.

    Relative paths resolve from the config's folder, then from the current directory (where
    `accelerate launch` resolves them).
    """

    def load(name: str) -> object:
        candidates = [Path(name)] if Path(name).is_absolute() else [config_path.parent / name, Path(name)]
        try:
            for candidate in candidates:
                if stat_user_path(candidate, "DeepSpeed config", DeepSpeedConfigError) is not None:
                    text = read_user_text(candidate, MAX_JSON_BYTES, "DeepSpeed config", DeepSpeedConfigError)
                    return parse_deepspeed_text(text, shown(name))
        except WizardError as exc:
            raise ValueError(exc.message) from None
        raise FileNotFoundError(f"{name} not found next to {config_path.name} or in the current directory")

    return load
