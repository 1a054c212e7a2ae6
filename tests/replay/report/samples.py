"""Hand-written traces for the report tests: a payments-like run, its replay, a hostile one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from replay.trace import TraceWriter

S = 1_000_000_000
HEADER = {
    "scenario_id": "payments",
    "scenario_hash": "sha256:abc",
    "variant": "no-idempotency",
    "seed": 7,
    "harness_version": "0.1.0",
    "python_version": "3.11.7",
    "versions": {"trio": "0.35.0", "msgpack": "1.2.4"},
    "created": "2026-01-01T00:00:00+00:00",
}
SCHEDULE = {
    "seed": 7,
    "events": [
        {"id": "f0", "kind": "redeliver", "target": {"kind": "subject", "name": "orders"}},
        {"id": "f1", "kind": "partition", "target": {"kind": "link", "name": "consumer-gateway"}},
        {"id": "f2", "kind": "latency", "target": {"kind": "link", "name": "producer-nats"}},
    ],
}


def ev(
    t_s: float, process: Any, kind: str, f: str, value: Any = None, **more: Any
) -> dict[str, Any]:
    return {
        "time_ns": int(t_s * S),
        "process": process,
        "type": kind,
        "f": f,
        "value": value,
        **more,
    }


def fault(t_s: float, kind: str, phase: str, fault_id: str, target: str, **params: Any) -> Any:
    value = {"phase": phase, "fault_id": fault_id, "target": target, **params}
    return ev(t_s, "nemesis", "info", kind, value)


def payments_events(*, redelivered: bool) -> list[dict[str, Any]]:
    """Twelve orders published and charged; with ``redelivered``, o-005 is charged twice."""
    events = [
        ev(0.3, "service:gateway", "info", "start", {"pid": 11}),
        ev(0.7, "service:consumer", "info", "start", {"pid": 12}),
        ev(0.72, "harness", "info", "workload", {"phase": "start"}),
        ev(0.72, "service:producer", "info", "start", {"pid": 13}),
        ev(0.75, "service:consumer", "info", "log", "consumer ready"),
        fault(1.0, "redeliver", "apply", "f0", "subject:orders", count=2),
        fault(1.2, "partition", "apply", "f1", "link:consumer-gateway", direction="both"),
        fault(1.8, "partition", "heal", "f1", "link:consumer-gateway", direction="both"),
    ]
    for n in range(12):
        t, order = 0.8 + n * 0.05, f"o-{n + 1:03d}"
        events += [
            ev(t, "producer", "invoke", "publish", order),
            ev(t + 0.002, "producer", "ok", "publish", order),
            ev(t + 0.004, "consumer", "invoke", "charge", order),
            ev(t + 0.01, "consumer", "ok", "charge", order),
        ]
    events.append(
        ev(1.06, "proxy", "info", "frame_dropped", {"proxy": "consumer-nats", "op": "ack"})
    )
    if redelivered:
        events += [
            ev(2.5, "proxy", "info", "nats_delivery", {"proxy": "consumer-nats", "delivery": 2}),
            ev(2.51, "consumer", "invoke", "charge", "o-005"),
            ev(2.52, "consumer", "ok", "charge", "o-005"),
        ]
    events += [
        ev(1.5, "service:producer", "info", "exit", {"code": 0, "expected": True}),
        ev(1.5, "harness", "info", "workload", {"phase": "end"}),
        fault(3.0, "latency", "not_triggered", "f2", "link:producer-nats", latency_ms=100),
        ev(3.0, "harness", "info", "settle", {"settled": True}),
        fault(3.0, "redeliver", "heal", "f0", "subject:orders", count=2),
        ev(3.1, "service:consumer", "info", "exit", {"code": -15, "expected": True}),
        ev(3.1, "service:gateway", "info", "exit", {"code": -15, "expected": True}),
    ]
    return sorted(events, key=lambda e: e["time_ns"])


def payments_verdicts(*, violated: bool) -> list[dict[str, Any]]:
    duplicated = {"o-005": 2} if violated else {}
    return [
        {
            "name": "exactly_once",
            "valid": not violated,
            "explanation": "1 of 12 orders charged more than once: o-005 (x2)"
            if violated
            else "each of the 12 orders was charged once",
            "evidence": {"orders_checked": 12, "gateway": {"duplicated": duplicated}},
        },
        {
            "name": "no_lost_messages",
            "valid": True,
            "explanation": "each of the 12 published orders has a charge",
            "evidence": {"published": 12, "missing": []},
        },
    ]


def write_payments(
    path: Path,
    *,
    violated: bool = True,
    end: bool = True,
    header: dict[str, Any] | None = None,
    extra: list[dict[str, Any]] | None = None,
) -> Path:
    """A payments-like trace; ``end=False`` leaves it partial (no end frame, no verdicts)."""
    with TraceWriter(path, header or HEADER) as writer:
        writer.write_schedule(SCHEDULE)
        for event in payments_events(redelivered=violated) + (extra or []):
            writer.write_event(event)
        if end:
            for verdict in payments_verdicts(violated=violated):
                writer.write_verdict(verdict)
            writer.write_end("violated" if violated else "held", int(violated), 3.2)
    return path
