"""Old import paths of names that moved: a module's PEP 562 ``__getattr__`` that warns.

A module whose names moved keeps answering for them for one release::

    __getattr__ = moved(__name__, {"Subject": "chaos.nemesis"})

``from OLD import Subject`` then emits a ``DeprecationWarning`` naming the new path and
returns the very object the new path holds. The new module is loaded by name on first use,
never at import time: an old path never makes its module import a floor above it.
CHANGELOG.md lists every such path; they go in the release after next.
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable, Mapping
from typing import Any

#: The release in which the old paths of the 0.2.0 moves stop working.
REMOVED_IN = "0.3.0"


def moved(
    module: str, names: Mapping[str, str], removed_in: str = REMOVED_IN
) -> Callable[[str], Any]:
    """The ``__getattr__`` of ``module`` for ``names`` (old name -> the module now holding
    it, under the same name); the old paths go in ``removed_in`` (a move made after a
    release names the release after the next one)."""

    def __getattr__(name: str) -> Any:
        new = names.get(name)
        if new is None:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        warnings.warn(
            f"{module}.{name} moved to {new}.{name}; the old path goes in {removed_in}",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(importlib.import_module(new), name)

    return __getattr__
