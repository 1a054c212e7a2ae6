"""HTML tables of one trace: its identity, fault schedule, service events and workload ops."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from replay.trace import Trace
from replay.trace.text import seconds

from ._html import duration, esc, esc_atom, esc_fields
from ._model import TraceView
from ._ops import Op


def status(trace: Trace) -> tuple[str, str]:
    """(text, css class): complete with its outcome, or PARTIAL and why."""
    if trace.truncated:
        return f"PARTIAL: cut off mid-frame after {trace.frames} whole frames", "partial"
    if trace.end is None:
        return f"PARTIAL: no end frame (the run was killed), {trace.frames} frames", "partial"
    return "complete", "complete"


def outcome(trace: Trace) -> str:
    """The recorded outcome and exit code, or "unknown (partial trace)"."""
    if trace.end is None:
        return "unknown (partial trace)"
    end = trace.end
    wall = end.get("wall_time_s")
    wall_text = f", wall {wall:.3f}s" if isinstance(wall, int | float) else ""
    return f"{esc_atom(end.get('outcome'))} (exit code {esc_atom(end.get('exit_code'))}{wall_text})"


def header_block(trace: Trace) -> str:
    """The trace's identity: scenario, variant, seed, versions, status, outcome."""
    h = trace.header

    def get(key: str) -> str:
        return esc_atom(h[key], 120) if h.get(key) is not None else "?"

    versions = h.get("versions")
    pinned = (
        ", ".join(f"{esc_atom(k, 60)} {esc_atom(v, 60)}" for k, v in list(versions.items())[:40])
        if isinstance(versions, Mapping)
        else "?"
    )
    text, css = status(trace)
    pack = (
        f" <span class=dim>pack {get('scenario_path')}</span>"
        if h.get("scenario_builtin") is False
        else ""
    )
    rows = [
        (
            "scenario",
            f"{get('scenario_id')} <span class=dim>hash {get('scenario_hash')}</span>{pack}",
        ),
        ("variant", get("variant")),
        ("seed", get("seed")),
        ("status", f'<span class="badge {css}">{esc(text)}</span>'),
        ("outcome", outcome(trace)),
        ("harness", f"{get('harness_version')}, python {get('python_version')}"),
        ("versions", pinned),
        ("created", f"{get('created')}, format v{trace.version}"),
        (
            "counts",
            f"{trace.frames} frames, {len(trace.events)} events, {len(trace.verdicts)} verdicts",
        ),
    ]
    cells = "".join(f"<tr><th>{k}</th><td>{v}</td></tr>" for k, v in rows)
    return f'<table class="meta">{cells}</table>'


def schedule_table(schedule: dict[str, Any] | None) -> str:
    """The recorded fault schedule, one row per fault event."""
    events = schedule.get("events") if schedule else None
    if not isinstance(events, list) or not events:
        return (
            '<p class="none">No fault schedule recorded.</p>'
            if not schedule
            else ('<p class="none">The schedule holds no fault events.</p>')
        )
    rows = []
    for event in events[:200]:
        e = event if isinstance(event, Mapping) else {"event": event}
        cells = [e.get(k) for k in ("id", "kind", "target", "params", "trigger", "duration_s")]
        rows.append("<tr>" + "".join(f"<td>{esc_fields(c, 200)}</td>" for c in cells) + "</tr>")
    head = "".join(
        f"<th>{h}</th>" for h in ("id", "kind", "target", "params", "trigger", "duration")
    )
    return (
        f'<table class="grid"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>'
    )


def service_table(view: TraceView) -> str:
    """Service lifecycle events (start, exit, crash): logs are left out."""
    marks = sorted(view.service_marks, key=lambda m: m.time_ns)
    if not marks:
        return '<p class="none">No service lifecycle events recorded.</p>'
    rows = "".join(
        f'<tr class="{m.style}"><td class="t">{seconds(m.time_ns)}</td><td>{esc(m.lane, 60)}</td>'
        f"<td>{esc(m.label, 60)}</td><td>{esc(m.detail, 200)}</td></tr>"
        for m in marks[:300]
    )
    return (
        '<table class="grid"><thead><tr><th>time</th><th>service</th><th>event</th>'
        f"<th>details</th></tr></thead><tbody>{rows}</tbody></table>"
    )


def _op_row(op: Op) -> str:
    error = esc_atom(op.error, 200) if op.error is not None else ""
    return (
        f'<tr class="{esc(op.result)}{" hit" if op.hit else ""}">'
        f'<td class="t">{seconds(op.start_ns)}</td><td class="t">{seconds(op.end_ns)}</td>'
        f'<td class="t">{duration(op.start_ns, op.end_ns)}</td><td>{esc(op.f, 60)}</td>'
        f"<td>{esc_fields(op.value, 200)}</td><td>{esc(op.result)}</td><td>{error}</td></tr>"
    )


def ops_table(process: str, ops: list[Op], limit: int) -> str:
    """The first ``limit`` ops of a process (plus any evidence hits), and how many are left out."""
    shown = ops[:limit] + [op for op in ops[limit:] if op.hit]
    hits = sum(op.hit for op in ops)
    rest = len(ops) - len(shown)
    summary = f"{esc(process, 60)}: {len(ops)} ops" + (
        f", {hits} named by evidence" if hits else ""
    )
    more = f'<p class="more">… {rest} more ops not shown</p>' if rest else ""
    return (
        f'<details class="ops"><summary>{summary}</summary><table class="grid">'
        "<thead><tr><th>invoke</th><th>complete</th><th>took</th><th>f</th><th>value</th>"
        f"<th>result</th><th>error</th></tr></thead><tbody>"
        f"{''.join(_op_row(op) for op in shown)}</tbody></table>{more}</details>"
    )
