"""The worker's variants: the golden lease and its defective siblings, one fault each.

Each defective variant is ``GoldenLease`` minus exactly one property (README.md documents
the fault that exposes it, the invariant that catches it and the diagnosis path).
"""

from __future__ import annotations

from typing import Any

from ground.errors import ConfigError
from scenarios.leases.lease import RENEW, GoldenLease, wall_clock_now


class NoFencing(GoldenLease):
    """The golden worker, but its writes carry no fencing token.

    The store cannot tell a write of the current holder from one of a holder whose lease
    has passed to another: a holder paused between its lease check and its write wakes up
    and writes after its successor.
    """

    description = "the golden worker without fencing: writes carry no token"

    def fence(self, token: int) -> int | None:
        return None


class WallClockExpiry(GoldenLease):
    """The golden worker, but lease expiry is computed and compared on the worker's clock.

    Taking the lease asks ``expires_at < <my clock>`` and writes ``<my clock> + TTL``: a
    worker whose clock runs ahead takes a lease that, by the database's clock, is still
    another worker's.
    """

    description = "the golden worker with lease expiry on the worker's wall clock"
    now_sql = "%(now)s"

    def now_params(self) -> dict[str, Any]:
        return {"now": wall_clock_now()}


class RenewWithoutOwnerCheck(GoldenLease):
    """The golden worker, but a renewal does not check that the worker still holds the lease.

    A holder cut off from the database past its lease renews its successor's lease instead,
    is told the lease's (new) token, and writes under it: the store accepts both writers.
    """

    description = "the golden worker whose renewal does not check it still holds the lease"
    renew_sql = RENEW.replace(" AND holder = %(me)s", "")


#: Every variant of the scenario (``Leases.variants`` is derived from it).
VARIANTS: dict[str, type[GoldenLease]] = {
    "golden": GoldenLease,
    "no-fencing": NoFencing,
    "wall-clock-expiry": WallClockExpiry,
    "renew-without-owner-check": RenewWithoutOwnerCheck,
}


def lease_for(variant: str) -> type[GoldenLease]:
    try:
        return VARIANTS[variant]
    except KeyError:
        raise ConfigError(
            f"unknown variant {variant!r} (leases has: {', '.join(VARIANTS)})"
        ) from None
