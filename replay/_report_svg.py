"""The timeline SVG of one trace: fault, service, workload and proxy lanes on a shared axis.

::

    phases   ┆workload start         ┆workload end  ┆settle
    faults   subject:orders  [redeliver f0 +1.359s → +4.011s]
    services consumer        ▲━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━■ exit -15
    workload consumer        ▮ ▮ ▮ ▮ ▮ ▮ ▮ ▮ ▮ ▮ ▮ ▮ ▮ ▮      ▮ ▮
    proxy    effects                  ✕ ✕                   ↻ ↻
             0s      1s      2s      3s      4s
"""

from __future__ import annotations

from ._report_items import Marker
from ._report_lanes import effects_lane, fault_lanes, op_lane, service_lanes
from ._report_marks import LANE_GAP, Lane
from ._report_model import TraceView
from ._report_scale import WIDTH, Scale
from ._report_text import esc, secs

_TOP = 34
_AXIS_H = 28
_GROUP_H = 18


def _phase_lines(phases: list[Marker], scale: Scale, bottom: float) -> str:
    out = []
    for n, phase in enumerate(phases[:40]):
        x, y = scale.x(phase.time_ns), 12 + 13 * (n % 2)
        tip = esc(f"{phase.label} at {secs(phase.time_ns)} {phase.detail}", 300)
        out.append(
            f'<g class="phase"><title>{tip}</title>'
            f'<line x1="{x}" y1="{y + 3}" x2="{x}" y2="{bottom}"/>'
            f'<text x="{x + 3}" y="{y}">{esc(phase.label, 40)}</text></g>'
        )
    return "".join(out)


def _axis(scale: Scale, y: float) -> str:
    out = [f'<line class="axis" x1="{scale.x0}" y1="{y}" x2="{scale.x1}" y2="{y}"/>']
    for x, label in scale.ticks():
        out.append(
            f'<line class="tick" x1="{x}" y1="{y}" x2="{x}" y2="{y + 5}"/>'
            f'<text class="ticklabel" x="{x}" y="{y + 17}">{esc(label)}</text>'
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
        f"{_phase_lines(view.phases, scale, bottom)}{''.join(body)}{_axis(scale, bottom)}</svg>"
    )
