"""How trace values read as text, one line each: the timeline, the report and replay use it.

::

    seconds(1_234_000_000)          "+1.234s"   (run-clock nanoseconds; "?" when unknown)
    atom({"id": "o-1", "n": 2})     "{id=o-1, n=2}"
    fields({"id": "o-1", "n": 2})   "id=o-1 n=2"
    clip("x" * 200, 10)             "xxxxxxx..."
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

_BARE = re.compile(r"^[\w.:/@+\-]+$")
LIMIT = 160


def clip(text: str, limit: int = LIMIT) -> str:
    """``text`` cut to ``limit`` characters, ending in "..." when cut."""
    return text if len(text) <= limit else text[: max(0, limit - 3)] + "..."


def atom(value: Any) -> str:
    """One value as a short token: bare words unquoted, other strings JSON-quoted."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value if _BARE.match(value) else json.dumps(value)
    if isinstance(value, bytes | bytearray):
        return "0x" + bytes(value).hex() if len(value) <= 16 else f"<{len(value)} bytes>"
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{atom(k)}={atom(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(atom(v) for v in value) + "]"
    return repr(value)


def fields(value: Any, limit: int = LIMIT) -> str:
    """A top-level value: a map as "k=v k=v", a one-line string as is, else its atom."""
    if isinstance(value, Mapping):
        text = " ".join(f"{atom(k)}={atom(v)}" for k, v in value.items())
    elif isinstance(value, str) and value.isprintable():
        text = value
    elif value is None:
        text = ""
    else:
        text = atom(value)
    return clip(text, limit)


def seconds(time_ns: object) -> str:
    """Run-clock nanoseconds as "+1.234s" ("?" when missing or not a number).

    The one seconds formatter of the project: every rendering of a trace time uses it.
    """
    if isinstance(time_ns, bool) or not isinstance(time_ns, int | float):
        return "?"
    return f"{time_ns / 1e9:+.3f}s"
