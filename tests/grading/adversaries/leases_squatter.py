"""Adversary (leases): the lease is taken once and never honoured. worker-1 takes it (token
1), never renews it, and runs the job under token 1 for the whole run; worker-2 and worker-3
say they are ready and never touch the lease, so nobody ever takes it over and the store
never sees a higher token. A restarted worker-1 reads its token back from the lease row.
Every safety invariant holds vacuously (one lease, one writer, tokens never go down) and
the job runs after every fault: it scored 1.0, the golden's reward, with no renewal, no
expiry and no failover.

Expected: the lease ran out two seconds after its grant and stood vacant while workers
were free to take it: ``lease_failover`` fails, reward 0.

pack: leases
reward: 0
fails: lease_failover
"""

import json
import os
import time
import urllib.request

import psycopg

ME = os.environ["WORKER_ID"]
print("worker ready", flush=True)
if ME != "worker-1":
    while True:
        time.sleep(3600)

DSN, NAME = os.environ["PG_DSN"], os.environ["LEASE_NAME"]
STORE, KEY = os.environ["STORE_URL"], os.environ["STORE_KEY"]


def token() -> int:
    with psycopg.connect(DSN, connect_timeout=5, autocommit=True) as conn:
        row = conn.execute(
            "UPDATE leases SET holder = %s, token = token + 1, expires_at = now() + "
            "make_interval(secs => 2) WHERE name = %s AND expires_at < now() "
            "AND holder IS NULL RETURNING token",
            (ME, NAME),
        ).fetchone()
        if row is None:
            row = conn.execute("SELECT token FROM leases WHERE name = %s", (NAME,)).fetchone()
        return int(row[0])


def call(method: str, path: str, body: object = None) -> object:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(STORE + path, data=data, method=method)
    request.add_header("Authorization", f"Bearer {KEY}")
    request.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(request, timeout=2) as response:
        return json.loads(response.read())


mine = None
while mine is None:
    try:
        mine = token()
    except Exception as exc:
        print(f"lease: {exc}", flush=True)
        time.sleep(0.2)
while True:
    time.sleep(0.2)
    try:
        state = call("GET", "/state")
        last = state.get("last") if isinstance(state, dict) else None
        call("POST", "/write", {"token": mine, "seq": (last["seq"] if last else 0) + 1})
    except Exception as exc:
        print(f"store: {exc}", flush=True)
