"""Writing the outputs: plan first, then write atomically, never clobber without --force.

Every file is written to a temporary file in the same folder, flushed to disk, then renamed over
the target, so a reader sees the old file or the new one, never half of one. Nothing is written
unless every file can be: conflicts are found before the first write, and every new file is on
disk before the first rename, so a full disk or a read-only folder leaves the old set whole.
"""

from __future__ import annotations

import contextlib
import difflib
import errno
import os
import signal
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from wizard.errors import InterruptedByUser, OverwriteRefusedError, WriteError
from wizard.render.renderer import RenderedFile

CREATE, UNCHANGED, OVERWRITE, CONFLICT = "create", "unchanged", "overwrite", "conflict"


@dataclass(frozen=True)
class FileAction:
    """What writing one file will do, with a diff when it replaces other content."""

    path: Path
    action: str
    diff: str = ""


def plan_writes(output_dir: Path, files: Sequence[RenderedFile], force: bool) -> list[FileAction]:
    """Compare each file with what is on disk."""
    if output_dir.exists() and not output_dir.is_dir():
        raise WriteError(f"--output-dir {output_dir} exists and is not a directory")
    actions = []
    for file in files:
        path = output_dir / file.name
        if path.is_dir():
            raise WriteError(f"cannot write {path}: a directory is in the way")
        if not path.exists():
            actions.append(FileAction(path, CREATE))
            continue
        try:
            old = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise WriteError(f"cannot read the existing {path}: {_reason(exc)}") from None
        if old == file.text:
            actions.append(FileAction(path, UNCHANGED))
            continue
        diff = "".join(
            difflib.unified_diff(
                old.splitlines(keepends=True),
                file.text.splitlines(keepends=True),
                fromfile=f"{path} (on disk)",
                tofile=f"{path} (new)",
            )
        )
        actions.append(FileAction(path, OVERWRITE if force else CONFLICT, diff))
    return actions


def write_files(output_dir: Path, files: Sequence[RenderedFile], force: bool) -> list[FileAction]:
    """Write all files atomically, or raise before writing any of them."""
    actions = plan_writes(output_dir, files, force)
    conflicts = [a for a in actions if a.action == CONFLICT]
    if conflicts:
        names = ", ".join(str(a.path) for a in conflicts)
        raise OverwriteRefusedError(
            f"not overwriting {names}: the existing content differs (nothing was written)",
            hint="rerun with --force to replace it, or --dry-run to see the difference",
        )
    try:
        output_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise WriteError(f"cannot create {output_dir}: {_reason(exc)}") from None
    by_name = {f.name: f for f in files}
    todo = [(a.path, by_name[a.path.name]) for a in actions if a.action != UNCHANGED]
    with _signals_deferred():
        # Every new file is complete on disk before the first one replaces anything: a full disk
        # or a read-only folder then leaves the whole old set, not new and old files mixed.
        staged: list[tuple[str, Path]] = []
        try:
            for path, file in todo:
                try:
                    staged.append((_stage(path, file.text, file.executable), path))
                except OSError as exc:
                    raise WriteError(f"cannot write {path}: {_reason(exc)} (no file was replaced)") from None
        except BaseException:
            _discard(tmp for tmp, _ in staged)
            raise
        for index, (tmp, path) in enumerate(staged):
            try:
                os.replace(tmp, path)
            except OSError as exc:
                _discard(rest for rest, _ in staged[index:])
                raise WriteError(f"cannot write {path}: {_reason(exc)} (the previous file is untouched)") from None
    return actions


def atomic_write(path: Path, text: str, executable: bool = False) -> None:
    """Write `text` to `path` through a temporary file and a rename."""
    tmp_name = None
    try:
        tmp_name = _stage(path, text, executable)
        os.replace(tmp_name, path)
        tmp_name = None
    except OSError as exc:
        raise WriteError(f"cannot write {path}: {_reason(exc)} (the previous file, if any, is untouched)") from None
    finally:
        if tmp_name is not None:
            _discard([tmp_name])


def write_new(folder: Path, name: str, text: str) -> Path:
    """Write `text` to a file in `folder` that did not exist; return its path.

    The first free name of `name`, `name-2`, `name-3`, ... (before the suffix) is taken, and the
    file appears whole or not at all (a hard link of a finished temporary file, which fails
    instead of replacing a file created meanwhile). An existing file is never touched.
    """
    stem, dot, suffix = name.rpartition(".")
    tmp_name = None
    try:
        tmp_name = _stage(folder / name, text, False)
        for number in range(1, 1000):
            candidate = folder / (name if number == 1 else f"{stem}-{number}{dot}{suffix}")
            try:
                _link_or_create(tmp_name, candidate, text)
            except FileExistsError:
                continue
            return candidate
        raise WriteError(f"cannot save {name} in {folder}: 999 files of that name exist already")
    except OSError as exc:
        raise WriteError(f"cannot write {folder / name}: {_reason(exc)}") from None
    finally:
        if tmp_name is not None:
            _discard([tmp_name])


def _link_or_create(tmp_name: str, target: Path, text: str) -> None:
    """Give the finished temporary file the name `target`; FileExistsError if that name is taken."""
    try:
        os.link(tmp_name, target)
    except FileExistsError:
        raise
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EXDEV, errno.EMLINK):
            raise
        # A file system without hard links: create the name exclusively and write it.
        with open(target, "x", encoding="utf-8") as handle:
            handle.write(text)


def _stage(path: Path, text: str, executable: bool) -> str:
    """Write `text` to a new temporary file beside `path`, flushed to disk; return its name.

    On any failure the temporary file is removed and the exception propagates.
    """
    data = text.encode("utf-8")
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp_name, 0o755 if executable else 0o644)
    except BaseException:
        _discard([tmp_name])
        raise
    return tmp_name


def _discard(names: Iterable[str]) -> None:
    for name in names:
        with contextlib.suppress(OSError):
            os.unlink(name)


def _reason(exc: OSError | UnicodeDecodeError) -> str:
    if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
        return "no space left on the device"
    if isinstance(exc, OSError) and exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return "permission denied (read-only location?)"
    return exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)


@contextlib.contextmanager
def _signals_deferred() -> Iterator[None]:
    """Hold SIGINT/SIGTERM while files are written and renamed into place, then deliver them.

    Each file is already atomic; deferring the signals also keeps the set of files consistent
    (all new or all old) when the user presses Ctrl-C in the middle.
    """
    pending: list[int] = []
    handlers = {}
    try:
        for sig in (signal.SIGINT, signal.SIGTERM):
            handlers[sig] = signal.signal(sig, lambda signum, _frame: pending.append(signum))
    except ValueError:  # not the main thread: signals cannot be handled here
        yield
        return
    completed = False
    try:
        yield
        completed = True
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
        for signum in pending:
            if completed and signum == signal.SIGINT and handlers[signal.SIGINT] is signal.default_int_handler:
                # Re-sent, it would be a KeyboardInterrupt, which the CLI reports as "no config was
                # written": here every file has been written, complete.
                raise InterruptedByUser("interrupted after the files were written (each one complete)")
            os.kill(os.getpid(), signum)
