"""Compiled Jinja templates kept on disk between runs, keyed by their content.

Compiling the templates and the tree's texts is the largest part of a run that otherwise
starts in a fraction of it; Jinja can keep the compiled code in a bytecode cache ("Bytecode
Cache", https://jinja.palletsprojects.com/en/stable/api/#bytecode-cache). An entry's name is a
SHA-256 of the environment's settings and the template's source, so an edited template or tree
text simply gets a new entry, and Jinja refuses an entry written by another Python or Jinja.

The folder is ``$BACKEND_WIZARD_CACHE_DIR``, else ``$XDG_CACHE_HOME/backend-wizard``, else
``~/.cache/backend-wizard``; an empty ``BACKEND_WIZARD_CACHE_DIR`` turns the cache off. It is
safe to delete at any time. Entries hold compiled code, so a folder that others could write
(not owned by this user, or writable by group or others) is not used, and an entry that cannot
be read or written only costs a compile: the cache never makes a run fail.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
from pathlib import Path
from typing import TYPE_CHECKING

import jinja2
from jinja2.bccache import Bucket, FileSystemBytecodeCache

from wizard.engine import texts
from wizard.render import renderer

if TYPE_CHECKING:
    from jinja2 import Environment

ENV_VAR = "BACKEND_WIZARD_CACHE_DIR"


class ContentKeyedCache(FileSystemBytecodeCache):
    """Jinja's file cache, with entries named by content (settings and source), never by path."""

    def get_bucket(self, environment: Environment, name: str, filename: str | None, source: str) -> Bucket:
        """The entry for `source` compiled in `environment`; empty when absent or unreadable."""
        settings = repr(
            (
                type(environment).__qualname__,
                environment.undefined.__qualname__,
                environment.autoescape,
                environment.trim_blocks,
                environment.lstrip_blocks,
                environment.keep_trailing_newline,
                environment.newline_sequence,
                sorted(getattr(environment, "intercepted_binops", ())),
                sorted(getattr(environment, "intercepted_unops", ())),
                jinja2.__version__,
            )
        )
        key = hashlib.sha256(f"{settings}\0{source}".encode(errors="surrogatepass")).hexdigest()
        bucket = Bucket(environment, key, self.get_source_checksum(source))
        try:
            self.load_bytecode(bucket)
        except Exception:  # a truncated or foreign file: compile again (Jinja catches only some)
            bucket.reset()
        return bucket

    def set_bucket(self, bucket: Bucket) -> None:
        """Store an entry; a full disk or a read-only folder only means no entry."""
        with contextlib.suppress(OSError):
            super().set_bucket(bucket)


def cache_folder() -> Path | None:
    """Where the cache lives, or None when it is turned off."""
    configured = os.environ.get(ENV_VAR)
    if configured is not None:
        return Path(configured) if configured else None
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "backend-wizard"


def _private_folder(folder: Path) -> bool:
    """Create `folder` (mode 0700) if needed; whether only this user can write it."""
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = folder.stat(follow_symlinks=False)
    except (OSError, RuntimeError):  # RuntimeError: Path.home() without a home
        return False
    others_write = info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    owner = getattr(os, "getuid", lambda: info.st_uid)()
    return stat.S_ISDIR(info.st_mode) and info.st_uid == owner and not others_write


def enable() -> None:
    """Use the on-disk cache for the tree's texts and the templates, when its folder is usable."""
    try:
        folder = cache_folder()
    except RuntimeError:  # no home folder to put it in
        return
    if folder is None or not _private_folder(folder):
        return
    cache = ContentKeyedCache(str(folder), pattern="%s.jinja-bytecode")
    texts.use_bytecode_cache(cache)
    renderer.use_bytecode_cache(cache)
