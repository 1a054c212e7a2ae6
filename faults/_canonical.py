"""Canonical msgpack encoding: sorted keys, float64 floats, lists for every sequence."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import msgpack


def canonical(value: Any) -> Any:
    """``value`` rebuilt with sorted dict keys, lists for tuples and ``-0.0`` as ``0.0``."""
    if isinstance(value, Mapping):
        if not all(isinstance(key, str) for key in value):
            raise TypeError("canonical encoding needs string keys")
        return {key: canonical(value[key]) for key in sorted(value)}
    if isinstance(value, list | tuple):
        return [canonical(item) for item in value]
    if isinstance(value, float):
        if not math.isfinite(value):
            raise TypeError(f"canonical encoding needs finite floats, got {value}")
        return value + 0.0
    if value is None or isinstance(value, bool | int | str):
        return value
    raise TypeError(f"canonical encoding cannot encode {type(value).__name__}")


def packb(value: Any) -> bytes:
    """Canonical msgpack bytes of plain data: equal data gives equal bytes everywhere."""
    data: bytes = msgpack.packb(canonical(value), use_bin_type=True, use_single_float=False)
    return data
