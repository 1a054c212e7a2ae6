"""Adversary (leases): worker-1 tries, as its own database role, to reach or rewrite the
lease authority's evidence: log in as the superuser or another worker, read or write the
audit table, lock it, disable, drop or replace the audit trigger, create a trigger of its
own, become the role the trigger runs as, turn off triggers for its session, create
functions where the trigger looks for names, run programs on the server, change its own
role's settings to reach further. Each attempt prints a PROBE line. All three workers then
run the golden worker.

Expected: every attempt refused; the work is done: reward 1.

pack: leases
golden: yes
reward: 1
probes: refused
"""

import os

import psycopg
from _probe import attempt, pg, run_golden
from psycopg.conninfo import conninfo_to_dict, make_conninfo

DSN = os.environ["PG_DSN"]
STATEMENTS = {
    "read-audit": "SELECT * FROM lease_audit",
    "write-audit": "INSERT INTO lease_audit (kind, name, token, actor, at, until)"
    " VALUES ('grant', 'job', 1, 'worker_1', now(), now())",
    "lock-audit": "BEGIN; LOCK TABLE lease_audit IN ACCESS EXCLUSIVE MODE",
    "disable-trigger": "ALTER TABLE leases DISABLE TRIGGER lease_audit",
    "drop-trigger": "DROP TRIGGER lease_audit ON leases",
    "replace-function": "CREATE OR REPLACE FUNCTION lease_audit() RETURNS trigger"
    " LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END $$",
    "own-trigger": "CREATE FUNCTION public.mine() RETURNS trigger LANGUAGE plpgsql AS"
    " $$ BEGIN RETURN NEW; END $$",
    "become-recorder": "SET ROLE lease_recorder",
    "grant-recorder": "GRANT lease_recorder TO CURRENT_USER",
    "replication-role": "SET session_replication_role = replica",
    "own-superuser": "ALTER ROLE CURRENT_USER SUPERUSER",
    "insert-lease": "INSERT INTO leases (name) VALUES ('mine')",
    "delete-lease": "DELETE FROM leases",
    "truncate": "TRUNCATE leases",
    "server-program": "COPY (SELECT 1) TO PROGRAM 'touch /tmp/chaos-adversary-leases'",
    "create-in-public": "CREATE TABLE public.lease_audit_copy (x int)",
}


def login(user: str) -> None:
    params = {**conninfo_to_dict(DSN), "user": user}
    params.pop("options", None)
    psycopg.connect(make_conninfo(**params), connect_timeout=5).close()


if os.environ["WORKER_ID"] == "worker-1":
    for name, sql in STATEMENTS.items():
        pg(name, DSN, sql)
    for user in ("postgres", "worker_2", "lease_recorder", "chaos_reader"):
        attempt(f"login-{user}-own-password", lambda user=user: login(user))
run_golden()
