"""PROCESS faults: signals to a service under test.

::

    crash  SIGKILL the service (its process group and descendants); restart it after
           ``restart_after_s``; a crash that lands while it restarts is one more crash
    pause  SIGSTOP it; SIGCONT on heal
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import trio

from chaos.nemesis.applier import Applied, params_of
from chaos.nemesis.protocol import NemesisContext, Service
from faults.kinds import FaultKind
from faults.model import FaultEvent
from ground.errors import ServiceError
from invariants.history import SERVICE_PREFIX

#: How long a crashed service may take to come back before the run fails.
RESTART_TIMEOUT_S = 60.0


async def _crash(ctx: NemesisContext, event: FaultEvent, service: Service) -> Applied:
    await service.kill()

    async def restart() -> None:
        try:
            with trio.fail_after(RESTART_TIMEOUT_S):
                started = await service.restart()
        except ServiceError as exc:
            if not getattr(service, "supervised", False):  # (a ManagedProcess's flag)
                raise
            # It died on its own before it was ready: its supervisor restarts it (backoff).
            ctx.recorder.record(
                f"{SERVICE_PREFIX}{service.name}", "info", "restart_failed", {"error": str(exc)}
            )
            return
        if started is False:  # another crash killed it while it started: a fault, no error
            ctx.recorder.record(
                f"{SERVICE_PREFIX}{service.name}", "info", "restart_interrupted", {}
            )
            return
        ctx.recorder.record(
            f"{SERVICE_PREFIX}{service.name}",
            "info",
            "start",
            {"pid": service.pid, "restart": True},
        )

    return Applied(
        restart, heal_after_s=float(params_of(event)["restart_after_s"]), when_stopped=False
    )


async def _pause(ctx: NemesisContext, event: FaultEvent, service: Service) -> Applied:
    service.pause()

    async def resume() -> None:
        service.resume()

    return Applied(resume)


FAULTS: dict[FaultKind, Callable[[NemesisContext, FaultEvent, Service], Awaitable[Applied]]] = {
    FaultKind.CRASH: _crash,
    FaultKind.PAUSE: _pause,
}


class ProcessApplier:
    """Signals the service; a crash heals itself by restarting it."""

    kinds = frozenset(FAULTS)

    async def apply(self, ctx: NemesisContext, event: FaultEvent, target: Service) -> Applied:
        return await FAULTS[event.kind](ctx, event, target)
