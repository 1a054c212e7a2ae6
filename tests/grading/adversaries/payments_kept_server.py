"""Adversary (payments): leaves something of its own in the kept PostgreSQL, outside its
run's database, for the runs after it on the same warm worker (its own next seeds, or
another candidate's): a large object in ``postgres`` and in ``template1`` (any role may
connect to a database whose ``CONNECT`` PUBLIC holds, and create large objects there), and
a session on ``postgres`` running a query that outlives its program (a backend notices its
client is gone only when it next writes to it). Dropping the run's database ends only that
database's sessions, and ``DROP OWNED`` drops only what is in the database it runs in: the
role would stay (its large object in ``template1``), the session too, and the next run on
the worker would find the server unclean (a harness error, rerun elsewhere). Otherwise the
golden consumer.

Expected: every other database refuses the role (``CONNECT`` is its run's database's
only): each PROBE refused, reward 1.0, both seeds on kept servers, nothing left.

pack: payments
golden: yes
seeds: 2, 25
reward: 1.0
probes: refused
"""

import os
from urllib.parse import urlsplit, urlunsplit

from _probe import attempt, in_background, run_golden

DSN = os.environ["PG_DSN"]


def elsewhere(database: str) -> str:
    parts = urlsplit(DSN)
    return urlunsplit(parts._replace(path=f"/{database}"))


def large_object(database: str) -> None:
    import psycopg

    with psycopg.connect(elsewhere(database), connect_timeout=5, autocommit=True) as conn:
        conn.execute("SELECT lo_from_bytea(0, 'kept')")


def sleeper() -> None:
    import psycopg

    conn = psycopg.connect(elsewhere("postgres"), connect_timeout=5, autocommit=True)
    conn.execute("SELECT pg_sleep(3600)")


for database in ("postgres", "template1", "template0", "chaos_template"):
    attempt(f"large-object-in-{database}", lambda db=database: large_object(db))


def sleep_on_postgres() -> None:
    attempt("query-left-running-on-postgres", sleeper)


in_background(sleep_on_postgres)
run_golden()
