"""Reaping one run: finding its processes (marker, recorded pid and start time, or a
PostgreSQL process inside its dirs), SIGKILLing them, releasing a killed PostgreSQL's SysV
segment, emptying and removing its sandbox cgroups, its containers (``_container_reap``),
its files and dirs. ``chaos.services.registry`` is this module's public home.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chaos.services._reaper import read_entry
from chaos.services._registry_record import _SHM, MARKER, Record

_IPC_RMID = 0
_MNT_DETACH = 2
#: Seconds a reap waits for killed processes to disappear.
_PATIENCE_S = 3.0


# -- finding and reaping ----------------------------------------------------------------


@dataclass
class Reaped:
    """What reaping one run removed."""

    run_id: str
    reason: str
    owner: int
    command: str
    killed: list[dict[str, Any]] = field(default_factory=list)
    dirs: list[str] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    sysv: list[int] = field(default_factory=list)
    survivors: list[int] = field(default_factory=list)
    #: Containers of the run (labelled with its id) that were removed.
    containers: list[str] = field(default_factory=list)
    #: Sandbox cgroups removed, and those that could not be (members that would not die).
    cgroups: list[str] = field(default_factory=list)
    cgroups_left: list[str] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        return not self.survivors and not self.cgroups_left

    @property
    def empty(self) -> bool:
        return not (
            self.killed or self.dirs or self.files or self.sysv or self.containers or self.cgroups
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "run": self.run_id,
            "reason": self.reason,
            "owner": self.owner,
            "command": self.command,
            "killed": self.killed,
            "dirs": self.dirs,
            "files": self.files,
            "sysv_segments": self.sysv,
            "survivors": self.survivors,
            "containers": self.containers,
            "cgroups": self.cgroups,
            "cgroups_left": self.cgroups_left,
        }


def _environ(pid: int) -> list[bytes]:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return f.read().split(b"\0")
    except OSError:
        return []


def _cwd(pid: int) -> str:
    try:
        return os.readlink(f"/proc/{pid}/cwd").removesuffix(" (deleted)")
    except OSError:
        return ""


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()[:120]
    except OSError:
        return ""


def _is_postgres(pid: int) -> bool:
    """A PostgreSQL server process (postmaster or backend): its titles hide its environment."""
    try:
        return os.path.basename(os.readlink(f"/proc/{pid}/exe")).startswith("postgres")
    except OSError:
        return False


def _inside(path: str, dirs: list[str]) -> bool:
    return bool(path) and any(path == d or path.startswith(d + "/") for d in dirs)


def _pids() -> list[int]:
    return [int(n) for n in os.listdir("/proc") if n.isdigit()]


def members(record: Record) -> dict[int, int]:
    """Live processes of ``record``'s run -> start ticks (never this process)."""
    marker = f"{MARKER}={record.run_id}".encode()
    dirs = [str(d) for d in record.dirs]
    me = os.getpid()
    found: dict[int, int] = {}
    for pid in _pids():
        if pid == me:
            continue
        entry = read_entry(pid)
        if entry is None or entry.state in ("Z", "X"):
            continue
        recorded = record.processes.get(pid)
        if recorded is not None and recorded[0] == entry.start:
            found[pid] = entry.start
        elif marker in _environ(pid):
            found[pid] = entry.start
        elif dirs and _is_postgres(pid) and _inside(_cwd(pid), dirs):
            found[pid] = entry.start
    return found


def _kill_all(found: dict[int, int]) -> None:
    for pid, start in found.items():
        entry = read_entry(pid)
        if entry is not None and entry.start == start:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)


def _reap_zombies(pids: set[int]) -> None:
    """waitpid the ones that were handed to this process (a subreaper) and have died."""
    me = os.getpid()
    for pid in pids:
        entry = read_entry(pid)
        if entry is not None and entry.state == "Z" and entry.ppid == me:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)


def _kill_members(record: Record, reaped: Reaped, patience: float) -> None:
    deadline = time.monotonic() + patience
    seen: set[int] = set()
    while True:
        found = members(record)
        for pid in found.keys() - seen:
            reaped.killed.append({"pid": pid, "command": _cmdline(pid)})
        seen |= found.keys()
        if not found:
            break
        if time.monotonic() > deadline:
            reaped.survivors = sorted(found)
            break
        _kill_all(found)
        _reap_zombies(set(found))
        time.sleep(0.02)
    _reap_zombies(seen)


def _sysv_segments() -> dict[int, tuple[int, int]]:
    """shmid -> (key, attached processes), from /proc/sysvipc/shm."""
    table: dict[int, tuple[int, int]] = {}
    try:
        rows = Path("/proc/sysvipc/shm").read_text().splitlines()[1:]
    except OSError:
        return table
    for row in rows:
        cols = row.split()
        with contextlib.suppress(IndexError, ValueError):
            table[int(cols[1])] = (int(cols[0]), int(cols[6]))
    return table


def _release_postgres_segments(record: Record, reaped: Reaped) -> None:
    """A SIGKILLed postmaster leaves its SysV segment (key and id in postmaster.pid, line 7):
    remove it when nothing is attached and the key still matches."""
    segments: dict[int, tuple[int, int]] | None = None
    for d in record.dirs:
        for pidfile in (*d.glob("postmaster.pid"), *d.glob("*/data/postmaster.pid")):
            try:
                key, shmid = (int(x) for x in pidfile.read_text().splitlines()[6].split())
            except (OSError, IndexError, ValueError):
                continue
            segments = _sysv_segments() if segments is None else segments
            if segments.get(shmid) == (key, 0):
                import ctypes

                if ctypes.CDLL(None, use_errno=True).shmctl(shmid, _IPC_RMID, None) == 0:
                    reaped.sysv.append(shmid)


#: How /proc/self/mountinfo writes a space, a tab, a newline and a backslash in a path.
_MOUNTINFO_ESCAPES = ((r"\040", " "), (r"\011", "\t"), (r"\012", "\n"), (r"\134", "\\"))


def _mounts_under(folder: Path) -> list[Path]:
    """The mount points inside ``folder`` (a killed sandbox's scratch tmpfs), deepest first."""
    try:
        table = Path("/proc/self/mountinfo").read_text()
    except OSError:
        return []
    inside = []
    for line in table.splitlines():
        fields = line.split()
        if len(fields) > 4:
            text = fields[4]
            for code, char in _MOUNTINFO_ESCAPES:
                text = text.replace(code, char)
            point = Path(text)
            if folder in point.parents:
                inside.append(point)
    return sorted(inside, key=lambda p: len(p.parts), reverse=True)


def _remove_dirs(record: Record, reaped: Reaped) -> None:
    for d in record.dirs:
        if not d.is_absolute() or d.is_symlink() or not d.is_dir():
            continue
        if d.lstat().st_uid != os.geteuid() or len(d.parts) < 3:
            continue
        for point in _mounts_under(d):  # a SIGKILLed run's mounts: rmtree cannot cross them
            import ctypes

            ctypes.CDLL(None, use_errno=True).umount2(os.fsencode(point), _MNT_DETACH)
        shutil.rmtree(d, ignore_errors=True)
        if not d.exists():
            reaped.dirs.append(str(d))


def _remove_files(record: Record, killed: set[int], reaped: Reaped) -> None:
    paths = list(record.files)
    # libfaketime's own per-process pair, for a process that did not use the run's shared
    # pair (only for pids that no longer run: a new process may have the same pid).
    for pid in killed | set(record.processes):
        if read_entry(pid) is None:
            paths += [_SHM / f"faketime_shm_{pid}", _SHM / f"sem.faketime_sem_{pid}"]
    for path in paths:
        try:
            path.unlink()
        except FileNotFoundError:
            continue
        except OSError:
            continue
        reaped.files.append(str(path))


def _is_sandbox_cgroup(path: Path) -> bool:
    """Only a directory named like a sandbox's, inside a cgroup filesystem, is ever touched."""
    return (
        path.is_absolute()
        and ".." not in path.parts
        and path.name.startswith("chaos-")
        and path.parts[:4] == ("/", "sys", "fs", "cgroup")
        and len(path.parts) > 5
    )


def _remove_cgroups(record: Record, reaped: Reaped, patience: float) -> None:
    """SIGKILL every member of the run's sandbox cgroups (a candidate's processes carry no
    marker: the cgroup is how they are found), then remove the emptied directories."""
    from chaos.sandbox._cgroup import Cgroup

    groups = [d for d in record.cgroups if _is_sandbox_cgroup(d) and d.is_dir()]
    if not groups:
        return
    group = Cgroup(version=0, dirs=list(groups))
    deadline = time.monotonic() + patience
    while not group.try_remove() and time.monotonic() < deadline:
        _reap_zombies(group.members())
        time.sleep(0.02)
    reaped.cgroups = [str(d) for d in groups if d not in group.dirs]
    reaped.cgroups_left = [str(d) for d in group.dirs]


def reap(record: Record, *, reason: str, patience: float = _PATIENCE_S) -> Reaped:
    """Kill what ``record``'s run left, release its SysV memory, remove its cgroups, files and
    dirs."""
    reaped = Reaped(record.run_id, reason, record.owner, record.command)
    _kill_members(record, reaped, patience)
    _remove_cgroups(record, reaped, patience)
    if record.containers:  # only a run that wrote down containers asks the daemon (a run's
        # end in every worker: no Docker client import, no request, for a run without any)
        from chaos.services import _container_reap

        reaped.containers = _container_reap.reap_run_containers(record.run_id)
    _release_postgres_segments(record, reaped)
    _remove_files(record, {k["pid"] for k in reaped.killed}, reaped)
    _remove_dirs(record, reaped)
    return reaped
