"""Writing the outputs: plan first, then write atomically, never clobber without --force.

Every file is written to a temporary file in the same folder, flushed to disk, then renamed over
the target, so a reader sees the old file or the new one, never half of one. Nothing is written
unless every file can be: conflicts are found before the first write, and every new file is on
disk before the first rename, so a full disk or a read-only folder leaves the old set whole.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from wizard.errors import InterruptedByUser, OutputPathError, OverwriteRefusedError, WriteError
from wizard.render.context import ANSWERS_FILE
from wizard.render.existing import DIRECTORY, FILE, LINK, MISSING, OTHER, Existing, look
from wizard.render.manifest import read_manifest
from wizard.render.renderer import RenderedFile

CREATE, UNCHANGED, OVERWRITE, CONFLICT, REMOVE = "create", "unchanged", "overwrite", "conflict", "remove"
# The writer's temporary files: ".NAME.backend-wizard-PID-RANDOM.tmp", so that a run killed
# before its renames (SIGKILL cannot be held) leaves names a later run knows as its own.
TEMP_TAG = "backend-wizard"
_TEMP = re.compile(rf"^\.(?P<name>.+)\.{TEMP_TAG}-(?P<pid>[0-9]+)-[^.]+\.tmp$")
# C0 and C1 control characters and DEL: a launch script finds its folder by command
# substitution, which drops trailing newlines, and a terminal acts on the others.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")


@dataclass(frozen=True)
class FileAction:
    """What writing one file will do, with a diff when it replaces other content."""

    path: Path
    action: str
    diff: str = ""


def check_output_dir(output_dir: Path) -> None:
    """Refuse an output folder whose absolute path holds a control character, or that the system refuses (exit 2).

    A name the file system cannot hold (a part longer than 255 bytes, a path through a file) is
    said in one line before any question, not found later as a traceback while writing.
    """
    where = str(Path.cwd() / output_dir)
    found = _CONTROL.search(where)
    if found is not None:
        raise OutputPathError(
            f"--output-dir {str(output_dir)!r}: the folder's path {where!r} holds the control character"
            f" {found.group()!r}; allowed: a path without control characters (a launch script could not find"
            " its own folder)",
            hint="choose another --output-dir",
        )
    try:
        os.stat(output_dir)
    except FileNotFoundError:
        pass  # made when the files are written
    except OSError as exc:  # too long, a loop of links, a file where a folder should be, no permission
        raise OutputPathError(
            f"--output-dir {str(output_dir)!r}: {exc.strerror or exc}; allowed: a folder the system can make",
            hint="choose another --output-dir",
        ) from None


def plan_writes(output_dir: Path, files: Sequence[RenderedFile], force: bool) -> list[FileAction]:
    """Compare each file with what is on disk; with `force`, also list the old set's files to remove.

    A name held by a symbolic link (even one pointing nowhere) is an existing file: replaced only
    with --force, and then the link itself is replaced, never the file it points to. A named
    pipe, a device or a socket at a name is refused (exit 2): the writer neither reads nor replaces it.
    """
    check_output_dir(output_dir)
    if output_dir.exists() and not output_dir.is_dir():
        raise WriteError(f"--output-dir {output_dir} exists and is not a directory")
    actions = []
    old_answers: str | None = None
    for file in files:
        path = output_dir / file.name
        found = _look(path)
        if found.kind == MISSING:
            actions.append(FileAction(path, CREATE))
            continue
        if found.kind == FILE and found.text == file.text:
            actions.append(FileAction(path, UNCHANGED))
            continue
        if file.name == ANSWERS_FILE and found.text is not None:
            old_answers = found.text
        actions.append(FileAction(path, OVERWRITE if force else CONFLICT, _difference(path, found, file.text)))
    if force and old_answers is not None:
        actions += _stale(output_dir, old_answers, {f.name for f in files})
    return actions


def _look(path: Path) -> Existing:
    """What is at `path`; a directory or a special file in the way is an error."""
    try:
        found = look(path)
    except OSError as exc:
        raise WriteError(f"cannot read the existing {path}: {_reason(exc)}") from None
    if found.kind == DIRECTORY:
        raise WriteError(f"cannot write {path}: a directory is in the way")
    if found.kind == OTHER:
        raise OutputPathError(
            f"cannot write {path}: it exists and is {found.note}; allowed: a regular file or nothing"
            " (nothing was written)",
            hint="remove it, or choose another --output-dir",
        )
    return found


def _difference(path: Path, found: Existing, new: str) -> str:
    """The unified diff from the file on disk to the new text, or a line saying why there is none."""
    if found.text is None:
        replaced = "the link itself is replaced, never what it points to" if found.kind == LINK else "it is replaced"
        return f"--- {path} (on disk): {found.note}; with --force {replaced}\n"
    import difflib  # only where an old file differs

    return "".join(
        difflib.unified_diff(
            found.text.splitlines(keepends=True),
            new.splitlines(keepends=True),
            fromfile=f"{path} (on disk)",
            tofile=f"{path} (new)",
        )
    )


def _stale(output_dir: Path, old_answers: str, new_names: set[str]) -> list[FileAction]:
    """The regular files of the old set (its manifest) that the new set lacks."""
    removals = []
    for name in read_manifest(old_answers):
        if name in new_names:
            continue
        path = output_dir / name
        try:
            found = look(path)
        except OSError:
            continue  # unreadable: left where it is
        if found.kind == FILE:
            removals.append(FileAction(path, REMOVE, f"--- {path}: no longer part of this set; removed\n"))
    return removals


def overwrite_refused(conflicts: Sequence[FileAction], hint: str) -> OverwriteRefusedError:
    """The one-line refusal for existing files that differ and no --force."""
    names = ", ".join(str(a.path) for a in conflicts)
    return OverwriteRefusedError(f"not overwriting {names}: the existing content differs (nothing was written)", hint)


def write_files(output_dir: Path, files: Sequence[RenderedFile], force: bool) -> list[FileAction]:
    """Write all files atomically, or raise before writing any of them.

    Folders this call creates are removed again when the write fails; temporary files of a
    run that was killed are removed; with --force, the files of the old set that the new set
    no longer has are removed last (see `plan_writes`).
    """
    actions = plan_writes(output_dir, files, force)
    conflicts = [a for a in actions if a.action == CONFLICT]
    if conflicts:
        raise overwrite_refused(conflicts, "rerun with --force to replace it, or --dry-run to see the difference")
    created = _make_folders(output_dir)
    try:
        _write_planned(output_dir, files, actions)
    except BaseException:
        _remove_folders(created)
        raise
    return actions


def _write_planned(output_dir: Path, files: Sequence[RenderedFile], actions: Sequence[FileAction]) -> None:
    by_name = {f.name: f for f in files}
    _discard_dead_temporaries(output_dir, {a.path.name for a in actions})
    todo = [(a.path, by_name[a.path.name]) for a in actions if a.action in (CREATE, OVERWRITE)]
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
        for action in actions:
            if action.action == REMOVE:
                try:
                    action.path.unlink(missing_ok=True)
                except OSError as exc:
                    raise WriteError(
                        f"the new files are written, but the old {action.path} could not be removed: {_reason(exc)}"
                    ) from None


def _make_folders(output_dir: Path) -> list[Path]:
    """Create `output_dir` and its missing parents; return those created, outermost first."""
    missing = []
    folder = output_dir
    while not folder.exists() and not folder.is_symlink() and folder != folder.parent:
        missing.append(folder)
        folder = folder.parent
    created: list[Path] = []
    for folder in reversed(missing):
        try:
            folder.mkdir()
        except FileExistsError:
            continue  # made meanwhile by someone else: theirs, not ours to remove
        except OSError as exc:
            _remove_folders(created)
            raise WriteError(f"cannot create {output_dir}: {_reason(exc)}") from None
        created.append(folder)
    if not output_dir.is_dir():
        _remove_folders(created)
        raise WriteError(f"cannot create {output_dir}: {_reason(OSError(errno.EEXIST, os.strerror(errno.EEXIST)))}")
    return created


def _remove_folders(created: Sequence[Path]) -> None:
    """Remove the folders a failed write created, innermost first; a non-empty one stays."""
    for folder in reversed(created):
        with contextlib.suppress(OSError):
            folder.rmdir()


def _discard_dead_temporaries(output_dir: Path, names: set[str]) -> None:
    """Remove the temporary files of this set that a killed run left (its process is gone)."""
    try:
        entries = list(os.scandir(output_dir))
    except OSError:
        return
    for entry in entries:
        match = _TEMP.match(entry.name)
        if match is None or match["name"] not in names or _alive(int(match["pid"])):
            continue
        if entry.is_file(follow_symlinks=False):
            _discard([entry.path])


def _alive(pid: int) -> bool:
    """Whether a process with this id runs (a running writer's temporary file is left alone)."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # it exists, owned by someone else
    return True


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
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.{TEMP_TAG}-{os.getpid()}-", suffix=".tmp", dir=path.parent)
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
    import signal  # only a run that writes files defers signals

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
