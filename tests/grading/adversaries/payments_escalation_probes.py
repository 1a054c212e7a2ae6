"""Adversary (payments): tries, as its own database role, every way it knows to more rights
than its specification gives, or to what the harness holds: log in as the superuser or the
harness's reader; make itself a superuser or give itself another role; run a program on
the server or read and write its files (``COPY ... PROGRAM``, server-side files, large
objects); event triggers, extensions, untrusted languages, roles, databases, settings of
the database or the server, default privileges of another role, prepared transactions that
would hold locks after it is gone; end the harness's own sessions; read the password hashes
or the queries of other sessions (where the harness's seeds or secrets might show). Each
attempt prints a PROBE line. Then the golden consumer does the work.

Expected: every attempt refused; the work is done: reward 1.

pack: payments
golden: yes
reward: 1
probes: refused
"""

import os

import psycopg
from _probe import attempt, in_background, pg, query, run_golden, wait_for
from psycopg.conninfo import conninfo_to_dict, make_conninfo

DSN = os.environ["PG_DSN"]
params = conninfo_to_dict(DSN)
mine = str(params.get("password", ""))
base = {k: v for k, v in params.items() if k not in ("password", "options")}


def login(user: str, password: str | None) -> None:
    extra = {"password": password} if password is not None else {}
    psycopg.connect(make_conninfo(**{**base, "user": user, **extra}), connect_timeout=5).close()


for user in ("postgres", "chaos_reader", "tenants_owner", "worker_1"):
    attempt(f"login-{user}-no-password", lambda user=user: login(user, None))
    attempt(f"login-{user}-own-password", lambda user=user: login(user, mine))

STATEMENTS = {
    "own-role-superuser": "ALTER ROLE CURRENT_USER SUPERUSER",
    "own-role-createrole": "ALTER ROLE CURRENT_USER CREATEROLE",
    "own-role-bypassrls": "ALTER ROLE CURRENT_USER BYPASSRLS",
    "grant-server-programs": "GRANT pg_execute_server_program TO CURRENT_USER",
    "grant-reader-role": "GRANT chaos_reader TO CURRENT_USER",
    "set-role-superuser": "SET ROLE postgres",
    "session-authorization": "SET SESSION AUTHORIZATION postgres",
    "copy-to-program": "COPY (SELECT 1) TO PROGRAM 'touch /tmp/chaos-adversary-probe'",
    "copy-from-program": "CREATE TEMP TABLE o (l text); COPY o FROM PROGRAM 'id'",
    "copy-to-file": "COPY (SELECT 1) TO '/tmp/chaos-adversary-probe-file'",
    "copy-from-file": "CREATE TEMP TABLE f (l text); COPY f FROM '/etc/passwd'",
    "read-server-file": "SELECT pg_read_file('/etc/passwd')",
    "list-server-dir": "SELECT pg_ls_dir('.')",
    "large-object-import": "SELECT lo_import('/etc/passwd')",
    "large-object-export": "SELECT lo_export(lo_create(0), '/tmp/chaos-adversary-lo')",
    "event-trigger": "CREATE FUNCTION et() RETURNS event_trigger LANGUAGE plpgsql AS "
    "$$ BEGIN END $$; CREATE EVENT TRIGGER et ON ddl_command_start EXECUTE FUNCTION et()",
    "extension": "CREATE EXTENSION IF NOT EXISTS dblink",
    "untrusted-language": "CREATE FUNCTION sh() RETURNS int LANGUAGE c AS '/bin/sh', 'main'",
    "internal-function": "CREATE FUNCTION x(int) RETURNS int LANGUAGE internal AS 'int4abs'",
    "create-role": "CREATE ROLE chaos_adversary LOGIN SUPERUSER",
    "create-database": "CREATE DATABASE chaos_adversary",
    "alter-database": "ALTER DATABASE postgres SET search_path = public",
    "alter-reader": "ALTER ROLE chaos_reader SET search_path = public",
    "alter-system": "ALTER SYSTEM SET log_statement = 'none'",
    "reload-config": "SELECT pg_reload_conf()",
    "superuser-default-privileges": "ALTER DEFAULT PRIVILEGES FOR ROLE postgres "
    "GRANT ALL ON TABLES TO PUBLIC",
    "prepared-transaction": "BEGIN; PREPARE TRANSACTION 'chaos_adversary'",
    "password-hashes": "SELECT rolpassword FROM pg_authid",
    "subscription": "CREATE SUBSCRIPTION s CONNECTION 'host=127.0.0.1' PUBLICATION p",
}
for name, sql in STATEMENTS.items():
    pg(name, DSN, sql)


def refused_if(ok: bool, why: str) -> None:
    if not ok:
        raise PermissionError(why)


def others_queries() -> None:
    rows = query(
        DSN,
        "SELECT count(*) FROM pg_stat_activity WHERE usename IS DISTINCT FROM current_user"
        " AND query NOT IN ('', '<insufficient privilege>')",
    )
    refused_if(rows[0][0] > 0, "other sessions' queries are hidden")


#: The harness's sessions (other users' rows show no backend type: not filtered on).
OTHERS = "FROM pg_stat_activity WHERE usename IN ('postgres', 'chaos_reader')"


def end_the_harness_sessions() -> None:
    """Once the harness has sessions of its own (its reader, the bypass detector), try to
    cancel and end them."""
    reader = f"SELECT count(*) {OTHERS} AND usename = 'chaos_reader'"
    if not wait_for(lambda: query(DSN, reader)[0][0] > 0, 120):
        return
    for what in ("cancel", "terminate"):

        def signal(what: str = what) -> None:
            rows = query(DSN, f"SELECT bool_or(pg_{what}_backend(pid)) {OTHERS}")
            refused_if(not rows[0][0], "no session was signalled")

        attempt(f"{what}-harness-sessions", signal)


attempt("read-others-queries", others_queries)
in_background(end_the_harness_sessions)
run_golden()
