"""Which start of a supervised service printed its ready line: one bookkeeping for every
service a run starts (``RunContext.start_service``, ``start_container``, the candidate's
sandbox).

A service restarted by a crash fault prints its ready line once per start, and a start killed
before it was ready prints none, so counting lines would fall behind the starts: the ready
line remembers the start (``starts`` of the service, 1 before it exists) whose line it saw
last, and a start is ready once that is it or a later one.

::

    ready = ReadyLine("listening")
    def sink(service, stream, line):
        ready.saw(line)                       # before anything else reads the line
    service = await open_process_service(..., log_sink=sink, ready=ready.probe())
    ready.attach(service)
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol


class Started(Protocol):
    @property
    def starts(self) -> int: ...


class ReadyLine:
    """The ready line of one service (``None``: it has none, and is ready once started)."""

    def __init__(self, line: str | None) -> None:
        self.line = line
        #: The start whose ready line was seen last (0: none yet).
        self.seen = 0
        self._service: Started | None = None

    def attach(self, service: Started) -> None:
        """The service, once it exists (its first start may print before it is returned)."""
        self._service = service

    @property
    def start(self) -> int:
        """The service's current start (1 before it is attached)."""
        return self._service.starts if self._service is not None else 1

    def saw(self, text: str) -> bool:
        """Note one line of the service's output; True if it holds the ready line."""
        if self.line is not None and self.line in text:
            self.seen = self.start
            return True
        return False

    def ready(self, start: int | None = None) -> bool:
        """Whether ``start`` (default: the current one) has printed its ready line."""
        return self.line is None or self.seen >= (self.start if start is None else start)

    def probe(self) -> Callable[[], Awaitable[bool]] | None:
        """The service's ``ready`` probe: None when there is no ready line to wait for."""
        if self.line is None:
            return None

        async def probe() -> bool:
            return self.ready()

        return probe


__all__ = ["ReadyLine"]
