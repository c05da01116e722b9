"""A `model` answer that is a Hub id: read from the local Hugging Face cache, else from the Hub.

The cache comes first, so a model downloaded once works offline (`wizard.hub_cache`); otherwise
config.json and the safetensors headers are fetched with huggingface_hub (`wizard.hub`, which
imports it only then). Every failure is one line that names the id, what was tried and the fix.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from wizard.checkpoint import local_weights
from wizard.engine.hub_id import HubId
from wizard.engine.model_origin import ModelOrigin
from wizard.engine.model_size import catalog_model
from wizard.engine.safetensors_count import SafetensorsProblem, count_weights
from wizard.errors import InvalidAnswerError, ModelUnavailableError, WizardError
from wizard.hub import HubProblem, endpoint, fetch, offline
from wizard.hub_cache import cached_snapshot, hub_cache_dir
from wizard.model_config import check_model_config, parse_model_config, weights_note
from wizard.user_files import read_user_text, shown

# The same bound as a local config.json's (wizard.inputs).
MAX_JSON_BYTES = 1024 * 1024

_OR = "or pass the model's config.json or its size such as 7B"


# What this process already read, so that the answers checked again after a change (and the
# files resolved again for rendering) keep the count the first read gave, without asking again.
_READ: dict[tuple[str, str, bool, str], tuple[dict[str, Any], ModelOrigin]] = {}


def load_hub_model(hub: HubId, value: str) -> tuple[dict[str, Any], ModelOrigin]:
    """The config.json and origin of a Hub model: from the cache when it holds it, else from the Hub.

    Raises:
        InvalidAnswerError: the model cannot be read or counted; the message says why and the fix.
    """
    key = (str(hub), str(hub_cache_dir()), offline(), endpoint())
    if key not in _READ:
        _READ[key] = _load(hub, value)
    config, origin = _READ[key]
    return dict(config), origin


def _load(hub: HubId, value: str) -> tuple[dict[str, Any], ModelOrigin]:
    cache = hub_cache_dir()
    snapshot = cached_snapshot(hub, cache)
    if snapshot is not None:
        try:
            return _from_snapshot(hub, snapshot, value)
        except InvalidAnswerError:
            if offline():
                raise
            # The cached config.json alone could not be counted (an architecture the counter
            # does not know): the Hub's safetensors metadata may still count it.
    try:
        config_path, files, commit = fetch(hub, cache)
    except HubProblem as exc:
        raise ModelUnavailableError(value, _problem(hub, exc, cache)) from None
    config = _read_config(config_path, value)
    try:
        weights = count_weights(files, config) if files else None
    except SafetensorsProblem as exc:
        raise InvalidAnswerError("model", value, f"{hub} on the Hub: {exc}; {_OR}") from None
    origin = ModelOrigin(
        name=str(hub),
        source="hub",
        counted_from="safetensors headers" if weights is not None else "config.json",
        params=weights.params if weights is not None else None,
        hub_id=hub.repo_id,
        revision=hub.revision or commit,
        note=weights_note(weights) if weights is not None else None,
    )
    check_model_config(config, value, f"{hub}'s config.json", origin.params)
    return config, origin


def _from_snapshot(hub: HubId, snapshot: Path, value: str) -> tuple[dict[str, Any], ModelOrigin]:
    """A cached snapshot: config.json, and the shards' headers when every shard was downloaded."""
    config = _read_config(snapshot / "config.json", value)
    weights = local_weights(snapshot, config, value, partial=True)
    origin = ModelOrigin(
        name=str(hub),
        source="hub-cache",
        counted_from="safetensors headers" if weights is not None else "config.json",
        params=weights.params if weights is not None else None,
        hub_id=hub.repo_id,
        revision=hub.revision or snapshot.name,
        note=weights_note(weights) if weights is not None else None,
    )
    check_model_config(config, value, shown(snapshot / "config.json"), origin.params)
    return config, origin


def _read_config(path: Path, value: str) -> dict[str, Any]:
    try:
        text = read_user_text(path, MAX_JSON_BYTES, "model config", WizardError)
    except WizardError as exc:
        raise InvalidAnswerError("model", value, exc.message) from None
    return parse_model_config(text, value, shown(path))


def _problem(hub: HubId, problem: HubProblem, cache: Path) -> str:
    """The one line for a Hub id that could not be read: what happened, what was tried, the fix.

    Where the id's name is a model of the bundled catalog (meta-llama/Llama-3.2-1B is llama-3.2-1b),
    that name is the way out offline, so it is offered first.
    """
    line = _problem_line(hub, problem, cache)
    known = catalog_model(hub.repo_id.split("/")[-1])
    if known is None:
        return line
    rest = _OR.removeprefix("or pass ")
    return line.removesuffix(_OR) + f"or pass {known} (the bundled catalog's copy of its config.json), {rest}"


def _problem_line(hub: HubId, problem: HubProblem, cache: Path) -> str:
    where = f"is not in the Hugging Face cache ({shown(cache)})"
    if problem.kind == "gated":
        return (
            f"is gated on the Hugging Face Hub and {where.removeprefix('is ')}: log in with `hf auth login` "
            f"(or set HF_TOKEN) and accept the licence on {endpoint()}/{hub.repo_id}; {_OR}"
        )
    if problem.kind in ("missing", "revision"):
        return (
            f"is neither a local folder nor in the Hugging Face cache ({shown(cache)}), and {problem.reason}: "
            f"check the id; a private model needs `hf auth login`; {_OR}"
        )
    if problem.kind == "offline":
        return (
            f"{where} and {problem.reason}: download it while online (`hf download {hub.repo_id} config.json"
            + (f" --revision {hub.revision}" if hub.revision else "")
            + "`), "
            f"or unset HF_HUB_OFFLINE; {_OR}"
        )
    if problem.kind == "not-installed":
        return f"{where}; {problem.reason}; {_OR}"
    return f"{where} and {problem.reason}: check the network, HF_ENDPOINT and HF_TOKEN; {_OR}"
