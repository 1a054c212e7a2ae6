"""Which limit the monitor names when a candidate reaches several (``_SiteWatch``), on fakes:
the cgroup and the uid's process count are what a real machine's ``/sys`` and ``/proc`` would
say. The real sandbox's limits are tests/grading/test_graded_runs.py's adversaries."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio

from chaos.sandbox import _site_watch
from chaos.sandbox._site_watch import _SiteWatch
from chaos.sandbox.candidate import CandidateReport, Limits


class _Cgroup:
    """A candidate's cgroup as its files read: full CPU, a few tasks short of its pids.max,
    no fork refused by it (the uid's RLIMIT_NPROC refused them first)."""

    limits_memory = True

    def __init__(self, cpu_s: float, tasks: int) -> None:
        self._cpu, self._tasks = cpu_s, tasks
        self.killed = False

    def oom_kills(self) -> int:
        return 0

    def pids_refused(self) -> int:
        return 0

    def cpu_s(self) -> float:
        return self._cpu

    def tasks(self) -> int:
        return self._tasks

    def kill(self) -> None:
        self.killed = True


class _Uid:
    uid = 123456


def _site(tmp_path: Path, cgroup: _Cgroup) -> Any:
    site: Any = _SiteWatch.__new__(_SiteWatch)
    site.limits = Limits(cpu_s=8.0, processes=256)
    site.report = CandidateReport(service="consumer", sha256="0" * 64)
    site.name = "consumer"
    site.cgroup = cgroup
    site.uid = _Uid()
    site.process = None
    site.flag = tmp_path / "contained"
    site.t0 = 0.0
    site._record = lambda f, value: None
    return site


@pytest.mark.parametrize(
    ("uid_tasks", "reason"),
    [
        (256, "processes"),  # at its RLIMIT_NPROC: forks refused, every process spinning
        (300, "processes"),
        (3, "cpu"),  # an ordinary CPU hog
    ],
)
def test_a_fork_bomb_held_by_its_rlimit_is_contained_for_processes_not_cpu(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, uid_tasks: int, reason: str
) -> None:
    # The uid's tasks outside the cgroup (a zombie not yet reaped, say) count for the rlimit:
    # it refuses with the cgroup below its pids.max, which then counts no refused fork.
    monkeypatch.setattr(_site_watch, "tasks_of", lambda uid: uid_tasks)
    monkeypatch.setattr(_site_watch, "processes_of", lambda uid: [])
    cgroup = _Cgroup(cpu_s=8.1, tasks=min(uid_tasks, 250))
    site = _site(tmp_path, cgroup)

    async def tick() -> None:
        site._check_resources(1)

    trio.run(tick)
    assert [c["reason"] for c in site.report.contained] == [reason]
    assert cgroup.killed
