"""Adversary (payments): makes a harness service print without end. A function of its own
that ``RAISE LOG``s in a loop has the PostgreSQL server write ten thousand log lines per
query, at no CPU cost of the candidate's; the harness recorded every line a service of its
own printed: 300 MB of trace and a gigabyte of the harness's memory in 20 s, enough over a
whole run to fill the grader's disk or memory (a harness error, or a grader killed). The
golden consumer does the work meanwhile.

Expected: past 20,000 lines a service's output is counted, not recorded: the trace stays
small (about 4 MB: it was 300 MB), the run goes on as the golden's, reward 1.0.

pack: payments
golden: yes
reward: 1.0
trace_mb: 20
"""

import os
import time

import psycopg
from _probe import in_background, run_golden, say

DSN = os.environ["PG_DSN"]
FLOOD = """
CREATE OR REPLACE FUNCTION pg_temp.flood(k int) RETURNS void LANGUAGE plpgsql AS $$
BEGIN FOR i IN 1..k LOOP RAISE LOG 'flood %', i; END LOOP; END $$
"""


def flood() -> None:
    lines = 0
    try:
        with psycopg.connect(DSN, autocommit=True, connect_timeout=10) as conn:
            conn.execute(FLOOD)
            until = time.monotonic() + 15
            while time.monotonic() < until:
                conn.execute("SELECT pg_temp.flood(10000)")
                lines += 10000
    except Exception as exc:
        say(f"adversary: flood stopped ({type(exc).__name__})")
    say(f"adversary: {lines} lines logged")


in_background(flood)
run_golden()
