"""The run's recorder: every operation, fault and observation, in time order, to the trace.

Events are Jepsen-style operations ``{index, time_ns, process, type, f, value, error}``
(see docs/trace-format.md); ``time_ns`` counts from the start of the run. The recorder
keeps them in memory too, for the invariants and for replay's comparison.
"""

from __future__ import annotations

import json
from typing import Any

import trio

from invariants.history import PROXY, SERVICE_PREFIX
from replay.trace import TraceWriter

#: Service output lines starting with this are history operations (``@op {json}``).
OP_PREFIX = "@op "


class Recorder:
    """Appends events to a trace as they happen."""

    def __init__(self, writer: TraceWriter) -> None:
        self.writer = writer
        self.events: list[dict[str, Any]] = []
        self._t0 = trio.current_time()
        self._changed = trio.Event()

    @property
    def count(self) -> int:
        """How many events were recorded so far."""
        return len(self.events)

    async def wait_changed(self) -> None:
        """Until the next event is recorded (settle detection, ``chaos.settle``)."""
        await self._changed.wait()

    def now_ns(self) -> int:
        return int((trio.current_time() - self._t0) * 1e9)

    def record(
        self,
        process: str,
        type: str,
        f: str,
        value: Any = None,
        error: str | None = None,
        **extra: Any,
    ) -> dict[str, Any]:
        event: dict[str, Any] = {
            "time_ns": self.now_ns(),
            "process": process,
            "type": type,
            "f": f,
            "value": value,
            "error": error,
        }
        event.update(extra)
        stored = self.writer.write_event(event)
        self.events.append(stored)
        self._changed.set()
        self._changed = trio.Event()
        return stored

    def log_line(self, service: str, stream: str, line: str) -> None:
        """A line a service printed: an ``@op`` line becomes a history operation of that
        service's process; any other line is a ``log`` event."""
        if line.startswith(OP_PREFIX):
            try:
                op = json.loads(line[len(OP_PREFIX) :])
                kind, f = str(op.pop("type")), str(op.pop("f"))
            except (ValueError, KeyError, TypeError, AttributeError):
                kind = ""
            if kind in ("invoke", "ok", "fail", "info"):
                value = op.pop("value", None)
                error = op.pop("error", None)
                self.record(service, kind, f, value, None if error is None else str(error), **op)
                return
        self.record(f"{SERVICE_PREFIX}{service}", "info", "log", line[:2000], stream=stream)

    def proxy_event(self, event: dict[str, Any]) -> None:
        fields = dict(event)
        name = str(fields.pop("event"))
        self.record(PROXY, "info", name, fields)
