"""The consumer's variants: the golden implementation and its defective siblings.

Each defective variant differs from the golden one by exactly one fault (see README.md for
the signals that lead to it).
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

from ground.errors import ConfigError
from scenarios.payments.charger import SCHEMA, GoldenCharger


class NoIdempotencyCharger(GoldenCharger):
    """The golden consumer without its idempotency check: every delivery is charged.

    It neither looks for an existing charge, nor sends an idempotency key to the gateway,
    nor keeps ``charges.order_id`` unique. A redelivered order is charged again.
    """

    description = "the golden consumer without its idempotency check"

    schema = SCHEMA.replace("order_id     text PRIMARY KEY", "order_id     text NOT NULL")

    async def already_charged(self, order_id: str) -> bool:
        return False

    def gateway_request(self, order: dict[str, Any]) -> dict[str, Any]:
        request = super().gateway_request(order)
        request["idempotency_key"] = None
        return request

    async def record(self, order: dict[str, Any]) -> None:
        db = await self.connect_db()
        async with db.transaction():
            await db.execute(
                "INSERT INTO charges (order_id, account, amount_cents) VALUES (%s, %s, %s)",
                (order["order_id"], order["account"], order["amount_cents"]),
            )
            await self._book(db, order)


class AckBeforeCommitCharger(GoldenCharger):
    """The golden consumer, but it acks an order once the gateway has charged it, before the
    transaction that books it commits. A crash (or anything that stops the booking for good)
    between the ack and the commit loses the charge: the broker will not deliver it again.
    """

    description = "the golden consumer, acking before the booking commits"

    async def after_gateway(self, msg: Any, order_id: str) -> bool:
        await self.ack(msg, order_id)
        return True


class GatewayRetryNoKeyCharger(GoldenCharger):
    """The golden consumer, but a retried gateway call goes without the idempotency key.

    The first call for an order carries the key; when it fails (a timeout, a reset) the
    consumer asks again as a new request. A call that timed out on the client may well have
    been executed by the gateway, so each such retry is one more charge there. Postgres
    still books the order once (its check is intact).
    """

    description = "the golden consumer, retrying gateway calls without the idempotency key"

    def __init__(self, dsn: str, gateway: str) -> None:
        super().__init__(dsn, gateway)
        self.calls: Counter[str] = Counter()

    def gateway_request(self, order: dict[str, Any]) -> dict[str, Any]:
        request = super().gateway_request(order)
        self.calls[order["order_id"]] += 1
        if self.calls[order["order_id"]] > 1:
            request["idempotency_key"] = None
        return request


#: How long the wall-clock-dedupe variant remembers a processed order (its own wall clock).
DEDUPE_TTL_S = 600.0


class WallClockDedupeCharger(GoldenCharger):
    """The golden consumer, but it remembers processed orders with a wall-clock expiry.

    Instead of the permanent ``charges.order_id`` key, a ``processed`` table holds each
    booked order with ``expires_at = time.time() + 600`` (a dedupe window, as a cache with a
    TTL would), and an order is "already charged" only while its entry has not expired by
    the consumer's clock. A clock that jumps forward between the booking and a redelivery
    (or was behind when the order was booked) forgets it: the redelivery is booked again.
    The gateway's key still holds, so the gateway charges once and Postgres twice.
    """

    description = "the golden consumer, remembering processed orders with a wall-clock expiry"

    schema = SCHEMA.replace("order_id     text PRIMARY KEY", "order_id     text NOT NULL") + (
        "CREATE TABLE IF NOT EXISTS processed (\n"
        "    order_id   text PRIMARY KEY,\n"
        "    expires_at double precision NOT NULL\n"
        ");\n"
    )

    async def already_charged(self, order_id: str) -> bool:
        db = await self.connect_db()
        async with db.transaction():
            cur = await db.execute(
                "SELECT expires_at FROM processed WHERE order_id = %s", (order_id,)
            )
            row = await cur.fetchone()
        return row is not None and float(row[0]) > time.time()

    async def record(self, order: dict[str, Any]) -> None:
        db = await self.connect_db()
        async with db.transaction():
            await db.execute(
                "INSERT INTO charges (order_id, account, amount_cents) VALUES (%s, %s, %s)",
                (order["order_id"], order["account"], order["amount_cents"]),
            )
            await self._book(db, order)
            await db.execute(
                "INSERT INTO processed (order_id, expires_at) VALUES (%s, %s)"
                " ON CONFLICT (order_id) DO UPDATE SET expires_at = EXCLUDED.expires_at",
                (order["order_id"], time.time() + DEDUPE_TTL_S),
            )


#: Every variant of the scenario (``Payments.variants`` is derived from it).
VARIANTS: dict[str, type[GoldenCharger]] = {
    "golden": GoldenCharger,
    "no-idempotency": NoIdempotencyCharger,
    "ack-before-commit": AckBeforeCommitCharger,
    "gateway-retry-no-key": GatewayRetryNoKeyCharger,
    "wall-clock-dedupe": WallClockDedupeCharger,
}


def charger_for(variant: str) -> type[GoldenCharger]:
    try:
        return VARIANTS[variant]
    except KeyError:
        raise ConfigError(
            f"unknown variant {variant!r} (payments has: {', '.join(VARIANTS)})"
        ) from None
