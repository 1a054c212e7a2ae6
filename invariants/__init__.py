"""Invariant checkers: pure functions from (history, final state) to a ``Verdict``.

This package is the generic layer: the history model, verdicts, the registry and checkers any
scenario may use. A scenario pack keeps its own checkers and registers them under its name
(``register("exactly_once", pack="payments")``); a scenario resolves the names it lists with
``get(name, pack=...)``. Run several with ``run_checkers``, which never raises: a checker
that crashes gives an ``unknown`` verdict.

The generic checkers register when this package is imported: ``fencing_tokens`` and
``exclusive_leases`` (history-based lease checks, ``invariants.leases``).
"""

import invariants.exclusive_leases  # registers a generic checker
import invariants.fencing  # noqa: F401  (registers a generic checker)
from invariants.base import FunctionInvariant, Invariant, run_checkers
from invariants.history import NEMESIS, History, Op, OpType, Pair
from invariants.registry import REGISTRY, get, known, register
from invariants.verdict import HELD, UNKNOWN, VIOLATED, Validity, Verdict, verdict_word

__all__ = [
    "HELD",
    "NEMESIS",
    "REGISTRY",
    "UNKNOWN",
    "VIOLATED",
    "FunctionInvariant",
    "History",
    "Invariant",
    "Op",
    "OpType",
    "Pair",
    "Validity",
    "Verdict",
    "get",
    "known",
    "register",
    "run_checkers",
    "verdict_word",
]
