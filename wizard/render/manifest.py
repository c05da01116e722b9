"""The set: which files one run wrote together, recorded in the header of its answers.yaml.

answers.yaml starts with comment lines naming every other file of the set with a digest of the
content written. A `--force` re-run whose new set no longer has one of them removes it, but only
when its content is still what the wizard wrote (an edited file is the user's) and only for the
names the wizard can write at all (a manifest edited to name another file removes nothing).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence

from wizard.render.addons import SNIPPET
from wizard.render.context import (
    ACCELERATE_CONFIG,
    ANSWERS_FILE,
    AXOLOTL_CONFIG,
    DEEPSPEED_CONFIG,
    LAUNCH_SCRIPT,
    SLURM_SCRIPT,
)
from wizard.render.renderer import RenderedFile

# Every name a set can hold besides answers.yaml: nothing else is ever removed.
SET_NAMES = frozenset({ACCELERATE_CONFIG, AXOLOTL_CONFIG, DEEPSPEED_CONFIG, LAUNCH_SCRIPT, SLURM_SCRIPT, SNIPPET})
MANIFEST_TITLE = (
    "# Files written with these answers (sha256); a --force re-run removes those it no longer writes, if unchanged:"
)
_ENTRY = re.compile(r"^#   (?P<name>[A-Za-z0-9_.]+) sha256:(?P<digest>[0-9a-f]{64})$")


def digest(text: str) -> str:
    """The sha256 of a file's text as written (UTF-8), in hex."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def with_manifest(answers_text: str, files: Sequence[RenderedFile]) -> str:
    """answers.yaml's text with the manifest of `files` after its first comment line."""
    head, _, rest = answers_text.partition("\n")
    entries = [f"#   {f.name} sha256:{digest(f.text)}" for f in files if f.name != ANSWERS_FILE]
    return "\n".join([head, MANIFEST_TITLE, *entries, rest])


def read_manifest(answers_text: str) -> Mapping[str, str]:
    """The files an earlier run recorded in its answers.yaml (name -> sha256); {} if none.

    Only the comment block right after the title counts, and only the names the wizard writes.
    """
    lines = answers_text.splitlines()
    if MANIFEST_TITLE not in lines:
        return {}
    recorded: dict[str, str] = {}
    for line in lines[lines.index(MANIFEST_TITLE) + 1 :]:
        if not line.startswith("#"):
            break  # the end of the comment block: YAML follows
        match = _ENTRY.match(line)
        if match is not None and match["name"] in SET_NAMES:
            recorded[match["name"]] = match["digest"]
    return recorded
