"""First divergence: the earliest point where a replay's logical history left the recording.

Each stream of logical events (``replay.logical``) is compared position by position; its
first mismatch (a different event, or one side running out) is a candidate. The first
divergence is the earliest candidate in time, counted from each run's workload start so that
a slower setup is not mistaken for a divergence. Streams race each other, so reordering
*across* streams is never a divergence; reordering *within* one is.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from replay.logical import LogicalEvent, streams, workload_start_ns
from replay.trace.text import atom, clip, fields, seconds

_SHOWN = ("index", "time_ns", "process", "type", "f", "value")


def summary(item: LogicalEvent | None) -> dict[str, Any] | None:
    """The recorded fields of a logical event worth showing (None for a missing event)."""
    if item is None:
        return None
    shown = {k: item.event.get(k) for k in _SHOWN}
    if item.event.get("error") is not None:
        shown["error"] = item.event["error"]
    return shown


def _line(event: Mapping[str, Any]) -> str:
    text = (
        f"#{atom(event.get('index'))} {seconds(event.get('time_ns'))} {event.get('process')} "
        f"{event.get('type')} {event.get('f')} {fields(event.get('value'), 100)}"
    )
    return clip(text.rstrip(), 200)


@dataclass(frozen=True)
class Divergence:
    """Where one stream of a replay first differs from the recording."""

    stream: str
    position: int
    expected: dict[str, Any] | None
    actual: dict[str, Any] | None
    offset_ns: int

    @property
    def index(self) -> int:
        """The recorded event's index (the replay's when the recording has none there)."""
        event = self.expected or self.actual or {}
        index = event.get("index")
        return index if isinstance(index, int) else -1

    @property
    def time_ns(self) -> Any:
        return (self.expected or self.actual or {}).get("time_ns")

    def describe(self) -> str:
        """One line: stream, expected vs actual."""
        expected = _line(self.expected) if self.expected else "nothing (no such recorded event)"
        actual = _line(self.actual) if self.actual else "nothing (the replay has no such event)"
        return f"{self.stream} #{self.position}: expected {expected}; got {actual}"

    def to_json(self) -> dict[str, Any]:
        return {
            "stream": self.stream,
            "position": self.position,
            "index": self.index,
            "time_ns": self.time_ns,
            "expected": self.expected,
            "actual": self.actual,
            "description": self.describe(),
        }


def _offset(item: LogicalEvent | None, start: int) -> int | None:
    t = item.time_ns if item is not None else None
    return None if t is None else t - start


def stream_divergences(
    expected: Sequence[Mapping[str, Any]],
    actual: Sequence[Mapping[str, Any]],
    *,
    prefix: bool = False,
) -> list[Divergence]:
    """The first mismatch of every stream that has one, earliest first.

    ``prefix``: the recording was cut off (a killed run), so a stream running out of
    recorded events is not a divergence.
    """
    want, got = streams(expected), streams(actual)
    want_t0, got_t0 = workload_start_ns(expected), workload_start_ns(actual)
    found: list[Divergence] = []
    for name in sorted(want.keys() | got.keys()):
        a, b = want.get(name, []), got.get(name, [])
        for position in range(max(len(a), len(b))):
            x = a[position] if position < len(a) else None
            y = b[position] if position < len(b) else None
            if x is not None and y is not None and x.key == y.key:
                continue
            if x is None and prefix:
                break
            times = [t for t in (_offset(x, want_t0), _offset(y, got_t0)) if t is not None]
            offset = min(times, default=0)
            found.append(Divergence(name, position, summary(x), summary(y), offset))
            break
    found.sort(key=lambda d: (d.offset_ns, d.stream))
    return found


def first_divergence(
    expected: Sequence[Mapping[str, Any]],
    actual: Sequence[Mapping[str, Any]],
    *,
    prefix: bool = False,
) -> Divergence | None:
    """The earliest divergence of ``actual`` from ``expected``, None when they agree."""
    found = stream_divergences(expected, actual, prefix=prefix)
    return found[0] if found else None
