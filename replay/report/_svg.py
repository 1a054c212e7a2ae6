"""SVG drawing primitives of the report's timelines, on one time scale shared by every trace.

::

    x:  0 ........ LABEL_W ......................................... WIDTH - RIGHT_PAD . WIDTH
        lane label  | Scale.x(0 ns)                        Scale.x(span_ns) |
    rows of ROW_H px; labels placed right of their point, or left of it at the right edge;
    point markers drawn by style (▲ start, ■ exit, ✕ crash/dropped, ◇ instant, ○ other)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from replay.trace.text import seconds

from ._html import esc
from ._model import Marker

WIDTH = 1120
LABEL_W = 200
RIGHT_PAD = 16
CHAR_W = 6.1  # average advance of an 11px sans-serif character, for layout estimates
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
class Scale:
    """Maps run-clock nanoseconds in [0, span_ns] onto the plot's x range."""

    span_ns: int

    @classmethod
    def covering(cls, end_ns: int) -> Scale:
        """A scale that ends a little after ``end_ns`` (at least 1 ms)."""
        return cls(max(1_000_000, int(end_ns * 1.02)))

    @property
    def x0(self) -> float:
        return float(LABEL_W)

    @property
    def x1(self) -> float:
        return float(WIDTH - RIGHT_PAD)

    def x(self, time_ns: int) -> float:
        """The x of ``time_ns``, clamped to the plot."""
        frac = min(max(time_ns / self.span_ns, 0.0), 1.0)
        return round(self.x0 + frac * (self.x1 - self.x0), 1)

    def ticks(self) -> list[tuple[float, str]]:
        """About ten (x, label) ticks at a round step (1, 2 or 5 times a power of ten)."""
        span_s = self.span_ns / 1e9
        raw = span_s / 10
        power = 10 ** math.floor(math.log10(raw))
        step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
        decimals = max(0, -math.floor(math.log10(step)))
        out, n = [], 0
        while n * step <= span_s + 1e-12:
            out.append((self.x(round(n * step * 1e9)), f"{n * step:.{decimals}f}s"))
            n += 1
        return out


def text_width(text: str, char_w: float = CHAR_W) -> float:
    """Estimated width in px of ``text`` at the report's label size."""
    return len(text) * char_w


def label_place(x: float, label: str, gap: float = 8) -> tuple[float, float, float, str]:
    """(reserved from, reserved to, text x, anchor): right of ``x``, or left at the edge."""
    width = text_width(label)
    if x + gap + width <= WIDTH - 2:
        return x - 6, x + gap + width, x + gap, "start"
    return x - gap - width, x + 6, x - gap, "end"


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
    tip = esc(f"{m.label} at {seconds(m.time_ns)} {m.detail}".strip(), 400)
    text = ""
    if labelled:
        _, _, text_x, anchor = label_place(x, m.label)
        text = f'<text x="{text_x}" y="{y + 4}" text-anchor="{anchor}">{esc(m.label, 48)}</text>'
    return f'<g class="mk {m.style}"><title>{tip}</title>{shape}{text}</g>'


def axis(scale: Scale, y: float) -> str:
    """The time axis at height ``y``: a line with labelled ticks in seconds."""
    out = [f'<line class="axis" x1="{scale.x0}" y1="{y}" x2="{scale.x1}" y2="{y}"/>']
    for x, label in scale.ticks():
        out.append(
            f'<line class="tick" x1="{x}" y1="{y}" x2="{x}" y2="{y + 5}"/>'
            f'<text class="ticklabel" x="{x}" y="{y + 17}">{esc(label)}</text>'
        )
    return "".join(out)
