"""Run registrations: each run writes down what it starts, so a later command reaps what a
dead run left (its harness SIGKILLed, OOM-killed, or its machine's PID 1 never reaping).

::

    <registry>/<run id>.run      one per live run; its owner holds an flock on it
      {"run": ID, "owner": PID, "start": TICKS, "boot": BOOT_ID, "argv": [...], "created": T}
      {"dir": "/dev/shm/chaos-payments-ID"}           written before the dir is made
      {"file": "/dev/shm/faketime_shm_chaos-ID"}      written before the file is made
      {"process": PID, "start": TICKS, "name": "postgres"}
      {"cgroup": "/sys/fs/cgroup/pids/.../chaos-HEX"}  a sandbox's cgroup, before it is made

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
files (and a killed PostgreSQL's SysV segment), kills the members of its sandbox cgroups and
removes those cgroups, and then the registration itself.

The parts: this module (a live run's ``Registration``: writing down, closing) is the public
home of every name; ``_registry_record`` (where the registry is, a registration read back,
``staleness``), ``_registry_reap`` (reaping one run: ``members``, ``reap``, ``Reaped``) and
``_registry_gc`` (``collect``: every stale run of the registry).
"""

from __future__ import annotations

import contextlib
import contextvars
import fcntl
import itertools
import json
import os
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from chaos.services._reaper import read_entry
from chaos.services._registry_gc import GcReport, collect, collect_quietly
from chaos.services._registry_reap import Reaped, members, reap
from chaos.services._registry_record import (
    _SUFFIX,
    MARKER,
    REGISTRY_MARKER,
    Record,
    _ensure_private_dir,
    boot_id,
    parse,
    process_alive,
    registry_dir,
    staleness,
    start_ticks,
)
from ground import _signals

_ids = itertools.count(1)
_current: contextvars.ContextVar[Registration | None] = contextvars.ContextVar(
    "chaos_registration", default=None
)
_live: set[Registration] = set()


def current() -> Registration | None:
    """The registration of the run this task belongs to (set by ``open_run_dir``)."""
    return _current.get()


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
        self.cgroups: list[Path] = []
        #: Whether this run may have created a container (written down before the first).
        self.containers = False
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

    def add_cgroup(self, path: Path) -> None:
        """Write down a sandbox cgroup directory (before it is made): a dead run's cgroup is
        emptied (its members SIGKILLed) and removed by the next collection."""
        self._append({"cgroup": str(path)})
        self.cgroups.append(path)

    def add_containers(self) -> None:
        """Write down, before its first container is created, that this run makes containers
        (labelled with its run id): only such a run's end asks the Docker daemon for them."""
        if not self.containers:
            self._append({"containers": True})
            self.containers = True

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
            cgroups=list(self.cgroups),
            containers=self.containers,
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


# Record (a registration read back) is here too, by name only: chaos.services.supervise
# exports a Record of its own.
__all__ = [
    "MARKER",
    "REGISTRY_MARKER",
    "GcReport",
    "Reaped",
    "Registration",
    "boot_id",
    "collect",
    "collect_quietly",
    "current",
    "members",
    "open_faketime_shared",
    "open_registration",
    "parse",
    "process_alive",
    "reap",
    "registered",
    "registry_dir",
    "staleness",
    "start_ticks",
]
