"""Rules, invariants and teardowns that may be ``async def``: run on the machine's loop.

Hypothesis calls every rule, invariant and teardown as a plain function. ``on_loop`` turns an
``async def`` (or a function returning an awaitable) into one that runs it on the machine's
trio loop (``machine.portal``) and returns its result; the machine's run is started first,
from the calling thread (what the coroutine awaits is the run). ``rule``, ``invariant`` and
``initialize`` are Hypothesis's, applied to that function; ``refuse_unawaited`` stops a class
that put Hypothesis's own decorator on an ``async def`` (it would never be awaited).
"""

from __future__ import annotations

import functools
import inspect
import sys
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from hypothesis import stateful

from ground._portal import Portal

F = TypeVar("F", bound=Callable[..., Any])


class OnLoop(Protocol):
    """What ``on_loop`` needs of a machine: its loop, and a way to start its run."""

    portal: Portal

    def _started(self) -> Any: ...


def is_async(fn: Callable[..., Any]) -> bool:
    return inspect.iscoroutinefunction(inspect.unwrap(fn))


async def awaited(fn: Callable[..., Any], machine: Any, kwargs: dict[str, Any]) -> Any:
    result = fn(machine, **kwargs)
    return await result if inspect.isawaitable(result) else result


def on_loop(fn: F) -> F:
    """``fn`` as Hypothesis calls it (a plain call); an ``async def`` runs on the machine's
    loop and its result comes back here. A plain function is returned as it is."""
    if not is_async(fn):
        return fn

    @functools.wraps(fn)
    def step(self: OnLoop, **kwargs: Any) -> Any:
        self._started()  # what it awaits on is the run: started from here, not the loop
        return self.portal.run(awaited, fn, self, kwargs)

    step._chaos_on_loop = True  # type: ignore[attr-defined]
    return step  # type: ignore[return-value]


def rule(**kwargs: Any) -> Callable[[F], F]:
    """``hypothesis.stateful.rule`` that also takes an ``async def`` (run on the loop)."""
    decorate: Callable[[F], F] = stateful.rule(**kwargs)
    return lambda fn: decorate(on_loop(fn))


def initialize(**kwargs: Any) -> Callable[[F], F]:
    """``hypothesis.stateful.initialize`` that also takes an ``async def``."""
    decorate: Callable[[F], F] = stateful.initialize(**kwargs)
    return lambda fn: decorate(on_loop(fn))


def invariant(*, check_during_init: bool = False) -> Callable[[F], F]:
    """``hypothesis.stateful.invariant`` that also takes an ``async def``."""
    decorate = stateful.invariant(check_during_init=check_during_init)
    return lambda fn: decorate(on_loop(fn))


def refuse_unawaited(cls: type) -> None:
    """An ``async def`` under Hypothesis's own decorators would never be awaited."""
    for name, value in vars(cls).items():
        if (
            callable(value)
            and not inspect.iscoroutinefunction(value)
            and is_async(value)
            and not getattr(value, "_chaos_on_loop", False)
        ):
            raise TypeError(
                f"{cls.__name__}.{name} is async: decorate it with chaos.hypothesis's rule, "
                "invariant or initialize (hypothesis.stateful's would not await it)"
            )


def async_teardown(
    teardown: Callable[[Any], Any], machine_teardown: Callable[[Any], None]
) -> Callable[[Any], None]:
    """A subclass's ``async def teardown`` run on the loop, then ``machine_teardown``."""

    @functools.wraps(teardown)
    def run_both(self: OnLoop) -> None:
        if sys.exc_info()[1] is not None:  # a step failed, or Hypothesis gave up on it
            machine_teardown(self)
            return
        try:
            self._started()  # (an example of no steps: its run starts here)
            self.portal.run(awaited, teardown, self, {})
        finally:
            machine_teardown(self)

    return run_both
