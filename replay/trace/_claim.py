"""The claim on a trace path: one live writer per path, a temporary name, one rename at the end.

::

    claim_trace(T)   T.partial opened (created, or a dead writer's taken over) and flock'ed
        ...          the writer appends frames to T.partial: readable at every moment,
                     left there (partial) if the process is killed
    claim.place()    fsync, rename T.partial -> T (atomic), fsync the folder, unlock
    claim.discard()  remove T.partial, unlock: whatever was at T is untouched
    claim.abandon()  unlock, T.partial left as it is (a full disk cut it short)

The lock is ``flock`` on T.partial itself, so the kernel releases it when its holder dies,
SIGKILL included: a claim whose holder is gone is taken over by the next writer. A path whose
T.partial is locked by a live process is refused with ConfigError before anything is written.
"""

from __future__ import annotations

import errno
import fcntl
import os
import shutil
from pathlib import Path
from types import TracebackType
from typing import BinaryIO

from ground._paths import kind_of, open_regular
from ground.errors import ConfigError, TraceError, WriteError

from ._framing import MAGIC

PARTIAL_SUFFIX = ".partial"
_TAKEOVER_ATTEMPTS = 5


def partial_path(path: str | os.PathLike[str]) -> Path:
    """Where the trace for ``path`` is written until it is placed: ``PATH.partial``."""
    path = Path(path)
    return path.with_name(path.name + PARTIAL_SUFFIX)


def is_trace_file(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a file that starts like a chaos trace, or a trace being written."""
    path = Path(path)
    if path.name.endswith(PARTIAL_SUFFIX) and path.exists():
        return True
    try:
        with open_regular(path, "trace") as stream:  # a FIFO or a device: never read
            return stream.read(len(MAGIC)) == MAGIC
    except (OSError, ConfigError):
        return False


def lock_holder(path: str | os.PathLike[str]) -> int | None:
    """The pid holding a flock on ``path`` (from /proc/locks), None when none or not known."""
    try:
        st = os.stat(path)
        lines = Path("/proc/locks").read_text().splitlines()
    except OSError:
        return None
    where = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    for line in lines:
        fields = line.split()
        if len(fields) >= 6 and fields[1] == "FLOCK" and fields[5] == where:
            return int(fields[4]) if fields[4].isdigit() else None
    return None


def _same_file(fd: int, path: Path) -> bool:
    try:
        st = os.stat(path)
    except OSError:
        return False
    mine = os.fstat(fd)
    return (mine.st_dev, mine.st_ino) == (st.st_dev, st.st_ino)


def _check_destination(path: Path, replace: bool) -> None:
    """Refuse a destination that is a folder, a special file, or a file that is not a trace."""
    if path.name.endswith(PARTIAL_SUFFIX):
        raise ConfigError(
            f"trace path {path} ends in {PARTIAL_SUFFIX}, the suffix of traces being written"
        )
    if path.is_dir():
        raise ConfigError(f"{path} is a directory, not a trace file path")
    if not path.exists() and not path.is_symlink():
        return
    if not replace:
        raise ConfigError(f"trace file already exists: {path}")
    if not path.is_file():
        kind = kind_of(path.stat().st_mode) if path.exists() else "a dangling link"
        raise ConfigError(
            f"{path} exists and is not a regular file ({kind}); refusing to replace it"
        )
    if path.stat().st_size and not is_trace_file(path):
        raise ConfigError(f"{path} exists and is not a chaos trace; refusing to replace it")


def check_trace_path(path: str | os.PathLike[str], *, replace: bool = True) -> Path:
    """What ``claim_trace`` would refuse, checked without creating or locking anything.

    For commands that write several traces: check every path before the first run starts.
    """
    path = Path(path)
    _check_destination(path, replace)
    blocking = next((p for p in path.parents if p.exists() and not p.is_dir()), None)
    if blocking is not None:
        raise ConfigError(f"cannot create trace {path}: {blocking} is not a folder")
    holder = lock_holder(partial_path(path))
    if holder is not None:
        raise ConfigError(
            f"trace {path} is being written by another run (pid {holder}); "
            "wait for it to end or write to another path"
        )
    return path


def _make_parents(folder: Path) -> list[Path]:
    """Create ``folder`` and its missing parents; the ones created, deepest last."""
    missing = [p for p in (folder, *folder.parents) if not p.exists()][::-1]
    folder.mkdir(parents=True, exist_ok=True)
    return missing


def _remove_empty(created: list[Path]) -> None:
    """Remove the folders a claim created (deepest first) while they are empty."""
    for folder in reversed(created):
        try:
            folder.rmdir()
        except OSError:
            return


def _lock(partial: Path, path: Path) -> int:
    """An fd of ``partial`` under an exclusive flock; ConfigError if a live writer holds it."""
    for _ in range(_TAKEOVER_ATTEMPTS):
        flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW
        try:
            fd = os.open(partial, flags, 0o644)
        except OSError as exc:
            raise ConfigError(f"cannot create trace {path}: {exc.strerror}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = lock_holder(partial)
            os.close(fd)
            who = f" (pid {holder})" if holder is not None else ""
            raise ConfigError(
                f"trace {path} is being written by another run{who}; "
                "wait for it to end or write to another path"
            ) from None
        if _same_file(fd, partial):  # not renamed or removed by its last holder meanwhile
            return fd
        os.close(fd)
    raise ConfigError(f"cannot claim trace {path}: {partial} keeps changing")


class TraceClaim:
    """The right to write the trace at ``path``: ``partial`` is open and locked until placed.

    Use ``file`` to write (``TraceWriter`` does), then ``place()`` to rename it into ``path``,
    or ``discard()`` to remove it. As a context manager a claim that was not placed is
    discarded on exit.
    """

    def __init__(self, path: Path, replace: bool, fd: int, created: list[Path]) -> None:
        self.path = path
        self.partial = partial_path(path)
        self.replace = replace
        self.file: BinaryIO = os.fdopen(fd, "r+b")
        self._created = created

    @property
    def active(self) -> bool:
        """Neither placed nor discarded yet."""
        return not self.file.closed

    def _check_active(self) -> None:
        if not self.active:
            raise ValueError(f"the claim on {self.path} was already placed or discarded")

    def place(self) -> Path:
        """Sync and rename the partial trace into ``path``, then release the claim. A full
        disk is ``WriteError`` (exit 3): the partial trace stays, named in the message."""
        self._check_active()
        try:
            self.file.flush()
            os.fsync(self.file.fileno())
            if not _same_file(self.file.fileno(), self.partial):
                raise TraceError(f"{self.partial} was moved away while it was written")
            if self.replace:
                _check_destination(self.path, replace=True)
                os.replace(self.partial, self.path)
            else:
                _link_new(self.partial, self.path)
            _sync_folder(self.path.parent)
        except FileExistsError:
            raise ConfigError(
                f"trace file already exists: {self.path} (this trace is left at {self.partial})"
            ) from None
        except OSError as exc:
            kept = f"{exc.strerror or exc}; what was written is kept in {self.partial}"
            if exc.errno in DISK_ERRNOS:
                raise WriteError(f"cannot write trace {self.path}: {kept}") from None
            raise ConfigError(f"cannot place trace {self.path}: {kept}") from None
        finally:
            _close_quietly(self.file)  # a failed flush is raised above, not again here
        return self.path

    def abandon(self) -> None:
        """Release the claim and leave the partial trace as it is (it could not be written
        to the end: a full disk); idempotent."""
        if self.active:
            _close_quietly(self.file)

    def place_copy(self, source: str | os.PathLike[str]) -> Path:
        """Place a copy of the finished trace at ``source`` (e.g. a search's best run)."""
        self._check_active()
        if not is_trace_file(source):
            raise ConfigError(f"{source} is not a chaos trace")
        self.file.seek(0)
        self.file.truncate()
        with Path(source).open("rb") as stream:
            shutil.copyfileobj(stream, self.file)
        return self.place()

    def discard(self) -> None:
        """Remove the partial trace and release the claim; idempotent."""
        if not self.active:
            return
        try:
            if _same_file(self.file.fileno(), self.partial):
                self.partial.unlink()
        except OSError:
            pass
        finally:
            _close_quietly(self.file)
        _remove_empty(self._created)

    def __enter__(self) -> TraceClaim:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.discard()


#: OS errors of a full or failing disk: the machine's fault, exit 3 (WriteError).
DISK_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO, errno.EROFS})


def _close_quietly(file: BinaryIO) -> None:
    """Close ``file`` (its fd and flock are released) even if its last flush fails."""
    try:
        file.close()
    except OSError:
        pass


def _link_new(partial: Path, path: Path) -> None:
    """Move ``partial`` to ``path`` unless ``path`` exists (FileExistsError)."""
    try:
        os.link(partial, path)
    except FileExistsError:
        raise
    except OSError:  # a file system without hard links: check, then rename
        if path.exists() or path.is_symlink():
            raise FileExistsError(path) from None
        os.rename(partial, path)
        return
    os.unlink(partial)


def _sync_folder(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def claim_trace(path: str | os.PathLike[str], *, replace: bool = True) -> TraceClaim:
    """Claim ``path`` for a new trace, before anything is written or run.

    ConfigError (exit 2) when ``path`` is a folder, a special file or a file that is not a
    trace, exists and ``replace`` is False, cannot be created, or is being written by a live
    process. A claim left by a dead process is taken over (its partial trace is replaced).
    """
    path = Path(path)
    check_trace_path(path, replace=replace)
    try:
        created = _make_parents(path.parent)
    except OSError as exc:
        raise ConfigError(f"cannot create trace {path}: {exc.strerror}") from None
    partial = partial_path(path)
    try:
        fd = _lock(partial, path)
    except BaseException:
        _remove_empty(created)
        raise
    os.ftruncate(fd, 0)
    return TraceClaim(path, replace, fd, created)
