"""Where every command reads and writes: the one place that checks paths, and writes files.

::

    output file   a regular file (replaced atomically) or a new path       check_out_file
    output folder a folder, or a new path                                   check_out_dir
    input file    a regular file that can be read                           check_in_file
    secret file   only its owner can read it (chmod 600), as ssh wants a key   check_private
    anything else (a device, a FIFO, a socket; a folder where a file goes)  ConfigError, exit 2

Each check raises ``ConfigError`` (exit 2, one line) and changes nothing (the writability
probe creates and removes one empty file), so a command checks every path before anything
starts. ``replace_file`` writes a file whole or not at all: a full disk is a ``WriteError``
(exit 3) and whatever was at the path stays. ``open_regular`` opens an input without
blocking on a FIFO and refuses what is not a regular file (the trace reader uses it).

Ground floor: imports nothing of the project but ``ground.errors``.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO, TypeVar

from ground.errors import ConfigError, WriteError

_T = TypeVar("_T")

#: How a file that is not a regular one is named in a message.
_KINDS = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


def kind_of(mode: int) -> str:
    """``a folder``, ``a FIFO``, ``a character device``...; ``a regular file``."""
    return next((name for test, name in _KINDS if test(mode)), "a regular file")


def _stat(path: Path) -> os.stat_result | None:
    """The file ``path`` names (through symlinks); None when there is none."""
    try:
        return path.stat()
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno in (errno.ENOTDIR, errno.ELOOP, errno.ENAMETOOLONG):
            return None  # judged below by its parents, or refused when created
        raise ConfigError(f"cannot use {path}: {exc.strerror}") from None


def _first_existing(path: Path) -> Path:
    for candidate in (path, *path.parents):
        if os.path.lexists(candidate):
            return candidate
    return Path(".")  # pragma: no cover - "/" always exists


#: OS errors of a full disk: the machine's fault (exit 3), not the input's.
_FULL = frozenset({errno.ENOSPC, errno.EDQUOT})


def _probe_dir(folder: Path, what: str) -> str | None:
    """Why a file cannot be created in the existing ``folder`` (None: it can). Creates and
    removes a uniquely named empty file: the only test root's permissions and special
    filesystems (/proc, read-only mounts) cannot fool. A full disk is ``WriteError``."""
    try:
        fd, name = tempfile.mkstemp(prefix=".chaos-probe-", dir=folder)
    except OSError as exc:
        if exc.errno in _FULL:
            raise WriteError(f"cannot write {what}: {folder}: {exc.strerror}") from None
        return exc.strerror or str(exc)
    os.close(fd)
    try:
        os.unlink(name)
    except OSError:
        pass
    return None


def check_out_file(path: Path, what: str, kind: str = "file", *, make_folders: bool = True) -> Path:
    """An output file the command will write (``what``: the option, ``kind``: "trace"...):
    a regular file it may replace, or a new path in a folder it can create files in (or
    create, with ``make_folders``: a trace's folders are made, a report's must exist)."""
    if path.name in ("", ".", ".."):
        raise ConfigError(f"{what} {path} is not a {kind} file path")
    found = _stat(path)
    if found is not None and stat.S_ISDIR(found.st_mode):
        raise ConfigError(f"{what} {path} is a folder, not a {kind} file path")
    if found is not None and not stat.S_ISREG(found.st_mode):
        raise ConfigError(
            f"{what} {path} is {kind_of(found.st_mode)}: write the {kind} to a regular file"
        )
    folder = path.parent if str(path.parent) else Path(".")
    existing = _first_existing(folder)
    if not existing.is_dir():
        raise ConfigError(f"cannot write {kind} {path}: {existing} is not a folder")
    if existing != folder and not make_folders:
        raise ConfigError(f"cannot write {kind} {path}: no folder {folder}")
    if found is not None and not os.access(path, os.W_OK):
        raise ConfigError(f"cannot write {kind} {path}: {os.strerror(errno.EACCES)}")
    if (why := _probe_dir(existing, f"{kind} {path}")) is not None:
        raise ConfigError(f"cannot write {kind} {path}: cannot create files in {existing} ({why})")
    return path


def check_out_dir(path: Path, what: str) -> Path:
    """An output folder the command will create (if missing) and write into."""
    found = _stat(path)
    if found is not None and not stat.S_ISDIR(found.st_mode):
        article = "a file" if stat.S_ISREG(found.st_mode) else kind_of(found.st_mode)
        raise ConfigError(f"{what} {path} is {article}, not a folder")
    existing = _first_existing(path)
    if not existing.is_dir():
        raise ConfigError(f"cannot use {what} {path}: {existing} is not a folder")
    if (why := _probe_dir(existing, f"{what} {path}")) is not None:
        raise ConfigError(f"cannot use {what} {path}: cannot create files in {existing} ({why})")
    return path


def check_in_file(path: Path, what: str, kind: str = "file") -> Path:
    """An input file the command will read: it exists, is a regular file and is readable."""
    found = _stat(path)
    if found is None:
        raise ConfigError(f"{what} {path}: cannot read: {os.strerror(errno.ENOENT)}")
    if not stat.S_ISREG(found.st_mode):
        raise ConfigError(f"{what} {path} is {kind_of(found.st_mode)}, not a {kind} file")
    if not os.access(path, os.R_OK):
        raise ConfigError(f"{what} {path}: {os.strerror(errno.EACCES)}")
    return path


def check_in_path(path: Path, what: str) -> Path:
    """An input that may be a regular file or a folder (a candidate program)."""
    found = _stat(path)
    if found is None:
        raise ConfigError(f"{what} {path}: {os.strerror(errno.ENOENT)}")
    if not (stat.S_ISREG(found.st_mode) or stat.S_ISDIR(found.st_mode)):
        raise ConfigError(f"{what} {path} is {kind_of(found.st_mode)}, not a file or a folder")
    return path


def check_private(path: Path, what: str) -> Path:
    """A secret (a key) only its owner may read: as ssh does with a private key, one that
    its group or others can read is refused, with the fix."""
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & 0o077:
        raise ConfigError(
            f"{what} {path} is mode {mode:04o}: a key others can read is no key "
            f"(chmod 600 {path}; make a new key if others may have read this one)"
        )
    return path


def open_regular(path: Path, what: str, kind: str = "regular") -> BinaryIO:
    """``path`` opened for reading, refused (``ConfigError``: ``WHAT PATH is a FIFO, not a
    KIND file``) unless it is a regular file: a FIFO is opened without waiting for a writer,
    a device is never read. ``OSError`` as ``open`` raises it when there is no such file or
    it cannot be read."""
    mode = os.stat(path).st_mode  # (a socket cannot even be opened)
    if not stat.S_ISREG(mode):
        raise ConfigError(f"{what} {path} is {kind_of(mode)}, not a {kind} file")
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        mode = os.fstat(fd).st_mode  # what was opened, if it changed meanwhile
        if not stat.S_ISREG(mode):
            raise ConfigError(f"{what} {path} is {kind_of(mode)}, not a {kind} file")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def replace_file(path: Path, data: bytes | str, what: str, mode: int = 0o644) -> None:
    """Write ``data`` to ``path`` whole or not at all (a temp file beside it, renamed over
    it). ``check_out_file`` first: its folder must exist, a device or a FIFO is refused
    (never replaced). A full disk or an I/O error is ``WriteError`` (exit 3) and what was at
    ``path`` stays."""
    check_out_file(path, what, make_folders=False)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    folder = path.parent if str(path.parent) else Path(".")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=folder)
    except OSError as exc:
        raise WriteError(f"cannot write {path}: {exc.strerror or exc}") from None
    try:
        try:
            with os.fdopen(fd, "wb") as stream:
                stream.write(payload)
                stream.flush()
                os.fsync(stream.fileno())
            os.chmod(tmp, mode)
            os.replace(tmp, path)
        except OSError as exc:
            kept = "left as it was" if path.exists() else "not written"
            raise WriteError(f"cannot write {path}: {exc.strerror or exc} ({kept})") from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise




def write_whole(folder: Path, write: Callable[[], _T], what: str) -> _T:
    """``write()`` into ``folder`` (new or empty) whole or not at all: a full disk (exit 3),
    a signal or any error removes what was written, so a half-written folder (a task for a
    candidate, a new pack) is never left. ``what`` names the folder in the error."""
    existed = folder.is_dir()
    if existed and any(folder.iterdir()):
        return write()  # refused (these never overwrite anything): nothing to undo
    try:
        return write()
    except BaseException as exc:
        if folder.is_dir():
            if existed:  # it was empty: empty it again
                for child in folder.iterdir():
                    if child.is_dir() and not child.is_symlink():
                        shutil.rmtree(child, ignore_errors=True)
                    else:
                        child.unlink(missing_ok=True)
            else:
                shutil.rmtree(folder, ignore_errors=True)
        if isinstance(exc, OSError):
            raise WriteError(
                f"cannot write {what} {folder}: {exc.strerror or exc} "
                "(what was written was removed)"
            ) from None
        raise


__all__ = [
    "check_in_file",
    "check_in_path",
    "check_out_dir",
    "check_out_file",
    "check_private",
    "kind_of",
    "open_regular",
    "replace_file",
    "write_whole",
]
