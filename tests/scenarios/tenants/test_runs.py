"""The tenants pack for real: PostgreSQL, the API process, proxies, the harness's client.

Per defective variant, on a seed of its own fault space: the variant holds with no fault at
all (a smoke test is not a variant); that seed's schedule violates the invariant it
declares, with every diagnosis signal it declares in the trace; and the golden API holds
under that very schedule, its trace lacking the signals that name the defect. Plus the
golden on a seed of the neutral space. Ten runs of about 3 s each: about 35 s in all.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from chaos.run import RunOptions, RunResult, run_scenario
from chaos.scenario import load_scenario
from faults.model import FaultSchedule
from faults.schedule import generate

pytestmark = pytest.mark.slow

#: A seed of each variant's own space that catches it (measured: `chaos sweep tenants
#: --variant V --seeds 0-19` caught every variant on all 20 seeds).
CAUGHT_ON = {"session-tenant": 1, "missing-policy": 1, "definer-function": 2}


async def run(variant: str, schedule: FaultSchedule, out: Path) -> RunResult:
    scenario = load_scenario("tenants")
    return await run_scenario(
        RunOptions(scenario, schedule.seed, variant=variant, schedule=schedule, out=out)
    )


def verdicts(result: RunResult) -> dict[str, object]:
    return {v.name: v.valid for v in result.verdicts}


async def test_golden_holds_on_a_seed_of_the_neutral_space(tmp_path: Path) -> None:
    tenants = load_scenario("tenants")
    schedule = generate(tenants.fault_space("golden"), 3)
    result = await run("golden", schedule, tmp_path / "golden.trace")
    assert result.held, [v.explanation for v in result.verdicts]
    assert result.settled
    creates = [e for e in result.history if e["process"] == "client" and e["f"] == "create"]
    assert len(creates) == 2 * 15  # every create invoked and acknowledged


@pytest.mark.parametrize("variant", sorted(CAUGHT_ON))
async def test_variant_holds_without_faults(variant: str, tmp_path: Path) -> None:
    result = await run(variant, FaultSchedule(seed=0, space_hash="none"), tmp_path / "t.trace")
    assert verdicts(result) == dict.fromkeys(load_scenario("tenants").invariants, True)
    assert result.settled


@pytest.mark.parametrize("variant", sorted(CAUGHT_ON))
async def test_variant_is_caught_and_the_golden_survives_the_same_faults(
    variant: str, tmp_path: Path
) -> None:
    tenants = load_scenario("tenants")
    schedule = generate(tenants.fault_space(variant), CAUGHT_ON[variant])
    caught = await run(variant, schedule, tmp_path / "variant.trace")
    declared = tenants.catches[variant]
    assert verdicts(caught)[declared] is False
    leak = next(v for v in caught.verdicts if v.name == declared)
    assert leak.evidence["leaks"], leak.explanation
    missing = [s.what for s in tenants.signals[variant] if not s.found_in(caught.history)]
    assert missing == []

    golden = await run("golden", schedule, tmp_path / "golden.trace")
    assert golden.held, [v.explanation for v in golden.verdicts]
    applied = [e for e in golden.history if e["process"] == "nemesis"]
    assert [e["value"]["phase"] for e in applied] == ["apply", "heal"]
    # the signals point at the defect: the golden's trace under the same faults lacks some
    assert not all(s.found_in(golden.history) for s in tenants.signals[variant])
