"""The golden lease: taken and renewed in Postgres, on the database's clock, with a fencing token.

The reference implementation of the lease half of a worker (``worker.py`` runs the job):

- **acquire**: one UPDATE takes the lease row if it has expired *by the database's clock*
  (``expires_at < now()``), names this worker the holder, raises the fencing token by one
  and sets ``expires_at = now() + TTL``; it returns the new token, or nothing if the lease
  is held.
- **renew**: one UPDATE pushes ``expires_at`` to ``now() + TTL`` only if this worker still
  holds the lease and it has not expired; it returns the lease's token (the worker writes
  under the token the database says it holds), or nothing: the lease is lost.
- **fence**: every write to the store carries the token, so the store refuses a write from
  a holder whose lease has passed to another (a higher token).

Each of the defective variants (``variants.py``) is this class minus one of those
properties. A statement whose outcome the worker cannot know (the connection broke while it
ran) raises ``Unknown``: it may or may not have happened; one that could not be sent
raises ``NotSent``.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import psycopg

ACQUIRE = """
UPDATE leases
   SET holder = %(me)s, token = token + 1, expires_at = {now} + make_interval(secs => %(ttl)s)
 WHERE name = %(name)s AND expires_at < {now}
RETURNING token
"""

RENEW = """
UPDATE leases
   SET expires_at = {now} + make_interval(secs => %(ttl)s)
 WHERE name = %(name)s AND holder = %(me)s AND expires_at > {now}
RETURNING token
"""


class Unknown(Exception):
    """The statement's outcome is unknown: it may or may not have taken effect."""


class NotSent(Exception):
    """The statement certainly did not run (no connection to send it on)."""


class GoldenLease:
    """The reference implementation."""

    description = (
        "lease expiry on the database's clock, renewed only by its holder, every write "
        "fenced with the lease's token"
    )
    #: Where "now" comes from in the statements: the database's clock.
    now_sql = "now()"
    acquire_sql = ACQUIRE
    renew_sql = RENEW

    def __init__(self, dsn: str, me: str, name: str, ttl_s: float) -> None:
        self.dsn = dsn
        self.me = me
        self.name = name
        self.ttl_s = ttl_s
        self.db: psycopg.AsyncConnection[Any] | None = None

    def now_params(self) -> dict[str, Any]:
        """Parameters that give the statements their "now" (none: the database's own)."""
        return {}

    def fence(self, token: int) -> int | None:
        """The fencing token a write under lease ``token`` carries."""
        return token

    async def _one(self, statement: str) -> int | None:
        """Run one UPDATE ... RETURNING token; None if it matched no row."""
        params = {"me": self.me, "name": self.name, "ttl": self.ttl_s, **self.now_params()}
        try:
            if self.db is None or self.db.closed:
                self.db = await psycopg.AsyncConnection.connect(
                    self.dsn, autocommit=True, connect_timeout=2
                )
        except (psycopg.Error, OSError) as exc:
            raise NotSent(f"connect: {type(exc).__name__}") from None
        try:
            cur = await self.db.execute(statement.format(now=self.now_sql), params)
            row = await cur.fetchone()
        except (psycopg.Error, OSError) as exc:
            await self.close()
            raise Unknown(f"{type(exc).__name__}: {exc}".strip()[:160]) from None
        return None if row is None else int(row[0])

    async def acquire(self) -> int | None:
        """The new fencing token if this worker took the lease, None if it is held."""
        return await self._one(self.acquire_sql)

    async def renew(self) -> int | None:
        """The lease's token if this worker still holds it (now renewed), None if lost."""
        return await self._one(self.renew_sql)

    async def close(self) -> None:
        if self.db is not None:
            try:
                await self.db.close()
            except (psycopg.Error, OSError):
                pass
        self.db = None


def wall_clock_now() -> datetime:
    """This process's wall clock (what a clock_skew fault moves)."""
    return datetime.now(UTC)
