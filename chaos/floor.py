"""The run floor from synchronous code: runs one at a time, in this process, on warm services.

::

    RunFloor.run(options)  (pytest test, Hypothesis example; any thread)
        └─ portal thread (ground._portal): one trio loop for the floor's whole life
             registered run dir "chaos-floor-*"
               ├─ PostgreSQL + nats-server, started at the first run of a scenario that wants
               │  them (``Scenario.warm_services``), kept: ``chaos.warm.WarmServices``
               ├─ zygotes of ``Scenario.zygote_preload`` (``chaos.services.zygote``)
               └─ per run: ``check_clean``, then ``run_scenario`` with a fresh database and
                  stream on the kept servers, the run's own services forked from the zygote

A Hypothesis test makes one run per example, dozens per test; a cold run pays for a
PostgreSQL and nats-server start and stop, and for an interpreter per service, every time.
The floor pays for them once, as a warm worker of ``chaos sweep`` does (``chaos.warm``), but
in the test's own process, so a run's ``RunResult`` (history, final state) comes back whole
and a live run (``RunOptions.driver``: ``chaos.hypothesis.ChaosMachine``) can be driven step
by step from the test's thread. ``CHAOS_WARM=0`` (or ``RunFloor(warm=False)``) runs cold.

``shared_floor()`` is the process's floor, started at its first use and closed at exit (the
pytest plugin closes it at the end of the session). If the process is killed, the servers die
with the portal's thread (parent-death signal) and the next harness command reaps the dir.
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

import trio

from chaos import warm as warm_workers
from chaos.run import RunOptions, RunResult, run_scenario
from chaos.services import open_run_dir, zygote
from ground._portal import Held, Portal
from ground._shared import ProcessShared
from ground.errors import ServiceError

T = TypeVar("T")

GetZygote = Callable[[Sequence[str]], Awaitable[zygote.Zygote | None]]


class _Kept:
    """What the floor keeps between runs, on its loop: the warm servers and the zygotes."""

    def __init__(
        self, run_dir: Path, nursery: trio.Nursery, zygotes: GetZygote, warm: bool
    ) -> None:
        self.run_dir, self.nursery, self.zygotes, self.warm = run_dir, nursery, zygotes, warm
        self.services: warm_workers.WarmServices | None = None
        self._retire = trio.Event()
        self._gone = trio.Event()
        self._lock = trio.Lock()
        #: Runs made, and how many of them on the kept servers.
        self.runs = 0
        self.warm_runs = 0

    async def _keep(self, task_status: trio.TaskStatus[None]) -> None:
        self._retire, self._gone = trio.Event(), trio.Event()
        try:
            async with warm_workers.open_warm_services(self.run_dir) as services:
                self.services = services
                task_status.started()
                await self._retire.wait()
        finally:
            self.services = None
            self._gone.set()

    async def _clean_services(self) -> warm_workers.WarmServices:
        """The kept servers, checked clean; servers an earlier run left dirty are replaced."""
        for attempt in range(2):
            if self.services is None:
                await self.nursery.start(self._keep)
            assert self.services is not None
            try:
                await self.services.check_clean()
                return self.services
            except ServiceError:
                if attempt:
                    raise
                self._retire.set()  # dirty: stop them, start fresh ones
                await self._gone.wait()
        raise AssertionError("unreachable")

    async def run(self, options: RunOptions) -> RunResult:
        async with self._lock:  # one run at a time on the kept servers
            scenario = options.scenario
            services = None
            if self.warm and scenario.warm_services and options.warm is None:
                services = await self._clean_services()
            forks = await self.zygotes(scenario.zygote_preload) if self.warm else None
            self.runs += 1
            self.warm_runs += services is not None
            with zygote.using(forks):
                return await run_scenario(replace(options, warm=services or options.warm))


@asynccontextmanager
async def _open_kept(warm: bool) -> AsyncIterator[_Kept]:
    with open_run_dir(prefix="chaos-floor-") as run_dir:
        async with zygote.open_zygotes(run_dir) as zygotes, trio.open_nursery() as nursery:
            kept = _Kept(run_dir, nursery, zygotes, warm)
            try:
                yield kept
            finally:
                nursery.cancel_scope.cancel()  # stops the kept servers


class RunFloor:
    """Runs scenarios from synchronous code, one at a time, on servers kept between runs."""

    def __init__(self, *, warm: bool | None = None) -> None:
        #: Whether runs use the kept servers and zygotes (default: unless ``CHAOS_WARM=0``).
        self.warm = warm_workers.enabled() if warm is None else warm
        self._portal: Portal | None = None
        self._kept: Held[_Kept] | None = None
        self._start_lock = threading.Lock()

    @property
    def portal(self) -> Portal:
        """The floor's loop (started at first use): live runs are driven through it."""
        with self._start_lock:
            if self._portal is None or not self._portal.running:
                portal = Portal("chaos-floor").start()
                try:
                    self._kept = portal.enter(_open_kept(self.warm))
                except BaseException:
                    portal.close()
                    raise
                self._portal = portal
            return self._portal

    def _kept_state(self) -> _Kept:
        self.portal  # noqa: B018  (starts the floor)
        assert self._kept is not None
        return self._kept.value

    def run(self, options: RunOptions) -> RunResult:
        """One run, start to verdict (on the kept servers when the scenario allows)."""
        return self.portal.run(self._kept_state().run, options)

    async def run_async(self, options: RunOptions) -> RunResult:
        """``run`` for code already on the floor's loop (a live run's task)."""
        return await self._kept_state().run(options)

    @property
    def runs(self) -> tuple[int, int]:
        """(runs made, runs made on the kept servers)."""
        if self._kept is None:
            return 0, 0
        return self._kept.value.runs, self._kept.value.warm_runs

    def close(self) -> None:
        """Stop the kept servers and the loop (a run in progress is cancelled first)."""
        with self._start_lock:
            portal, held = self._portal, self._kept
            self._portal = self._kept = None
        if portal is None:
            return
        try:
            if held is not None and portal.running:
                held.exit()
        finally:
            portal.close()

    def __enter__(self) -> RunFloor:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


_shared: ProcessShared[RunFloor] = ProcessShared(RunFloor)


def shared_floor() -> RunFloor:
    """This process's floor (its servers start at the first run); closed at exit."""
    return _shared.get()


def close_shared_floor() -> None:
    """Stop this process's floor, if it was started (the next use starts a new one)."""
    _shared.close()


__all__ = ["RunFloor", "close_shared_floor", "shared_floor"]
