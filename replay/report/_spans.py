"""Fault spans: pair each nemesis apply with its heal, per fault target."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from invariants.history import NEMESIS

_APPLY_PREFIXES = ("start-", "apply-")
_HEAL_PREFIXES = ("stop-", "heal-")
_TARGET_KEYS = ("target", "link", "service", "stream", "proxy")


@dataclass(frozen=True)
class FaultSpan:
    """A fault's life: applied at ``start_ns``, healed at ``end_ns`` (None: never healed)."""

    kind: str
    target: str
    start_ns: int | None
    end_ns: int | None


def _phase(event: Mapping[str, Any]) -> tuple[str, str] | None:
    """(phase, kind) of a nemesis event that applies or heals a fault, else None."""
    f, value = str(event.get("f")), event.get("value")
    if isinstance(value, Mapping) and value.get("phase") in ("apply", "heal"):
        return str(value["phase"]), f
    for prefix in _APPLY_PREFIXES:
        if f.startswith(prefix):
            return "apply", f[len(prefix) :]
    for prefix in _HEAL_PREFIXES:
        if f.startswith(prefix):
            return "heal", f[len(prefix) :]
    return None


def fault_target(value: object) -> str:
    """The fault's target as "kind:name" or a bare name; "-" when the event names none."""
    if isinstance(value, Mapping):
        for key in _TARGET_KEYS:
            target = value.get(key)
            if isinstance(target, Mapping) and {"kind", "name"} <= target.keys():
                return f"{target['kind']}:{target['name']}"
            if target is not None:
                return str(target)
    return "-"


def _time(event: Mapping[str, Any]) -> int | None:
    t = event.get("time_ns")
    return t if isinstance(t, int) and not isinstance(t, bool) else None


def fault_spans(events: Iterable[Mapping[str, Any]]) -> list[FaultSpan]:
    """Spans from nemesis completions (type info/ok), sorted by target then start time."""
    open_: dict[tuple[str, str, str], list[int | None]] = {}
    spans: list[FaultSpan] = []
    for event in events:
        if event.get("process") != NEMESIS or event.get("type") not in ("info", "ok"):
            continue
        found = _phase(event)
        if found is None:
            continue
        phase, kind = found
        value = event.get("value")
        target = fault_target(value)
        fault_id = str(value.get("fault_id", "")) if isinstance(value, Mapping) else ""
        key = (kind, target, fault_id)
        if phase == "apply":
            open_.setdefault(key, []).append(_time(event))
        else:
            starts = open_.get(key) or [None]
            spans.append(FaultSpan(kind, target, starts.pop(0), _time(event)))
    for (kind, target, _), starts in open_.items():
        spans.extend(FaultSpan(kind, target, start, None) for start in starts)
    return sorted(spans, key=lambda s: (s.target, s.start_ns or 0, s.kind))
