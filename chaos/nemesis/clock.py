"""CLOCK faults: a service's wall clock shifted through its libfaketime file.

::

    clock_skew  offset the service's clock by ``offset_s`` seconds; back to 0 on heal
"""

from __future__ import annotations

from chaos.nemesis.applier import Applied, params_of
from chaos.nemesis.protocol import NemesisContext, Service
from faults.kinds import FaultKind
from faults.model import FaultEvent
from ground.errors import ConfigError


class ClockApplier:
    """Sets the service's libfaketime offset; the heal sets it back to 0."""

    kinds = frozenset({FaultKind.CLOCK_SKEW})

    async def apply(self, ctx: NemesisContext, event: FaultEvent, target: Service) -> Applied:
        skew = target.faketime
        if skew is None:
            raise ConfigError(f"service {target.name} cannot take clock skew")
        skew.set_offset(float(params_of(event)["offset_s"]))

        async def unskew() -> None:
            skew.set_offset(0.0)

        return Applied(unskew)
