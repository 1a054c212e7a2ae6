"""Adversary (payments): opens as many database connections as the server lets its role,
and keeps them, so that the harness cannot connect when it comes to read (a harness that
cannot read was a harness error, left out of the reward). It lets two go, for the golden
consumer, which then does the work.

Expected: its role has a connection limit (its PROBE line: refused past it) and the server
keeps connections for the harness's reader: the harness reads, the work is done: reward 1.

pack: payments
golden: yes
reward: 1
probes: refused
"""

import os

import psycopg
from _probe import attempt, run_golden, say

DSN = os.environ["PG_DSN"]
held = []


def flood() -> None:
    for _ in range(500):
        held.append(psycopg.connect(DSN, connect_timeout=5))
    raise RuntimeError("no limit after 500 connections")


attempt("connections-without-limit", flood)
for conn in held[:2]:
    conn.close()
say(f"adversary: holding {len(held) - 2} connections")
run_golden()
