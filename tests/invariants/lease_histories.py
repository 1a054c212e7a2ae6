"""Hand-written lease histories: a lock service's facts and a resource's writes, Jepsen style.

Each helper returns the ops of one fact or one write (an invocation and its completion); a
``story`` numbers them in order. Times: ``at`` is on the shared clock in seconds, and each op
is recorded at that time in the run (``time_ns``), so explanations read the same numbers.
"""

from __future__ import annotations

from typing import Any

from invariants.history import History

AUTHORITY, RESOURCE = "lease-audit", "store"
STATE: dict[str, Any] = {"lease_evidence": {"authority": AUTHORITY, "resource": RESOURCE}}


def _pair(
    process: str, f: str, value: dict[str, Any], outcome: str = "ok", error: str | None = None
) -> list[dict[str, Any]]:
    at = value.get("at", 0.0)
    invoke = {"process": process, "type": "invoke", "f": f, "value": value, "at": at}
    if outcome == "pending":
        return [invoke]
    done = {"process": process, "type": outcome, "f": f, "value": value, "at": at, "error": error}
    return [invoke, done]


def grant(token: int, holder: str, at: float, ttl: float = 2.0, **kw: Any) -> list[dict[str, Any]]:
    return _pair(
        AUTHORITY, "grant", {"token": token, "holder": holder, "at": at, "until": at + ttl, **kw}
    )


def renew(token: int, by: str, at: float, ttl: float = 2.0, **kw: Any) -> list[dict[str, Any]]:
    return _pair(AUTHORITY, "renew", {"token": token, "by": by, "at": at, "until": at + ttl, **kw})


def release(token: int, by: str, at: float) -> list[dict[str, Any]]:
    return _pair(AUTHORITY, "release", {"token": token, "by": by, "at": at})


def write(
    writer: str, token: int | None, at: float, outcome: str = "ok", **kw: Any
) -> list[dict[str, Any]]:
    error = "fenced" if outcome == "fail" else None
    return _pair(
        RESOURCE, "write", {"writer": writer, "token": token, "at": at, **kw}, outcome, error
    )


def story(*steps: list[dict[str, Any]]) -> History:
    ops: list[dict[str, Any]] = []
    for step in steps:
        for op in step:
            fields = {k: v for k, v in op.items() if k != "at"}
            ops.append({**fields, "index": len(ops), "time_ns": round(op["at"] * 1e9)})
    return History(ops)
