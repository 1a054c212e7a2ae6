"""Logical events: what a replay must reproduce, stripped of times, pids, ports and log lines.

Each recorded event maps to at most one ``LogicalEvent`` in a named *stream*; events of one
stream happen in an order the run determines, events of different streams race::

    producer / consumer ...     workload ops       key (type, f, value minus clock readings,
                                                   extra @op fields)
    nemesis <fault id>          apply/heal/...     key (f, phase, fault id, target)
    proxy <link> <event>        message level      key (proxy, op, subject, seq, delivery)
    service:<name>              start / exit       key (f, expected)
    harness                     milestones         key (f, phase, settled)

Log lines, connection events, toxicity draws, pids, ports and error texts are left out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from faults.proxy.nats_protocol import parse_ack_subject
from invariants.history import HARNESS, NEMESIS, PROXY, SERVICE_PREFIX

#: Proxy events that describe what happened to a message (not to a connection).
MESSAGE_EVENTS = ("frame_dropped", "frame_duplicated", "nats_delivery")
_STANDARD = {"index", "time_ns", "process", "type", "f", "value", "error"}
_NOISE = {"pid", "port", "conn", "stream", "attempt_ns", "elapsed_s", "elapsed_ms"}
#: Keys of an op's value that hold clock readings: a replay reads another clock, so they are
#: left out of the comparison (``at``, ``until``, ``expires_at``, ``deadline_ns``, ...).
_CLOCK_KEYS = frozenset({"at", "until", "now", "time", "deadline"})
_CLOCK_SUFFIXES = ("_at", "_ns", "_ms", "_s", "_time", "_until")


def is_clock_key(key: object) -> bool:
    """True for a value key that holds a clock reading (see ``_CLOCK_KEYS``)."""
    return isinstance(key, str) and (key in _CLOCK_KEYS or key.endswith(_CLOCK_SUFFIXES))


def _comparable(value: Any) -> Any:
    """An op's value without its clock readings (only a mapping's top-level keys)."""
    if not isinstance(value, Mapping):
        return value
    return {k: v for k, v in value.items() if not is_clock_key(k)}


@dataclass(frozen=True)
class LogicalEvent:
    """One comparable event: its stream, its key, and where it sits in its history."""

    stream: str
    key: tuple[Any, ...]
    event: Mapping[str, Any]

    @property
    def time_ns(self) -> int | None:
        t = self.event.get("time_ns")
        return t if isinstance(t, int) and not isinstance(t, bool) else None


def ack_subject(subject: str) -> str:
    """A JetStream ack subject (either layout) without its domain, account, timestamp,
    consumer sequence and pending count: the same message's ack has the same key."""
    ack = parse_ack_subject(subject)
    if ack is None:
        return subject
    return f"$JS.ACK.{ack.stream}.{ack.consumer}.{ack.delivered}.{ack.stream_sequence}"


def _value(event: Mapping[str, Any]) -> Mapping[str, Any]:
    value = event.get("value")
    return value if isinstance(value, Mapping) else {}


def logical(event: Mapping[str, Any]) -> LogicalEvent | None:
    """The logical form of one recorded event, or None when it is not compared."""
    process, f = str(event.get("process")), event.get("f")
    value = _value(event)
    if process == NEMESIS:
        fault = str(value.get("fault_id"))
        key: tuple[Any, ...] = (f, value.get("phase"), fault, value.get("target"))
        return LogicalEvent(f"nemesis {fault}", key, event)
    if process == PROXY:
        if f not in MESSAGE_EVENTS:
            return None
        proxy = value.get("proxy")
        subject = ack_subject(str(value.get("subject", "")))
        key = (
            f,
            proxy,
            value.get("op"),
            subject,
            value.get("stream_sequence"),
            value.get("delivery"),
        )
        return LogicalEvent(f"proxy {proxy} {f}", key, event)
    if process == HARNESS:
        return LogicalEvent(HARNESS, (f, value.get("phase"), value.get("settled")), event)
    if process.startswith(SERVICE_PREFIX):
        if f not in ("start", "exit"):
            return None
        return LogicalEvent(process, (f, value.get("expected")), event)
    extra = sorted((k, v) for k, v in event.items() if k not in _STANDARD | _NOISE)
    key = (event.get("type"), f, _comparable(event.get("value")), tuple(extra))
    return LogicalEvent(process, key, event)


def streams(events: Iterable[Mapping[str, Any]]) -> dict[str, list[LogicalEvent]]:
    """The logical events of a history, grouped by stream, each stream in recorded order."""
    grouped: dict[str, list[LogicalEvent]] = {}
    for event in events:
        item = logical(event)
        if item is not None:
            grouped.setdefault(item.stream, []).append(item)
    return grouped


def workload_start_ns(events: Iterable[Mapping[str, Any]]) -> int:
    """When the workload started (the harness milestone), 0 when it was not recorded."""
    for event in events:
        if (
            event.get("process") == HARNESS
            and event.get("f") == "workload"
            and _value(event).get("phase") == "start"
        ):
            t = event.get("time_ns")
            return t if isinstance(t, int) and not isinstance(t, bool) else 0
    return 0
