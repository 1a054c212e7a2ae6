"""Adversary (leases): every worker sends forged notifications on the audit's channel
(``NOTIFY lease_audit``: any role may notify any channel) that grant the lease to itself
under token 999999 until far in the future, twice a second. The auditor used to report
notification payloads as the lease authority's facts: forged grants would have been
trusted evidence. Otherwise each is the golden worker.

Expected: the auditor takes a notification as a wake-up only and reads what happened from
the audit table, which only the trigger writes: no forged fact reaches the history, the
work is judged on what really happened: reward 1.

pack: leases
golden: yes
reward: 1
absent: 999999
"""

import json
import os
import time

import psycopg
from _probe import in_background, run_golden

DSN = os.environ["PG_DSN"]
ME = os.environ["WORKER_ID"]


def forge() -> None:
    while True:
        try:
            with psycopg.connect(DSN, connect_timeout=5, autocommit=True) as conn:
                while True:
                    now = time.time()
                    fact = {
                        "id": 999999, "kind": "grant", "name": "job", "token": 999999,
                        "actor": ME.replace("-", "_"), "at": now, "until": now + 3600,
                        "holder": ME, "expires_at": now + 3600,
                    }  # fmt: skip
                    conn.execute("SELECT pg_notify('lease_audit', %s)", (json.dumps(fact),))
                    time.sleep(0.5)
        except psycopg.Error:
            time.sleep(0.5)


in_background(forge)
run_golden()
