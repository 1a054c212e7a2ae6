"""The run's recorder: every operation, fault and observation, in time order, to the trace.

Events are Jepsen-style operations ``{index, time_ns, process, type, f, value, error}``
(see docs/trace-format.md); ``time_ns`` counts from the start of the run. The recorder
keeps them in memory too, for the invariants and for replay's comparison.
"""

from __future__ import annotations

import json
from typing import Any

import trio

from ground.errors import ConfigError
from invariants.history import PROXY, SERVICE_PREFIX
from replay.trace import TraceWriter

#: Service output lines starting with this are history operations (``@op {json}``).
OP_PREFIX = "@op "
#: The most ``log`` lines recorded of one harness service in a run, and the most proxy
#: observations (connections opened and closed, deliveries): past them they are counted, not
#: recorded. A program under test can make a server print without end (``RAISE LOG`` in a
#: loop: 300 MB of trace and a gigabyte of the harness's memory in 20 s) or open connections
#: without end; an honest run records a few hundred of each. Operations (``@op`` lines, the
#: evidence) are never dropped. The candidate's own output has its own cap (the sandbox's).
MAX_SERVICE_LOG_LINES = 20_000
MAX_PROXY_EVENTS = 100_000
#: The integers a trace holds (msgpack's): past them an integer is kept as its digits.
_INT_MIN, _INT_MAX = -(2**63), 2**64 - 1


def storable(value: Any) -> Any:
    """``value`` as a trace can hold it: an integer msgpack cannot (past 64 bits) becomes
    its digits, a string with lone surrogates (JSON's ``"\\ud800"``) their backslash escapes;
    maps, lists and the rest as they are. Such values come from what a program under test
    sent (a fencing token of 2**64, a note id no UTF-8 can hold) through a harness service
    that recorded it: kept as text, a checker that wants a number or a note finds none and
    fails the seed, where the trace writer's refusal was a harness error ("the machine is
    broken", exit 3) that any candidate could cause at will."""
    if isinstance(value, bool) or value is None or isinstance(value, float):
        return value
    if isinstance(value, int):
        return value if _INT_MIN <= value <= _INT_MAX else str(value)
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return value.encode("utf-8", "backslashreplace").decode("utf-8")
        return value
    if isinstance(value, dict):
        return {storable(k): storable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [storable(v) for v in value]
    return value


class Recorder:
    """Appends events to a trace as they happen."""

    def __init__(self, writer: TraceWriter) -> None:
        self.writer = writer
        self.events: list[dict[str, Any]] = []
        self._t0 = trio.current_time()
        self._changed = trio.Event()
        self._log_lines: dict[str, int] = {}
        self._proxy_events = 0

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
        try:
            stored = self.writer.write_event(event)
        except ConfigError:
            # a value the trace cannot hold, from a program under test: kept as text
            stored = self.writer.write_event(storable(event))
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
        count = self._log_lines[service] = self._log_lines.get(service, 0) + 1
        if count > MAX_SERVICE_LOG_LINES + 1:
            return
        if count == MAX_SERVICE_LOG_LINES + 1:
            line = f"(output truncated after {MAX_SERVICE_LOG_LINES} lines)"
        self.record(f"{SERVICE_PREFIX}{service}", "info", "log", line[:2000], stream=stream)

    def proxy_event(self, event: dict[str, Any]) -> None:
        self._proxy_events += 1
        if self._proxy_events > MAX_PROXY_EVENTS + 1:
            return
        fields = dict(event)
        name = str(fields.pop("event"))
        if self._proxy_events == MAX_PROXY_EVENTS + 1:
            name, fields = "truncated", {"after": MAX_PROXY_EVENTS}
        self.record(PROXY, "info", name, fields)
