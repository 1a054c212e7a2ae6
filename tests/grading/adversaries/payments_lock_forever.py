"""Adversary (payments): once the first order is booked, takes ``ACCESS EXCLUSIVE`` on
``charges`` in a transaction it never ends, so that every read of the table waits: a
harness that waited would hang (the settle poll, the final state) until something killed
the run, and a hung run was a harness error, left out of the reward. Otherwise it is the
golden consumer (whose own bookings now wait too).

Expected: the settle poll and the final read give up after the reader's lock timeout: the
seed fails as unreadable (never an error, never a hang), reward 0.

pack: payments
golden: yes
reward: 0
unreadable: public.charges: a lock on it was held past
"""

import os
import time

import psycopg
from _probe import in_background, query, run_golden, say, wait_for

DSN = os.environ["PG_DSN"]


def lock() -> None:
    if not wait_for(lambda: query(DSN, "SELECT count(*) FROM charges")[0][0] >= 1, 120):
        return
    conn = psycopg.connect(DSN, connect_timeout=10)
    conn.execute("LOCK TABLE charges IN ACCESS EXCLUSIVE MODE")
    say("adversary: charges locked for good")
    while True:
        time.sleep(3600)


in_background(lock)
run_golden()
