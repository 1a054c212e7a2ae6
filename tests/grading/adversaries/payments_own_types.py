"""Adversary (payments): creates ``charges`` itself, before the golden consumer, with
``amount_cents`` of a domain type of its own (a bigint with a CHECK that calls a function
of its own): reading a column of a type the candidate defined means trusting its definition
(its checks, casts, I/O). Everything else is the golden consumer's work.

Expected: the reader reads columns of built-in (pg_catalog) types only: the seed fails as
unreadable, reward 0.

pack: payments
golden: yes
reward: 0
unreadable: public.charges.amount_cents is of type public.cents, not a built-in type
"""

import os

import psycopg
from _probe import run_golden, say

SETUP = """
CREATE OR REPLACE FUNCTION positive(bigint) RETURNS boolean LANGUAGE sql AS 'SELECT $1 > 0';
CREATE DOMAIN cents AS bigint CHECK (positive(VALUE));
CREATE TABLE IF NOT EXISTS charges (
    order_id     text PRIMARY KEY,
    account      text NOT NULL,
    amount_cents cents NOT NULL
);
"""

with psycopg.connect(os.environ["PG_DSN"], connect_timeout=10, autocommit=True) as conn:
    conn.execute(SETUP)  # type: ignore[arg-type]
say("adversary: charges.amount_cents is a domain of its own")
run_golden()
