"""Small helpers for readable, deterministic explanations (for checkers of any pack)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

LIMIT = 10


def natural_key(text: str) -> tuple[tuple[int, int | str], ...]:
    """Sort key that orders ``o-2`` before ``o-10``."""
    return tuple(
        (0, int(part)) if part.isdigit() else (1, part) for part in re.split(r"(\d+)", text) if part
    )


def natural(ids: Iterable[str]) -> list[str]:
    """``ids`` without duplicates, in natural order."""
    return sorted(set(ids), key=natural_key)


def listing(items: Sequence[str], limit: int = LIMIT) -> str:
    """``a, b, c`` or ``a, b, c and 4 more`` past ``limit`` items."""
    shown = ", ".join(items[:limit])
    return shown if len(items) <= limit else f"{shown} and {len(items) - limit} more"


def were(count: int) -> str:
    return "was" if count == 1 else "were"


def plural(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"
