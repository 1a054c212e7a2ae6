"""The golden tenants API: notes per tenant over HTTP, isolated by row-level security.

The reference implementation of the service a candidate writes (``TASK.md`` is its contract;
``server.py`` runs it). Its design, property by property:

- **Row-level security on every table.** The migration (run as the owner role at start-up)
  enables RLS on ``app.items`` and ``app.requests`` with a policy ``tenant_id =
  current_setting('app.tenant', true)``; the queries never repeat the tenant filter. With
  no tenant set, a policy matches nothing (fail closed).
- **The tenant travels with every transaction.** Each transaction is one round trip,
  ``BEGIN; SELECT set_config('app.tenant', <tenant>, true); <statement>; COMMIT``:
  ``is_local = true`` is ``SET LOCAL``, so the setting ends with the transaction and a
  transaction can run on any pooled connection.
- **Idempotent creates.** ``app.create_item(key, body)`` (``SECURITY INVOKER``) records the
  request and its response in ``app.requests`` (primary key ``(tenant_id, key)``) and the note
  in ``app.items``; a request whose key this tenant already used gets the stored response
  again. Keys are the client's, unique per tenant only.
- **Retries on another connection.** A pool of connections (first in, first out). When a
  transaction's connection fails (reset, closed, or no answer within 1 s), the connection
  is dropped and the transaction retried, with backoff, on another one; an in-doubt commit
  is harmless because the retry finds the key and answers as the first time.

Each defective variant (``variants.py``) subclasses ``TenantsApi`` and changes exactly one of
these properties.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections import deque
from collections.abc import Sequence
from typing import Any, ClassVar

import psycopg
import psycopg.errors
from psycopg import sql
from psycopg.pq import TransactionStatus

#: A tenant name (requests carry it in ``X-Tenant``).
TENANT = re.compile(r"[a-z][a-z0-9_-]{0,62}\Z")
#: An idempotency key (``Idempotency-Key``).
KEY = re.compile(r"[A-Za-z0-9._:-]{1,128}\Z")
#: A transaction with no answer after this long is abandoned (its outcome unknown).
BATCH_TIMEOUT_S = 1.0
#: The waits between the attempts of one transaction (so at most 6 attempts).
BACKOFF_S = (0.3, 0.6, 1.2, 2.0, 2.0)
#: Connections the pool opens at start-up (it opens more when it runs dry).
POOL_SIZE = 3
MAX_BODY = 64 * 1024

MIGRATION = """
CREATE TABLE IF NOT EXISTS app.items (
    id        text PRIMARY KEY,
    tenant_id text NOT NULL DEFAULT current_setting('app.tenant'),
    body      text NOT NULL
);
CREATE TABLE IF NOT EXISTS app.requests (
    tenant_id text NOT NULL DEFAULT current_setting('app.tenant'),
    key       text NOT NULL,
    response  json NOT NULL,
    PRIMARY KEY (tenant_id, key)
);
CREATE SEQUENCE IF NOT EXISTS app.item_ids;

ALTER TABLE app.items ENABLE ROW LEVEL SECURITY;
DROP POLICY IF EXISTS items_tenant ON app.items;
CREATE POLICY items_tenant ON app.items
    USING (tenant_id = current_setting('app.tenant', true))
    WITH CHECK (tenant_id = current_setting('app.tenant', true));

-- requests policy
ALTER TABLE app.requests ENABLE ROW LEVEL SECURITY;
DROP POLICY IF EXISTS requests_tenant ON app.requests;
CREATE POLICY requests_tenant ON app.requests
    USING (tenant_id = current_setting('app.tenant', true))
    WITH CHECK (tenant_id = current_setting('app.tenant', true));
-- end requests policy

CREATE OR REPLACE FUNCTION app.create_item(p_key text, p_body text) RETURNS json
LANGUAGE plpgsql SECURITY INVOKER AS $$
DECLARE
    item   json := json_build_object(
        'id', 'it-' || lpad(nextval('app.item_ids')::text, 4, '0'), 'body', p_body);
    stored json;
BEGIN
    INSERT INTO app.requests (key, response) VALUES (p_key, item)
        ON CONFLICT (tenant_id, key) DO NOTHING;
    IF FOUND THEN
        INSERT INTO app.items (id, body) VALUES (item->>'id', p_body);
        RETURN json_build_object('created', true, 'item', item);
    END IF;
    -- this tenant sent this key before: answer as the first time
    SELECT response INTO stored FROM app.requests WHERE key = p_key;
    RETURN json_build_object('created', false, 'item', stored);
END
$$;

GRANT USAGE ON SCHEMA app TO {app_role};
GRANT SELECT, INSERT ON app.items, app.requests TO {app_role};
GRANT USAGE ON SEQUENCE app.item_ids TO {app_role};
REVOKE ALL ON FUNCTION app.create_item(text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION app.create_item(text, text) TO {app_role};
"""

LIST = sql.SQL(
    "SELECT coalesce(json_agg(json_build_object('id', id, 'body', body) ORDER BY id),"
    " '[]'::json) AS result FROM app.items"
)
CREATE = sql.SQL("SELECT app.create_item({}, {}) AS result")
BEGIN, COMMIT = sql.SQL("BEGIN"), sql.SQL("COMMIT")


def log(message: str) -> None:
    print(message, flush=True)


class ConnectionLost(Exception):
    """A transaction's connection failed: it may or may not have committed."""


class Unavailable(Exception):
    """The database did not answer through every attempt."""


class HttpError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _brief(exc: BaseException) -> str:
    """An error on one line (psycopg's messages span several)."""
    return f"{type(exc).__name__}: {' '.join(str(exc).split())}"[:160]


def _pid(conn: psycopg.AsyncConnection[Any]) -> int | str:
    try:
        return conn.info.backend_pid
    except psycopg.Error:
        return "?"


async def _execute(conn: psycopg.AsyncConnection[Any], query: sql.Composed) -> Any:
    """Send ``query`` (several statements, one round trip); the column ``result``."""
    async with conn.cursor() as cur:
        await cur.execute(query)
        while True:
            if cur.description and cur.description[0].name == "result":
                row = await cur.fetchone()
                return None if row is None else row[0]
            if not cur.nextset():
                return None


async def run_batch(conn: psycopg.AsyncConnection[Any], query: sql.Composed) -> Any:
    """Run one round trip; ConnectionLost if the connection fails or stays silent."""
    task = asyncio.ensure_future(_execute(conn, query))
    try:
        return await asyncio.wait_for(asyncio.shield(task), BATCH_TIMEOUT_S)
    except TimeoutError:
        conn.pgconn.finish()  # abandon the connection (no cancel request: it may hang too)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        raise ConnectionLost(f"no answer within {BATCH_TIMEOUT_S:g} s") from None
    except psycopg.Error as exc:
        if conn.closed or conn.broken:
            raise ConnectionLost(_brief(exc)) from None
        raise


class Pool:
    """Connections as the app role, handed out first in, first out."""

    def __init__(self, dsn: str, size: int) -> None:
        self.dsn = dsn
        self.size = size
        self.idle: deque[psycopg.AsyncConnection[Any]] = deque()

    async def connect(self) -> psycopg.AsyncConnection[Any]:
        try:
            return await psycopg.AsyncConnection.connect(
                self.dsn, autocommit=True, connect_timeout=2
            )
        except psycopg.Error as exc:
            raise ConnectionLost(f"connect: {_brief(exc)}") from None

    async def open(self) -> None:
        for _ in range(self.size):
            self.idle.append(await self.connect())

    async def take(self) -> psycopg.AsyncConnection[Any]:
        while self.idle:
            conn = self.idle.popleft()
            if not conn.closed:
                return conn
        return await self.connect()

    async def give(self, conn: psycopg.AsyncConnection[Any]) -> None:
        if not conn.closed and conn.info.transaction_status == TransactionStatus.IDLE:
            self.idle.append(conn)
        else:
            await self.discard(conn)

    async def discard(self, conn: psycopg.AsyncConnection[Any]) -> None:
        try:
            await conn.close()
        except psycopg.Error:
            pass


class Session:
    """One request's database work: its tenant, the connection it holds, its retries."""

    def __init__(self, api: TenantsApi, tenant: str) -> None:
        self.api = api
        self.tenant = tenant
        self.conn: psycopg.AsyncConnection[Any] | None = None
        #: Transactions sent so far (every attempt counts).
        self.transactions_sent = 0

    async def run(self, op: str, statement: sql.Composable) -> Any:
        """Run ``statement`` in a transaction for this tenant, retrying on another
        connection while connections fail; Unavailable after the last attempt."""
        delays = (*self.api.backoff_s, None)
        for attempt, delay in enumerate(delays, start=1):
            where = f"tenant={self.tenant} {op} attempt {attempt}"
            pid: int | str = "-"
            try:
                if self.conn is None:
                    self.conn = await self.api.pool.take()
                conn = self.conn
                pid = _pid(conn)
                parts = [BEGIN, *self.api.tenant_statements(self), statement, COMMIT]
                self.transactions_sent += 1
                result = await run_batch(conn, sql.SQL("; ").join(parts))
            except ConnectionLost as exc:
                if self.conn is not None:
                    await self.api.pool.discard(self.conn)
                    self.conn = None
                if delay is None:
                    log(f"db pid={pid} {where} lost its connection ({exc}); giving up")
                    break
                log(
                    f"db pid={pid} {where} lost its connection ({exc}); "
                    f"retrying in {delay:g} s on another connection"
                )
            except psycopg.errors.UniqueViolation:  # the same request, concurrently
                await self._rollback()
                if delay is None:
                    break
                log(f"db {where}: the same key is being created concurrently; retrying")
            else:
                log(f"db pid={pid} {where} ok")
                return result
            assert delay is not None
            await asyncio.sleep(delay)
        raise Unavailable(f"{op} for {self.tenant}: the database did not answer")

    async def _rollback(self) -> None:
        if self.conn is not None:
            try:
                await self.conn.execute("ROLLBACK")
            except psycopg.Error:
                await self.api.pool.discard(self.conn)
                self.conn = None

    async def close(self) -> None:
        if self.conn is not None:
            await self.api.pool.give(self.conn)
            self.conn = None


class TenantsApi:
    """The golden API (see the module docstring)."""

    description: ClassVar[str] = (
        "tenant set per transaction (set_config(..., true)), row-level security on every "
        "table, idempotent creates, retries on another pooled connection"
    )
    migration: ClassVar[str] = MIGRATION
    backoff_s: ClassVar[Sequence[float]] = BACKOFF_S

    def __init__(self, dsn: str, owner_dsn: str, app_role: str) -> None:
        self.owner_dsn = owner_dsn
        self.app_role = app_role
        self.pool = Pool(dsn, POOL_SIZE)

    def tenant_statements(self, session: Session) -> list[sql.Composable]:
        """What sets the tenant in a transaction: ``SET LOCAL`` semantics, every time."""
        return [
            sql.SQL("SELECT set_config('app.tenant', {}, true)").format(sql.Literal(session.tenant))
        ]

    # -- start-up -----------------------------------------------------------------------

    async def migrate(self) -> None:
        """Create or update the schema as the owner role (idempotent; retried until the
        database answers)."""
        ddl = sql.SQL(self.migration).format(app_role=sql.Identifier(self.app_role))
        for _ in range(60):
            try:
                async with await psycopg.AsyncConnection.connect(
                    self.owner_dsn, autocommit=True, connect_timeout=3
                ) as conn:
                    await conn.execute(ddl)
                    return
            except psycopg.OperationalError as exc:
                log(f"migration: {_brief(exc)}; retrying")
                await asyncio.sleep(0.5)
        raise Unavailable("migration: the database did not answer")

    async def serve(self, port: int) -> None:
        await self.migrate()
        await self.pool.open()
        server = await asyncio.start_server(self.handle, "127.0.0.1", port)
        log(f"api ready on 127.0.0.1:{port} (pool of {self.pool.size} connections)")
        async with server:
            await server.serve_forever()

    # -- operations ---------------------------------------------------------------------

    async def create(self, tenant: str, key: str, body: str) -> tuple[int, Any]:
        session = Session(self, tenant)
        try:
            result = await session.run(
                f"create {key}", CREATE.format(sql.Literal(key), sql.Literal(body))
            )
        finally:
            await session.close()
        item = result["item"]
        if not result["created"]:
            log(f"idempotency: replayed key {key} for tenant {tenant} (item {item['id']})")
        return 201, item

    async def list(self, tenant: str) -> tuple[int, Any]:
        session = Session(self, tenant)
        try:
            items = await session.run("list", LIST)
        finally:
            await session.close()
        return 200, {"items": items}

    # -- HTTP ---------------------------------------------------------------------------

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            status, payload = await self.respond(reader)
        except HttpError as exc:
            status, payload = exc.status, {"error": str(exc)}
        except Unavailable as exc:
            status, payload = 503, {"error": str(exc)}
        except (ConnectionError, asyncio.IncompleteReadError, TimeoutError):
            writer.close()
            return
        except Exception as exc:  # one bad request never stops the server
            log(f"internal error: {_brief(exc)}")
            status, payload = 500, {"error": "internal error"}
        body = json.dumps(payload).encode()
        head = (
            f"HTTP/1.1 {status} {REASONS.get(status, 'Error')}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n"
        )
        try:
            writer.write(head.encode() + body)
            await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()

    async def respond(self, reader: asyncio.StreamReader) -> tuple[int, Any]:
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ")
        if len(parts) != 3:
            raise HttpError(400, "bad request line")
        method, path = parts[0], parts[1]
        headers = {}
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if sep:
                headers[name.strip().lower()] = value.strip()
        length = int(headers.get("content-length", "0") or 0)
        if not 0 <= length <= MAX_BODY:
            raise HttpError(413, "body too large")
        raw = await asyncio.wait_for(reader.readexactly(length), 10) if length else b""
        if path != "/items":
            raise HttpError(404, f"no route {path}")
        tenant = headers.get("x-tenant", "")
        if not TENANT.match(tenant):
            raise HttpError(400, "X-Tenant must name a tenant ([a-z][a-z0-9_-]*)")
        if method == "GET":
            return await self.list(tenant)
        if method != "POST":
            raise HttpError(405, f"{method} /items is not allowed")
        key = headers.get("idempotency-key", "")
        if not KEY.match(key):
            raise HttpError(400, "POST /items needs an Idempotency-Key")
        try:
            body = json.loads(raw)["body"]
        except (ValueError, KeyError, TypeError):
            raise HttpError(400, 'the body must be JSON {"body": "<text>"}') from None
        if not isinstance(body, str):
            raise HttpError(400, "body must be a string")
        return await self.create(tenant, key, body)


REASONS = {
    200: "OK",
    201: "Created",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    413: "Payload Too Large",
    500: "Internal Server Error",
    503: "Service Unavailable",
}
