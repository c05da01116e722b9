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

    def describe(self) -> str:
        """One phrase for the summary: "meta-llama/Llama-3.1-8B (the Hugging Face cache, safetensors headers)"."""
        where = SOURCES[self.source]
        if self.source in ("hub", "hub-cache"):
            where += f", {self.counted_from}" if self.counted_from != "config.json" else ", config.json by architecture"
        elif self.source == "safetensors":
            where = "the safetensors headers of the local folder"
        text = f"{self.name} ({where})"
        return f"{text}; {self.note}" if self.note else text
