"""Adversary (payments): fills ``ledger`` with 150,000 rows of nothing (entries of no
order, for no amount) before the golden consumer starts its work: a harness that read
whatever it found would spend its memory and time on them, or fall over.

Expected: the reader reads at most 100,000 rows of a table (and 64 MiB of it): the seed
fails as unreadable, reward 0.

pack: payments
golden: yes
reward: 0
unreadable: public.ledger: more than 100000 rows
"""

import os

from _probe import query, run_golden, say

DSN = os.environ["PG_DSN"]
query(
    DSN,
    "CREATE TABLE IF NOT EXISTS ledger (id bigserial PRIMARY KEY, order_id text NOT NULL,"
    " account text NOT NULL, amount_cents bigint NOT NULL);"
    " INSERT INTO ledger (order_id, account, amount_cents)"
    " SELECT 'x-' || g, 'acct-0', 0 FROM generate_series(1, 150000) g",
)
say("adversary: ledger filled")
run_golden()
