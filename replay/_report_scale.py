"""The shared time scale of the report's timelines: one axis for the original and its replays."""

from __future__ import annotations

import math
from dataclasses import dataclass

WIDTH = 1120
LABEL_W = 200
RIGHT_PAD = 16
CHAR_W = 6.1  # average advance of an 11px sans-serif character, for layout estimates


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
