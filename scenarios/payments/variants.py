"""The consumer's variants: the golden implementation and its defective siblings.

Each defective variant differs from the golden one by exactly one fault (see README.md for
the signals that lead to it).
"""

from __future__ import annotations

from typing import Any

from chaos.errors import ConfigError
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


#: Every variant of the scenario (``Payments.variants`` is derived from it).
VARIANTS: dict[str, type[GoldenCharger]] = {
    "golden": GoldenCharger,
    "no-idempotency": NoIdempotencyCharger,
}


def charger_for(variant: str) -> type[GoldenCharger]:
    try:
        return VARIANTS[variant]
    except KeyError:
        raise ConfigError(
            f"unknown variant {variant!r} (payments has: {', '.join(VARIANTS)})"
        ) from None
