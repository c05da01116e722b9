"""A local model folder's exact parameter count, from its safetensors headers.

A folder that holds config.json beside model.safetensors.index.json (whose weight_map names the
shards) or beside *.safetensors files is counted from each shard's 8-byte length and JSON
header, read through `wizard.user_files` (bounded reads; a pipe or a device is refused): the
weights themselves are never read. See `wizard.engine.safetensors_count` for the format.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from wizard.engine.safetensors_count import (
    INDEX_FILE,
    LENGTH_BYTES,
    SafetensorsProblem,
    Tensor,
    WeightCount,
    count_weights,
    header_length,
    parse_header,
    shard_names,
)
from wizard.engine.strict_json import JsonProblem, loads_strict
from wizard.errors import InvalidAnswerError, WizardError
from wizard.user_files import describe_os_error, read_user_prefix, read_user_text, shown

# An index lists every tensor name once: DeepSeek-V3's, with 91,991 of them, is under 9 MB.
MAX_INDEX_BYTES = 64 * 1024 * 1024


class _Unreadable(WizardError):
    """A file of the folder that cannot be read (turned into the model answer's error)."""


def local_weights(folder: Path, config: Mapping[str, Any], value: str, *, partial: bool = False) -> WeightCount | None:
    """The exact count of the safetensors checkpoint in `folder`, or None when it holds none.

    Args:
        folder: the folder holding config.json.
        config: the parsed config.json (its quantization_config and num_hidden_layers).
        value: the `model` answer as given, for the error message.
        partial: None, rather than an error, when the index names shards the folder lacks (a
            Hugging Face cache snapshot holds only the files that were downloaded).

    Raises:
        InvalidAnswerError: a header or the index that cannot be read, or a quantization that
            cannot be counted; the message names the file and the ways out.
    """
    try:
        shards = _shard_files(folder, partial)
        if not shards:
            return None
        files = {name: read_header(folder / name) for name in shards}
        return count_weights(files, config)
    except _Unreadable as exc:
        raise InvalidAnswerError("model", value, exc.message) from None
    except SafetensorsProblem as exc:
        raise InvalidAnswerError(
            "model",
            value,
            f"{shown(folder)}: {exc}; give the unquantized model (its folder or Hub id), "
            "or the size as a number such as 7B",
        ) from None


def read_header(path: Path) -> dict[str, Tensor]:
    """The tensors of one safetensors file, from its first 8 + N bytes only."""
    prefix = read_user_prefix(path, LENGTH_BYTES, "safetensors file", _Unreadable)
    try:
        length = header_length(prefix)
    except SafetensorsProblem as exc:
        raise _Unreadable(f"safetensors file {shown(path)}: {exc}") from None
    data = read_user_prefix(path, LENGTH_BYTES + length, "safetensors file", _Unreadable)[LENGTH_BYTES:]
    if len(data) < length:
        raise _Unreadable(f"safetensors file {shown(path)} ends inside its {length:,}-byte header (cut short?)")
    try:
        return parse_header(data)
    except SafetensorsProblem as exc:
        raise _Unreadable(f"safetensors file {shown(path)}: {exc}") from None


def _shard_files(folder: Path, partial: bool = False) -> list[str]:
    """The shard files to read: those the index names, else every *.safetensors file of the folder."""
    index = folder / INDEX_FILE
    if _is_file(index):
        text = read_user_text(index, MAX_INDEX_BYTES, "safetensors index", _Unreadable)
        try:
            names = shard_names(loads_strict(text))
        except (JsonProblem, SafetensorsProblem) as exc:
            raise _Unreadable(f"safetensors index {shown(index)}: {exc}") from None
        missing = [name for name in names if not _is_file(folder / name)]
        if missing and partial:
            return []
        if missing:
            raise _Unreadable(
                f"safetensors index {shown(index)} names {missing[0]}, which is not in the folder "
                f"({len(missing)} of {len(names)} shards missing: is the download complete?)"
            )
        return names
    try:
        entries = sorted(os.listdir(folder))
    except OSError as exc:
        raise _Unreadable(f"model folder {shown(folder)} cannot be listed: {describe_os_error(exc)}") from None
    # Anything so named is read: a pipe or a folder among them is refused by name, never skipped.
    return [name for name in entries if name.endswith(".safetensors")]


def _is_file(path: Path) -> bool:
    """Whether something stands at `path` (read_user_prefix refuses what is not a regular file)."""
    try:
        os.stat(path)
    except (OSError, ValueError):
        return False
    return True
