"""Invariant checkers: pure functions from (history, final state) to a ``Verdict``.

Scenarios name their invariants by string: ``invariants.get("exactly_once")``. Run several
with ``run_checkers``, which never raises: a checker that crashes gives an ``unknown`` verdict.
"""

from invariants import payments
from invariants.base import FunctionInvariant, Invariant, run_checkers
from invariants.history import NEMESIS, History, Op, OpType, Pair
from invariants.registry import REGISTRY, get, register
from invariants.verdict import Validity, Verdict

__all__ = [
    "NEMESIS",
    "REGISTRY",
    "FunctionInvariant",
    "History",
    "Invariant",
    "Op",
    "OpType",
    "Pair",
    "Validity",
    "Verdict",
    "get",
    "payments",
    "register",
    "run_checkers",
]
