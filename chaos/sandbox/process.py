"""The process sandbox: a candidate as a child process, isolated by the kernel's own means.

As root (``isolation="root"``), for each run: a uid of its own (``_uids``), a box (``_box``:
its scratch folders, a copy of its program, the interpreter's links, copies of the task's
libraries, its clock file) on a size-limited tmpfs, a network namespace holding only its
links' listeners (the proxies accept there; their upstream dials stay outside) and tripwires
on the real dependencies' ports, a cgroup (memory, processes, CPU time) when the machine
offers one, and a launcher (``_launch.py``) that builds a private mount tree (``_mounts``),
pid and cgroup namespaces, sets the rlimits, drops to the uid and execs the program with a
scrubbed environment. Not root (``isolation="user"``): the same box (a plain folder) minus
uid, namespaces and cgroup; direct connections to a dependency are then refused by nothing,
only detected (``_detect``). At every level a Python candidate runs the base interpreter
with the task's libraries and nothing else installed (``_python``).

A monitor samples the candidate about ten times a second: how it ended (the launcher's status
file), the cgroup's OOM kills and refused forks, CPU seconds, processes, its scratch size,
and about once a second the bypass detector. Reaching a limit *contains* it: its processes
are killed (the launcher stays, idle, so the harness never sees the service "exit before it
was ready"), a restart by a crash fault is refused, and the report says why. When the run
ends the candidate gets SIGTERM and ``Limits.term_s`` to exit; then everything it started is
killed, its cgroup, uid, mounts, namespace and files removed.

The parts: ``_site`` (one candidate's site: its start and end), ``_site_state`` (what the
site holds), ``_site_setup`` (its box and the launcher's configuration), ``_site_net`` (its
links, listeners and tripwires), ``_site_watch`` (the monitor and containment); this module
is the ``Sandbox`` itself and the choice of isolation.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from chaos.sandbox import _python
from chaos.sandbox._site import LAUNCHER, _Site
from chaos.sandbox._site_net import candidate_links, inbound_links
from chaos.sandbox.candidate import (
    Candidate,
    Program,
)
from chaos.services import ManagedProcess
from ground.errors import ConfigError

if TYPE_CHECKING:
    from chaos.context import RunContext


ISOLATIONS = ("root", "uid", "user")
_namespaces: bool | None = None


def namespaces_available() -> bool:
    """Whether this process may create mount, pid and network namespaces (root, and
    CAP_SYS_ADMIN: a default Docker container has not). Probed once, in a child."""
    global _namespaces
    if _namespaces is None:
        if os.geteuid() != 0:
            _namespaces = False
        else:
            probe = (
                "import ctypes,sys;l=ctypes.CDLL(None,use_errno=True);"
                "sys.exit(0 if l.unshare(0x40000000|0x20000000|0x00020000)==0 else 1)"
            )
            done = subprocess.run(
                [sys.executable, "-I", "-S", "-c", probe], check=False, capture_output=True
            )
            _namespaces = done.returncode == 0
    return _namespaces


def default_isolation() -> str:
    """root (namespaces, own uid, cgroup) when possible, else uid (own uid, rlimits) as
    root without namespaces, else user (rlimits and detection only)."""
    if os.geteuid() != 0:
        return "user"
    return "root" if namespaces_available() else "uid"


class ProcessSandbox:
    """Runs candidates as sandboxed child processes (see the module docstring)."""

    name = "process"

    def __init__(self, isolation: str | None = None, libraries: tuple[str, ...] = ()) -> None:
        if isolation not in (None, *ISOLATIONS):
            raise ConfigError(
                f"--isolation must be one of {', '.join(ISOLATIONS)}, got {isolation!r}"
            )
        self.requested = isolation
        self.isolation = isolation or default_isolation()
        #: The task's libraries (checked here; each run copies them from the candidate's).
        self.libraries = tuple(libraries)

    def check(self, program: Program | None = None) -> None:
        if not sys.platform.startswith("linux"):
            raise ConfigError("the process sandbox needs Linux")
        if self.isolation in ("root", "uid") and os.geteuid() != 0:
            raise ConfigError(f"--isolation {self.isolation} needs the harness to run as root")
        if self.isolation == "root" and not namespaces_available():
            raise ConfigError(
                "--isolation root needs namespaces (CAP_SYS_ADMIN); this machine refuses them"
            )
        _python.library_files(self.libraries)  # installed, and files we can carry
        if self.isolation == "uid" and program is not None and program.kind == "python":
            # the base interpreter and its standard library (the task's libraries are
            # copied into the candidate's box: where they are installed does not matter)
            python = _python.interpreter()
            closed = _closed_to_others(python) or _closed_to_others(_python.stdlib())
            if closed is not None:
                raise ConfigError(
                    f"--isolation uid: the candidate's own uid cannot reach Python {python} "
                    f"({closed} is closed to other users); use a Python installed where "
                    "every user can run it, or --isolation root"
                )

    async def start(
        self,
        ctx: RunContext,
        candidate: Candidate,
        name: str,
        env: dict[str, str],
        ready_line: str | None,
        wait: bool,
    ) -> ManagedProcess:
        site = _Site(ctx, candidate, name, self.isolation)
        return await site.start(env, ready_line, wait)


def _closed_to_others(path: Path) -> Path | None:
    """The first folder on the way to ``path`` (or the file itself) another user cannot
    pass (or run), if any."""
    for folder in reversed(path.parents):
        if not folder.stat().st_mode & stat.S_IXOTH:
            return folder
    mode = path.stat().st_mode
    return None if mode & stat.S_IXOTH and mode & stat.S_IROTH else path


__all__ = [
    "LAUNCHER",
    "ProcessSandbox",
    "candidate_links",
    "default_isolation",
    "inbound_links",
    "namespaces_available",
]
