"""Run registrations: each run writes down what it starts, so a later command reaps what a
dead run left (its harness SIGKILLed, OOM-killed, or its machine's PID 1 never reaping).

::

    <registry>/<run id>.run      one per live run; its owner holds an flock on it
      {"run": ID, "owner": PID, "start": TICKS, "boot": BOOT_ID, "argv": [...], "created": T}
      {"dir": "/dev/shm/chaos-payments-ID"}           written before the dir is made
      {"file": "/dev/shm/faketime_shm_chaos-ID"}      written before the file is made
      {"process": PID, "start": TICKS, "name": "postgres"}

``<registry>`` is ``$CHAOS_REGISTRY_DIR``, else ``/dev/shm/chaos-harness-<uid>`` (memory:
gone after a reboot, like the pids it names), else ``<tmp>/chaos-harness-<uid>``.

Every child the harness starts carries ``CHAOS_RUN_ID=<run id>`` and
``CHAOS_RUN_REGISTRY=<registry>`` in its environment. A process belongs to a dead run when
it carries the run's marker, when it is a recorded pid with the same start time, or when it
is a PostgreSQL process whose working directory is inside the run's dir (PostgreSQL overwrites
its environment block with its process titles, but its backends run in the data dir).
Nothing else is ever signalled.

A registration is stale when nobody holds its lock and its owner (pid + start time, same
boot) is gone or has let it go; ``collect`` kills what such a run left, removes its dirs and
files (and a killed PostgreSQL's SysV segment) and then the registration itself.
"""

from __future__ import annotations

import contextlib
import contextvars
import errno
import fcntl
import itertools
import json
import os
import shutil
import signal
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chaos import _signals
from chaos.services._reaper import read_entry

MARKER = "CHAOS_RUN_ID"
REGISTRY_MARKER = "CHAOS_RUN_REGISTRY"
_SUFFIX = ".run"
_SHM = Path("/dev/shm")
_IPC_RMID = 0
#: Seconds a reap waits for killed processes to disappear.
_PATIENCE_S = 3.0

_ids = itertools.count(1)
_current: contextvars.ContextVar[Registration | None] = contextvars.ContextVar(
    "chaos_registration", default=None
)
_live: set[Registration] = set()


# -- where, who, when -------------------------------------------------------------------


def registry_dir() -> Path:
    """$CHAOS_REGISTRY_DIR, else /dev/shm/chaos-harness-<uid>, else <tmp>/chaos-harness-<uid>."""
    if env := os.environ.get("CHAOS_REGISTRY_DIR"):
        return Path(env)
    name = f"chaos-harness-{os.geteuid()}"
    if os.access(_SHM, os.W_OK | os.X_OK):
        return _SHM / name
    return Path(tempfile.gettempdir()) / name


def _ensure_private_dir(path: Path) -> Path:
    """Create ``path`` (0700) or check an existing one is a real dir of ours."""
    try:
        path.mkdir(mode=0o700, parents=True)
    except FileExistsError:
        pass
    st = path.lstat()
    if not path.is_dir() or path.is_symlink() or st.st_uid != os.geteuid():
        raise OSError(errno.EPERM, "not a private directory of this user", str(path))
    return path


def boot_id() -> str:
    """This boot's id (pids and start times mean nothing across a reboot)."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (None if it is gone)."""
    entry = read_entry(pid)
    return None if entry is None else entry.start


def process_alive(pid: int, start: int) -> bool:
    """Whether ``pid`` is still the process that started at ``start`` (zombies are dead)."""
    entry = read_entry(pid)
    return entry is not None and entry.start == start and entry.state not in ("Z", "X")


def current() -> Registration | None:
    """The registration of the run this task belongs to (set by ``open_run_dir``)."""
    return _current.get()


# -- a record, as read back -------------------------------------------------------------


@dataclass
class Record:
    """A registration file as read back: the owner and what it wrote down."""

    path: Path
    run_id: str
    owner: int
    start: int
    boot: str
    argv: list[str] = field(default_factory=list)
    created: float = 0.0
    dirs: list[Path] = field(default_factory=list)
    files: list[Path] = field(default_factory=list)
    processes: dict[int, tuple[int, str]] = field(default_factory=dict)
    registry: Path | None = None

    @property
    def command(self) -> str:
        return " ".join(self.argv) or "?"


def parse(path: Path, text: str) -> Record | None:
    """A registration's lines -> Record (None when the header is unreadable); a cut-off last
    line (the owner died mid-write) is ignored."""
    lines = text.splitlines()
    try:
        head = json.loads(lines[0])
        record = Record(
            path,
            str(head["run"]),
            int(head["owner"]),
            int(head["start"]),
            str(head["boot"]),
            [str(a) for a in head.get("argv", [])],
            float(head.get("created", 0.0)),
            registry=path.parent,
        )
    except (IndexError, ValueError, KeyError, TypeError):
        return None
    for line in lines[1:]:
        try:
            item = json.loads(line)
            if "dir" in item:
                record.dirs.append(Path(item["dir"]))
            elif "file" in item:
                record.files.append(Path(item["file"]))
            elif "process" in item:
                record.processes[int(item["process"])] = (int(item["start"]), str(item["name"]))
        except (ValueError, KeyError, TypeError):
            continue
    return record


def staleness(
    record: Record, *, boot: str, alive: Callable[[int, int], bool], lock: str
) -> str | None:
    """Why ``record``'s run is over (so what it left may be reaped), or None while it may live.

    ``lock`` is "held" (someone holds its flock), "free" (we just took it) or "unsupported"
    (the registry's filesystem has no flock: then the owner's pid + start time decide).
    """
    if lock == "held":
        return None
    if record.boot != boot:
        return "the machine has rebooted since"
    if not alive(record.owner, record.start):
        return f"its harness (pid {record.owner}) is gone"
    if lock == "free":
        return f"its harness (pid {record.owner}) let it go without cleaning up"
    return None


# -- the live side ----------------------------------------------------------------------


class Registration:
    """A live run's registration, flock'ed by this process until ``close``."""

    def __init__(self, directory: Path, run_id: str, fd: int, path: Path) -> None:
        self.directory = directory
        self.run_id = run_id
        self.path = path
        self._fd: int | None = fd
        self.dirs: list[Path] = []
        self.files: list[Path] = []
        self.processes: dict[int, tuple[int, str]] = {}
        self._faketime: str | None = None

    # writing down ----------------------------------------------------------------------

    def _append(self, item: dict[str, Any]) -> None:
        if self._fd is not None:
            os.write(self._fd, (json.dumps(item) + "\n").encode())

    def marker_env(self) -> dict[str, str]:
        """The environment every child of this run carries."""
        return {MARKER: self.run_id, REGISTRY_MARKER: str(self.directory)}

    def make_dir(self, parent: Path, prefix: str) -> Path:
        """Write down, then create ``parent/<prefix><run id>`` (0700)."""
        for n in itertools.count():
            path = parent / f"{prefix}{self.run_id}{f'.{n}' if n else ''}"
            self._append({"dir": str(path)})
            try:
                path.mkdir(mode=0o700)
            except FileExistsError:
                continue
            self.dirs.append(path)
            return path
        raise AssertionError("unreachable")  # pragma: no cover

    def add_file(self, path: Path) -> None:
        """Write down a file (before it is created) to remove when the run ends."""
        self._append({"file": str(path)})
        self.files.append(path)

    def add_process(self, pid: int, name: str) -> None:
        """Write down a child by pid and start time."""
        start = start_ticks(pid)
        if start is None:
            return
        self.processes[pid] = (start, name)
        self._append({"process": pid, "start": start, "name": name})

    def faketime_shared(self) -> str:
        """``FAKETIME_SHARED`` for this run's skewed services: one libfaketime semaphore and
        shared memory per run, named after it, instead of one pair per process (which a
        killed process never removes)."""
        if self._faketime is None:
            from chaos.services.clock import create_faketime_shared, faketime_shared_paths

            tag = f"chaos-{self.run_id}"
            for path in faketime_shared_paths(tag):
                self.add_file(path)
            self._faketime = create_faketime_shared(tag)
        return self._faketime

    # ending ----------------------------------------------------------------------------

    def record(self) -> Record:
        me = read_entry(os.getpid())
        return Record(
            self.path,
            self.run_id,
            os.getpid(),
            me.start if me else 0,
            boot_id(),
            dirs=list(self.dirs),
            files=list(self.files),
            processes=dict(self.processes),
            registry=self.directory,
        )

    def close(self) -> Reaped:
        """Kill whatever of this run is still alive, remove its dirs and files, and drop the
        registration (kept, unlocked, if something could not be removed: a later command
        reaps it)."""
        with _signals.deferred():
            reaped = reap(self.record(), reason="the run ended")
            _live.discard(self)
            if self._fd is not None:
                fd, self._fd = self._fd, None
                if reaped.complete:
                    with contextlib.suppress(FileNotFoundError):
                        self.path.unlink()
                os.close(fd)
        return reaped


def open_registration(directory: Path | None = None) -> Registration:
    """Register a new run: the file appears under its final name already locked."""
    directory = _ensure_private_dir(directory or registry_dir())
    me = read_entry(os.getpid())
    run_id = f"{os.getpid()}-{me.start if me else 0}-{next(_ids)}"
    tmp = directory / f".{run_id}.tmp"
    fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        head = {
            "run": run_id,
            "owner": os.getpid(),
            "start": me.start if me else 0,
            "boot": boot_id(),
            "argv": _argv(),
            "created": time.time(),
        }
        os.write(fd, (json.dumps(head) + "\n").encode())
        path = directory / f"{run_id}{_SUFFIX}"
        os.rename(tmp, path)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    registration = Registration(directory, run_id, fd, path)
    _live.add(registration)
    return registration


def _argv() -> list[str]:
    argv = [os.path.basename(sys.argv[0]) if sys.argv else "?", *sys.argv[1:]]
    if argv[0] == "__main__.py":
        argv[0] = "chaos"
    return argv[:40]


@contextlib.contextmanager
def registered(registration: Registration) -> Iterator[Registration]:
    """Make ``registration`` the current one for this task (and tasks it starts)."""
    token = _current.set(registration)
    try:
        yield registration
    finally:
        try:
            _current.reset(token)
        except ValueError:  # left in another context: restore by value
            _current.set(None)


@contextlib.contextmanager
def open_faketime_shared(name: str, owner: tuple[int, int] | None = None) -> Iterator[str]:
    """A libfaketime pair of its own for a group of processes (the ``FAKETIME_SHARED``
    value), removed when the block ends; inside a registered run it is also written down in
    the run's registration, so a harness killed before the end leaves it to the next
    collection. ``owner`` (uid, gid): the user whose processes use it."""
    from chaos.services.clock import (
        create_faketime_shared,
        faketime_shared_paths,
        remove_faketime_shared,
    )

    registration = current()
    prefix = f"chaos-{registration.run_id}" if registration else f"chaos-{os.getpid()}"
    tag = f"{prefix}-{name}-{uuid.uuid4().hex[:8]}"
    if registration is not None:
        for path in faketime_shared_paths(tag):
            registration.add_file(path)
    try:
        yield create_faketime_shared(tag, owner)
    finally:
        remove_faketime_shared(tag)


def _emergency() -> None:
    """Synchronous last resort (the signal watchdog): reap every live run of this process."""
    for registration in list(_live):
        registration.close()


_signals.add_emergency_hook(_emergency)


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

    @property
    def complete(self) -> bool:
        return not self.survivors

    @property
    def empty(self) -> bool:
        return not (self.killed or self.dirs or self.files or self.sysv or self.containers)

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


def _remove_dirs(record: Record, reaped: Reaped) -> None:
    for d in record.dirs:
        if not d.is_absolute() or d.is_symlink() or not d.is_dir():
            continue
        if d.lstat().st_uid != os.geteuid() or len(d.parts) < 3:
            continue
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


def reap(record: Record, *, reason: str, patience: float = _PATIENCE_S) -> Reaped:
    """Kill what ``record``'s run left, release its SysV memory, remove its files and dirs."""
    reaped = Reaped(record.run_id, reason, record.owner, record.command)
    _kill_members(record, reaped, patience)
    from chaos.services import _container_reap  # loads Docker's client only when needed

    reaped.containers = _container_reap.reap_run_containers(record.run_id)
    _release_postgres_segments(record, reaped)
    _remove_files(record, {k["pid"] for k in reaped.killed}, reaped)
    _remove_dirs(record, reaped)
    return reaped


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
            report.errors.append(
                f"run {record.run_id}: pids {reaped.survivors} did not die; kept its registration"
            )
    finally:
        os.close(fd)


def _collect_tmp(path: Path) -> None:
    """A registration its owner never finished creating (killed before the rename)."""
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
