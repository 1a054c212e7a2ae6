"""Invariants by name, so a scenario lists the ones it checks as strings."""

from __future__ import annotations

from collections.abc import Callable

from chaos.errors import ConfigError
from invariants.base import CheckFn, FunctionInvariant, Invariant

REGISTRY: dict[str, Invariant] = {}


def register(name: str, description: str = "") -> Callable[[CheckFn], FunctionInvariant]:
    """Decorator: register a check function as the invariant ``name``."""

    def wrap(fn: CheckFn) -> FunctionInvariant:
        if name in REGISTRY:
            raise ConfigError(f"invariant {name!r} is already registered")
        invariant = FunctionInvariant(name, fn, description or (fn.__doc__ or "").strip())
        REGISTRY[name] = invariant
        return invariant

    return wrap


def get(name: str) -> Invariant:
    """The registered invariant ``name``; ConfigError naming the known ones otherwise."""
    try:
        return REGISTRY[name]
    except KeyError:
        known = ", ".join(sorted(REGISTRY)) or "none"
        raise ConfigError(f"unknown invariant {name!r} (known: {known})") from None
