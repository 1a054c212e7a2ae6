"""The payments pack's checkers (importing this package registers them under ``payments``).

``final_state`` shape: see docs/invariants.md. The scenario imports this package, so its
checkers are registered whenever the pack is loaded.
"""

from scenarios.payments.checkers.consistent_state import consistent_final_state
from scenarios.payments.checkers.exactly_once import exactly_once
from scenarios.payments.checkers.no_lost_messages import no_lost_messages
from scenarios.payments.checkers.state import PACK, MalformedState

__all__ = ["PACK", "MalformedState", "consistent_final_state", "exactly_once", "no_lost_messages"]
