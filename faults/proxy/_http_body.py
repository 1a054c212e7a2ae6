"""Decoding Toxiproxy JSON request bodies into typed fields, the way Go's decoder does.

Keys match case-insensitively, unknown keys are ignored, ``null`` leaves a field at its
default; a value of the wrong JSON type is a 400 ``bad request body: ...``.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from typing import Any

from faults.proxy.errors import BadRequest

#: Where a proxy listens when a request names no ``listen`` (never all interfaces).
DEFAULT_LISTEN = "127.0.0.1:0"
#: JSON whitespace; a body of only this is Go's ``EOF``.
_WHITESPACE = b" \t\r\n"


def parse_json(body: bytes) -> Any:
    """The JSON value of ``body``; 400 ``bad request body: ...`` when it is not JSON."""
    if not body.strip(_WHITESPACE):
        raise BadRequest("bad request body: EOF")
    try:
        return json.loads(body, parse_constant=_reject_constant)
    except RecursionError:
        raise BadRequest("bad request body: JSON nested too deeply") from None
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, int digit limits
        raise BadRequest(f"bad request body: {_clip(str(exc))}") from None


def fields(value: Any, names: Collection[str], where: str = "") -> dict[str, Any]:
    """The non-null members of JSON object ``value`` named in ``names`` (matched case-
    insensitively, the last of duplicates winning); a null ``value`` has none."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise BadRequest(f"bad request body: expected a JSON object{where}, got {kind(value)}")
    found: dict[str, Any] = {}
    for key, item in value.items():
        name = key.casefold()
        if name in names and item is not None:
            found[name] = item
    return found


def text(found: dict[str, Any], name: str, where: str = "") -> str | None:
    """Field ``name`` as a string, or None when absent."""
    value = found.get(name)
    if value is None or isinstance(value, str):
        return value
    raise BadRequest(f"bad request body: {name} must be a string{where}, got {kind(value)}")


def flag(found: dict[str, Any], name: str, where: str = "") -> bool | None:
    """Field ``name`` as a boolean, or None when absent."""
    value = found.get(name)
    if value is None or isinstance(value, bool):
        return value
    raise BadRequest(f"bad request body: {name} must be a boolean{where}, got {kind(value)}")


def number(found: dict[str, Any], name: str, where: str = "") -> float | None:
    """Field ``name`` as a float, or None when absent (huge integers are a 400)."""
    value = found.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise BadRequest(f"bad request body: {name} must be a number{where}, got {kind(value)}")
    try:
        return float(value)
    except OverflowError:
        raise BadRequest(f"bad request body: {name} is out of range{where}") from None


def kind(value: Any) -> str:
    """The JSON type name of a decoded value."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def _reject_constant(name: str) -> Any:
    raise ValueError(f"invalid JSON constant {name}")


def _clip(message: str, limit: int = 200) -> str:
    return message if len(message) <= limit else message[: limit - 3] + "..."
