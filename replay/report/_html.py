"""Text helpers of the HTML report: escaping that trace contents cannot break out of."""

from __future__ import annotations

import html
import re
from typing import Any

from replay.trace.text import atom, clip, fields

_CONTROL = re.compile(
    r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff\ufdd0-\ufdef\ufffe\uffff]"
)


def _visible(match: re.Match[str]) -> str:
    return f"\\x{ord(match.group()):02x}" if ord(match.group()) < 0x100 else "\ufffd"


def esc(value: object, limit: int | None = None) -> str:
    """``value`` as text safe in HTML and SVG text or attributes (control chars made visible)."""
    text = value if isinstance(value, str) else str(value)
    text = _CONTROL.sub(_visible, text)
    if limit is not None:
        text = clip(text, limit)
    return html.escape(text, quote=True)


def esc_atom(value: Any, limit: int = 160) -> str:
    """One trace value as a short escaped token (``atom`` of the timeline, clipped)."""
    return esc(clip(atom(value), limit))


def esc_fields(value: Any, limit: int = 160) -> str:
    """A top-level value as escaped "k=v k=v" text."""
    return esc(fields(value, limit))


def duration(start_ns: int | None, end_ns: int | None) -> str:
    """The time between two instants, "12 ms" or "1.234 s" ("" when either is unknown)."""
    if start_ns is None or end_ns is None:
        return ""
    took = (end_ns - start_ns) / 1e9
    return f"{took * 1000:.0f} ms" if took < 1 else f"{took:.3f} s"


def as_ns(value: object) -> int | None:
    """An event's time_ns when it is an int (bools and other types are unknown)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None
