"""Load is diagnosable: the trace records the load a run saw, ``--stress`` re-creates CPU
pressure with busy loops that never outlive the block, and the options parse as documented."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio

from chaos.cli import _optional_values
from chaos.context import RunContext
from chaos.run import RunOptions, run_scenario
from chaos.scenario import Scenario
from chaos.stress import (
    SWEEP_JOBS_ENV,
    cpu_count,
    describe,
    open_stress,
    parse_stress,
    suggested_stress,
)
from faults.model import FaultSchedule
from ground.errors import ConfigError
from replay.report import render_timeline
from replay.trace import read_trace


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


async def test_busy_loops_run_for_the_block_and_are_gone_after_it() -> None:
    async with open_stress(2) as pids:
        assert len(pids) == 2
        assert all(_alive(pid) for pid in pids)
    assert not any(_alive(pid) for pid in pids)


async def test_busy_loops_are_gone_after_an_error_or_a_cancellation() -> None:
    seen: list[int] = []
    with pytest.raises(RuntimeError):
        async with open_stress(1) as pids:
            seen += pids
            raise RuntimeError("boom")
    with trio.move_on_after(0.2):
        async with open_stress(1) as pids:
            seen += pids
            await trio.sleep_forever()
    assert len(seen) == 2
    assert not any(_alive(pid) for pid in seen)


class Quiet(Scenario):
    id = "quiet"

    async def setup(self, ctx: RunContext) -> None: ...

    async def workload(self, ctx: RunContext) -> None: ...

    async def settled(self, ctx: RunContext) -> bool:
        return True

    async def final_state(self, ctx: RunContext) -> dict[str, Any]:
        return {}


async def test_the_trace_records_the_load_the_run_saw(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(SWEEP_JOBS_ENV, "8")
    scenario = Quiet()
    scenario.path = tmp_path
    schedule = FaultSchedule(seed=0, space_hash="none", events=())
    async with open_stress(1):
        result = await run_scenario(
            RunOptions(scenario, 1, out=tmp_path / "t.trace", schedule=schedule)
        )
    trace = read_trace(result.trace)
    load = trace.header["load"]
    assert load["cpus"] == cpu_count()
    assert load["sweep_jobs"] == 8
    assert load["stress"] == 1
    assert len(load["loadavg"]) == 3
    assert trace.end is not None
    assert len(trace.end["load"]["loadavg"]) == 3
    shown = render_timeline(trace)
    assert "sweep --jobs 8; --stress 1" in shown
    assert f"{cpu_count()} cpu(s)" in shown


def test_stress_counts_parse_and_bad_ones_are_config_errors() -> None:
    assert parse_stress(None, 3) is None
    assert parse_stress("auto", 3) == 3
    assert parse_stress("2", 3) == 2
    for bad in ("0", "-1", "x", str(8 * cpu_count() + 1)):
        with pytest.raises(ConfigError, match="--stress"):
            parse_stress(bad, 3)


def test_the_suggested_stress_follows_the_recorded_load() -> None:
    here = cpu_count()
    # A sweep at --jobs 8 on 2 CPUs: 4 runs per CPU, so 4 loops per CPU here on an idle
    # machine; what already runs here counts towards it.
    sweep = {"loadavg": [3.0, 2, 1], "cpus": 2, "sweep_jobs": 8}
    assert suggested_stress(sweep, current=0.0) == 4 * here
    assert suggested_stress(sweep, current=1.0) == 4 * here - 1
    busy = {"loadavg": [6.0, 2, 1], "cpus": 2, "sweep_jobs": None}
    assert suggested_stress(busy, current=0.0) == 3 * here
    assert suggested_stress(busy, current=100.0) == 1  # already busier: the least stress
    assert suggested_stress({"loadavg": [0.1, 0, 0], "cpus": 2}, current=0.0) == 1
    assert suggested_stress(None) == here
    assert describe({"loadavg": [1.5, 1, 0.5], "cpus": 2, "sweep_jobs": 4}) == (
        "loadavg 1.5 1 0.5, 2 cpu(s), sweep --jobs 4"
    )
    assert describe(None) == "not recorded"


@pytest.mark.parametrize(
    ("given", "parsed"),
    [
        (["replay", "t", "--stress"], ["replay", "t", "--stress=auto"]),
        (["replay", "--stress", "t"], ["replay", "--stress=auto", "t"]),
        (["replay", "t", "--stress", "3"], ["replay", "t", "--stress", "3"]),
        (["replay", "t", "--stress", "--json"], ["replay", "t", "--stress=auto", "--json"]),
        (["run", "--", "--stress"], ["run", "--", "--stress"]),
        (["sweep", "p", "--ray", "--stress"], ["sweep", "p", "--ray=local", "--stress=auto"]),
    ],
)
def test_stress_alone_means_auto(given: list[str], parsed: list[str]) -> None:
    assert _optional_values(given) == parsed


async def test_validate_stress_loads_only_the_golden_runs(tmp_path: Path) -> None:
    import chaos.stress
    from chaos.cli._validate import _golden_under_stress
    from chaos.validate import Observed

    seen: dict[str, int | None] = {}

    async def run(variant: str, seed: int, out: Path, *, faults: bool = True) -> Observed:
        seen[variant] = chaos.stress._stress
        return Observed(out)

    stressed = _golden_under_stress(run, 1)
    await stressed("golden", 1000, tmp_path / "g.trace")
    await stressed("no-idempotency", 1000, tmp_path / "v.trace")
    assert seen == {"golden": 1, "no-idempotency": None}
    assert _golden_under_stress(run, None) is run


def test_validate_stress_is_refused_with_ray_before_anything_runs(tmp_path: Path) -> None:
    pytest.importorskip("ray")
    from chaos.cli._exec import ExecFlags
    from chaos.cli._validate import validate_command

    out = tmp_path / "out"
    with pytest.raises(ConfigError, match="--stress loads this machine"):
        validate_command("payments", 2, 1000, 2, out, False, False, ExecFlags(ray="local"), "2")
    assert not out.exists()
