"""The local Hugging Face cache: where a Hub id's files already are, so it works offline.

The layout and the variables are huggingface_hub's ("Understand caching",
https://huggingface.co/docs/huggingface_hub/guides/manage-cache, and "Environment variables",
https://huggingface.co/docs/huggingface_hub/package_reference/environment_variables):

- the cache folder is HF_HUB_CACHE, else $HF_HOME/hub, else $XDG_CACHE_HOME/huggingface/hub,
  else ~/.cache/huggingface/hub;
- a model's files are under models--<org>--<name>/: refs/<revision> holds the commit hash a
  branch or tag points to, and snapshots/<commit>/ holds the files of that commit (links into
  blobs/).

Nothing here imports huggingface_hub: reading the cache needs only the file system.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from wizard.engine.hub_id import HubId
from wizard.errors import WizardError
from wizard.user_files import read_user_text

_COMMIT = re.compile(r"[0-9a-f]{40}")
_MAX_REF_BYTES = 1024


class _Unreadable(WizardError):
    """A ref file that cannot be read: the cache is then taken not to hold the model."""


def hub_cache_dir() -> Path:
    """The cache folder huggingface_hub uses with the same environment."""
    for name in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):  # the second is the older name
        if os.environ.get(name):
            return Path(os.environ[name]).expanduser()
    home = os.environ.get("HF_HOME")
    if not home:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join("~", ".cache")
        home = os.path.join(base, "huggingface")
    return Path(home).expanduser() / "hub"


def cached_snapshot(hub: HubId, cache: Path | None = None) -> Path | None:
    """The cached snapshot folder of `hub` that holds its config.json, or None.

    A commit hash names its snapshot directly; a branch or tag (main when none is given) is
    looked up in refs/.
    """
    cache = hub_cache_dir() if cache is None else cache
    repo = cache / ("models--" + hub.repo_id.replace("/", "--"))
    revision = hub.revision or "main"
    if _COMMIT.fullmatch(revision):
        commit = revision
    else:
        try:
            commit = read_user_text(repo / "refs" / revision, _MAX_REF_BYTES, "cache ref", _Unreadable).strip()
        except _Unreadable:
            return None
        if not _COMMIT.fullmatch(commit):
            return None
    snapshot = repo / "snapshots" / commit
    return snapshot if os.path.isfile(snapshot / "config.json") else None
