"""Compiled Jinja templates kept on disk between runs, keyed by their content.

Compiling the templates and the tree's texts is the largest part of a run that otherwise
starts in a fraction of it; Jinja can keep the compiled code in a bytecode cache ("Bytecode
Cache", https://jinja.palletsprojects.com/en/stable/api/#bytecode-cache). An entry's name is a
SHA-256 of the environment's settings and the template's source, so an edited template or tree
text simply gets a new entry, and Jinja refuses an entry written by another Python or Jinja.

The folder is the wizard's cache folder (`wizard.disk_cache`, which also says when it is not
used); it is safe to delete at any time. An entry that cannot be read or written only costs a
compile: the cache never makes a run fail.
"""

from __future__ import annotations

import contextlib
import hashlib
from typing import TYPE_CHECKING

import jinja2
from jinja2.bccache import Bucket, FileSystemBytecodeCache

from wizard import disk_cache
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


def enable() -> None:
    """Use the on-disk cache for the tree's texts and the templates, when its folder is usable."""
    folder = disk_cache.usable_folder()
    if folder is None:
        return
    cache = ContentKeyedCache(str(folder), pattern="%s.jinja-bytecode")
    texts.use_bytecode_cache(cache)
    renderer.use_bytecode_cache(cache)
