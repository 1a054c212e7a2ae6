"""Collection (``chaos gc``, and quietly before each run): every stale registration of the
registry reaped under the registry's lock, half-created ones removed, and on request the
orphans (marked processes and containers whose registration is gone).
``chaos.services.registry`` is this module's public home.
"""

from __future__ import annotations

import errno
import fcntl
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chaos.services._reaper import read_entry
from chaos.services._registry_reap import Reaped, _cmdline, _environ, _kill_all, _pids, reap
from chaos.services._registry_record import (
    _SUFFIX,
    MARKER,
    REGISTRY_MARKER,
    _ensure_private_dir,
    boot_id,
    parse,
    process_alive,
    registry_dir,
    staleness,
)
from ground import _signals


def _try_lock(fd: int) -> str:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            return "held"
        if exc.errno in (errno.ENOLCK, errno.EINVAL, errno.EOPNOTSUPP):
            return "unsupported"
        raise
    return "free"


@dataclass
class GcReport:
    """What one collection found and removed."""

    registry: Path
    reaped: list[Reaped] = field(default_factory=list)
    live: int = 0
    orphans: list[dict[str, Any]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not self.reaped and not self.orphans

    def to_json(self) -> dict[str, Any]:
        return {
            "registry": str(self.registry),
            "reaped": [r.to_json() for r in self.reaped],
            "live_runs": self.live,
            "orphans": self.orphans,
            "errors": self.errors,
        }


def _collect_one(path: Path, report: GcReport, boot: str) -> None:
    try:
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    except FileNotFoundError:
        return  # its owner just finished
    try:
        lock = _try_lock(fd)
        if lock != "held" and os.fstat(fd).st_nlink == 0:
            return  # removed while we opened it: its owner has cleaned up
        with os.fdopen(os.dup(fd), "r", encoding="utf-8", errors="replace") as f:
            record = parse(path, f.read())
        if record is None:
            if lock == "free":  # a header cut off mid-write: nothing was started yet
                path.unlink(missing_ok=True)
            return
        reason = staleness(record, boot=boot, alive=process_alive, lock=lock)
        if reason is None:
            report.live += 1
            return
        reaped = reap(record, reason=reason)
        report.reaped.append(reaped)
        if reaped.complete:
            path.unlink(missing_ok=True)
        else:
            left = [f"pids {reaped.survivors}"] if reaped.survivors else []
            left += [f"cgroup {c}" for c in reaped.cgroups_left]
            report.errors.append(
                f"run {record.run_id}: {', '.join(left)} did not go; kept its registration"
            )
    finally:
        os.close(fd)


def _collect_tmp(path: Path) -> None:
    """A registration its owner never finished creating (killed before the rename). Not
    while its owner (the pid and start time in its name) lives: it creates the file, then
    locks it, and a collection in between would find it unlocked (under load, often)."""
    owner, _, rest = path.name[1:].partition("-")
    start = rest.partition("-")[0]
    if owner.isdigit() and start.isdigit() and process_alive(int(owner), int(start)):
        return
    try:
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    except FileNotFoundError:
        return
    try:
        if _try_lock(fd) == "free":
            path.unlink(missing_ok=True)
    finally:
        os.close(fd)


def _orphans(directory: Path, report: GcReport) -> None:
    """Processes marked with this registry whose run has no registration any more (someone
    removed the registry): they can belong to no live run, whose file would exist."""
    tag = f"{REGISTRY_MARKER}={directory}".encode()
    prefix = f"{MARKER}=".encode()
    me = os.getpid()
    for pid in _pids():
        env = _environ(pid)
        if pid == me or tag not in env:
            continue
        run_id = next((e[len(prefix) :].decode() for e in env if e.startswith(prefix)), "")
        if not run_id or (directory / f"{run_id}{_SUFFIX}").exists():
            continue
        if (directory / f".{run_id}.tmp").exists():
            continue
        entry = read_entry(pid)
        if entry is None or entry.state in ("Z", "X"):
            continue
        report.orphans.append({"pid": pid, "run": run_id, "command": _cmdline(pid)})
        _kill_all({pid: entry.start})


def collect(directory: Path | None = None, *, wait: bool = True, orphans: bool = False) -> GcReport:
    """Reap every stale registration in the registry (``wait=False``: skip if another
    collection is running). ``orphans``: also kill marked processes whose registration is
    gone (a full scan of /proc; ``chaos gc`` does it)."""
    directory = directory or registry_dir()
    report = GcReport(directory)
    if not directory.is_dir():
        return report
    entries = sorted(os.listdir(directory))
    if not orphans and not any(n.endswith((_SUFFIX, ".tmp")) for n in entries):
        return report  # the common case: nothing registered, nothing to lock
    with _signals.deferred():
        return _collect_locked(_ensure_private_dir(directory), report, wait, orphans)


def _collect_locked(directory: Path, report: GcReport, wait: bool, orphans: bool) -> GcReport:
    lock_fd = os.open(directory / ".gc.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            return report
        boot = boot_id()
        for name in sorted(os.listdir(directory)):
            try:
                if name.endswith(_SUFFIX):
                    _collect_one(directory / name, report, boot)
                elif name.startswith(".") and name.endswith(".tmp"):
                    _collect_tmp(directory / name)
            except OSError as exc:
                report.errors.append(f"{name}: {exc.strerror or exc}")
        if orphans:
            from chaos.services import _container_reap

            _orphans(directory, report)
            for cid, run_id in _container_reap.orphan_containers(
                directory, lambda run_id: (directory / f"{run_id}{_SUFFIX}").exists()
            ):
                report.orphans.append({"container": cid, "run": run_id})
    finally:
        os.close(lock_fd)
    return report


def collect_quietly() -> GcReport | None:
    """The automatic collection before a run starts: cheap when there is nothing to do,
    never in the way (an error is swallowed: ``chaos gc`` reports it)."""
    try:
        return collect(wait=False)
    except OSError:
        return None
