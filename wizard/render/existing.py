"""What already stands at a name the writer is about to fill: nothing, a file, a link, or else.

The writer compares an old file with the new one before replacing it. That read must never
block or grow without limit: a named pipe opened for reading waits for a writer forever, and
/dev/zero never ends. So the name is opened without following a symbolic link and without
blocking, its type is taken from the open descriptor (no window between a check and the open),
and at most READ_LIMIT bytes are read.
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass
from pathlib import Path

# Far above any file the wizard writes (a few KiB): a larger old file differs by its size alone.
READ_LIMIT = 1 << 20

MISSING, FILE, LINK, DIRECTORY, OTHER = "missing", "file", "link", "directory", "other"

_KINDS = {
    stat.S_IFIFO: "a named pipe (FIFO)",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
}


@dataclass(frozen=True)
class Existing:
    """What is at a path: its kind, a regular file's text, and words for what was not read.

    ``text`` is the file's UTF-8 text when it is at most READ_LIMIT bytes; otherwise None and
    ``note`` says why (too large, not UTF-8, the target of a link, the kind of a special file).
    """

    kind: str
    text: str | None = None
    note: str = ""


def look(path: Path) -> Existing:
    """What stands at `path`, read without blocking, following no link, and bounded in size."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except (FileNotFoundError, NotADirectoryError):  # NotADirectory: a file stands where a folder would
        return _missing_or_link(path)
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # O_NOFOLLOW met a symbolic link
            return Existing(LINK, note=_link_note(path))
        if exc.errno == errno.EISDIR:
            return Existing(DIRECTORY)
        if exc.errno in (errno.ENXIO, errno.EOPNOTSUPP):  # a socket, or a device without a driver
            return Existing(OTHER, note=_kind_of(path))
        raise
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            return Existing(DIRECTORY)
        if not stat.S_ISREG(mode):
            return Existing(OTHER, note=_KINDS.get(stat.S_IFMT(mode), "not a regular file"))
        data = _read_at_most(fd, READ_LIMIT + 1)
    finally:
        os.close(fd)
    if len(data) > READ_LIMIT:
        return Existing(FILE, note=f"larger than {READ_LIMIT // 1024} KiB, not compared line by line")
    try:
        return Existing(FILE, data.decode("utf-8"))
    except UnicodeDecodeError:
        return Existing(FILE, note="not UTF-8 text, not compared line by line")


def _read_at_most(fd: int, limit: int) -> bytes:
    """Up to `limit` bytes from `fd`: the bound holds while reading, not after."""
    chunks: list[bytes] = []
    left = limit
    while left > 0:
        chunk = os.read(fd, min(left, 1 << 16))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _missing_or_link(path: Path) -> Existing:
    """A name that cannot be opened because nothing is there, or a link points nowhere."""
    try:
        return Existing(LINK, note=_link_note(path)) if os.path.islink(path) else Existing(MISSING)
    except OSError:
        return Existing(MISSING)


def _link_note(path: Path) -> str:
    try:
        target = os.readlink(path)
    except OSError:
        target = "?"
    return f"a symbolic link to {target}"


def _kind_of(path: Path) -> str:
    try:
        return _KINDS.get(stat.S_IFMT(os.lstat(path).st_mode), "not a regular file")
    except OSError:
        return "not a regular file"
