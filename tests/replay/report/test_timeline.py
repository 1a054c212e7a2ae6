"""render_timeline on hand-written traces: expected lines, filters, partial status."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ground.errors import ConfigError
from replay.report import FaultSpan, fault_spans, render_timeline
from replay.trace import Trace, TraceWriter, read_trace

S = 1_000_000_000
HEADER = {
    "scenario_id": "payments",
    "scenario_hash": "sha256:abc",
    "variant": "dup-charge",
    "seed": 7,
    "harness_version": "0.1.0",
    "python_version": "3.11.7",
    "versions": {"trio": "0.35.0", "msgpack": "1.2.4"},
    "created": "2026-01-01T00:00:00+00:00",
}


def ev(
    t_s: float, process: object, kind: str, f: str, value: Any = None, **more: Any
) -> dict[str, Any]:
    return {
        "time_ns": int(t_s * S),
        "process": process,
        "type": kind,
        "f": f,
        "value": value,
        **more,
    }


EVENTS = [
    ev(0.1, "service:postgres", "info", "start", {"port": 5433}),
    ev(1.0, 0, "invoke", "charge", {"order": 17}),
    ev(1.234, "nemesis", "info", "partition", {"phase": "apply", "target": "consumer-postgres"}),
    ev(1.3, "proxy", "info", "draw", {"stream": "latency", "value": 0.052}),
    ev(2.0, 0, "fail", "charge", {"order": 17}, error="timeout"),
    ev(2.1, "service:orders", "info", "log", "retrying charge for order 17"),
    ev(3.456, "nemesis", "info", "partition", {"phase": "heal", "target": "consumer-postgres"}),
    ev(4.0, "nemesis", "info", "start-kill", {"service": "orders"}),
    ev(4.5, 1, "ok", "charge", {"order": 18}),
]
VERDICTS = [
    {"name": "exactly_once", "valid": False, "explanation": "order 17 charged 2 times"},
    {"name": "no_lost_orders", "valid": True, "explanation": "all 2 orders present"},
    {"name": "balance", "valid": "unknown", "explanation": "checker crashed: KeyError"},
]


def trace(**changes: Any) -> Trace:
    fields: dict[str, Any] = {
        "header": HEADER,
        "schedule": {"faults": [{"kind": "partition", "target": "consumer-postgres"}]},
        "events": list(reversed(EVENTS)),  # the renderer sorts by time
        "verdicts": VERDICTS,
        "end": {"outcome": "violation", "exit_code": 1, "wall_time_s": 5.25},
        "frames": 14,
        "version": 1,
    }
    return Trace(**{**fields, **changes})


def event_lines(text: str) -> list[list[str]]:
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("events ("))
    end = lines.index("", start)
    return [line.split() for line in lines[start + 1 : end]]


def test_full_timeline() -> None:
    text = render_timeline(trace())
    assert "trace     payments  variant dup-charge  seed 7" in text
    assert "status    complete: outcome violation, exit code 1, wall 5.250s" in text
    assert "versions  trio 0.35.0, msgpack 1.2.4" in text
    assert "    1. kind=partition target=consumer-postgres" in text
    assert "events (9)" in text
    rows = event_lines(text)
    assert [row[0] for row in rows] == [
        "+0.100s", "+1.000s", "+1.234s", "+1.300s", "+2.000s",
        "+2.100s", "+3.456s", "+4.000s", "+4.500s",
    ]  # fmt: skip
    assert rows[2] == ["+1.234s", "nemesis", "info", "partition", "phase=apply",
                       "target=consumer-postgres"]  # fmt: skip
    assert rows[4][-1] == "error=timeout"
    assert " ".join(rows[5]) == "+2.100s service:orders info log retrying charge for order 17"
    lines = text.splitlines()
    span = next(line for line in lines if line.strip().startswith("consumer-postgres"))
    assert span.split() == ["consumer-postgres", "partition", "+1.234s", "..", "+3.456s",
                            "(2.222s)"]  # fmt: skip
    assert any(line.split() == ["orders", "kill", "+4.000s", "..", "(never", "healed)"]
               for line in lines)  # fmt: skip
    assert "  exactly_once  VIOLATED  order 17 charged 2 times" in lines
    assert "  no_lost_orders  held  all 2 orders present" in lines
    assert "  balance  unknown  checker crashed: KeyError" in lines


def test_faults_only() -> None:
    text = render_timeline(trace(), faults_only=True)
    rows = event_lines(text)
    assert "events (3 of 9)" in text
    assert {row[1] for row in rows} == {"nemesis"}
    assert "fault spans" in text
    assert "exactly_once  VIOLATED" in text


def test_ops_only() -> None:
    text = render_timeline(trace(), ops_only=True)
    rows = event_lines(text)
    assert [(row[1], row[2]) for row in rows] == [("0", "invoke"), ("0", "fail"), ("1", "ok")]
    assert "fault spans" not in text


def test_time_window() -> None:
    text = render_timeline(trace(), since_s=1.25, until_s=3.5)
    assert [row[0] for row in event_lines(text)] == ["+1.300s", "+2.000s", "+2.100s", "+3.456s"]
    assert "consumer-postgres  partition" in text  # the span overlaps the window
    assert "orders" not in text.split("fault spans")[1].split("verdicts")[0]


def test_partial_status() -> None:
    assert "PARTIAL: no end frame (the run was killed); 14 frames" in render_timeline(
        trace(end=None)
    )
    assert "PARTIAL: cut off mid-frame after 14 whole frames" in render_timeline(
        trace(end=None, truncated=True)
    )


def test_bad_filters() -> None:
    with pytest.raises(ConfigError, match="faults_only and ops_only cannot both be set"):
        render_timeline(trace(), faults_only=True, ops_only=True)
    with pytest.raises(ConfigError, match="since must be <= until, got since=3 until=1"):
        render_timeline(trace(), since_s=3, until_s=1)


def test_minimal_header_and_odd_values_render() -> None:
    odd = [ev(0.5, "proxy", "info", "draw", {"raw": b"\x00\x01", "nested": {"a": [1, None]}})]
    text = render_timeline(Trace(header={}, events=odd, frames=2, version=1))
    assert "trace     ?  variant ?  seed ?" in text
    assert "raw=0x0001 nested={a=[1, null]}" in text
    assert "schedule  (none recorded)" in text
    assert "verdicts  (none recorded)" in text


def test_fault_spans_pairing() -> None:
    events = [
        ev(1, "nemesis", "invoke", "partition", {"phase": "apply", "target": "a"}),
        ev(1, "nemesis", "info", "partition", {"phase": "apply", "target": "a"}),
        ev(2, "nemesis", "info", "partition", {"phase": "apply", "target": "b"}),
        ev(3, "nemesis", "info", "partition", {"phase": "heal", "target": "a"}),
        ev(4, "nemesis", "fail", "stop-partition", {"target": "b"}),
        ev(5, "nemesis", "info", "stop-latency", {"link": "c"}),
        ev(
            6,
            "nemesis",
            "info",
            "pause",
            {"phase": "apply", "target": {"kind": "service", "name": "pg"}},
        ),
        ev(
            7,
            "nemesis",
            "info",
            "pause",
            {"phase": "heal", "target": {"kind": "service", "name": "pg"}},
        ),
    ]
    assert fault_spans(events) == [
        FaultSpan("partition", "a", 1 * S, 3 * S),
        FaultSpan("partition", "b", 2 * S, None),
        FaultSpan("latency", "c", None, 5 * S),
        FaultSpan("pause", "service:pg", 6 * S, 7 * S),
    ]


def test_render_of_a_trace_read_from_disk(tmp_path: Path) -> None:
    path = tmp_path / "t.chtrace"
    with TraceWriter(path, HEADER) as w:
        for event in EVENTS[:3]:
            w.write_event(event)
    text = render_timeline(read_trace(path))
    assert "PARTIAL: no end frame" in text
    assert "events (3)" in text
    assert "consumer-postgres  partition  +1.234s .. (never healed)" in text
