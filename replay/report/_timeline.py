"""render_timeline: a plain-text account of a trace (header, schedule, events, faults, verdicts).

::

    trace   payments-exactly-once  variant golden  seed 7
    status  complete: outcome pass, exit code 0, wall 12.345s
    ...
    events (40)
        +1.234s  nemesis   info  partition  phase=apply target=consumer-postgres
    fault spans
      consumer-postgres  partition  +1.234s .. +3.456s  (2.222s)
    verdicts
      exactly_once  VIOLATED  charge_customer ran 2 times for order 17
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ground.errors import ConfigError
from invariants.history import NEMESIS
from invariants.verdict import verdict_word
from replay.trace import Trace, is_infrastructure
from replay.trace.text import atom, clip, fields, seconds

from ._spans import FaultSpan, fault_spans

_WIDTH = 24


def _status(trace: Trace) -> str:
    if trace.truncated:
        return f"PARTIAL: cut off mid-frame after {trace.frames} whole frames"
    if trace.end is None:
        return f"PARTIAL: no end frame (the run was killed); {trace.frames} frames"
    end = trace.end
    wall = end.get("wall_time_s")
    wall_text = f"{wall:.3f}s" if isinstance(wall, int | float) else "?"
    return (
        f"complete: outcome {atom(end.get('outcome'))}, "
        f"exit code {atom(end.get('exit_code'))}, wall {wall_text}"
    )


def _header_lines(trace: Trace) -> list[str]:
    h = trace.header

    def get(key: str) -> str:
        return atom(h[key]) if h.get(key) is not None else "?"

    versions = h.get("versions")
    pinned = (
        ", ".join(f"{name} {v}" for name, v in versions.items())
        if isinstance(versions, Mapping)
        else "?"
    )
    return [
        f"trace     {get('scenario_id')}  variant {get('variant')}  seed {get('seed')}",
        f"status    {_status(trace)}",
        f"scenario  hash {get('scenario_hash')}"
        + (f"  pack {h['scenario_path']}" if h.get("scenario_builtin") is False else ""),
        f"harness   {get('harness_version')}  python {get('python_version')}",
        f"versions  {clip(pinned, 200)}",
        f"created   {get('created')}  format v{trace.version}",
        f"load      {_load_line(h.get('load'), trace.end)}",
        f"counts    {trace.frames} frames, {len(trace.events)} events, "
        f"{len(trace.verdicts)} verdicts",
    ]


def _load_line(start: Any, end: Any) -> str:
    """The load the run saw: at its start (header) and end (end frame), its CPUs, the
    sweep's concurrency and any ``--stress``."""
    if not isinstance(start, Mapping):
        return "not recorded"

    def avg(load: Any) -> str:
        values = load.get("loadavg") if isinstance(load, Mapping) else None
        if not isinstance(values, list) or not values:
            return "?"
        return " ".join(atom(v) for v in values)

    line = f"loadavg {avg(start)} at start"
    if isinstance(end, Mapping) and isinstance(end.get("load"), Mapping):
        line += f", {avg(end['load'])} at end"
    line += f"; {atom(start.get('cpus'))} cpu(s)"
    if start.get("sweep_jobs") is not None:
        line += f"; sweep --jobs {atom(start['sweep_jobs'])}"
    if start.get("stress"):
        line += f"; --stress {atom(start['stress'])}"
    return line


def _schedule_lines(schedule: dict[str, Any] | None) -> list[str]:
    if schedule is None:
        return ["schedule  (none recorded)"]
    lines = ["schedule"]
    for key, value in schedule.items():
        if isinstance(value, list) and all(isinstance(item, Mapping) for item in value):
            lines.append(f"  {atom(key)}: {len(value)}")
            lines += [f"    {n}. {fields(item)}" for n, item in enumerate(value, 1)]
        else:
            lines.append(f"  {atom(key)}: {clip(atom(value))}")
    return lines


def _event_line(event: Mapping[str, Any], width: int, f_width: int) -> str:
    process = str(event.get("process", "?"))
    line = (
        f"{seconds(event.get('time_ns')):>10}  {process:<{width}}  "
        f"{event.get('type', '?')!s:<6}  {event.get('f', '?')!s:<{f_width}}  "
        f"{fields(event.get('value'))}"
    )
    if event.get("error") is not None:
        line += f"  error={clip(atom(event['error']), 120)}"
    return line.rstrip()


def _in_window(t: float | None, since_s: float | None, until_s: float | None) -> bool:
    if t is None:
        return since_s is None and until_s is None
    return (since_s is None or t >= since_s) and (until_s is None or t <= until_s)


def _span_overlaps(span: FaultSpan, since_s: float | None, until_s: float | None) -> bool:
    start = span.start_ns / 1e9 if span.start_ns is not None else float("-inf")
    end = span.end_ns / 1e9 if span.end_ns is not None else float("inf")
    return (until_s is None or start <= until_s) and (since_s is None or end >= since_s)


def _span_lines(spans: list[FaultSpan]) -> list[str]:
    if not spans:
        return ["fault spans  (none)"]
    width = max(len(s.target) for s in spans)
    kind_width = max(len(s.kind) for s in spans)
    lines = ["fault spans"]
    for span in spans:
        start = seconds(span.start_ns) if span.start_ns is not None else "(start not recorded)"
        end, took = "(never healed)", ""
        if span.end_ns is not None:
            end = seconds(span.end_ns)
        if span.end_ns is not None and span.start_ns is not None:
            took = f"  ({(span.end_ns - span.start_ns) / 1e9:.3f}s)"
        lines.append(f"  {span.target:<{width}}  {span.kind:<{kind_width}}  {start} .. {end}{took}")
    return lines


def _verdict_lines(verdicts: list[dict[str, Any]]) -> list[str]:
    lines = ["verdicts" if verdicts else "verdicts  (none recorded)"]
    for v in verdicts:
        label = verdict_word(v.get("valid"))
        lines.append(f"  {atom(v.get('name', '?'))}  {label}  {fields(v.get('explanation'))}")
        if v.get("evidence") not in (None, {}, [], ""):
            lines.append(f"    evidence: {fields(v['evidence'])}")
    return lines


def _time_s(event: Mapping[str, Any]) -> float | None:
    t = event.get("time_ns")
    return None if isinstance(t, bool) or not isinstance(t, int | float) else t / 1e9


def _order(event: Mapping[str, Any]) -> tuple[bool, float, int]:
    t, index = _time_s(event), event.get("index")
    return t is None, t or 0.0, index if isinstance(index, int) else 0


def render_timeline(
    trace: Trace,
    *,
    faults_only: bool = False,
    ops_only: bool = False,
    since_s: float | None = None,
    until_s: float | None = None,
) -> str:
    """The trace as plain text; filters narrow the events and fault spans, never the verdicts."""
    if faults_only and ops_only:
        raise ConfigError("faults_only and ops_only cannot both be set")
    if since_s is not None and until_s is not None and since_s > until_s:
        raise ConfigError(f"since must be <= until, got since={since_s} until={until_s}")
    ordered = sorted(trace.events, key=_order)
    shown = [
        e
        for e in ordered
        if _in_window(_time_s(e), since_s, until_s)
        and (not faults_only or e.get("process") == NEMESIS)
        and (not ops_only or not is_infrastructure(e.get("process")))
    ]
    width = min(_WIDTH, max((len(str(e.get("process", "?"))) for e in shown), default=1))
    f_width = min(_WIDTH, max((len(str(e.get("f", "?"))) for e in shown), default=1))
    narrowed = faults_only or ops_only or since_s is not None or until_s is not None
    count = f"{len(shown)} of {len(trace.events)}" if narrowed else str(len(trace.events))
    lines = [*_header_lines(trace), "", *_schedule_lines(trace.schedule), "", f"events ({count})"]
    lines += ["  " + _event_line(e, width, f_width) for e in shown]
    if not ops_only:
        spans = [s for s in fault_spans(ordered) if _span_overlaps(s, since_s, until_s)]
        lines += ["", *_span_lines(spans)]
    lines += ["", *_verdict_lines(trace.verdicts)]
    return "\n".join(lines) + "\n"
