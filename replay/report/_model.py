"""TraceView: what the HTML report draws for one trace: fault bars, markers, ops, phases."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from invariants.history import HARNESS, NEMESIS, PROXY, SERVICE_PREFIX
from replay.trace import Trace, is_infrastructure
from replay.trace.text import atom

from ._html import as_ns
from ._ops import Op, evidence_tokens, pair_ops
from ._spans import fault_target

_NOT_PARAMS = frozenset({"phase", "fault_id", "target", "link", "service", "stream", "proxy"})


@dataclass(frozen=True)
class FaultBar:
    """One applied fault: ``end_ns`` None means never healed, ``start_ns`` None: apply missing."""

    target: str
    kind: str
    fault_id: str
    start_ns: int | None
    end_ns: int | None
    params: str


@dataclass(frozen=True)
class Marker:
    """A point on a lane: ``style`` picks its shape and colour, ``detail`` is its tooltip."""

    lane: str
    time_ns: int
    label: str
    style: str
    detail: str
    fault_id: str = ""


def params_text(value: object) -> str:
    """A nemesis or service value as "k=v k=v", without phase, fault id and target."""
    if not isinstance(value, Mapping):
        return "" if value is None else atom(value)
    return " ".join(f"{atom(k)}={atom(v)}" for k, v in value.items() if k not in _NOT_PARAMS)


@dataclass
class TraceView:
    """Everything the report shows of one trace, times in run-clock nanoseconds."""

    trace: Trace
    faults: list[FaultBar] = field(default_factory=list)
    fault_marks: list[Marker] = field(default_factory=list)
    service_bars: list[tuple[str, int, int | None]] = field(default_factory=list)
    service_marks: list[Marker] = field(default_factory=list)
    effects: list[Marker] = field(default_factory=list)
    phases: list[Marker] = field(default_factory=list)
    ops: dict[str, list[Op]] = field(default_factory=dict)
    tokens: frozenset[str] = frozenset()
    end_ns: int = 0


def _faults(view: TraceView, nemesis: Iterable[dict[str, Any]]) -> None:
    """Pair apply with heal by (kind, target, fault_id); the rest become markers."""
    open_: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for event in nemesis:
        value, kind, t = event.get("value"), str(event.get("f")), as_ns(event.get("time_ns"))
        target = fault_target(value)
        phase = value.get("phase") if isinstance(value, Mapping) else None
        fault_id = str(value.get("fault_id", "")) if isinstance(value, Mapping) else ""
        key = (kind, target, fault_id)
        if phase == "apply":
            open_.setdefault(key, []).append(event)
        elif phase == "heal":
            starts = open_.get(key)
            start = as_ns(starts.pop(0).get("time_ns")) if starts else None
            view.faults.append(FaultBar(target, kind, fault_id, start, t, params_text(value)))
        elif t is not None:
            style = "not-triggered" if phase == "not_triggered" else "instant"
            label = f"{kind} {fault_id} not triggered" if style == "not-triggered" else kind
            mark = Marker(target, t, label.strip(), style, params_text(value), fault_id)
            view.fault_marks.append(mark)
    for (kind, target, fault_id), starts in open_.items():
        for event in starts:
            start, params = as_ns(event.get("time_ns")), params_text(event.get("value"))
            view.faults.append(FaultBar(target, kind, fault_id, start, None, params))
    view.faults.sort(key=lambda b: (b.target, b.start_ns or 0, b.fault_id))


def _service(view: TraceView, event: dict[str, Any], up: dict[str, int]) -> None:
    name, f, value = str(event["process"]), str(event.get("f")), event.get("value")
    t = as_ns(event.get("time_ns"))
    if f == "log" or t is None:
        return
    lane = name[len(SERVICE_PREFIX) :]
    detail = params_text(value)
    if f == "start":
        up[lane] = t
        view.service_marks.append(Marker(lane, t, "start", "start", detail))
    elif f == "exit":
        if lane in up:
            view.service_bars.append((lane, up.pop(lane), t))
        code = value.get("code") if isinstance(value, Mapping) else None
        expected = isinstance(value, Mapping) and value.get("expected") is True
        style = "exit" if code == 0 else ("killed" if expected else "crash")
        label = f"exit {atom(code)}" if style != "crash" else f"CRASH exit {atom(code)}"
        view.service_marks.append(Marker(lane, t, label, style, detail))
    else:
        view.service_marks.append(Marker(lane, t, f, "instant", detail))


def _effect(event: dict[str, Any]) -> Marker | None:
    """Proxy events that show a fault acting: drops, duplicates, redeliveries, resets."""
    f, value, t = str(event.get("f")), event.get("value"), as_ns(event.get("time_ns"))
    if t is None or not isinstance(value, Mapping):
        return None
    detail = params_text({k: v for k, v in value.items() if k != "proxy"})
    where = str(value.get("proxy", "?"))
    if f == "frame_dropped":
        return Marker("proxy", t, f"dropped {atom(value.get('op', 'frame'))}", "dropped", detail)
    if f == "frame_duplicated":
        return Marker("proxy", t, f"duplicated {atom(value.get('op', 'frame'))}", "dup", detail)
    delivery = value.get("delivery")
    if f == "nats_delivery" and isinstance(delivery, int) and delivery > 1:
        return Marker("proxy", t, f"redelivery #{delivery}", "redelivered", f"{where} {detail}")
    if f == "connection_closed" and value.get("reason") not in (None, "eof"):
        return Marker("proxy", t, f"closed: {atom(value['reason'])}", "reset", f"{where} {detail}")
    return None


def _time_order(event: Mapping[str, Any]) -> tuple[int, int]:
    index = event.get("index")
    return as_ns(event.get("time_ns")) or 0, index if isinstance(index, int) else 0


def build_view(trace: Trace) -> TraceView:
    """The report's model of ``trace``."""
    view = TraceView(trace, tokens=evidence_tokens(trace.verdicts))
    events = sorted(trace.events, key=_time_order)
    _faults(view, (e for e in events if e.get("process") == NEMESIS))
    up: dict[str, int] = {}
    for event in events:
        process = str(event.get("process"))
        if process.startswith(SERVICE_PREFIX):
            _service(view, event, up)
        elif process == PROXY and (mark := _effect(event)) is not None:
            view.effects.append(mark)
        elif process == HARNESS and (t := as_ns(event.get("time_ns"))) is not None:
            value = event.get("value")
            phase = value.get("phase") if isinstance(value, Mapping) else None
            label = f"{event.get('f')} {phase}" if phase else str(event.get("f"))
            view.phases.append(Marker("harness", t, label, "phase", params_text(value)))
    view.service_bars += [(lane, start, None) for lane, start in up.items()]
    workload = [e for e in events if not is_infrastructure(e.get("process"))]
    view.ops = pair_ops(workload, view.tokens)
    times = [t for e in events if (t := as_ns(e.get("time_ns"))) is not None]
    view.end_ns = max(times, default=0)
    return view
