"""Fetching a Hub id's config.json and safetensors metadata with huggingface_hub.

Imported only when a `model` answer is a Hub id that the local cache does not hold, so that
every other run (an answers file, a size, a local folder) never loads huggingface_hub. It is an
optional extra (`pip install 'backend-wizard[hub]'`, see the README's "Models from the Hub").

Two calls, both of huggingface_hub's public API:

- `hf_hub_download(repo_id, "config.json", ...)` fetches config.json into the cache
  (https://huggingface.co/docs/huggingface_hub/guides/download), so the next run finds it there;
- `HfApi.get_safetensors_metadata(repo_id, ...)` reads the safetensors headers only, by HTTP
  range requests, never the weights
  (https://huggingface.co/docs/huggingface_hub/package_reference/hf_api#huggingface_hub.HfApi.get_safetensors_metadata).

The endpoint is HF_ENDPOINT, the token HF_TOKEN or the one `hf auth login` stored, each read by
huggingface_hub itself; HF_HUB_OFFLINE=1 stops before any request.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

from wizard.engine.hub_id import HubId
from wizard.engine.safetensors_count import SafetensorsProblem, Tensor, tensors_of

# Seconds to wait for the Hub before saying it cannot be reached.
TIMEOUT = 10.0
DEFAULT_ENDPOINT = "https://huggingface.co"
# How the variables huggingface_hub reads as true are spelled (constants._is_true).
_TRUE = {"1", "ON", "YES", "TRUE"}


class HubProblem(Exception):
    """Why the Hub gave no answer for an id, in words that follow "model 'org/name' ...".

    `kind` is gated, missing, revision, offline, unreachable or not-installed.
    """

    def __init__(self, kind: str, reason: str) -> None:
        super().__init__(reason)
        self.kind = kind
        self.reason = reason


def offline() -> bool:
    """Whether HF_HUB_OFFLINE (or TRANSFORMERS_OFFLINE) asks for no network, as huggingface_hub reads it."""
    value = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE") or ""
    return value.upper() in _TRUE


def endpoint() -> str:
    """The Hub's address: HF_ENDPOINT, else huggingface.co."""
    return (os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


def fetch(hub: HubId, cache: Path) -> tuple[Path, dict[str, dict[str, Tensor]] | None, str | None]:
    """Download config.json into `cache`; read the safetensors headers on the Hub.

    Returns:
        The downloaded config.json, the tensors of each safetensors file (None for a model
        without safetensors), and the commit the files came from.

    Raises:
        HubProblem: offline, not installed, gated, missing, or the Hub did not answer.
    """
    if offline():
        raise HubProblem("offline", "HF_HUB_OFFLINE is set, so the Hub is not asked")
    try:
        import huggingface_hub as hf
        from huggingface_hub import errors
    except ImportError:
        raise HubProblem(
            "not-installed", "reading a Hub id needs huggingface_hub: pip install 'backend-wizard[hub]'"
        ) from None
    _bound_waits(hf)
    where = endpoint()
    try:
        # One request without huggingface_hub's retries (five, up to 23 s when the Hub is
        # unreachable): it also tells a gated or missing model apart before any download.
        url = hf.hf_hub_url(hub.repo_id, "config.json", revision=hub.revision, endpoint=where)
        hf.get_hf_file_metadata(url, timeout=TIMEOUT, endpoint=where)
        config = hf.hf_hub_download(
            hub.repo_id,
            "config.json",
            revision=hub.revision,
            cache_dir=str(cache),
            endpoint=where,
            etag_timeout=TIMEOUT,
        )
        api = hf.HfApi(endpoint=where)
        try:
            meta = api.get_safetensors_metadata(hub.repo_id, revision=hub.revision, timeout=TIMEOUT)
        except errors.NotASafetensorsRepoError:
            return Path(config), None, _commit_of(Path(config))
        files = {name: _tensors(info.tensors) for name, info in meta.files_metadata.items()}
    except errors.GatedRepoError:
        raise HubProblem("gated", "is gated on the Hub: its licence must be accepted first") from None
    except errors.RepositoryNotFoundError:
        raise HubProblem("missing", f"is not a model on {where} (or it is private)") from None
    except errors.RevisionNotFoundError:
        raise HubProblem("revision", f"has no revision '{hub.revision}' on {where}") from None
    except errors.LocalEntryNotFoundError as exc:  # the download failed and the cache has no copy
        raise HubProblem("unreachable", f"could not be fetched from {where}: {_one_line(exc)}") from None
    except errors.EntryNotFoundError:
        raise HubProblem("missing", f"has no config.json on {where}") from None
    except (errors.SafetensorsParsingError, SafetensorsProblem) as exc:
        raise HubProblem("unreadable", f"has safetensors headers that cannot be read: {_one_line(exc)}") from None
    except (OSError, errors.HfHubHTTPError) as exc:  # connection refused, DNS, timeout, 5xx
        raise HubProblem("unreachable", f"could not be fetched from {where}: {_one_line(exc)}") from None
    except Exception as exc:  # httpx's own errors (TimeoutException, ...) derive from neither of the above
        if type(exc).__module__.split(".")[0] in ("httpx", "httpcore", "huggingface_hub"):
            raise HubProblem("unreachable", f"could not be fetched from {where}: {_one_line(exc)}") from None
        raise
    return Path(config), files, _commit_of(Path(config))


def _bound_waits(hf: Any) -> None:
    """Give huggingface_hub's shared HTTP client a timeout (it has none by default); keep its log quiet.

    Its retry warnings would break the one-line error the wizard prints when the Hub fails.
    """
    import logging  # here, with huggingface_hub itself: a run without a Hub id never needs it

    # huggingface_hub's library logger (what its logging.set_verbosity_error sets).
    logging.getLogger("huggingface_hub").setLevel(logging.ERROR)
    # A client without the attribute keeps huggingface_hub's own behaviour.
    with contextlib.suppress(Exception):
        import httpx

        hf.get_session().timeout = httpx.Timeout(TIMEOUT)


def _tensors(infos: Any) -> dict[str, Tensor]:
    """The tensors of one file's metadata, in the form the header counter reads."""
    return tensors_of({name: {"dtype": info.dtype, "shape": list(info.shape)} for name, info in infos.items()})


def _commit_of(config: Path) -> str | None:
    """The commit a downloaded file belongs to: its snapshot folder's name."""
    name = config.parent.name
    return name if len(name) == 40 else None


def _one_line(exc: BaseException) -> str:
    """An exception's message on one line, short enough to read (huggingface_hub's run over several)."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 200 else text[:197] + "..."
