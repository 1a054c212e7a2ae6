"""noop: passes every chunk unchanged (an internal type the API accepts)."""

from __future__ import annotations

from faults.proxy.toxics.base import Toxic


class NoopToxic(Toxic):
    type_name = "noop"
