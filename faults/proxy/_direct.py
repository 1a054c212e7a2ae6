"""The empty-chain fast path: forward bytes in a worker thread, outside the event loop.

A direction with no toxic needs no scheduling, timers or chunk boundaries, only
``recv > send`` as fast as the kernel allows. A trio task pays the scheduler and the I/O
manager on every hop (about 3x the CPU of a blocking loop here), so this path runs a plain
``poll > read > write`` loop in a thread. The event loop stays in charge: ``wake()``
(called when a toxic arrives or the connection closes) makes the thread return at once,
and data it read after a toxic arrived is handed back so the chain sees it.
"""

from __future__ import annotations

import os
import select
import time
from dataclasses import dataclass
from typing import Literal

import trio

#: Read sizes adapt between these bounds (no toxic sees them).
READ_MIN = 64 * 1024
READ_MAX = 1024 * 1024

_POLL_IN = select.POLLIN | select.POLLPRI

#: Threads are cheap next to connections; trio's default limiter (40) would cap proxies.
_LIMITER = trio.CapacityLimiter(100_000)


@dataclass(slots=True)
class Outcome:
    """Why the thread returned: ``eof``, ``woken`` (look at the flags), ``handover`` (data
    read after the direction left direct mode), or ``error`` (an ``OSError``)."""

    kind: Literal["eof", "woken", "handover", "error"]
    data: bytes = b""
    error: OSError | None = None


class DirectPump:
    """Moves bytes ``src_fd -> dst_fd`` in a thread while ``active()`` holds."""

    def __init__(self, src_fd: int, dst_fd: int, busy_poll_s: float = 0.0) -> None:
        self._src = src_fd
        self._dst = dst_fd
        self._busy_poll_s = busy_poll_s
        self._wake = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self.bytes = 0
        #: Forward while this holds; cleared (then ``wake()``) when a toxic arrives.
        self.active = True
        #: Set when the connection closes: even a half-done write stops.
        self.closing = False

    def wake(self) -> None:
        """Make a running thread return soon (from any thread)."""
        if self._wake >= 0:
            os.eventfd_write(self._wake, 1)

    def stop(self) -> None:
        """The connection is closing: return now, whatever the thread is doing."""
        self.closing = True
        self.active = False
        self.wake()

    def close(self) -> None:
        """Release the wake-up descriptor (once the thread has returned)."""
        if self._wake >= 0:
            os.close(self._wake)
            self._wake = -1

    async def run(self) -> Outcome:
        """Forward until EOF, an error, a wake-up or a hand-over. Never abandons the thread:
        the sockets must outlive it (their descriptors could be reused otherwise)."""
        return await trio.to_thread.run_sync(self._loop, limiter=_LIMITER)

    def _drain_wake(self) -> None:
        try:
            os.eventfd_read(self._wake)
        except BlockingIOError:
            pass

    def _poller(self, fd: int, events: int) -> select.poll:
        poller = select.poll()
        poller.register(fd, events)
        poller.register(self._wake, select.POLLIN)
        return poller

    def _wait(self, poller: select.poll, fd: int) -> bool:
        """Block until ``fd`` is ready; False if woken instead.

        With a busy-poll budget, first poll without blocking for that long: a reply that
        arrives meanwhile is forwarded without the cost of waking a sleeping thread (tens of
        µs on an idle VM), at the price of that much CPU per wait.
        """
        events: list[tuple[int, int]] = []
        if self._busy_poll_s:
            deadline = time.perf_counter() + self._busy_poll_s
            events = poller.poll(0)
            while not events and time.perf_counter() < deadline:
                events = poller.poll(0)
        while True:
            ready = [f for f, _ in events or poller.poll()]
            events = []
            if self._wake in ready:
                self._drain_wake()
                return False
            if fd in ready:
                return True

    def _loop(self) -> Outcome:
        src, dst = self._src, self._dst
        readable = self._poller(src, _POLL_IN)
        writable = self._poller(dst, select.POLLOUT)
        size = READ_MIN
        while True:
            if not self.active:
                return Outcome("woken")
            # Poll first: on request/response traffic a read would mostly find nothing.
            if not self._wait(readable, src):
                continue
            try:
                data = os.read(src, size)
            except BlockingIOError:
                continue
            except OSError as exc:
                return Outcome("error", error=exc)
            if not data:
                return Outcome("eof")
            self.bytes += len(data)
            if not self.active:
                return Outcome("handover", data)
            if len(data) == size:
                size = min(size * 2, READ_MAX)
            elif len(data) < size // 4:
                size = max(size // 2, READ_MIN)
            error = self._write_all(writable, dst, data)
            if error is not None:
                return Outcome("error", error=error)

    def _write_all(self, writable: select.poll, dst: int, data: bytes) -> OSError | None:
        view = memoryview(data)
        while view:
            try:
                view = view[os.write(dst, view) :]
            except BlockingIOError:
                # Woken mid-write: only a closing connection stops a write half done.
                if not self._wait(writable, dst) and self.closing:
                    return OSError("connection closing")
            except OSError as exc:
                return exc
        return None
