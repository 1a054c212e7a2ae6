"""Rules, invariants and teardowns that may be ``async def``: run on the machine's loop.

Hypothesis calls every rule, invariant and teardown as a plain function. ``on_loop`` turns an
``async def`` (or a function returning an awaitable) into one that runs it on the machine's
trio loop (``machine.portal``) and returns its result; the machine's run is started first,
from the calling thread (what the coroutine awaits is the run). ``rule``, ``invariant`` and
``initialize`` are Hypothesis's, applied to that function; ``refuse_unawaited`` stops a class
that put Hypothesis's own decorator on an ``async def`` (it would never be awaited).

A failure in such a step (an assertion, an error) is handed to the machine (``_defer``),
which keeps the first one and raises it from teardown; the example's later rules still run
(its steps, which the machine's memo of failures is keyed by, stay those the choices drew),
its later invariants are skipped. Hypothesis needs the same choices to draw the same way
every time, and a real run is not the same twice: a racy invariant that failed before a step
in one example and held in another made the same choices stop drawing early
(``FlakyStrategyDefinition``, seen on payments under load). Deferred, every example draws all
its steps.
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
    """What ``on_loop`` needs of a machine: its loop, a way to start its run, and a way to
    keep a step's failure for teardown (True: kept; False: raise it now)."""

    portal: Portal

    def _started(self) -> Any: ...

    def _defer(self, failure: BaseException, step: str) -> bool: ...


def is_async(fn: Callable[..., Any]) -> bool:
    return inspect.iscoroutinefunction(inspect.unwrap(fn))


async def awaited(
    fn: Callable[..., Any], machine: Any, kwargs: dict[str, Any], args: tuple[Any, ...] = ()
) -> Any:
    result = fn(machine, *args, **kwargs)
    return await result if inspect.isawaitable(result) else result


def on_loop(fn: F, *, check: bool = False) -> F:
    """``fn`` as Hypothesis calls it (a plain call); an ``async def`` runs on the machine's
    loop and its result comes back here. A failure is handed to the machine's ``_defer``
    (raised from teardown; the step returns None); after one, a ``check`` (an invariant)
    returns None at once."""
    run_async = is_async(fn)

    @functools.wraps(fn)
    def step(self: OnLoop, *args: Any, **kwargs: Any) -> Any:
        # (Hypothesis passes keywords; a rule of the machine's, such as wait_messages, may
        # also be called from another rule, with positional arguments)
        if check and getattr(self, "_failure", None) is not None:
            return None  # the example failed already: its first failure is the report
        try:
            if not run_async:
                return fn(self, *args, **kwargs)
            self._started()  # what it awaits on is the run: started from here, not the loop
            return self.portal.run(awaited, fn, self, kwargs, args)
        except Exception as exc:
            defer = getattr(self, "_defer", None)
            if defer is None or not defer(exc, fn.__name__):
                raise
            return None

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
    return lambda fn: decorate(on_loop(fn, check=True))


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
        failed = sys.exc_info()[1] or getattr(self, "_failure", None)
        if failed is not None:  # a step failed, or Hypothesis gave up on it
            machine_teardown(self)
            return
        try:
            self._started()  # (an example of no steps: its run starts here)
            self.portal.run(awaited, teardown, self, {})
        finally:
            machine_teardown(self)

    return run_both
