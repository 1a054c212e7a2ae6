"""A service's process family: find it, signal all of it, reap what is handed to us.

A service's descendants may leave its process group (PostgreSQL backends call setsid), so a
fault that should hit "the service" signals the leader's group and every descendant.
The harness makes itself a child subreaper (prctl PR_SET_CHILD_SUBREAPER): descendants that
outlive their parent are re-parented to the harness instead of PID 1 (which, in containers,
often never reaps), and `reap_family` waits on them.

Finding a family reads the stat of every process it could contain. A subreaper that started
the leader holds all of them in its own tree (an orphan of the family comes back to it, or to
a subreaper below it: a zygote), so it walks only its tree (``/proc/PID/task/TID/children``),
not every process of the machine: a warm worker stops a handful of services per run on a
machine where other runs keep hundreds of processes. Elsewhere (not a subreaper, a leader
outside its tree, a kernel without those files) it reads every process, as before.
"""

from __future__ import annotations

import ctypes
import os
import signal
import threading
from typing import NamedTuple

import trio

_PR_SET_CHILD_SUBREAPER = 36
_subreaper: bool | None = None


class ProcEntry(NamedTuple):
    pid: int
    ppid: int
    pgid: int
    state: str
    start: int


def become_subreaper() -> bool:
    """Make this process the reaper of its orphaned descendants (Linux); idempotent."""
    global _subreaper
    if _subreaper is None:
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            _subreaper = libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
        except (OSError, AttributeError):
            _subreaper = False
    return _subreaper


def read_entry(pid: int) -> ProcEntry | None:
    """Parse /proc/<pid>/stat, or None if the process is gone."""
    try:  # os.open/os.read: no buffered file object (family() reads every process's)
        fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY)
    except OSError:
        return None
    try:
        stat = os.read(fd, 4096)
    except OSError:
        return None
    finally:
        os.close(fd)
    if not stat:
        return None
    fields = stat[stat.rfind(b")") + 2 :].split()
    return ProcEntry(pid, int(fields[1]), int(fields[2]), fields[0].decode(), int(fields[19]))


def _all_entries() -> list[ProcEntry]:
    entries = []
    for name in os.listdir("/proc"):
        if name.isdigit() and (entry := read_entry(int(name))) is not None:
            entries.append(entry)
    return entries


def _read_all(path: str) -> bytes | None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    chunks = []
    try:
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
    except OSError:
        return None
    finally:
        os.close(fd)
    return b"".join(chunks)


def _children(pid: int) -> list[int]:
    """``pid``'s children, from each of its threads' ``children`` file (none if it is gone)."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    found: list[int] = []
    for tid in tids:
        data = _read_all(f"/proc/{pid}/task/{tid}/children")
        if data:
            found.extend(int(child) for child in data.split())
    return found


def _has_children_files() -> bool:
    return os.path.exists(f"/proc/self/task/{threading.get_native_id()}/children")


def _tree_entries(root: int) -> list[ProcEntry]:
    """``root`` and every process below it (a snapshot, as racy as reading all of /proc)."""
    entries, seen, stack = [], {root}, [root]
    while stack:
        pid = stack.pop()
        if (entry := read_entry(pid)) is not None:
            entries.append(entry)
        for child in _children(pid):
            if child not in seen:
                seen.add(child)
                stack.append(child)
    return entries


def _candidates(leader: int) -> list[ProcEntry]:
    """Every process that could be of ``leader``'s family: this process's tree when it is a
    subreaper and the leader is in it, else every process."""
    if _subreaper and _has_children_files():
        entries = _tree_entries(os.getpid())
        if any(e.pid == leader for e in entries):
            return entries
    return _all_entries()


def family(leader: int) -> dict[int, ProcEntry]:
    """The leader's descendants and the members of its process group (leader excluded)."""
    entries = _candidates(leader)
    children: dict[int, list[ProcEntry]] = {}
    for e in entries:
        children.setdefault(e.ppid, []).append(e)
    found = {e.pid: e for e in entries if e.pgid == leader and e.pid != leader}
    stack = [leader]
    while stack:
        for child in children.get(stack.pop(), []):
            if child.pid not in found and child.pid != leader:
                found[child.pid] = child
                stack.append(child.pid)
    return found


def signal_family(members: dict[int, ProcEntry], sig: int) -> None:
    """Send `sig` to every member that is still the same process (pid reuse checked)."""
    for pid, was in members.items():
        now = read_entry(pid)
        if now is not None and now.start == was.start and now.state != "Z":
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass


def _reap_once(members: dict[int, ProcEntry], leader: int) -> bool:
    """SIGKILL live members, reap zombies re-parented to us; True when none is left to wait for."""
    me, done = os.getpid(), True
    for pid, was in members.items():
        now = read_entry(pid)
        if now is None or now.start != was.start:
            continue
        if now.state != "Z":
            signal_family({pid: was}, signal.SIGKILL)
            done = False
        elif now.ppid == me:
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass
        elif now.ppid == leader or now.ppid in members:
            done = False  # its parent is dying too; it will be re-parented to us
    return done


async def reap_family(members: dict[int, ProcEntry], leader: int, patience: float = 2.0) -> None:
    """Kill what is left of a family and wait (bounded) for its zombies handed to us."""
    with trio.move_on_after(patience):
        while not _reap_once(members, leader):  # noqa: ASYNC110 - /proc offers no event
            await trio.sleep(0.02)
