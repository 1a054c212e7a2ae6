"""Reading the tenants scenario's final state and history, with a precise error per bad shape.

``final_state`` (read by the harness with its own privileged connection; see README.md)::

    {"tenants": ["acme", ...],
     "items": [{"id": "it-1", "tenant": "acme", "body": "..."}, ...],   # app.items, all rows
     "schema": {...}}                                                  # diagnosis only

The history holds the harness's own requests: processes ``client`` (the workload) and
``probe`` (the recovery reads), operations ``create`` and ``list`` (one process has at most
one request open); an ``ok`` completion
carries the rows of the response (``item`` or ``items``, each ``{"id", "body"}``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from invariants import NEMESIS, History, Op

#: The registry namespace of the tenants checkers (the scenario's id).
PACK = "tenants"
#: The process of the recovery reads (``Tenants.settled``); ``client`` is the workload's.
PROBE = "probe"


class MalformedState(ValueError):
    """The final state or a request operation does not have the documented shape."""


class Row(NamedTuple):
    tenant: str
    body: str


def _entry(final_state: Mapping[str, Any], key: str, kind: type) -> Any:
    if not isinstance(final_state, Mapping):
        raise MalformedState(f"final_state must be a map, got {type(final_state).__name__}")
    if key not in final_state:
        raise MalformedState(f"final_state has no {key!r}")
    value = final_state[key]
    if kind is list and isinstance(value, tuple):
        value = list(value)
    if not isinstance(value, kind):
        raise MalformedState(f"final_state[{key!r}] must be a {kind.__name__}, got {value!r}")
    return value


def _text(row: Any, where: str, name: str) -> str:
    if not isinstance(row, Mapping):
        raise MalformedState(f"{where} must be a map, got {type(row).__name__}")
    value = row.get(name)
    if not isinstance(value, str):
        raise MalformedState(f"{where} has no string {name!r} (got {value!r})")
    return value


def items(final_state: Mapping[str, Any]) -> dict[str, Row]:
    """Every row of app.items by id (as the harness read it, bypassing row-level security)."""
    out: dict[str, Row] = {}
    for i, row in enumerate(_entry(final_state, "items", list)):
        where = f"final_state['items'][{i}]"
        out[_text(row, where, "id")] = Row(_text(row, where, "tenant"), _text(row, where, "body"))
    return out


def tenants(final_state: Mapping[str, Any]) -> list[str]:
    names = _entry(final_state, "tenants", list)
    for i, name in enumerate(names):
        if not isinstance(name, str):
            raise MalformedState(f"final_state['tenants'][{i}] must be str, got {name!r}")
    return list(names)


@dataclass(frozen=True)
class Request:
    """One request of the harness and how it ended."""

    invoke: Op
    completion: Op | None

    @property
    def f(self) -> str:
        return self.invoke.f

    @property
    def outcome(self) -> str:
        return "pending" if self.completion is None else self.completion.type

    @property
    def tenant(self) -> str:
        return _text(self.invoke.value, f"op {self.invoke.index}'s value", "tenant")

    @property
    def body(self) -> str:
        """The note a create sent."""
        return _text(self.invoke.value, f"op {self.invoke.index}'s value", "body")

    def label(self) -> str:
        what = self.f
        if self.f == "create":
            key = self.invoke.value.get("key") if isinstance(self.invoke.value, Mapping) else None
            what = f"create {key}"
        return f"op {self.invoke.index} ({self.tenant} {what})"

    def rows(self) -> list[tuple[str, str]]:
        """The (id, body) rows of an ``ok`` response; [] for any other outcome."""
        if self.completion is None or self.completion.type != "ok":
            return []
        value = self.completion.value
        where = f"op {self.completion.index}'s value"
        if not isinstance(value, Mapping):
            raise MalformedState(f"{where} must be a map")
        rows: Any = [value.get("item")] if self.f == "create" else value.get("items")
        if not isinstance(rows, list):
            raise MalformedState(f"{where} has no 'items' list")
        return [
            (_text(row, f"{where} row {i}", "id"), _text(row, f"{where} row {i}", "body"))
            for i, row in enumerate(rows)
        ]


def requests(history: History) -> list[Request]:
    """The harness's requests (every ``create`` and ``list`` but the nemesis's), in
    invocation order, each paired with its completion."""
    ops = History(op for op in history if op.process != NEMESIS and op.f in ("create", "list"))
    return [Request(pair.invoke, pair.completion) for pair in ops.pairs()]


def probes_among(found: list[dict[str, Any]]) -> str:
    """`` (3 of them recovery probes)`` when some of ``found`` (each with a ``probe`` flag)
    were the recovery probes' (a defect that never recovers fails every probe)."""
    count = sum(1 for entry in found if entry.get("probe"))
    return f" ({count} of them recovery probes)" if count else ""


def posters(reqs: list[Request]) -> dict[str, set[str]]:
    """Note body -> the tenants whose create requests sent it."""
    out: dict[str, set[str]] = {}
    for req in reqs:
        if req.f == "create":
            out.setdefault(req.body, set()).add(req.tenant)
    return out
