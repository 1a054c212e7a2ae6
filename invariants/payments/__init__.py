"""Checkers for the payments scenario (importing this package registers them).

``final_state`` shape: see docs/invariants.md.
"""

from invariants.payments.consistent_state import consistent_final_state
from invariants.payments.exactly_once import exactly_once
from invariants.payments.no_lost_messages import no_lost_messages
from invariants.payments.state import MalformedState

__all__ = ["MalformedState", "consistent_final_state", "exactly_once", "no_lost_messages"]
