"""A candidate's site in the process sandbox, its state: what ``chaos.sandbox.process``
made for one candidate in one run (folders, uid, cgroup, namespace, box, what the monitor
has seen), the base every part of ``_Site`` works on (``_site_setup``, ``_site_net``,
``_site_watch``; ``_site`` starts and ends it).
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import trio

from chaos.sandbox._box import Box
from chaos.sandbox._cgroup import Cgroup
from chaos.sandbox._detect import BypassDetector
from chaos.sandbox._uids import UidLease
from chaos.sandbox.candidate import Candidate
from chaos.services import (
    ManagedProcess,
    default_run_parent,
    registry,
)
from chaos.services._netns import NetNamespace
from chaos.services.ready import ReadyLine
from invariants.history import SERVICE_PREFIX

if TYPE_CHECKING:
    from chaos.context import RunContext


def _sandbox_dir(name: str) -> Path:
    """A fresh folder for one candidate, written down with the run's registration (so
    ``chaos gc`` removes it if the harness dies) when there is one."""
    registration = registry.current()
    if registration is not None:
        return registration.make_dir(default_run_parent(), f"chaos-sandbox-{name}-")
    return Path(tempfile.mkdtemp(prefix=f"chaos-sandbox-{name}-", dir=default_run_parent()))


class _SiteState:
    """What one candidate's site holds, and what every part of it shares."""

    def __init__(self, ctx: RunContext, candidate: Candidate, name: str, isolation: str) -> None:
        self.ctx = ctx
        self.candidate = candidate
        self.name = name
        self.root = isolation == "root"
        self.isolation = isolation
        self.limits = candidate.limits
        self.report = candidate.report
        self.report.isolation = isolation
        self.dir = _sandbox_dir(name)
        self.status_path = self.dir / "status.jsonl"
        self.flag = self.dir / "contained"
        self.t0 = trio.current_time()
        self.process: ManagedProcess | None = None
        self.cgroup: Cgroup | None = None
        self.uid: UidLease | None = None
        self.netns: NetNamespace | None = None
        self.box = Box(self.dir / "box")
        self.box_mounted = False
        #: Bytes of the box's tmpfs in use before the candidate wrote anything.
        self.box_base = 0
        self.detector: BypassDetector | None = None
        self.tripwires: list[tuple[trio.socket.SocketType, str]] = []
        #: Links whose upstream the candidate serves (tenants' API): dialled into it.
        self.inbound: list[str] = []
        self.gone: set[int] = set()
        self.exited: set[int] = set()
        self.status_offset = 0
        self.start_times: dict[int, float] = {}
        self.given_up: set[int] = set()
        #: Starts whose boost (``START_NICE``) the harness has taken back.
        self.unboosted: set[int] = set()
        #: When the monitor first saw each start (its boost lasts ``ready_s`` at most).
        self.boost_seen: dict[int, float] = {}
        #: The candidate's ready line (set when it starts).
        self.ready_at: ReadyLine | None = None
        self.cpu_seen: dict[tuple[int, int], float] = {}
        self.lines = 0
        self.stopping = False
        self.stderr_tail: list[str] = []

    def now(self) -> float:
        return trio.current_time() - self.t0

    def _record(self, f: str, value: Any) -> None:
        self.ctx.recorder.record(f"{SERVICE_PREFIX}{self.name}", "info", f, value)
