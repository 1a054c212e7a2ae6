"""Adversary (leases): worker-1 takes ``ACCESS EXCLUSIVE`` on ``leases`` (its UPDATE
privilege lets it) three seconds into the run, in a transaction it never ends: every
renewal and every read of the lease waits for ever, the harness's read of the lease
included; a harness that waited would hang until something killed the run (a harness
error, once left out of the reward). The other workers are golden.

Expected: the harness's read gives up after its lock timeout: the seed fails as unreadable
(never an error, never a hang), reward 0.

pack: leases
golden: yes
reward: 0
unreadable: public.leases: a lock on it was held past
"""

import os
import time

import psycopg
from _probe import in_background, run_golden, say

DSN = os.environ["PG_DSN"]


def lock() -> None:
    time.sleep(3)
    conn = psycopg.connect(DSN, connect_timeout=10)
    conn.execute("LOCK TABLE leases IN ACCESS EXCLUSIVE MODE")
    say("adversary: leases locked for good")
    while True:
        time.sleep(3600)


if os.environ["WORKER_ID"] == "worker-1":
    in_background(lock)
run_golden()
