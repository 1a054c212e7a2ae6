"""Workload ops for the report: invoke paired with its completion, and evidence matching."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from replay.trace.text import atom

from ._html import as_ns

_MAX_TOKENS = 2000
_MIN_TOKEN = 2


@dataclass
class Op:
    """One operation: ``result`` is ok/fail/info, or "pending" when it never completed."""

    process: str
    f: str
    value: Any
    start_ns: int | None
    end_ns: int | None = None
    result: str = "pending"
    error: Any = None
    hit: bool = False


def value_tokens(value: Any) -> set[str]:
    """The string atoms of an op value (itself, or the items of a list or map)."""
    if isinstance(value, str):
        return {value}
    if isinstance(value, Mapping):
        return {v for v in value.values() if isinstance(v, str)}
    if isinstance(value, list | tuple):
        return {v for v in value if isinstance(v, str)}
    return set()


def _walk(value: Any, found: set[str], depth: int = 0) -> None:
    if len(found) >= _MAX_TOKENS or depth > 8:
        return
    if isinstance(value, str):
        if len(value) >= _MIN_TOKEN:
            found.add(value)
    elif isinstance(value, Mapping):
        for key, item in value.items():
            _walk(key, found, depth + 1)
            _walk(item, found, depth + 1)
    elif isinstance(value, list | tuple):
        for item in value:
            _walk(item, found, depth + 1)


def evidence_tokens(verdicts: Iterable[Mapping[str, Any]]) -> frozenset[str]:
    """Every string (keys included) in the evidence of the verdicts that were violated."""
    found: set[str] = set()
    for verdict in verdicts:
        if verdict.get("valid") is False:
            _walk(verdict.get("evidence"), found)
    return frozenset(found)


def _take(pending: list[Op], f: str, value: Any) -> Op | None:
    """Newest open op with this f and value (older ones were lost), else oldest with this f."""
    for n in range(len(pending) - 1, -1, -1):
        if pending[n].f == f and pending[n].value == value:
            return pending.pop(n)
    for n, op in enumerate(pending):
        if op.f == f:
            return pending.pop(n)
    return None


def pair_ops(events: Iterable[Mapping[str, Any]], tokens: frozenset[str]) -> dict[str, list[Op]]:
    """Ops per process in invoke order; a completion with no invoke is an op of its own."""
    ops: dict[str, list[Op]] = {}
    pending: dict[str, list[Op]] = {}
    for event in events:
        process, f = str(event.get("process")), str(event.get("f"))
        kind, value, t = event.get("type"), event.get("value"), as_ns(event.get("time_ns"))
        if kind == "invoke":
            op = Op(process, f, value, t)
            ops.setdefault(process, []).append(op)
            pending.setdefault(process, []).append(op)
            continue
        found = _take(pending.get(process, []), f, value)
        if found is None:
            found = Op(process, f, value, None)
            ops.setdefault(process, []).append(found)
        found.end_ns, found.result, found.error = t, atom(kind), event.get("error")
        if found.value is None:
            found.value = value
    for process_ops in ops.values():
        for op in process_ops:
            op.hit = bool(tokens & value_tokens(op.value))
    return ops
