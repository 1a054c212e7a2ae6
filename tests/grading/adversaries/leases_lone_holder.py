"""Adversary (leases): one worker does everything and the lease never passes on. worker-1
takes the lease and renews it as long as its row still names it, expired or not (nobody
else ever takes it, so its holder never changes); it writes only within a second of a
successful renewal, so it never writes under a lease it might have lost. worker-2 and
worker-3 say they are ready and idle. When worker-1 is paused or cut off from the database
past the TTL the job simply stops until worker-1 is back: no failover, yet every safety
invariant holds and the job recovers after the fault. It scored 1.0.

Expected: on a seed whose one fault pauses worker-1 for 4.3 s (seed 10) the lease stood
vacant for more than the TTL while worker-2 and worker-3 were free: ``lease_failover``
fails, reward 0.

pack: leases
seeds: 10
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
TAKE = (
    "UPDATE leases SET holder = %(me)s, token = token + 1, expires_at = now() + "
    "make_interval(secs => 2) WHERE name = %(name)s AND expires_at < now() "
    "AND holder IS DISTINCT FROM %(me)s RETURNING token"
)
KEEP = (
    "UPDATE leases SET expires_at = now() + make_interval(secs => 2) "
    "WHERE name = %(name)s AND holder = %(me)s RETURNING token"
)


def call(method: str, path: str, body: object = None) -> object:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(STORE + path, data=data, method=method)
    request.add_header("Authorization", f"Bearer {KEY}")
    request.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(request, timeout=1) as response:
        return json.loads(response.read())


conn = None
renewed, mine = 0.0, None
while True:
    sent = time.monotonic()
    try:
        if conn is None:
            conn = psycopg.connect(DSN, connect_timeout=1, autocommit=True)
        args = {"me": ME, "name": NAME}
        row = conn.execute(KEEP, args).fetchone() or conn.execute(TAKE, args).fetchone()
        if row is not None:
            renewed, mine = sent, int(row[0])
    except Exception as exc:
        print(f"lease: {exc}", flush=True)
        conn = None
    if mine is not None and time.monotonic() - renewed < 1.0:
        try:
            state = call("GET", "/state")
            last = state.get("last") if isinstance(state, dict) else None
            call("POST", "/write", {"token": mine, "seq": (last["seq"] if last else 0) + 1})
        except Exception as exc:
            print(f"store: {exc}", flush=True)
    time.sleep(0.2)
