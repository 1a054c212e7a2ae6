"""payments on Docker: the payments scenario with its gateway and consumer as containers.

See README.md beside this file. Everything but how the two services start is the payments
pack's own: the code in the image, the workload, the fault spaces, the checkers.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from chaos.context import RunContext
from chaos.scenario import Signal
from chaos.services.images import Image, python_image
from invariants import Invariant, get
from scenarios.payments.scenario import ACK_WAIT_S, Payments

PAYMENTS = Path(__file__).resolve().parent.parent / "payments"
ROOT = PAYMENTS.parent.parent
#: Gateway's port inside its container (each container has a network namespace of its own).
GATEWAY_PORT = 8080
_APP_FILES = ("__init__.py", "_broker.py", "_oplog.py", "charger.py", "consumer.py",
              "gateway.py", "variants.py")  # fmt: skip


def app_image() -> Image:
    """This Python, nats-py and psycopg, and the payments services' code under /app."""
    app = {
        "ground/__init__.py": ROOT / "ground" / "__init__.py",
        "ground/errors.py": ROOT / "ground" / "errors.py",
        "ground/jsonhttp.py": ROOT / "ground" / "jsonhttp.py",
        "scenarios/__init__.py": ROOT / "scenarios" / "__init__.py",
    }
    app.update({f"scenarios/payments/{name}": PAYMENTS / name for name in _APP_FILES})
    return python_image("chaos-payments", libraries=("nats-py", "psycopg[binary]"), app=app)


IMAGE = app_image()


class PaymentsDocker(Payments):
    id = "payments_docker"
    description = "payments with its gateway and consumer as Docker containers"
    images = (IMAGE,)
    # The variants whose fault spaces faults.toml holds (payments' others are not ported).
    variants = {v: d for v, d in Payments.variants.items() if v in ("golden", "no-idempotency")}
    catches = {"no-idempotency": "exactly_once"}
    signals: dict[str, tuple[Signal, ...]] = {"no-idempotency": Payments.signals["no-idempotency"]}
    task = None

    def content_hash(self) -> str:
        """This folder's hash and the image's (which hashes the payments code it runs)."""
        return hashlib.sha256(f"{super().content_hash()}\0{IMAGE.ref}".encode()).hexdigest()

    def checkers(self) -> list[Invariant]:
        return [get(name, pack="payments") for name in self.invariants]

    async def setup(self, ctx: RunContext) -> None:
        gateway = await ctx.start_container(
            "gateway",
            IMAGE.ref,
            command=[
                "python",
                "-m",
                "scenarios.payments.gateway",
                str(GATEWAY_PORT),
                "/data/gateway.jsonl",
            ],
            ready_line="gateway listening",
            writable=["/data"],
            wait=False,
        )
        pg = await ctx.postgres()
        nats = await ctx.nats()
        names = await self._isolate(ctx, pg.dsn, nats.url)
        role = await self._role(ctx, pg)
        users = await self._broker(ctx, nats)
        gateway_inside = f"127.0.0.1:{GATEWAY_PORT}"
        nats_for_consumer = ctx.add_link("consumer-nats", f"{nats.host}:{nats.port}")
        pg_for_consumer = ctx.add_link("consumer-postgres", f"{pg.host}:{pg.port}")
        gateway_for_consumer = ctx.add_link(
            "consumer-gateway", gateway_inside, upstream_in="gateway"
        )
        nats_for_producer = ctx.add_link("producer-nats", f"{nats.host}:{nats.port}")
        # The harness's own way in to read the gateway's charges (no fault targets it).
        gateway_for_harness = ctx.add_link("harness-gateway", gateway_inside, upstream_in="gateway")
        ctx.state.update(
            pg=pg,
            nats=nats,
            gateway=f"http://{gateway_for_harness}",
            producer_nats=users["producer"].url(nats_for_producer),
            orders=self.orders(ctx),
            names=names,
        )
        consumer = await ctx.start_container(
            "consumer",
            IMAGE.ref,
            command=["python", "-m", "scenarios.payments.consumer"],
            env={
                **names,
                "VARIANT": ctx.variant,
                "NATS_URL": users["consumer"].url(nats_for_consumer),
                # its own role, as in payments (the harness keeps the superuser)
                "PG_DSN": role.dsn(pg_for_consumer, pg.database, schema=ctx.state["schema"]),
                "GATEWAY_URL": f"http://{gateway_for_consumer}",
                "ACK_WAIT_S": str(ACK_WAIT_S),
            },
            links=["consumer-nats", "consumer-postgres", "consumer-gateway"],
            ready_line="consumer ready",
            wait=False,
        )
        await ctx.ready(gateway, consumer)


SCENARIO = PaymentsDocker()

__all__ = ["IMAGE", "SCENARIO", "PaymentsDocker"]
