"""Unwrap the one-exception groups a trio nursery puts around errors from a CM body."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager


def _sole(group: BaseExceptionGroup[BaseException]) -> BaseException | None:
    exc: BaseException = group
    while isinstance(exc, BaseExceptionGroup):
        if len(exc.exceptions) != 1:
            return None
        exc = exc.exceptions[0]
    return exc


@contextmanager
def unwrapped_errors() -> Iterator[None]:
    """Re-raise a group holding exactly one exception as that exception."""
    try:
        yield
    except BaseExceptionGroup as group:
        sole = _sole(group)
        if sole is None:
            raise
        raise sole from sole.__cause__
