"""Hugging Face Hub model ids as the `model` answer takes them: "org/name", "org/name@revision".

The rules of a repo id follow huggingface_hub's `validate_repo_id`
(https://github.com/huggingface/huggingface_hub/blob/main/src/huggingface_hub/utils/_validators.py):
letters, digits, "-", "_" and ".", at most 96 characters per part, no "--" or "..", not starting
or ending with "-" or ".". Only the "org/name" form is taken here: a bare name is a size or a
catalogue model, and a path with more parts is a local path. Whether a local folder of the same
name wins is the caller's to decide (it does, as in `from_pretrained`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_PART = r"(?![-.])[A-Za-z0-9._-]{1,96}(?<![-.])"
_ID = re.compile(rf"^(?P<repo>{_PART}/{_PART})(?:@(?P<revision>[A-Za-z0-9._/-]{{1,255}}))?$")


@dataclass(frozen=True)
class HubId:
    """A model repository on the Hub, at a revision (a branch, a tag or a commit; None for main)."""

    repo_id: str
    revision: str | None = None

    def __str__(self) -> str:
        return self.repo_id if self.revision is None else f"{self.repo_id}@{self.revision}"


def parse_hub_id(text: str) -> HubId | None:
    """The Hub id `text` spells ("org/name" or "org/name@revision"), or None."""
    match = _ID.match(text.strip())
    if match is None or "--" in match["repo"] or ".." in match["repo"] or match["repo"].endswith(".json"):
        return None
    revision = match["revision"]
    if revision is not None and (".." in revision or revision.startswith("/") or revision.endswith("/")):
        return None
    return HubId(match["repo"], revision)
