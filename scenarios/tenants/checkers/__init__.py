"""The tenants pack's checkers (importing this package registers them under ``tenants``).

``final_state`` and history shapes: see ``state.py`` and the pack's README.md.
"""

from scenarios.tenants.checkers.isolation import tenant_isolation
from scenarios.tenants.checkers.reads import read_your_writes
from scenarios.tenants.checkers.state import PACK, MalformedState
from scenarios.tenants.checkers.writes import no_cross_tenant_writes

__all__ = [
    "PACK",
    "MalformedState",
    "no_cross_tenant_writes",
    "read_your_writes",
    "tenant_isolation",
]
