"""Where a model's numbers came from: the Hub, its cache, a local folder, a catalogue, or a size.

The `model` answer can name a model in several ways; the summary says which one gave the
parameter count, so that a number is never taken for more than it is.
"""

from __future__ import annotations

from dataclasses import dataclass

# Source -> how the summary says it.
SOURCES = {
    "hub-cache": "the Hugging Face cache",
    "hub": "the Hugging Face Hub",
    "safetensors": "the safetensors headers",
    "config": "config.json, by its architecture",
    "catalog": "the bundled catalog",
    "size": "the size as given",
}


@dataclass(frozen=True)
class ModelOrigin:
    """A resolved `model` answer: what to call the model and where its count came from.

    `params` is the exact count read from the checkpoint's safetensors headers (local, cached
    or the Hub's metadata); None when the count comes from config.json by architecture.
    `counted_from` says how: "safetensors headers" or "config.json".
    """

    name: str
    source: str  # a key of SOURCES
    counted_from: str = "config.json"
    params: int | None = None
    hub_id: str | None = None
    revision: str | None = None
    note: str | None = None  # what the count left out or assumed, in a few words

    def as_json(self) -> dict[str, str | int | None]:
        """The JSON outputs' "model" object: what the model is and where its count came from."""
        return {
            "name": self.name,
            "source": self.source,
            "counted_from": self.counted_from if self.source not in ("size", "catalog") else self.source,
            "exact_params": self.params,
            "hub_id": self.hub_id,
            "revision": self.revision,
        }

    def describe(self) -> str:
        """One phrase for the estimate's header: "org/name, its safetensors headers in the Hugging Face cache"."""
        return f"{self.name}, {self._how()}"

    def counted(self, model_type: str | None = None) -> str:
        """How the count was made, to follow "N parameters ": "counted from the safetensors headers of ..."."""
        if self.source == "config":
            arch = f" ({model_type})" if model_type else ""
            return f"counted from the model's config.json, by its architecture{arch}"
        if self.source == "catalog":
            return f"of {self.name}, counted from the bundled catalog's config.json values, by its architecture"
        return f"of {self.name}, counted from {self._how()}"

    def _how(self) -> str:
        headers = self.counted_from != "config.json"
        if self.source == "safetensors":
            how = "the safetensors headers of the local folder"
        elif self.source == "hub-cache":
            how = "the safetensors headers in " if headers else "its config.json in "
            how += SOURCES[self.source] + ("" if headers else ", by architecture")
        elif self.source == "hub":
            how = "the safetensors headers on " if headers else "its config.json from "
            how += SOURCES[self.source] + ("" if headers else ", by architecture")
        else:
            how = SOURCES[self.source]
        return f"{how}; {self.note}" if self.note else how
