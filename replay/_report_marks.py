"""Building blocks of the timeline lanes: the Lane, point markers, and row packing."""

from __future__ import annotations

from dataclasses import dataclass

from ._report_items import Marker
from ._report_scale import WIDTH, Scale, text_width
from ._report_text import esc, secs

ROW_H = 22
LANE_GAP = 3
_SHAPES = {
    "start": "M{x},{a} L{r},{b} L{l},{b} Z",
    "instant": "M{x},{a} L{r},{y} L{x},{b} L{l},{y} Z",
    "crash": "M{l},{a} L{r},{b} M{r},{a} L{l},{b}",
    "dropped": "M{l},{a} L{r},{b} M{r},{a} L{l},{b}",
    "dup": "M{x},{a} L{x},{b} M{l},{y} L{r},{y}",
    "reset": "M{x},{a} L{x},{b}",
}


@dataclass(frozen=True)
class Lane:
    """One labelled lane: ``svg`` is drawn in lane coordinates (0 at the lane's top)."""

    name: str
    rows: int
    svg: str
    css: str
    row_h: int = ROW_H


def label_place(x: float, label: str, gap: float = 8) -> tuple[float, float, float, str]:
    """(reserved from, reserved to, text x, anchor): right of ``x``, or left at the edge."""
    width = text_width(label)
    if x + gap + width <= WIDTH - 2:
        return x - 6, x + gap + width, x + gap, "start"
    return x - gap - width, x + 6, x - gap, "end"


def marker(scale: Scale, m: Marker, row: int, labelled: bool = True) -> str:
    """A point marker (shape by style) with a tooltip and an optional label."""
    x, y = scale.x(m.time_ns), row * ROW_H + ROW_H / 2
    spec = {"x": x, "y": y, "l": x - 5, "r": x + 5, "a": y - 5, "b": y + 5}
    if m.style in _SHAPES:
        shape = f'<path d="{_SHAPES[m.style].format(**spec)}"/>'
    elif m.style in ("exit", "killed"):
        shape = f'<rect x="{x - 4}" y="{y - 4}" width="8" height="8"/>'
    else:
        shape = f'<circle cx="{x}" cy="{y}" r="4.5"/>'
    tip = esc(f"{m.label} at {secs(m.time_ns)} {m.detail}".strip(), 400)
    text = ""
    if labelled:
        _, _, text_x, anchor = label_place(x, m.label)
        text = f'<text x="{text_x}" y="{y + 4}" text-anchor="{anchor}">{esc(m.label, 48)}</text>'
    return f'<g class="mk {m.style}"><title>{tip}</title>{shape}{text}</g>'


def pack(spans: list[tuple[float, float]]) -> list[int]:
    """Row of each (x_from, x_to) so that no two in a row overlap (first fit, in order)."""
    ends: list[float] = []
    rows = []
    for x_from, x_to in spans:
        row = next((n for n, end in enumerate(ends) if end + 4 <= x_from), len(ends))
        if row == len(ends):
            ends.append(x_to)
        ends[row] = x_to
        rows.append(row)
    return rows
