"""One object per process, made at first use and closed at exit (a kept floor, a kept pool)."""

from __future__ import annotations

import atexit
import threading
from collections.abc import Callable
from typing import Generic, Protocol, TypeVar


class _Closable(Protocol):
    def close(self) -> None: ...


T = TypeVar("T", bound=_Closable)


class ProcessShared(Generic[T]):
    """``get()`` makes the object once (thread-safe) and registers ``close`` at exit;
    ``close()`` stops it, and the next ``get()`` makes a new one."""

    def __init__(self, make: Callable[[], T]) -> None:
        self._make = make
        self._value: T | None = None
        self._lock = threading.Lock()
        self._registered = False

    def get(self) -> T:
        with self._lock:
            if self._value is None:
                self._value = self._make()
                if not self._registered:
                    atexit.register(self.close)
                    self._registered = True
            return self._value

    def close(self) -> None:
        with self._lock:
            value, self._value = self._value, None
        if value is not None:
            value.close()
