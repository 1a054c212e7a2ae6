"""Warm workers kept across grades in one process: a trainer's reward loop.

::

    chaos.grade(...) ──► GradePool (an Executor) ── portal thread: one trio loop ──►
      chaos.grade(...)     the grade's own loop         LocalExecutor.session: WarmPool
      (threads at once)    waits in a worker thread       warm workers, kept PostgreSQL and
                                                          nats-server each, between calls

``chaos.grade`` runs its graded runs on this process's ``GradePool`` (``shared_pool()``): a
local executor session whose warm workers live on a trio loop of their own
(``ground._portal``) from the first grade to the process's exit, so a second grade pays no
start-up: no interpreter, no PostgreSQL or nats-server start. Each run still starts its
candidate fresh in its sandbox, on a database, stream, roles and NATS users of its own that
are dropped when it ends (``chaos.warm``); a worker checks that before every run.

Many grades at once (threads, or tasks of one loop: a batch of rollouts) share the workers
fairly: each grade's runs go at most ``jobs`` at a time, and the pool serves the waiting runs
first come, first served, so concurrent grades take turns; every run carries its own
candidate (``RunSpec.candidate``) and trace folder, so their runs never mix.

The shared pool is closed at exit (``atexit``; ``close_shared_pool()`` closes it earlier).
Its workers carry a parent-death signal tied to the pool's thread: if the process is killed,
they stop their servers, and the next harness command (or ``chaos gc``) removes their dirs.
A grade cancelled (Ctrl-C) cancels its runs on the pool and waits for them.
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable, Sequence
from types import TracebackType
from typing import Any

import trio

from chaos.executor import LocalExecutor, OnOutcome, RunOutcome, RunSpec
from ground._portal import Held, Portal, PortalClosed
from ground._shared import ProcessShared

#: At most this many warm workers (a grade's ``--jobs`` is at most 64); they start when
#: first needed, so the pool holds as many as the grades have asked for at once.
POOL_SIZE = 64

_Batch = Callable[..., Awaitable[list[RunOutcome]]]


class GradePool:
    """An ``Executor`` whose warm workers are kept across calls (``chaos.executor``)."""

    kind = "local"

    def __init__(self, size: int = POOL_SIZE) -> None:
        self.size = size
        self._executor = LocalExecutor(warm=True)
        self._portal: Portal | None = None
        self._held: Held[_Batch] | None = None
        self._lock = threading.Lock()

    def _open(self) -> tuple[Portal, _Batch]:
        with self._lock:
            if self._portal is None or not self._portal.running or self._held is None:
                portal = Portal("chaos-grade-pool").start()
                try:
                    session = self._executor.session(1, warm_pool=True, pool_size=self.size)
                    self._held = portal.enter(session)
                except BaseException:
                    portal.close()
                    raise
                self._portal = portal
            return self._portal, self._held.value

    @property
    def workers(self) -> int:
        """Warm workers started so far (a replaced worker counts again)."""
        pool = self._executor.pool
        return 0 if pool is None else pool.started

    async def __call__(
        self, specs: Sequence[RunSpec], jobs: int, progress: OnOutcome | None = None
    ) -> list[RunOutcome]:
        portal, run_batch = await trio.to_thread.run_sync(self._open)
        scopes: list[trio.CancelScope] = []

        async def on_pool() -> list[RunOutcome]:
            with trio.CancelScope() as scope:
                scopes.append(scope)
                return await run_batch(specs, progress, jobs=jobs)
            return []  # cancelled: its caller was

        try:
            return await trio.to_thread.run_sync(portal.run, on_pool, abandon_on_cancel=True)
        except trio.Cancelled:
            with trio.CancelScope(shield=True):
                if scopes:
                    try:
                        await trio.to_thread.run_sync(portal.run_sync, scopes[0].cancel)
                    except PortalClosed:
                        pass
            raise

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "run_timeout_s": None, "warm": True, "shared": True}

    def close(self) -> None:
        """Stop every worker and its servers (a grade still running is cancelled first)."""
        with self._lock:
            portal, held = self._portal, self._held
            self._portal = self._held = None
        if portal is None:
            return
        try:
            if held is not None and portal.running:
                held.exit()
        finally:
            portal.close()

    def __enter__(self) -> GradePool:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


_shared: ProcessShared[GradePool] = ProcessShared(GradePool)


def shared_pool() -> GradePool:
    """This process's pool (its workers start at the first grade); closed at exit."""
    return _shared.get()


def close_shared_pool() -> None:
    """Stop this process's pool, if it was started (the next grade starts a new one)."""
    _shared.close()


__all__ = ["GradePool", "close_shared_pool", "shared_pool"]
