"""Invariants by name, so a scenario lists the ones it checks as strings.

Names live in namespaces: the generic one (``pack=None``: checkers any scenario may list)
and one per scenario pack (``register("exactly_once", pack="payments")``, named by the
scenario's id). A scenario's names resolve in its own pack first, then among the generic
ones, so two packs may each have an ``exactly_once``. Registering a name again in the same
namespace replaces it: a pack module imported twice does no harm. Verdicts carry the short
name.
"""

from __future__ import annotations

from collections.abc import Callable

from ground.errors import ConfigError
from invariants.base import CheckFn, FunctionInvariant, Invariant

#: Namespace (a pack, or None for the generic checkers) -> name -> invariant.
REGISTRY: dict[str | None, dict[str, Invariant]] = {None: {}}


def register(
    name: str, description: str = "", *, pack: str | None = None
) -> Callable[[CheckFn], FunctionInvariant]:
    """Decorator: register a check function as the invariant ``name`` of ``pack`` (None:
    generic). The same name again in the same namespace replaces the earlier one."""

    def wrap(fn: CheckFn) -> FunctionInvariant:
        invariant = FunctionInvariant(name, fn, description or (fn.__doc__ or "").strip())
        REGISTRY.setdefault(pack, {})[name] = invariant
        return invariant

    return wrap


def known(pack: str | None = None) -> list[str]:
    """The names visible from ``pack``: its own and the generic ones, sorted."""
    return sorted({*REGISTRY.get(pack, {}), *REGISTRY.get(None, {})})


def get(name: str, pack: str | None = None) -> Invariant:
    """The invariant ``name`` of ``pack`` (else the generic one); ConfigError naming the
    known ones otherwise."""
    for namespace in dict.fromkeys((pack, None)):
        found = REGISTRY.get(namespace, {}).get(name)
        if found is not None:
            return found
    names = ", ".join(known(pack)) or "none"
    raise ConfigError(f"unknown invariant {name!r} (known: {names})")
