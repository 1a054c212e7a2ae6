"""Hypothesis on real runs: fault schedules for ``@given``, and a live stateful machine.

::

    chaos/hypothesis/
      _strategy.py  schedules(): generate's draw (chaos run, chaos search) as a strategy,
                    built from fair bits so it shrinks toward the space's simplest faults
      _live.py      LiveRun: a run whose faults are injected step by step (a FaultDriver)
      _machine.py   ChaosMachine: a RuleBasedStateMachine whose steps are faults on a live run
      _rules.py     the machine's rules, one per fault template of its space
      _steps.py     rule / invariant / initialize that take ``async def`` (run on the loop)

``@given`` over ``schedules(...)`` makes a real run per example through the pytest plugin's
``env`` fixture (``env.run(schedule)``, ``chaos.testing``); both faces run on the process's
``chaos.floor`` (servers kept between runs). docs/pytest.md shows both; docs/search.md
measures them beside ``chaos search``.
"""

from hypothesis.stateful import precondition

from chaos.hypothesis._live import Fault, LiveRun, LiveRunEnded
from chaos.hypothesis._machine import ChaosMachine
from chaos.hypothesis._steps import initialize, invariant, rule
from chaos.hypothesis._strategy import schedules

__all__ = [
    "ChaosMachine",
    "Fault",
    "LiveRun",
    "LiveRunEnded",
    "initialize",
    "invariant",
    "precondition",
    "rule",
    "schedules",
]
