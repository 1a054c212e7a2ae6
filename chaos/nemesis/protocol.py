"""What the nemesis needs from a run: a small protocol ``RunContext`` satisfies.

The nemesis reaches the run only through ``NemesisContext``, so its triggers and lifecycle
are tested on a fake context under trio's ``MockClock`` (tests/nemesis/), with no services.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(frozen=True)
class Subject:
    """A message subject faults can target: where it is published and consumed."""

    nats_subject: str
    stream: str
    consume_link: str
    publish_link: str


class NamedToxic(Protocol):
    @property
    def name(self) -> str: ...


class Link(Protocol):
    """A proxied link (``faults.proxy.Proxy``): counts connections and bytes, holds toxics."""

    @property
    def connection_count(self) -> int: ...

    @property
    def bytes_total(self) -> int: ...

    def on_connection(self, hook: Callable[[Any], None]) -> Callable[[], None]: ...

    def add_toxic(
        self, type: str, *, name: str, stream: str, attributes: dict[str, Any]
    ) -> NamedToxic: ...

    def toxics(self) -> Sequence[NamedToxic]: ...

    def remove_toxic(self, name: str) -> None: ...


class Skew(Protocol):
    """A service's libfaketime offset (``chaos.services.SkewFile``)."""

    def set_offset(self, seconds: float) -> None: ...


class Service(Protocol):
    """A service under test (``chaos.services.ManagedProcess``)."""

    @property
    def name(self) -> str: ...

    @property
    def pid(self) -> int | None: ...

    @property
    def faketime(self) -> Skew | None: ...

    async def kill(self) -> None: ...

    async def restart(self) -> bool | None:
        """Kill and start again; False when a later kill ended the start before it was
        ready (that kill's own heal starts it next)."""
        ...

    def pause(self) -> None: ...

    def resume(self) -> None: ...


class Recording(Protocol):
    """Adds an operation to the run's history (``chaos.recorder.Recorder``)."""

    def record(
        self,
        process: str,
        type: str,
        f: str,
        value: Any = None,
        error: str | None = None,
        **extra: Any,
    ) -> object: ...


class NemesisContext(Protocol):
    """The run as the nemesis sees it: targets by name, delivery waits, time, recording."""

    @property
    def workload_t0(self) -> float:
        """When the workload started (trio time): ``at_time`` offsets count from it."""
        ...

    @property
    def recorder(self) -> Recording: ...

    def link(self, name: str) -> Link: ...

    def subject(self, name: str) -> Subject: ...

    def service(self, name: str) -> Service: ...

    async def wait_deliveries(self, subject: str, n: int) -> None:
        """Until the ``n``-th message has been delivered on ``subject``."""
        ...
