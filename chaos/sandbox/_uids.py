"""Unprivileged user ids for candidates: one per concurrent candidate, across processes.

A candidate runs as a uid of its own (no passwd entry needed), so the kernel's per-user
process limit (RLIMIT_NPROC) counts its processes only, its files are its own, and when it
is gone every process of that uid can be killed without looking further. Many graders may
run at once (``chaos.grade`` from many processes): a uid is taken by holding an exclusive
``flock`` on its lock file, which the kernel releases if the holder dies.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from ground.errors import ServiceError

UID_BASE = 2_000_000_000
SLOTS = 4096
LOCK_DIR = Path("/run/chaos-sandbox/uids")


def processes_of(uid: int) -> list[int]:
    """Pids of every process whose real or effective uid is ``uid``."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/status") as f:
                for line in f:
                    if line.startswith("Uid:"):
                        if str(uid) in line.split()[1:3]:
                            found.append(int(name))
                        break
        except OSError:
            continue
    return found


def tasks_of(uid: int) -> int:
    """Threads of every process of ``uid`` (what RLIMIT_NPROC counts), zombies included."""
    total = 0
    for pid in processes_of(uid):
        try:
            total += len(os.listdir(f"/proc/{pid}/task"))
        except OSError:
            continue
    return total


def kill_all(uid: int, patience_s: float = 2.0) -> bool:
    """SIGKILL every process of ``uid`` until none is left; True when none is."""
    deadline = time.monotonic() + patience_s
    while True:
        pids = processes_of(uid)
        if not pids:
            return True
        if time.monotonic() > deadline:
            return False
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.01)


class UidLease:
    """One uid, held until ``release``."""

    def __init__(self, uid: int, fd: int) -> None:
        self.uid = uid
        self.gid = uid
        self._fd: int | None = fd
        #: The last ``kill_once`` found no process of the uid.
        self.empty = False

    def kill_once(self) -> bool:
        """SIGKILL every process of the uid; True when there was none."""
        pids = processes_of(self.uid)
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.empty = not pids
        return self.empty

    def release(self, clean: bool = False) -> None:
        """Free the uid (the next holder kills whatever is still left of it). ``clean``: its
        files in the shared folders are gone; if ``kill_once`` also found no process of it
        last, nothing of it is left (nothing but its processes makes any), and this process
        keeps it, still locked, for its next candidate: no scan of every process then."""
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        if clean and self.empty:
            with _kept_lock:
                if _kept_pid[0] == os.getpid():
                    _kept.append((self.uid, fd))
                    return
        os.close(fd)


#: Uids this process holds (locked) with nothing of them left: handed out before any other.
_kept: list[tuple[int, int]] = []
_kept_pid = [os.getpid()]
_kept_lock = threading.Lock()


def _take_kept() -> UidLease | None:
    with _kept_lock:
        if _kept_pid[0] != os.getpid():  # a forked child: those locks are its parent's
            _kept.clear()
            _kept_pid[0] = os.getpid()
        if _kept:
            uid, fd = _kept.pop()
            return UidLease(uid, fd)
    return None


#: World-writable folders a candidate with uid isolation can leave files in.
SHARED_FOLDERS = (Path("/dev/shm"), Path("/tmp"), Path("/var/tmp"), Path(tempfile.gettempdir()))


def remove_owned(uid: int, folders: Sequence[Path]) -> bool:
    """Remove every entry of ``folders`` (top level) that ``uid`` owns; True when none is
    left (as far as the folders could be read)."""
    clean = True
    for folder in dict.fromkeys(folders):
        try:
            entries = list(folder.iterdir())
        except FileNotFoundError:
            continue
        except OSError:
            clean = False
            continue
        for entry in entries:
            try:
                if entry.lstat().st_uid != uid:
                    continue
                if entry.is_dir() and not entry.is_symlink():
                    shutil.rmtree(entry, ignore_errors=True)
                else:
                    entry.unlink()
            except FileNotFoundError:
                continue
            except OSError:
                clean = False
                continue
            if entry.exists() or entry.is_symlink():
                clean = False
    return clean


def lease_uid() -> UidLease:
    """A uid no other live candidate holds (ServiceError when all are taken): one this
    process kept with nothing of it left, else a free slot, emptied first."""
    kept = _take_kept()
    if kept is not None:
        return kept
    LOCK_DIR.mkdir(parents=True, exist_ok=True, mode=0o700)
    start = os.getpid() % SLOTS
    for i in range(SLOTS):
        slot = (start + i) % SLOTS
        fd = os.open(LOCK_DIR / str(slot), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        uid = UID_BASE + slot
        kill_all(uid)  # a holder that died may have left some behind
        remove_owned(uid, SHARED_FOLDERS)
        return UidLease(uid, fd)
    raise ServiceError(f"all {SLOTS} sandbox uids are in use")
