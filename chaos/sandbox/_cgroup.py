"""A candidate's cgroup: a memory limit that the kernel enforces, a process count, CPU time.

cgroup v2 when this process's v2 cgroup can delegate the memory and pids controllers to a
child; else the v1 hierarchies that are mounted and writable (memory, pids, cpuacct; each
on its own); else none (the launcher's rlimits stand alone). Each cgroup is created under
this process's own cgroup of its hierarchy (never beside it), named per candidate start
site, written down in the run's registration before it is made (so the next command reaps it
if the harness is SIGKILLed) and removed when the run ends.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

_MOUNTINFO = Path("/proc/self/mountinfo")
_SELF_CGROUP = Path("/proc/self/cgroup")


def _mounts() -> Iterator[tuple[str, str, set[str]]]:
    """(mount point, fs type, super options) of every cgroup mount."""
    try:
        lines = _MOUNTINFO.read_text().splitlines()
    except OSError:
        return
    for line in lines:
        left, _, right = line.partition(" - ")
        parts, rest = left.split(), right.split()
        if len(parts) < 5 or len(rest) < 3 or rest[0] not in ("cgroup", "cgroup2"):
            continue
        yield parts[4], rest[0], set(rest[2].split(","))


def _own_paths() -> dict[str, str]:
    """Controller (or "" for v2) -> this process's cgroup path in that hierarchy."""
    found: dict[str, str] = {}
    try:
        lines = _SELF_CGROUP.read_text().splitlines()
    except OSError:
        return found
    for line in lines:
        _, controllers, path = line.split(":", 2)
        for controller in controllers.split(",") if controllers else [""]:
            found[controller] = path
    return found


def _write(path: Path, value: str) -> bool:
    try:
        path.write_text(value)
        return True
    except OSError:
        return False


def _parse_int(text: str, key: str | None) -> int:
    if key is None:
        try:
            return int(text.split()[0])
        except (ValueError, IndexError):
            return 0
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name == key:
            try:
                return int(value)
            except ValueError:
                return 0
    return 0


@dataclass
class Cgroup:
    """The cgroup directories of one candidate (one per v1 hierarchy, or one v2)."""

    version: int
    memory: Path | None = None
    pids: Path | None = None
    cpu: Path | None = None
    dirs: list[Path] = field(default_factory=list)
    #: The counter files sampled ten times a second, kept open (read again from offset 0:
    #: a fresh reading each time, without an open and a close).
    _fds: dict[Path, int] = field(default_factory=dict, repr=False)

    def _counter(self, path: Path, key: str | None = None) -> int:
        fd = self._fds.get(path)
        try:
            if fd is None:
                fd = self._fds[path] = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            data = os.pread(fd, 65536, 0)
        except OSError:
            return 0
        return _parse_int(data.decode(errors="replace"), key)

    def close(self) -> None:
        """Close the counter files (sampling opens them again)."""
        fds, self._fds = self._fds, {}
        for fd in fds.values():
            os.close(fd)

    @property
    def procs_files(self) -> list[str]:
        """Where the sandbox's init writes its pid to join (every directory)."""
        return [str(d / "cgroup.procs") for d in self.dirs]

    @property
    def limits_memory(self) -> bool:
        return self.memory is not None

    def oom_kills(self) -> int:
        if self.memory is None:
            return 0
        if self.version == 2:
            return self._counter(self.memory / "memory.events", "oom_kill")
        return self._counter(self.memory / "memory.oom_control", "oom_kill")

    def pids_refused(self) -> int:
        """Forks refused at the pids limit so far."""
        return 0 if self.pids is None else self._counter(self.pids / "pids.events", "max")

    def cpu_s(self) -> float | None:
        if self.cpu is None:
            return None
        if self.version == 2:
            return self._counter(self.cpu / "cpu.stat", "usage_usec") / 1e6
        return self._counter(self.cpu / "cpuacct.usage") / 1e9

    def tasks(self) -> int | None:
        """Processes and threads in it now (``pids.current``: what its pids limit counts),
        None without the pids controller."""
        return None if self.pids is None else self._counter(self.pids / "pids.current")

    def members(self) -> set[int]:
        pids: set[int] = set()
        for d in self.dirs:
            try:
                pids.update(int(p) for p in (d / "cgroup.procs").read_text().split())
            except (OSError, ValueError):
                pass
        return pids

    def kill(self) -> None:
        """SIGKILL every process in the cgroup (v2: cgroup.kill; v1: each member, once)."""
        if self.version == 2 and self.dirs and _write(self.dirs[0] / "cgroup.kill", "1"):
            return
        for pid in self.members():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def try_remove(self) -> bool:
        """Kill what is left and remove the directories that are empty; True when all are
        gone (call again a little later otherwise: dying processes take a moment)."""
        self.close()
        self.kill()
        left = []
        for d in self.dirs:
            try:
                d.rmdir()
            except FileNotFoundError:
                pass
            except OSError:
                left.append(d)
        self.dirs = left
        return not left


def create_cgroup(
    name: str,
    memory_bytes: int,
    max_pids: int,
    register: Callable[[Path], None] | None = None,
) -> Cgroup | None:
    """A fresh cgroup for one candidate, or None if this machine lets us make none.
    ``register`` writes each directory down before it is made."""
    if os.geteuid() != 0:
        return None
    if register is None:
        register = _unrecorded
    own = _own_paths()
    mounts = list(_mounts())
    for mount, fstype, _ in mounts:
        if fstype == "cgroup2" and "" in own:
            group = _v2(Path(mount), own[""], name, memory_bytes, max_pids, register)
            if group is not None:
                return group
    group = Cgroup(version=1)
    for mount, fstype, options in mounts:
        if fstype != "cgroup":
            continue
        for controller in ("memory", "pids", "cpuacct"):
            if controller not in options or controller not in own:
                continue
            d = Path(mount) / own[controller].lstrip("/") / name
            register(d)
            try:
                d.mkdir()
            except OSError:
                continue
            group.dirs.append(d)
            if controller == "memory" and _write(d / "memory.limit_in_bytes", str(memory_bytes)):
                _write(d / "memory.swappiness", "0")
                group.memory = d
            elif controller == "pids" and _write(d / "pids.max", str(max_pids)):
                group.pids = d
            elif controller == "cpuacct":
                group.cpu = d
    return group if group.dirs else None


def _unrecorded(path: Path) -> None:
    """A cgroup made outside a registered run (tests of the sandbox alone)."""


def _v2(
    mount: Path,
    own: str,
    name: str,
    memory_bytes: int,
    max_pids: int,
    register: Callable[[Path], None],
) -> Cgroup | None:
    parent = mount / own.lstrip("/")
    try:
        available = set((parent / "cgroup.controllers").read_text().split())
        enabled = set((parent / "cgroup.subtree_control").read_text().split())
    except OSError:
        return None
    if not {"memory", "pids"} <= available:
        return None
    if not {"memory", "pids"} <= enabled and not _write(
        parent / "cgroup.subtree_control", "+memory +pids"
    ):
        return None
    d = parent / name
    register(d)
    try:
        d.mkdir()
    except OSError:
        return None
    group = Cgroup(version=2, dirs=[d], cpu=d)
    if _write(d / "memory.max", str(memory_bytes)):
        _write(d / "memory.swap.max", "0")
        group.memory = d
    if _write(d / "pids.max", str(max_pids)):
        group.pids = d
    if group.memory is None:
        group.try_remove()
        return None
    return group
