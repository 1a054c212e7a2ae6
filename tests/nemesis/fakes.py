"""A fake run for the nemesis: links, subjects, services and a recorder, all in memory.

Time is trio's (a ``MockClock`` in the tests), so every apply and heal has an exact time.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import trio

from chaos.nemesis import Subject
from faults.model import FaultEvent, FaultSchedule
from ground.errors import ConfigError


@dataclass(frozen=True)
class FakeToxic:
    name: str
    type: str
    stream: str
    attributes: dict[str, Any]


class FakeLink:
    def __init__(self) -> None:
        self.connection_count = 0
        self.bytes_total = 0
        self.hooks: list[Callable[[Any], None]] = []
        self.toxic_log: list[tuple[float, str, str]] = []  # (time, added|removed, name)
        self._toxics: dict[str, FakeToxic] = {}

    def on_connection(self, hook: Callable[[Any], None]) -> Callable[[], None]:
        self.hooks.append(hook)
        return lambda: self.hooks.remove(hook)

    def connect(self) -> None:
        self.connection_count += 1
        for hook in list(self.hooks):
            hook(object())

    def add_toxic(
        self, type: str, *, name: str, stream: str, attributes: dict[str, Any]
    ) -> FakeToxic:
        toxic = FakeToxic(name, type, stream, dict(attributes))
        self._toxics[name] = toxic
        self.toxic_log.append((trio.current_time(), "added", name))
        return toxic

    def toxics(self) -> Sequence[FakeToxic]:
        return list(self._toxics.values())

    def remove_toxic(self, name: str) -> None:
        del self._toxics[name]
        self.toxic_log.append((trio.current_time(), "removed", name))


class FakeSkew:
    def __init__(self) -> None:
        self.offsets: list[tuple[float, float]] = []  # (time, offset)

    def set_offset(self, seconds: float) -> None:
        self.offsets.append((trio.current_time(), seconds))


class FakeService:
    """A service whose restart takes ``restart_s`` of (virtual) time."""

    def __init__(self, name: str, *, skewable: bool = True, restart_s: float = 0.1) -> None:
        self.name = name
        self.pid: int | None = 100
        self.faketime = FakeSkew() if skewable else None
        self.restart_s = restart_s
        self.supervised = False
        self.restart_error: Exception | None = None
        self.killed_while_starting = False
        self.calls: list[tuple[float, str]] = []

    async def kill(self) -> None:
        self.calls.append((trio.current_time(), "kill"))
        self.pid = None

    async def restart(self) -> bool:
        await trio.sleep(self.restart_s)
        if self.restart_error is not None:
            self.calls.append((trio.current_time(), "restart failed"))
            raise self.restart_error
        if self.killed_while_starting:
            self.calls.append((trio.current_time(), "restart interrupted"))
            return False
        self.pid = 101
        self.calls.append((trio.current_time(), "restart"))
        return True

    def pause(self) -> None:
        self.calls.append((trio.current_time(), "pause"))

    def resume(self) -> None:
        self.calls.append((trio.current_time(), "resume"))


@dataclass
class FakeRecorder:
    events: list[dict[str, Any]] = field(default_factory=list)

    def record(
        self,
        process: str,
        type: str,
        f: str,
        value: Any = None,
        error: str | None = None,
        **extra: Any,
    ) -> dict[str, Any]:
        event = {"t": trio.current_time(), "process": process, "type": type, "f": f}
        event.update(value=value, error=error, **extra)
        self.events.append(event)
        return event

    def phases(self, fault_id: str) -> list[tuple[float, str]]:
        """(time, phase) of each nemesis op of one fault."""
        return [
            (e["t"], e["value"]["phase"])
            for e in self.events
            if e["process"] == "nemesis" and e["value"]["fault_id"] == fault_id
        ]


class FakeRun:
    """Satisfies ``chaos.nemesis.NemesisContext``."""

    def __init__(self) -> None:
        self.workload_t0 = trio.current_time()
        self.recorder = FakeRecorder()
        self.links = {name: FakeLink() for name in ("db", "consumer-nats", "producer-nats")}
        self.subjects = {
            "orders": Subject("orders.new", "ORDERS", "consumer-nats", "producer-nats")
        }
        self.services = {
            "consumer": FakeService("consumer"),
            "plain": FakeService("plain", skewable=False),
        }
        self.delivered: dict[str, int] = {}
        self._delivery = trio.Event()

    def link(self, name: str) -> FakeLink:
        if name not in self.links:
            raise ConfigError(f"no link {name!r} in this run")
        return self.links[name]

    def subject(self, name: str) -> Subject:
        if name not in self.subjects:
            raise ConfigError(f"no subject {name!r} in this scenario")
        return self.subjects[name]

    def service(self, name: str) -> FakeService:
        if name not in self.services:
            raise ConfigError(f"no service {name!r} in this run")
        return self.services[name]

    def deliver(self, subject: str) -> None:
        self.delivered[subject] = self.delivered.get(subject, 0) + 1
        self._delivery.set()
        self._delivery = trio.Event()

    async def wait_deliveries(self, subject: str, n: int) -> None:
        while self.delivered.get(subject, 0) < n:
            await self._delivery.wait()


def fault(
    kind: str,
    target: str,
    trigger: dict[str, Any],
    *,
    id: str = "f0",
    duration_s: float | None = None,
    **params: Any,
) -> FaultEvent:
    return FaultEvent.from_dict(
        {
            "id": id,
            "kind": kind,
            "target": target,
            "params": params,
            "trigger": trigger,
            "duration_s": duration_s,
        }
    )


def at(offset_s: float) -> dict[str, Any]:
    return {"type": "at_time", "offset_s": offset_s}


def schedule(*events: FaultEvent) -> FaultSchedule:
    return FaultSchedule(seed=0, space_hash="test", events=events)
