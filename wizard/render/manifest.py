"""The set: which files one run wrote together, recorded in the header of its answers.yaml.

answers.yaml starts with comment lines naming every other file of the set. A `--force` re-run
whose new set no longer has one of them removes it (--force already lets the run replace any
file of the set), and only the names the wizard can write at all: a manifest edited to name
another file removes nothing, and a file the old set did not list is never touched.
Names only, no digests: answers.yaml then changes when the set does, not when a file is edited.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

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
MANIFEST_TITLE = "# Written with it (a --force run removes those it no longer writes):"
_ENTRY = re.compile(r"^#   (?P<name>[A-Za-z0-9_.]+)$")


def with_manifest(answers_text: str, files: Sequence[RenderedFile]) -> str:
    """answers.yaml's text with the manifest of `files` after its first comment line."""
    head, _, rest = answers_text.partition("\n")
    entries = [f"#   {f.name}" for f in files if f.name != ANSWERS_FILE]
    return "\n".join([head, MANIFEST_TITLE, *entries, rest])


def read_manifest(answers_text: str) -> list[str]:
    """The files an earlier run recorded in its answers.yaml; [] if none.

    Only the comment block right after the title counts, and only the names the wizard writes.
    """
    lines = answers_text.splitlines()
    if MANIFEST_TITLE not in lines:
        return []
    recorded: list[str] = []
    for line in lines[lines.index(MANIFEST_TITLE) + 1 :]:
        if not line.startswith("#"):
            break  # the end of the comment block: YAML follows
        match = _ENTRY.match(line)
        if match is not None and match["name"] in SET_NAMES:
            recorded.append(match["name"])
    return recorded
