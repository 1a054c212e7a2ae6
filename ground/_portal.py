"""A portal: one trio loop in a thread of its own, driven from synchronous code.

::

    caller's thread (pytest, Hypothesis)          portal thread: trio.run(...)
      portal.run(afn, *args)  ── trio.from_thread ──►  await afn(*args)  (a task of its own)
      portal.enter(async_cm)  ─────────────────────►  async with async_cm: ... (held open)
      portal.close()          ─────────────────────►  cancel what is left, trio.run returns

Hypothesis runs a test synchronously, one example after another, and its stateful runner
calls each rule as a plain function; a chaos run is async and must stay alive between those
calls (services up, workload running). The portal keeps one trio loop alive for as long as
the caller wants it, and each synchronous call runs one coroutine on it and waits for it
(``trio.from_thread``, trio's public API). Services started on the loop are spawned from the
portal's thread, which lives until ``close``: their parent-death signal fires when it ends,
not before (``chaos.services._spawn``).

Exceptions of a call are raised in the caller's thread. Ctrl-C reaches the caller's (main)
thread; ``close`` (or leaving ``with Portal() as portal``) cancels whatever is still running
on the loop and waits for it to clean up.
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from types import TracebackType
from typing import Any, Generic, TypeVar

import outcome
import trio

T = TypeVar("T")


class PortalClosed(RuntimeError):
    """The portal's loop is not running (closed, or it ended on an error)."""


class Held(Generic[T]):
    """An async context manager held open on a portal's loop: ``value`` is what it entered as;
    ``exit()`` leaves it (re-raising, in the caller's thread, what its exit raised)."""

    def __init__(self, portal: Portal, value: T, leave: trio.Event, left: trio.Event) -> None:
        self.value = value
        self._portal, self._leave, self._left = portal, leave, left
        self.error: BaseException | None = None

    def exit(self) -> None:
        async def leave() -> None:
            self._leave.set()
            await self._left.wait()

        if not self._left.is_set():
            self._portal.run(leave)
        if self.error is not None:
            error, self.error = self.error, None
            raise error


class Portal:
    """A trio loop in a daemon thread; ``run`` / ``run_sync`` / ``enter`` call into it."""

    def __init__(self, name: str = "chaos-portal") -> None:
        self._name = name
        self._token: trio.lowlevel.TrioToken | None = None
        self._stop: trio.Event | None = None
        self._thread: threading.Thread | None = None
        self._result: outcome.Outcome[None] | None = None
        self._nursery: trio.Nursery | None = None

    # -- lifecycle --------------------------------------------------------------------------

    def start(self) -> Portal:
        """Start the loop (once); returns when it accepts calls."""
        if self._thread is not None:
            return self
        ready = threading.Event()
        self._thread = threading.Thread(
            target=self._thread_main, args=(ready,), name=self._name, daemon=True
        )
        self._thread.start()
        ready.wait()
        if self._token is None:  # it ended before it was ready
            self._raise_result()
        return self

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive() and self._token is not None

    def _thread_main(self, ready: threading.Event) -> None:
        try:
            self._result = outcome.capture(trio.run, self._main, ready)
        finally:
            self._token = None
            ready.set()

    async def _main(self, ready: threading.Event) -> None:
        self._stop = trio.Event()
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            self._token = trio.lowlevel.current_trio_token()
            ready.set()
            await self._stop.wait()
            nursery.cancel_scope.cancel()

    def close(self) -> None:
        """Cancel whatever still runs on the loop, wait for it to end; re-raise its error."""
        thread = self._thread
        if thread is None:
            return
        if self._token is not None and self._stop is not None:
            try:
                trio.from_thread.run_sync(self._stop.set, trio_token=self._token)
            except trio.RunFinishedError:
                pass
        thread.join()
        self._thread = None
        self._raise_result()

    def _raise_result(self) -> None:
        result, self._result = self._result, None
        if result is not None:
            result.unwrap()

    def __enter__(self) -> Portal:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- calls ------------------------------------------------------------------------------

    def _live_token(self) -> trio.lowlevel.TrioToken:
        if self._token is None:
            raise PortalClosed(f"the {self._name} loop is not running")
        return self._token

    def run(self, afn: Callable[..., Awaitable[T]], *args: Any) -> T:
        """``await afn(*args)`` on the loop; its result (or exception) here."""
        try:
            return trio.from_thread.run(afn, *args, trio_token=self._live_token())
        except trio.RunFinishedError:
            raise PortalClosed(f"the {self._name} loop ended") from None

    def run_sync(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` on the loop's thread (to read what the loop's tasks change)."""
        try:
            return trio.from_thread.run_sync(fn, *args, trio_token=self._live_token())
        except trio.RunFinishedError:
            raise PortalClosed(f"the {self._name} loop ended") from None

    def enter(self, cm: AbstractAsyncContextManager[T]) -> Held[T]:
        """Enter ``cm`` on the loop and keep it open until ``Held.exit()`` (or ``close``)."""

        async def start() -> Held[T]:
            assert self._nursery is not None
            held: Held[T] = await self._nursery.start(self._hold, cm)
            return held

        return self.run(start)

    async def _hold(
        self, cm: AbstractAsyncContextManager[T], task_status: trio.TaskStatus[Held[T]]
    ) -> None:
        leave, left = trio.Event(), trio.Event()
        held: Held[T] | None = None
        try:
            async with cm as value:
                held = Held(self, value, leave, left)
                task_status.started(held)
                await leave.wait()
        except BaseException as exc:  # entering raises to ``enter``'s caller: nursery.start
            if held is None or isinstance(exc, trio.Cancelled):
                raise
            held.error = exc  # an error on leaving: ``Held.exit`` raises it
        finally:
            left.set()
