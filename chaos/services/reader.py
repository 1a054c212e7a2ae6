"""Reading stores a program under test can write, without ever running its code.

A role that owns a table can make it a view over a function of its own, give it rules,
row-level security policies, inheritance children, columns of types of its own, or leave
operators and functions in a schema on the search path for a careless query to pick up. A
privileged reader that selected from such a relation would run that code with its own
rights: the role would be a superuser for as long as the read lasts (PostgreSQL's
CVE-2024-7348 was pg_dump doing exactly that; its fix, ``restrict_nonsystem_relation_kind``,
is one of the defences here). So the harness reads what a candidate can write as a role of
its own, through one helper that refuses anything but plain data::

    create_reader(service, writers={"public": ["payments_consumer"]})   as the superuser,
        a LOGIN role NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION BYPASSRLS NOINHERIT,
        CONNECT on the database, USAGE on each writer's schema, SELECT on what the writers
        create there (default privileges), SELECT on the harness's own ``tables``
    reader.rows("public", "charges", ["order_id", "amount_cents"])     as that role:
        session  search_path = pg_catalog, pg_temp; restrict_nonsystem_relation_kind =
                 view, foreign-table; row_security = off; read-only; lock and statement
                 timeouts
        BEGIN;   the catalog: an ordinary table, no rules, no inheritance children, not a
                 partition (else refused before anything touches it)
                 LOCK TABLE ONLY "public"."charges" IN ACCESS SHARE MODE   (no DDL under us)
                 the catalog again: the same relation; within the size cap; each read
                 column of a built-in (pg_catalog) type
                 SELECT "order_id", "amount_cents" FROM ONLY "public"."charges" LIMIT n
        COMMIT

The select names columns and nothing else: no operator, function, cast or ORDER BY (callers
sort in Python), so no object of the writer's is looked up, let alone run. ``BYPASSRLS``
means no policy of the writer's runs or hides a row (``row_security = off`` turns a policy
that would apply anyway into an error, never a filtered read). A refusal raises
``Unreadable`` with the reason; a relation that does not exist reads as ``None``.

``harness_dsn(dsn)`` gives the superuser's own connections (catalog reads, the bypass
detector's ``pg_stat_activity``) the same search path and relation-kind guard.
"""

from __future__ import annotations

import secrets
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo
from psycopg.types.string import TextLoader

from chaos.services.postgres import GUARD, PostgresService, harness_dsn, session_options
from ground.errors import ServiceError, Unreadable

#: How long a read waits for a lock on the relation, and for its statement.
LOCK_TIMEOUT_S = 10.0
STATEMENT_TIMEOUT_S = 20.0
#: What one read takes at most (rows, and the relation's size on disk with its indexes).
MAX_ROWS = 100_000
MAX_BYTES = 64 * 1024 * 1024
_CONNECT_TIMEOUT_S = 30


def _session(
    password: str,
    role: str,
    service: PostgresService,
    database: str,
    lock_timeout_s: float,
    statement_timeout_s: float,
) -> str:
    settings = {
        **GUARD,
        "row_security": "off",
        "default_transaction_read_only": "on",
        "TimeZone": "UTC",
        "DateStyle": "ISO",
        "lock_timeout": str(max(1, int(lock_timeout_s * 1000))),
        "statement_timeout": str(max(1, int(statement_timeout_s * 1000))),
        "idle_in_transaction_session_timeout": str(max(1, int(statement_timeout_s * 3000))),
    }
    return make_conninfo(
        "",
        host=service.host,
        port=str(service.port),
        dbname=database,
        user=role,
        password=password,
        options=session_options(settings),
        connect_timeout=str(_CONNECT_TIMEOUT_S),
    )


def _brief(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text[:300] or type(exc).__name__


@dataclass
class PostgresReader:
    """The harness's reader of one database (``create_reader``): ``rows`` reads one relation
    as plain data or raises ``Unreadable``. Thread-safe (one connection, one read at a time);
    ``close`` when the run ends."""

    role: str
    database: str
    _dsn: str = field(repr=False)
    max_rows: int = MAX_ROWS
    max_bytes: int = MAX_BYTES
    lock_timeout_s: float = LOCK_TIMEOUT_S
    statement_timeout_s: float = STATEMENT_TIMEOUT_S
    _conn: psycopg.Connection[Any] | None = field(default=None, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def _connect(self) -> psycopg.Connection[Any]:
        if self._conn is None or self._conn.closed or self._conn.broken:
            try:
                self._conn = psycopg.connect(self._dsn, autocommit=False)
            except psycopg.OperationalError as exc:
                raise ServiceError(f"the harness's reader cannot log in: {_brief(exc)}") from None
        return self._conn

    def rows(
        self, schema: str, table: str, columns: Sequence[str], *, text: bool = False
    ) -> list[dict[str, Any]] | None:
        """Every row of ``schema.table`` (its ``columns`` only, in no particular order); None
        when there is no such relation. With ``text``, every value is the server's text
        form (``-infinity`` for an infinite timestamp, where Python has none), in UTC and
        ISO dates. ``Unreadable`` names what was refused: a relation that is not an
        ordinary table, a rule or inheritance child, a missing column or one whose type is
        not built in, more than ``max_rows`` rows or ``max_bytes`` on disk, a lock held past
        the lock timeout, a read past the statement timeout, a privilege the writer took
        back, a value Python cannot hold. ``ServiceError`` if the server cannot be reached
        (twice)."""
        if not columns:
            raise ValueError("rows() needs at least one column")
        where = f"{schema}.{table}"
        with self._lock:
            for attempt in (1, 2):
                conn = self._connect()
                try:
                    with conn.transaction():
                        return self._read(conn, schema, table, list(columns), where, text)
                except Unreadable:
                    raise
                except psycopg.errors.UndefinedTable:
                    return None  # dropped between the catalog's answer and the lock
                except psycopg.errors.LockNotAvailable:
                    raise Unreadable(
                        f"{where}: a lock on it was held past {self.lock_timeout_s:g} s"
                    ) from None
                except psycopg.errors.QueryCanceled:
                    raise Unreadable(
                        f"{where}: reading it took over {self.statement_timeout_s:g} s"
                    ) from None
                except psycopg.OperationalError as exc:
                    if not conn.broken and not conn.closed:
                        raise Unreadable(f"{where}: {_brief(exc)}") from None
                    self.close()
                    if attempt == 2:
                        raise ServiceError(
                            f"the harness's reader lost its connection: {_brief(exc)}"
                        ) from None
                except psycopg.Error as exc:
                    raise Unreadable(f"{where}: {_brief(exc)}") from None
                except (ValueError, ArithmeticError, RecursionError) as exc:
                    # a value psycopg cannot load (a date out of Python's range, a JSON
                    # document nested past the recursion limit): the data is the writer's
                    raise Unreadable(f"{where}: {type(exc).__name__}: {_brief(exc)}") from None
        raise AssertionError("unreachable")

    def _read(
        self,
        conn: psycopg.Connection[Any],
        schema: str,
        table: str,
        columns: list[str],
        where: str,
        text: bool,
    ) -> list[dict[str, Any]] | None:
        relation = sql.Identifier(schema, table)
        found = _describe(conn, schema, table)
        if found is None:
            return None
        refused = refusal(*found[1:5])
        if refused is not None:
            raise Unreadable(f"{where}: {refused}")
        # Locked, it cannot be altered, renamed or swapped for a view until the read is done.
        conn.execute(sql.SQL("LOCK TABLE ONLY {} IN ACCESS SHARE MODE").format(relation))
        again = _describe(conn, schema, table)
        if again is None or again[:5] != found[:5]:
            raise Unreadable(f"{where}: it changed while the harness was reading it")
        oid, size = again[0], again[5]
        if int(size) > self.max_bytes:
            raise Unreadable(
                f"{where}: {int(size) // 1024} KiB on disk, over the reader's "
                f"{self.max_bytes // 1024} KiB"
            )
        types = {
            str(name): (str(type_schema), str(type_name), int(type_oid))
            for name, type_schema, type_name, type_oid in conn.execute(
                "SELECT a.attname, tn.nspname, t.typname, t.oid FROM pg_catalog.pg_attribute a"
                " JOIN pg_catalog.pg_type t ON t.oid = a.atttypid"
                " JOIN pg_catalog.pg_namespace tn ON tn.oid = t.typnamespace"
                " WHERE a.attrelid = %s AND a.attnum > 0 AND NOT a.attisdropped",
                (oid,),
            )
        }
        for column in columns:
            if column not in types:
                raise Unreadable(f"{where} has no column {column!r}")
            type_schema, type_name, _ = types[column]
            if type_schema != "pg_catalog":
                raise Unreadable(
                    f"{where}.{column} is of type {type_schema}.{type_name}, not a built-in "
                    "type (pg_catalog)"
                )
        query = sql.SQL("SELECT {} FROM ONLY {} LIMIT {}").format(
            sql.SQL(", ").join(sql.Identifier(c) for c in columns),
            relation,
            sql.Literal(self.max_rows + 1),
        )
        cursor = conn.cursor()
        if text:
            for column in columns:
                cursor.adapters.register_loader(types[column][2], TextLoader)
        rows = cursor.execute(query).fetchall()
        if len(rows) > self.max_rows:
            raise Unreadable(f"{where}: more than {self.max_rows} rows")
        return [dict(zip(columns, row, strict=True)) for row in rows]

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except psycopg.Error:
                pass


def _describe(
    conn: psycopg.Connection[Any], schema: str, table: str
) -> tuple[int, str, bool, bool, bool, int] | None:
    """(oid, relkind, has rules, has inheritance children, is a partition, bytes on disk)."""
    row = conn.execute(
        "SELECT c.oid, c.relkind, c.relhasrules, c.relhassubclass, c.relispartition,"
        " pg_catalog.pg_total_relation_size(c.oid)"
        " FROM pg_catalog.pg_class c"
        " JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace"
        " WHERE n.nspname = %s AND c.relname = %s",
        (schema, table),
    ).fetchone()
    if row is None:
        return None
    oid, kind, rules, children, partition, size = row
    return int(oid), str(kind), bool(rules), bool(children), bool(partition), int(size or 0)


def refusal(kind: str, rules: bool, children: bool, partition: bool) -> str | None:
    """Why a relation is not plain data to read (None: it is): its ``relkind`` and flags
    from ``pg_class``."""
    kinds = {
        "v": "a view",
        "m": "a materialized view",
        "f": "a foreign table",
        "p": "a partitioned table",
        "S": "a sequence",
        "c": "a composite type",
        "i": "an index",
        "I": "a partitioned index",
        "t": "a TOAST table",
    }
    if kind != "r":
        return f"{kinds.get(kind, f'of kind {kind!r}')}, not an ordinary table"
    if rules:
        return "a table with rules"
    if children:
        return "a table with inheritance children"
    if partition:
        return "a partition of another table"
    return None


def create_reader(
    service: PostgresService,
    *,
    name: str = "chaos_reader",
    database: str | None = None,
    writers: Mapping[str, Iterable[str]] | None = None,
    tables: Iterable[tuple[str, str]] = (),
    lock_timeout_s: float = LOCK_TIMEOUT_S,
    statement_timeout_s: float = STATEMENT_TIMEOUT_S,
) -> PostgresReader:
    """As the superuser (``service.dsn``): the reader role ``name`` of ``database`` (default
    the service's), allowed to connect, to use each schema of ``writers`` and to SELECT
    every table the roles listed for it create there from now on (default privileges), and
    to SELECT each ``(schema, table)`` of ``tables`` (the harness's own). It gets the
    connections PostgreSQL reserves (``pg_use_reserved_connections``) and ``BYPASSRLS``
    where the DSN's user may grant them (a superuser; an external server's ``CREATEROLE``
    user may not: then a table whose policies apply to the reader is unreadable). Call it
    before any writer runs; ``drop_role`` removes it (external servers). A read waits at
    most ``lock_timeout_s`` for a lock on its relation and ``statement_timeout_s`` for its
    statements."""
    db = database or service.database
    password = secrets.token_hex(16)
    role = sql.Identifier(name)
    target = make_conninfo(service.dsn, dbname=db)
    with psycopg.connect(
        harness_dsn(target), autocommit=True, connect_timeout=_CONNECT_TIMEOUT_S
    ) as conn:
        conn.execute("SET password_encryption = 'scram-sha-256'")
        me = conn.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user")
        superuser = bool((me.fetchone() or (False,))[0])
        conn.execute(
            sql.SQL(
                "CREATE ROLE {} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION "
                "NOINHERIT {} PASSWORD {}"
            ).format(role, sql.SQL("BYPASSRLS" if superuser else ""), sql.Literal(password))
        )
        if superuser:
            conn.execute(sql.SQL("GRANT pg_use_reserved_connections TO {}").format(role))
        conn.execute(sql.SQL("GRANT CONNECT ON DATABASE {} TO {}").format(sql.Identifier(db), role))
        for schema, roles in (writers or {}).items():
            conn.execute(
                sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(sql.Identifier(schema), role)
            )
            for writer in roles:
                conn.execute(
                    sql.SQL(
                        "ALTER DEFAULT PRIVILEGES FOR ROLE {} IN SCHEMA {} GRANT SELECT ON "
                        "TABLES TO {}"
                    ).format(sql.Identifier(writer), sql.Identifier(schema), role)
                )
        for schema, table in tables:
            conn.execute(
                sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(sql.Identifier(schema), role)
            )
            conn.execute(
                sql.SQL("GRANT SELECT ON TABLE {} TO {}").format(
                    sql.Identifier(schema, table), role
                )
            )
    dsn = _session(password, name, service, db, lock_timeout_s, statement_timeout_s)
    return PostgresReader(
        name, db, dsn, lock_timeout_s=lock_timeout_s, statement_timeout_s=statement_timeout_s
    )


__all__ = [
    "MAX_BYTES",
    "MAX_ROWS",
    "refusal",
]
