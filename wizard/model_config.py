"""A model's config.json as the wizard reads it: parsed, its text part taken, its count checked."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from wizard.engine.model_size import MAX_PARAMS, MIN_PARAMS, ModelSizeError, shape_from_config
from wizard.engine.param_count import text_part
from wizard.engine.strict_json import JsonProblem, loads_strict
from wizard.errors import InvalidAnswerError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from wizard.engine.safetensors_count import WeightCount


def weights_note(weights: WeightCount) -> str | None:
    """What the summary says about a count from headers beyond its source (quantization, layers left out)."""
    notes = []
    if weights.quantization is not None:
        notes.append(f"{weights.quantization}-quantized weights counted unpacked")
    if weights.extra_layers:
        layers = ", ".join(str(n) for n in weights.extra_layers)
        notes.append(f"layer {layers} past num_hidden_layers left out, as transformers does")
    return "; ".join(notes) or None


def parse_model_config(text: str, value: str, where: str) -> dict[str, Any]:
    """A config.json's text, parsed: a JSON object, its text_config for a multimodal model."""
    try:
        config = loads_strict(text)
    except JsonProblem as exc:
        raise InvalidAnswerError("model", value, f"{where}: {exc}") from None
    if not isinstance(config, dict):
        raise InvalidAnswerError("model", value, f"{where} must hold a JSON object")
    text_config = config.get("text_config")
    if isinstance(text_config, dict) and "hidden_size" not in config:
        config = dict(text_part(config))
    archs = config.get("architectures")
    if archs and not isinstance(archs, list):  # the shape reads archs[0]: a dict or `true` would crash
        raise InvalidAnswerError("model", value, f"{where}: 'architectures' must be a list of class names")
    return config


def check_model_config(config: Mapping[str, Any], value: str, where: str, params: int | None = None) -> None:
    """Refuse a config.json that cannot be counted, or whose count is out of bounds, in one line."""
    try:
        shape = shape_from_config(config, params)
    except ModelSizeError as exc:
        raise InvalidAnswerError("model", value, str(exc)) from None
    if not all(MIN_PARAMS <= count <= MAX_PARAMS for count in (shape.params, shape.active_params)):
        # The same bounds as a typed size: far larger counts overflow the float memory estimate.
        raise InvalidAnswerError("model", value, f"{where} gives a parameter count outside {MIN_PARAMS:,} to 100T")
