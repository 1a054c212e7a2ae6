"""The timeline SVG of one trace: fault, service, workload and proxy lanes on a shared axis.

::

    phases   ┆workload start         ┆workload end  ┆settle
    faults   subject:orders  [redeliver f0 +1.359s → +4.011s]
    services consumer        ▲━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━■ exit -15
    workload consumer        ▮ ▮ ▮ ▮ ▮ ▮ ▮ ▮ ▮ ▮ ▮ ▮ ▮ ▮      ▮ ▮
    proxy    effects                  ✕ ✕                   ↻ ↻
             0s      1s      2s      3s      4s

Fault bars of one target stack in rows where they overlap; so do labelled markers.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from replay.trace.text import seconds

from ._html import duration, esc, esc_atom
from ._model import FaultBar, Marker, TraceView
from ._ops import Op
from ._svg import LANE_GAP, ROW_H, WIDTH, Scale, axis, label_place, marker, pack, text_width

_MAX_LABEL_ROWS = 3
_KIND = re.compile(r"[^a-z0-9_]")
_TOP = 34
_AXIS_H = 28
_GROUP_H = 18


@dataclass(frozen=True)
class Lane:
    """One labelled lane: ``svg`` is drawn in lane coordinates (0 at the lane's top)."""

    name: str
    rows: int
    svg: str
    css: str
    row_h: int = ROW_H


def _bar_label(bar: FaultBar) -> str:
    start = seconds(bar.start_ns) if bar.start_ns is not None else "(apply not recorded)"
    end = seconds(bar.end_ns) if bar.end_ns is not None else "never healed"
    return f"{bar.kind} {bar.fault_id} {start} → {end}".replace("  ", " ")


def _bar_place(scale: Scale, bar: FaultBar, label: str) -> tuple[float, float, float, str]:
    """(x1, x2, label x, anchor): the label inside the bar, or left of it at the right edge."""
    x1 = scale.x(bar.start_ns) if bar.start_ns is not None else scale.x0
    x2 = max(scale.x(bar.end_ns) if bar.end_ns is not None else scale.x1, x1 + 2)
    if x1 + 4 + text_width(label) > WIDTH - 2:
        return x1, x2, x1 - 4, "end"
    return x1, x2, x1 + 4, "start"


def _bar(scale: Scale, bar: FaultBar, row: int, label: str) -> str:
    x1, x2, text_x, anchor = _bar_place(scale, bar, label)
    open_ = "" if bar.end_ns is not None else " open"
    kind = _KIND.sub("_", bar.kind.lower())
    y = row * ROW_H + 3
    tip = esc(f"{label} ({duration(bar.start_ns, bar.end_ns)}) {bar.target} {bar.params}", 400)
    return (
        f'<g class="fault k-{kind}{open_}"><title>{tip}</title>'
        f'<rect x="{x1}" y="{y}" width="{round(x2 - x1, 1)}" height="{ROW_H - 6}" rx="2"/>'
        f'<text x="{text_x}" y="{y + 12}" text-anchor="{anchor}">{esc(label, 80)}</text></g>'
    )


def fault_lanes(view: TraceView, scale: Scale) -> list[Lane]:
    """One lane per fault target; overlapping faults of a target stack in rows."""
    targets = sorted({b.target for b in view.faults} | {m.lane for m in view.fault_marks})
    lanes = []
    for target in targets:
        items: list[tuple[float, float, FaultBar | Marker, str]] = []
        for bar in (b for b in view.faults if b.target == target):
            label = _bar_label(bar)
            x1, x2, _, anchor = _bar_place(scale, bar, label)
            if anchor == "end":
                items.append((x1 - 8 - text_width(label), x2, bar, label))
            else:
                items.append((x1, max(x2, x1 + text_width(label) + 8), bar, label))
        for m in (m for m in view.fault_marks if m.lane == target):
            x_from, x_to, _, _ = label_place(scale.x(m.time_ns), m.label)
            items.append((x_from, x_to, m, m.label))
        items.sort(key=lambda item: item[0])
        rows = pack([(a, b) for a, b, _, _ in items])
        svg = "".join(
            _bar(scale, item, row, label)
            if isinstance(item, FaultBar)
            else marker(scale, item, row)
            for (_, _, item, label), row in zip(items, rows, strict=True)
        )
        lanes.append(Lane(target, max(rows, default=0) + 1, svg, "faultlane"))
    return lanes


def service_lanes(view: TraceView, scale: Scale) -> list[Lane]:
    """One lane per service with lifecycle events: its life as a bar, start/exit markers."""
    names = list(
        dict.fromkeys([m.lane for m in view.service_marks] + [b[0] for b in view.service_bars])
    )
    lanes = []
    for name in names:
        parts = []
        for _, start, end in (b for b in view.service_bars if b[0] == name):
            x2 = scale.x(end if end is not None else view.end_ns)
            parts.append(f'<line class="life" x1="{scale.x(start)}" y1="11" x2="{x2}" y2="11"/>')
        parts += [
            marker(scale, m, 0, m.style != "start") for m in view.service_marks if m.lane == name
        ]
        lanes.append(Lane(name, 1, "".join(parts), "servicelane"))
    return lanes


def effects_lane(effects: list[Marker], scale: Scale, limit: int = 500) -> Lane:
    """Proxy effects as markers; labelled in up to three rows, else unlabelled in one."""
    drawn = effects[:limit]
    spans = [label_place(scale.x(m.time_ns), m.label)[:2] for m in drawn]
    rows = pack(spans)
    labelled = max(rows, default=0) < _MAX_LABEL_ROWS
    svg = "".join(
        marker(scale, m, row if labelled else 0, labelled)
        for m, row in zip(drawn, rows, strict=True)
    )
    more = len(effects) - len(drawn)
    name = f"effects (+{more} not drawn)" if more > 0 else "effects"
    return Lane(name, max(rows, default=0) + 1 if labelled else 1, svg, "proxy")


def _op(scale: Scale, op: Op, end_ns: int) -> str:
    first = op.start_ns if op.start_ns is not None else op.end_ns
    if first is None:
        return ""
    x1 = scale.x(first)
    x2 = max(scale.x(op.end_ns if op.end_ns is not None else end_ns), x1 + 2)
    hit = " hit" if op.hit else ""
    tip = (
        f"{esc(op.process)} {esc(op.f)} {esc_atom(op.value)}: invoke {seconds(op.start_ns)} → "
        f"{esc(op.result)} {seconds(op.end_ns)} {duration(op.start_ns, op.end_ns)}"
    )
    if op.error is not None:
        tip += f" error={esc_atom(op.error, 200)}"
    y, height = (9, 4) if op.end_ns is None else (5, 12)
    return (
        f'<rect class="op {esc(op.result)}{hit}" x="{x1}" y="{y}" width="{round(x2 - x1, 1)}" '
        f'height="{height}"><title>{tip}</title></rect>'
    )


def op_lane(process: str, ops: list[Op], scale: Scale, max_ops: int) -> Lane:
    """A process's ops as invoke→completion intervals; the first ``max_ops`` (and hits) drawn."""
    drawn = ops[:max_ops] + [op for op in ops[max_ops:] if op.hit]
    end_ns = max((t for op in ops for t in (op.start_ns, op.end_ns) if t is not None), default=0)
    ordered = [op for op in drawn if not op.hit] + [op for op in drawn if op.hit]
    svg = "".join(_op(scale, op, end_ns) for op in ordered)
    more = len(ops) - len(drawn)
    name = f"{process} ({len(ops)} ops" + (f", {more} not drawn)" if more else ")")
    return Lane(name, 1, svg, "oplane")


def _phase_lines(phases: list[Marker], scale: Scale, bottom: float) -> str:
    out = []
    for n, phase in enumerate(phases[:40]):
        x, y = scale.x(phase.time_ns), 12 + 13 * (n % 2)
        tip = esc(f"{phase.label} at {seconds(phase.time_ns)} {phase.detail}", 300)
        out.append(
            f'<g class="phase"><title>{tip}</title>'
            f'<line x1="{x}" y1="{y + 3}" x2="{x}" y2="{bottom}"/>'
            f'<text x="{x + 3}" y="{y}">{esc(phase.label, 40)}</text></g>'
        )
    return "".join(out)


def render_svg(view: TraceView, scale: Scale, max_ops: int) -> str:
    """The whole timeline of ``view`` as one inline <svg> element."""
    groups: list[tuple[str, list[Lane]]] = [
        ("faults", fault_lanes(view, scale)),
        ("services", service_lanes(view, scale)),
        ("workload", [op_lane(p, ops, scale, max_ops) for p, ops in view.ops.items()]),
        ("proxy", [effects_lane(view.effects, scale)] if view.effects else []),
    ]
    body, y = [], float(_TOP)
    for title, lanes in groups:
        if not lanes and title != "faults":
            continue
        body.append(f'<text class="group" x="6" y="{y + 13}">{esc(title)}</text>')
        y += _GROUP_H
        if not lanes:
            body.append(f'<text class="none" x="{scale.x0}" y="{y + 12}">no faults applied</text>')
            y += 20
        for n, lane in enumerate(lanes):
            height = lane.rows * lane.row_h
            stripe = "lane odd" if n % 2 else "lane"
            body.append(
                f'<g class="{stripe} {lane.css}" transform="translate(0,{y})">'
                f'<rect class="bg" x="0" y="0" width="{WIDTH}" height="{height}"/>'
                f'<text class="lanelabel" x="14" y="{min(height, lane.row_h) / 2 + 4}">'
                f"{esc(lane.name, 30)}</text>{lane.svg}</g>"
            )
            y += height + LANE_GAP
    bottom = y + 4
    total = bottom + _AXIS_H
    return (
        f'<svg class="timeline" viewBox="0 0 {WIDTH} {total}" width="{WIDTH}" '
        f'height="{total}" role="img" aria-label="timeline">'
        f"{_phase_lines(view.phases, scale, bottom)}{''.join(body)}{axis(scale, bottom)}</svg>"
    )
