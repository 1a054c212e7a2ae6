"""What a supervised service (a ``ManagedProcess``, a ``ContainerService``) says of its current
start, whatever runs it: paused, exited, died on its own."""

from __future__ import annotations

from typing import Generic, Protocol, TypeVar

import trio

from ground.errors import ServiceError


class Incarnation(Protocol):
    """One start of a service: set ``exited`` when it ends; ``expected_exit`` when the
    harness stopped or killed it."""

    @property
    def exited(self) -> trio.Event: ...

    @property
    def expected_exit(self) -> bool: ...


Start = TypeVar("Start", bound=Incarnation)


class Incarnations(Generic[Start]):
    """The state every service kind shares; each sets ``_current`` at every start and
    ``_paused`` when a fault pauses it."""

    name: str
    _current: Start | None
    _paused: bool

    @property
    def paused(self) -> bool:
        return self._paused

    @property
    def exited(self) -> trio.Event:
        """Set when the current start exits (a restart brings a fresh event)."""
        if self._current is None:
            raise ServiceError(f"{self.name} has not been started")
        return self._current.exited

    @property
    def died(self) -> bool:
        """True when the current start exited without the harness stopping or killing it."""
        cur = self._current
        return cur is not None and cur.exited.is_set() and not cur.expected_exit
