"""Reading a file the user points at: the one function every reader of user input goes through.

A path from the command line or an answers file can name anything: a named pipe (opening it
blocks until a writer comes, forever), a character device such as /dev/zero (reading it never
ends), a 2 GB sparse file, a name longer than the filesystem allows, a symlink loop. Each is
refused in one line that names the path and says why, before anything is read:

- the path is checked with ``os.stat`` first, and only a regular file (or a folder, where the
  caller takes one) is opened; the descriptor is checked again with ``os.fstat``, so a file
  swapped for a pipe in between is refused too (opened with ``O_NONBLOCK``, which keeps the open
  itself from blocking on a pipe: https://man7.org/linux/man-pages/man7/fifo.7.html);
- the read asks for at most ``limit + 1`` bytes, so nothing past the limit is ever held in memory;
- every ``OSError`` (ENAMETOOLONG, ELOOP, EACCES, ENOTDIR, ...) becomes the caller's error type.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from wizard.errors import WizardError

# What `os.stat` calls a file that is neither a regular file nor a folder, in the user's words.
_KINDS = (
    (stat.S_ISFIFO, "a named pipe"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)
_REASONS = {
    errno.EACCES: "permission denied",
    errno.EPERM: "permission denied",
    errno.ENAMETOOLONG: "the name is too long for the filesystem",
    errno.ELOOP: "too many levels of symbolic links (a symlink loop?)",
    errno.ENOTDIR: "a part of the path is not a folder",
}


def shown(path: Path | str) -> str:
    """A path as one printable piece of an error line (a newline in a name would split the line)."""
    text = str(path)
    return text if text.isprintable() else repr(text)


def user_path(value: str) -> Path:
    """The path a user typed, with ``~`` expanded where there is a home to expand it to."""
    try:
        return Path(value).expanduser()
    except RuntimeError:  # "~nosuchuser/...": no home to expand, so the name is taken as written
        return Path(value)


def describe_os_error(exc: OSError) -> str:
    """Why an OS call on a user's path failed, in a few words."""
    if exc.errno in _REASONS:
        return _REASONS[exc.errno]
    return (exc.strerror or str(exc)).lower()


def stat_user_path(path: Path, what: str, error: type[WizardError], *, doing: str = "read") -> os.stat_result | None:
    """``os.stat`` of a user's path (following symlinks); None if nothing is there.

    Every other failure (a name too long, a symlink loop, no permission) raises ``error``.
    """
    try:
        return os.stat(path)
    except FileNotFoundError:
        return None
    except ValueError:  # os.stat refuses a name with a NUL character in it
        raise error(f"{what} {shown(path)} cannot be {doing}: the name holds a NUL character") from None
    except OSError as exc:
        if exc.errno == errno.ENOTDIR:
            return None  # "a/b" where a is a file: there is nothing at a/b
        raise error(f"{what} {shown(path)} cannot be {doing}: {describe_os_error(exc)}") from None


def is_user_folder(path: Path, what: str, error: type[WizardError]) -> bool:
    """Whether a user's path is a folder (False for a file or nothing); other failures raise ``error``."""
    info = stat_user_path(path, what, error)
    return info is not None and stat.S_ISDIR(info.st_mode)


def check_folder_name(path: Path, what: str, error: type[WizardError]) -> None:
    """Refuse a folder path no folder can have (a name too long, a symlink loop, no permission).

    For a folder the wizard may still create: nothing there yet is fine, and a path that names a
    file is left to the writer, which says so. Each name in the path is measured too, since a
    missing parent hides a too-long name below it from ``os.stat``.
    """
    stat_user_path(path, what, error, doing="used")
    limit = _name_max(path)
    for part in path.parts:
        if len(os.fsencode(part)) > limit:
            reason = describe_os_error(OSError(errno.ENAMETOOLONG, "File name too long"))
            raise error(f"{what} {shown(path)} cannot be used: {reason} ({limit} bytes per name)")


def _name_max(path: Path) -> int:
    """The longest name the filesystem holding ``path`` (or its nearest existing parent) allows."""
    for folder in (path, *path.parents):
        try:
            return int(os.pathconf(folder, "PC_NAME_MAX"))
        except (OSError, ValueError):
            continue
    return 255  # POSIX's NAME_MAX on every common filesystem


def _refuse_kind(info: os.stat_result, path: Path, what: str, error: type[WizardError]) -> None:
    if stat.S_ISREG(info.st_mode):
        return
    if stat.S_ISDIR(info.st_mode):
        raise error(f"{what} {shown(path)} is a directory, not a file")
    kind = next((name for test, name in _KINDS if test(info.st_mode)), "not a file")
    raise error(f"{what} {shown(path)} is not a regular file ({kind})")


def read_user_bytes(path: Path, limit: int, what: str, error: type[WizardError]) -> bytes:
    """At most ``limit`` bytes of a user's regular file; anything else raises ``error`` in one line."""
    info = _regular_file(path, what, error)
    if info.st_size > limit:
        raise error(f"{what} {shown(path)} is {info.st_size:,} bytes; the limit is {limit:,}")
    data = _read_prefix(path, limit + 1, what, error)
    if len(data) > limit:  # it grew since the stat, or reports no size (/proc)
        raise error(f"{what} {shown(path)} is larger than the limit of {limit:,} bytes")
    return data


def read_user_prefix(path: Path, count: int, what: str, error: type[WizardError]) -> bytes:
    """The first ``count`` bytes of a user's regular file of any size (fewer at its end).

    For a file whose head says what it holds: a safetensors shard of many gigabytes is measured
    from its 8-byte length and JSON header, and its weights are never read.
    """
    _regular_file(path, what, error)
    return _read_prefix(path, count, what, error)


def _regular_file(path: Path, what: str, error: type[WizardError]) -> os.stat_result:
    info = stat_user_path(path, what, error)
    if info is None:
        raise error(f"{what} {shown(path)} does not exist")
    _refuse_kind(info, path, what, error)
    return info


def _read_prefix(path: Path, count: int, what: str, error: type[WizardError]) -> bytes:
    """Up to ``count`` bytes from the start of a regular file, checked again once it is open."""
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:  # it changed since the stat: gone, or made unreadable
        raise error(f"{what} {shown(path)} cannot be read: {describe_os_error(exc)}") from None
    try:
        _refuse_kind(os.fstat(fd), path, what, error)  # swapped for a pipe or device since the stat
        chunks: list[bytes] = []
        size = 0
        while size < count:  # a regular file's read returns less than asked only at its end
            chunk = os.read(fd, count - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as exc:
        raise error(f"{what} {shown(path)} cannot be read: {describe_os_error(exc)}") from None
    finally:
        os.close(fd)
    return b"".join(chunks)


def read_user_text(path: Path, limit: int, what: str, error: type[WizardError]) -> str:
    """A user's UTF-8 text file, read by `read_user_bytes`; every failure is one line naming the file."""
    data = read_user_bytes(path, limit, what, error)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(f"{what} {shown(path)} is not UTF-8 text (byte {exc.start})") from None
