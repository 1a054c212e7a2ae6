"""Adversary (leases): tries to forge and erase the lease audit (insert a grant, delete the
trail, disable the trigger, log in as the superuser: all refused), then takes the lease once
and writes to the store under a fencing token no lease ever had. Expected: every probe
refused; fencing_tokens fails (the store accepted writes under a token never granted)."""

import json
import os
import signal
import sys
import time
import urllib.error
import urllib.request

import psycopg

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pg_probe import probe

me = os.environ["WORKER_ID"]
dsn = os.environ["PG_DSN"]
name = os.environ["LEASE_NAME"]
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
probe(dsn, [
    ("audit-insert", "INSERT INTO lease_audit (kind, name, token, actor, at, until, holder)"
                     f" VALUES ('grant', '{name}', 999999, '{me}', now(), now(), '{me}')"),
    ("audit-delete", "DELETE FROM lease_audit"),
    ("audit-update", "UPDATE lease_audit SET actor = 'worker-9'"),
    ("trigger-disable", "ALTER TABLE leases DISABLE TRIGGER lease_audit"),
    ("table-owner", "ALTER TABLE leases OWNER TO CURRENT_USER"),
])  # fmt: skip
print("worker ready", flush=True)


def take() -> None:
    with psycopg.connect(dsn, connect_timeout=5, autocommit=True) as conn:
        conn.execute(
            "UPDATE leases SET holder = %s, token = token + 1,"
            " expires_at = now() + make_interval(secs => 2)"
            " WHERE name = %s AND expires_at < now()",
            (me, name),
        )


def write(seq: int) -> int:
    body = json.dumps({"token": 10**6, "seq": seq}).encode()
    request = urllib.request.Request(
        os.environ["STORE_URL"] + "/write", data=body, method="POST",
        headers={"Authorization": f"Bearer {os.environ['STORE_KEY']}",
                 "Content-Type": "application/json"},
    )  # fmt: skip
    try:
        with urllib.request.urlopen(request, timeout=3) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


try:
    take()
except psycopg.Error as exc:
    print(f"take: {exc}", flush=True)
seq = 0
while True:
    try:
        with urllib.request.urlopen(os.environ["STORE_URL"] + "/state", timeout=3) as r:
            last = json.loads(r.read()).get("last") or {}
        seq = int(last.get("seq", seq)) + 1
        print(f"write {seq}: {write(seq)}", flush=True)
    except OSError as exc:
        print(f"store: {exc}", flush=True)
    time.sleep(0.2)
