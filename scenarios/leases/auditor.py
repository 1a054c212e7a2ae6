"""The lease auditor: reports each committed change of the lease table as a history op.

The harness runs it. It LISTENs on the audit trigger's channel (``database.py``): Postgres
delivers notifications of committed transactions only, in commit order, so the history gets
exactly the changes that happened. Each becomes an ``invoke``/``ok`` pair of this process
(``f`` = grant, renew or release) in the vocabulary of ``invariants.leases``::

    grant    {"token", "holder", "at", "until", "expires_at", "id"}
    renew    {"token", "by", "holder", "at", "until", "expires_at", "id"}
    release  {"token", "by", "at", "id"}

``holder`` and ``by`` are worker ids, from the database role that made the change (never
from the row's ``holder`` column, which a worker writes). A renewal's ``holder`` is the
worker the lease was granted to, so a renewal by anyone else reads ``"by": "worker-1",
"holder": "worker-2"``. ``at``/``until``/``expires_at`` are seconds since the epoch on the
database's clock; ``expires_at`` is what the worker wrote, ``until`` the lease as granted.

Usage: python -m scenarios.leases.auditor   (PG_DSN: the harness's DSN; ROLES: role -> worker;
SCHEMA: the audit's schema)
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import psycopg

from scenarios.leases.database import CHANNEL, HARNESS_CONNECT_TIMEOUT_S
from scenarios.leases.store import op

READY_LINE = "auditor listening"
#: The most facts the auditor reports: the harness's reader refuses an audit of more rows
#: (its ``MAX_ROWS``: the seed then fails as unreadable), and a worker can make a fact per
#: UPDATE without end (a DO loop), each an op pair in the harness's memory.
MAX_FACTS = 100_000


class Auditor:
    def __init__(self, roles: dict[str, str]) -> None:
        self.roles = roles
        self.granted_to: dict[int, str] = {}
        self.last_id = 0
        self.reported = 0

    def report(self, row: dict[str, Any]) -> None:
        if int(row["id"]) <= self.last_id or self.reported >= MAX_FACTS:
            return
        self.reported += 1
        self.last_id = int(row["id"])
        kind, token = str(row["kind"]), int(row["token"])
        actor = self.roles.get(str(row["actor"]), str(row["actor"]))
        value: dict[str, Any] = {"token": token, "at": float(row["at"]), "id": self.last_id}
        if kind == "grant":
            self.granted_to[token] = actor
            value["holder"] = actor
        else:
            value["by"] = actor
        if kind != "release":
            value["until"] = float(row["until"])
            value["expires_at"] = None if row["expires_at"] is None else float(row["expires_at"])
        if kind == "renew":
            value["holder"] = self.granted_to.get(token, str(row["holder"]))
        op("invoke", kind, value)
        op("ok", kind, value)


#: The rows of the audit not reported yet (the trigger's; no worker can write them).
NEW_ROWS = (
    "SELECT id, kind, token, actor, holder, extract(epoch FROM at) AS at,"
    " extract(epoch FROM until) AS until, CASE WHEN isfinite(expires_at)"
    " THEN extract(epoch FROM expires_at) END AS expires_at"
    " FROM {schema}.lease_audit WHERE id > %s ORDER BY id LIMIT %s"
)


def report_new(conn: psycopg.Connection[Any], auditor: Auditor, schema: str) -> None:
    if auditor.reported >= MAX_FACTS:
        return
    rows = conn.execute(
        NEW_ROWS.format(schema=schema).encode(), (auditor.last_id, MAX_FACTS - auditor.reported)
    )
    names = [c.name for c in rows.description or ()]
    for found in rows.fetchall():
        auditor.report(dict(zip(names, found, strict=True)))


def main() -> None:
    """Report every row of the audit in order. A notification only wakes the auditor up:
    any role may NOTIFY any channel, so its payload is never evidence; the rows are read
    from the table, which only the trigger writes (and once a second without one)."""
    auditor = Auditor(json.loads(os.environ["ROLES"]))
    schema = os.environ.get("SCHEMA", "public")
    with psycopg.connect(
        os.environ["PG_DSN"], autocommit=True, connect_timeout=HARNESS_CONNECT_TIMEOUT_S
    ) as conn:
        conn.execute(f"LISTEN {CHANNEL}")
        report_new(conn, auditor, schema)  # changes made before LISTEN (none, normally)
        print(READY_LINE, flush=True)
        while True:
            for _ in conn.notifies(timeout=1.0, stop_after=1):
                pass
            report_new(conn, auditor, schema)


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        sys.exit(0)
