"""The run's ``workload`` verdict: hand-written histories, and real runs of a tiny scenario
whose workload falls short for the system's reasons and for the harness's."""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from chaos.context import RunContext
from chaos.run import RunOptions, run_scenario
from chaos.scenario import Scenario, TaskSpec
from chaos.services import RestartPolicy
from chaos.workload import WORKLOAD, PlannedWork, check_workload
from faults.model import FaultSchedule
from ground.errors import EXIT_HARNESS, ServiceError, exit_code_for

PLAN = PlannedWork("producer", "publish", ("o-1", "o-2", "o-3"), unit="order")


def op(type_: str, value: Any, process: str = "producer", f: str = "publish") -> dict[str, Any]:
    return {"process": process, "type": type_, "f": f, "value": value}


def test_the_planned_work_done_holds() -> None:
    events = [op("invoke", "o-1"), op("ok", "o-1"), op("ok", "o-2"), op("ok", "o-3")]
    verdict = check_workload([PLAN], events)
    assert verdict.valid is True
    assert verdict.name == WORKLOAD
    assert verdict.explanation == "the workload did all it was asked to (producer: 3 orders)."


def test_work_left_undone_is_a_violation_naming_it_and_how_the_process_ended() -> None:
    events = [
        op("ok", "o-1"),
        op("fail", "o-2"),
        op("ok", "o-3", process="consumer"),  # another process's op is not the plan's
        op("ok", {"not": "a key"}, f="other"),
        {"process": "service:producer", "type": "info", "f": "exit", "value": {"code": 1}},
    ]
    verdict = check_workload([PLAN], events)
    assert verdict.valid is False
    assert verdict.explanation == (
        "producer did 1 of 3 orders it was asked to (publish), missing o-2, o-3 "
        "(it exited with code 1)."
    )
    assert verdict.evidence["producer publish"] == {
        "planned": 3,
        "done": 1,
        "missing": ["o-2", "o-3"],
        "exit_codes": [1],
    }


def test_a_key_function_reads_structured_values_and_skips_odd_ones() -> None:
    plan = PlannedWork("client", "create", ("a/k-1",), key=lambda v: f"{v['tenant']}/{v['key']}")
    events = [
        op("ok", None, "client", "create"),
        op("ok", {"tenant": "a"}, "client", "create"),
        op("ok", {"tenant": "a", "key": "k-1"}, "client", "create"),
    ]
    assert check_workload([plan], events).valid is True


class Short(Scenario):
    """A workload that publishes two of its three planned orders; with ``die``, a service of
    the harness's own dies on its own during the workload."""

    id = "short"
    task = TaskSpec(service="sut", summary="the system", env=())
    restart = RestartPolicy.never()

    def __init__(self, die: bool) -> None:
        self.die = die

    async def setup(self, ctx: RunContext) -> None:
        die = "import sys, time; time.sleep(0.2); sys.exit(1)"
        code = die if self.die else "import time; time.sleep(60)"
        await ctx.start_service("helper", [sys.executable, "-c", code])
        await ctx.start_service("sut", [sys.executable, "-c", "import time; time.sleep(60)"])

    async def workload(self, ctx: RunContext) -> None:
        for order in ("o-1", "o-2"):
            ctx.recorder.record("producer", "invoke", "publish", order)
            ctx.recorder.record("producer", "ok", "publish", order)
        if self.die:
            await ctx.service("helper").exited.wait()

    async def settled(self, ctx: RunContext) -> bool:
        return True

    async def final_state(self, ctx: RunContext) -> dict[str, Any]:
        return {}

    def planned_work(self, ctx: RunContext) -> Sequence[PlannedWork]:
        return [PLAN]


async def _run(tmp_path: Path, die: bool) -> Any:
    scenario = Short(die)
    scenario.path = tmp_path
    schedule = FaultSchedule(seed=0, space_hash="none", events=())
    return await run_scenario(RunOptions(scenario, 1, out=tmp_path / "t.trace", schedule=schedule))


async def test_a_short_workload_fails_the_run_for_the_system(tmp_path: Path) -> None:
    result = await _run(tmp_path, die=False)
    assert [(v.name, v.valid) for v in result.verdicts] == [(WORKLOAD, False)]
    assert not result.held
    assert result.exit_code == 1


async def test_a_short_workload_while_a_harness_service_died_is_a_harness_error(
    tmp_path: Path,
) -> None:
    with pytest.raises(BaseExceptionGroup) as raised:
        await _run(tmp_path, die=True)
    assert exit_code_for(raised.value) == EXIT_HARNESS
    found, _ = raised.value.split(ServiceError)
    assert found is not None
    assert re.search(r"fell short .* while helper exited with code 1", str(found.exceptions[0]))
