"""Whether the workload did the work it was asked to do: the run's own ``workload`` verdict.

A scenario's invariants judge what happened to the work the workload did; a system under
test that keeps the workload from doing it (deletes the producer's stream, refuses its
requests, crashes it) must not pass for having had less to get right. So a scenario
declares its planned work (``Scenario.planned_work``: for each kind of operation of the
harness's own workload, the keys it must complete) and the runner checks it after the
invariants::

    PlannedWork("producer", "publish", keys=("o-001", ..., "o-030"))
        every key needs an ``ok`` operation of process ``producer``, ``f`` ``publish``,
        whose value's key (``key(value)``, default ``str``) is that key

The verdict is named ``workload``; it holds when every planned key was done, and is
violated otherwise, naming what is missing and how each workload process exited. When the
work fell short while one of the harness's own services or servers died on its own
(``RunContext.harness_failures``), the cause may be the harness's: the run is then a
harness error (and a grade runs it again), never the system's failure.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from invariants import Verdict
from invariants.history import SERVICE_PREFIX
from invariants.text import listing, plural

#: The name of the run's verdict on the planned work.
WORKLOAD = "workload"


@dataclass(frozen=True)
class PlannedWork:
    """Work the harness's workload must get done: an ``ok`` operation of ``process`` named
    ``f`` for each of ``keys``; ``key`` names an operation's key from its value."""

    process: str
    f: str
    keys: tuple[str, ...]
    key: Callable[[Any], str] = str
    #: What one unit is called in explanations ("order", "create").
    unit: str = "operation"


def _done(plan: PlannedWork, events: Iterable[Mapping[str, Any]]) -> set[str]:
    done: set[str] = set()
    for e in events:
        if e.get("process") == plan.process and e.get("f") == plan.f and e.get("type") == "ok":
            try:
                done.add(plan.key(e.get("value")))
            except (KeyError, TypeError, ValueError, AttributeError):
                continue  # not an operation of the plan's shape
    return done


def _exits(process: str, events: Iterable[Mapping[str, Any]]) -> list[int]:
    """The exit codes of a workload process that did not exit cleanly."""
    codes = []
    for e in events:
        value = e.get("value")
        if e.get("process") == f"{SERVICE_PREFIX}{process}" and e.get("f") == "exit":
            code = value.get("code") if isinstance(value, Mapping) else None
            if isinstance(code, int) and code != 0:
                codes.append(code)
    return codes


def check_workload(plans: Sequence[PlannedWork], events: Sequence[Mapping[str, Any]]) -> Verdict:
    """The ``workload`` verdict of a run's recorded ``events`` against its ``plans``."""
    evidence: dict[str, Any] = {}
    sentences = []
    for plan in plans:
        done = _done(plan, events)
        missing = [k for k in plan.keys if k not in done]
        exits = _exits(plan.process, events)
        evidence[f"{plan.process} {plan.f}"] = {
            "planned": len(plan.keys),
            "done": len(plan.keys) - len(missing),
            "missing": missing,
            "exit_codes": exits,
        }
        if missing:
            sentence = (
                f"{plan.process} did {len(plan.keys) - len(missing)} of "
                f"{plural(len(plan.keys), plan.unit)} it was asked to ({plan.f}), "
                f"missing {listing(missing)}"
            )
            if exits:
                sentence += f" (it exited with code {', '.join(map(str, exits))})"
            sentences.append(sentence)
    if sentences:
        return Verdict.violated(WORKLOAD, "; ".join(sentences) + ".", **evidence)
    asked = [f"{plan.process}: {plural(len(plan.keys), plan.unit)}" for plan in plans]
    return Verdict.holds(
        WORKLOAD, f"the workload did all it was asked to ({listing(asked)}).", **evidence
    )


__all__ = ["WORKLOAD", "PlannedWork", "check_workload"]
