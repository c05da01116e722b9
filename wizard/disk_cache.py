"""The wizard's cache folder, and parsed copies of its own data files kept there between runs.

Parsing the shipped decision tree and GPU catalogue is a large part of a run that otherwise
takes a fraction of it. A parsed copy is stored with pickle ("pickle: Python object
serialization", https://docs.python.org/3/library/pickle.html) under a name that is a SHA-256
of what it was parsed from: the text itself, the kind of parse, and the source of the modules
that define the parsed objects, so an edited file or a changed wizard simply gets a new entry.

The folder is ``$BACKEND_WIZARD_CACHE_DIR``, else ``$XDG_CACHE_HOME/backend-wizard``, else
``~/.cache/backend-wizard``; an empty ``BACKEND_WIZARD_CACHE_DIR`` turns the cache off. It is
safe to delete at any time. A pickle runs code when it is loaded, so, as for compiled templates,
a folder that others could write (not owned by this user, or writable by group or others) is not
used; an entry that cannot be read or written only costs a parse: the cache never makes a run
fail. Only the wizard's own files and a tree that passed its lint are stored.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import pickle
import stat
import sys
import tempfile
from functools import cache
from pathlib import Path

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, TypeVar

    T = TypeVar("T")

ENV_VAR = "BACKEND_WIZARD_CACHE_DIR"
SUFFIX = ".parsed"
# The modules whose classes a parsed tree or catalogue holds: their source is part of every key,
# so a wizard whose classes changed never loads an object pickled by another one.
_DEFINING = ("tree.py", "tree_defs.py", "conditions.py", "located_yaml.py", "catalog.py", "texts.py", "traits.py")


def cache_folder() -> Path | None:
    """Where the cache lives, or None when it is turned off."""
    configured = os.environ.get(ENV_VAR)
    if configured is not None:
        return Path(configured) if configured else None
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "backend-wizard"


def private_folder(folder: Path) -> bool:
    """Create `folder` (mode 0700) if needed; whether only this user can write it."""
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = folder.stat(follow_symlinks=False)
    except (OSError, RuntimeError):  # RuntimeError: Path.home() without a home
        return False
    others_write = info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    owner = getattr(os, "getuid", lambda: info.st_uid)()
    return stat.S_ISDIR(info.st_mode) and info.st_uid == owner and not others_write


@cache
def usable_folder() -> Path | None:
    """The cache folder when it is turned on and private to this user; None otherwise."""
    try:
        folder = cache_folder()
    except RuntimeError:  # no home folder to put it in
        return None
    return folder if folder is not None and private_folder(folder) else None


@cache
def _salt() -> bytes:
    """What every key starts with: the Python, pickle's protocol and the defining modules' source."""
    engine = Path(__file__).resolve().parent / "engine"
    digest = hashlib.sha256(f"{sys.version}\0{pickle.HIGHEST_PROTOCOL}".encode())
    for name in _DEFINING:
        with contextlib.suppress(OSError):
            digest.update((engine / name).read_bytes())
    return digest.digest()


def entry_name(kind: str, text: str) -> str:
    """The file name of the entry for `text` parsed as `kind`."""
    digest = hashlib.sha256(_salt())
    digest.update(f"\0{kind}\0".encode())
    digest.update(text.encode("utf-8", errors="surrogatepass"))
    return digest.hexdigest() + SUFFIX


def parsed(kind: str, text: str, parse: Callable[[], T]) -> T:
    """`parse()`, or the object it returned for the same `kind` and `text` in an earlier run.

    An error raised by `parse` goes to the caller and nothing is stored.
    """
    folder = usable_folder()
    if folder is None:
        return parse()
    path = folder / entry_name(kind, text)
    with contextlib.suppress(Exception):  # absent, truncated or foreign: parse again
        with path.open("rb") as handle:
            value: T = pickle.load(handle)
        return value
    value = parse()
    _store(path, value)
    return value


def _store(path: Path, value: Any) -> None:
    """Write an entry whole (a temporary file renamed into place) or not at all."""
    try:
        data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:  # an object pickle cannot store: no entry
        return
    fd, temporary = -1, ""
    try:
        fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=SUFFIX)
        with os.fdopen(fd, "wb") as handle:
            fd = -1
            handle.write(data)
        os.replace(temporary, path)
        temporary = ""
    except OSError:  # a full disk or a read-only folder: no entry
        pass
    finally:
        if fd != -1:
            os.close(fd)
        if temporary:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
