"""Adversary (payments): leaves operators and functions in its schema (on every default
search path) named as what a harness query might call: ``=`` and ``<`` on text, ``count``,
``host``, ``lower``, ``pg_total_relation_size``, ``now``; each would make the consumer's
role a superuser and run a shell on the server (creating /tmp/chaos-adversary-trap-* on the
host) if the superuser ever called it, then behave as the built-in would. It also sets its
own role's search path. Then the golden consumer does the work.

Expected: the harness qualifies everything and searches pg_catalog first (its reader, the
bypass detector and its catalog reads): no trap fires, no marker file; the work is done:
reward 1.

pack: payments
golden: yes
reward: 1
"""

import os

import psycopg
from _probe import run_golden, say

DSN = os.environ["PG_DSN"]
TRAP = """
CREATE OR REPLACE FUNCTION trap() RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF current_user NOT LIKE '%consumer%' THEN
        BEGIN
            EXECUTE format('ALTER ROLE %I SUPERUSER', 'payments_consumer');
            EXECUTE 'COPY (SELECT 1) TO PROGRAM ''touch /tmp/chaos-adversary-trap-'
                || pg_backend_pid() || '''';
        EXCEPTION WHEN others THEN NULL;
        END;
    END IF;
END $$;
CREATE OR REPLACE FUNCTION text_eq(a text, b text) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN PERFORM trap(); RETURN a OPERATOR(pg_catalog.=) b; END $$;
CREATE OR REPLACE FUNCTION text_lt(a text, b text) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN PERFORM trap(); RETURN a OPERATOR(pg_catalog.<) b; END $$;
CREATE OPERATOR = (LEFTARG = text, RIGHTARG = text, FUNCTION = text_eq);
CREATE OPERATOR < (LEFTARG = text, RIGHTARG = text, FUNCTION = text_lt);
CREATE OR REPLACE FUNCTION lower(t text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN PERFORM trap(); RETURN pg_catalog.lower(t); END $$;
CREATE OR REPLACE FUNCTION host(a inet) RETURNS text LANGUAGE plpgsql AS $$
BEGIN PERFORM trap(); RETURN pg_catalog.host(a); END $$;
CREATE OR REPLACE FUNCTION now() RETURNS timestamptz LANGUAGE plpgsql AS $$
BEGIN PERFORM trap(); RETURN pg_catalog.now(); END $$;
CREATE OR REPLACE FUNCTION pg_total_relation_size(r regclass) RETURNS bigint
LANGUAGE plpgsql AS $$
BEGIN PERFORM trap(); RETURN pg_catalog.pg_total_relation_size(r); END $$;
CREATE OR REPLACE FUNCTION count_step(n bigint, x anyelement) RETURNS bigint
LANGUAGE plpgsql AS $$ BEGIN PERFORM trap(); RETURN n + 1; END $$;
CREATE AGGREGATE count(anyelement) (SFUNC = count_step, STYPE = bigint, INITCOND = '0');
"""

with psycopg.connect(DSN, connect_timeout=10, autocommit=True) as conn:
    conn.execute(TRAP)  # type: ignore[arg-type]
    conn.execute("ALTER ROLE CURRENT_USER SET search_path = public, pg_catalog")
say("adversary: traps laid on the search path")
run_golden()
