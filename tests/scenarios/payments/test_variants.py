"""The three one-fault payments variants on real services: each holds with no fault, is
caught by its declared invariant on a pinned seed of its own fault space with every declared
diagnosis signal in the trace, and the golden consumer holds under that same schedule."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from chaos.run import RunOptions, run_scenario
from chaos.scenario import load_scenario
from chaos.services import default_run_parent
from chaos.workload import WORKLOAD
from faults.model import FaultSchedule
from faults.schedule import generate

pytestmark = pytest.mark.slow

#: variant -> a seed of its fault space whose run catches it (found with chaos sweep; each
#: replayed with the same violation).
CAUGHT_ON = {
    "ack-before-commit": 1000,
    "gateway-retry-no-key": 1000,
    "wall-clock-dedupe": 1000,
}


@pytest.fixture
def run_root(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    root = Path(tempfile.mkdtemp(prefix="chaos-test-runs-", dir=default_run_parent()))
    root.chmod(0o755)  # PostgreSQL runs as its own user
    monkeypatch.setenv("CHAOS_RUN_DIR", str(root))
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.mark.parametrize("variant", sorted(CAUGHT_ON))
async def test_a_variant_holds_with_no_fault_injected(
    variant: str, tmp_path: Path, run_root: Path
) -> None:
    scenario = load_scenario("payments")
    quiet = FaultSchedule(seed=0, space_hash="none", events=())
    result = await run_scenario(
        RunOptions(scenario, 7, variant=variant, out=tmp_path / "t.trace", schedule=quiet)
    )
    # the pack's invariants and the run's own workload verdict (chaos.workload)
    expected = dict.fromkeys((*scenario.invariants, WORKLOAD), True)
    assert {v.name: v.valid for v in result.verdicts} == expected


@pytest.mark.parametrize("variant", sorted(CAUGHT_ON))
async def test_a_variant_is_caught_by_its_invariant_with_its_signals(
    variant: str, tmp_path: Path, run_root: Path
) -> None:
    scenario = load_scenario("payments")
    seed = CAUGHT_ON[variant]
    result = await run_scenario(
        RunOptions(scenario, seed, variant=variant, out=tmp_path / "t.trace")
    )
    verdicts = {v.name: v.valid for v in result.verdicts}
    assert verdicts[scenario.catches[variant]] is False
    missing = [s.what for s in scenario.signals[variant] if not s.found_in(result.history)]
    assert missing == []
    # An order lost for good (acked, then its booking lost with the crash) cannot settle: the
    # pack says STUCK and the run checks it then, not after settle_timeout_s; a duplicate
    # charge settles as usual.
    assert (result.settled, result.stuck) == (
        (False, True) if variant == "ack-before-commit" else (True, False)
    )


@pytest.mark.parametrize("variant", sorted(CAUGHT_ON))
async def test_the_golden_holds_under_the_schedule_that_catches_a_variant(
    variant: str, tmp_path: Path, run_root: Path
) -> None:
    scenario = load_scenario("payments")
    seed = CAUGHT_ON[variant]
    schedule = generate(scenario.fault_space(variant), seed)
    result = await run_scenario(
        RunOptions(scenario, seed, out=tmp_path / "t.trace", schedule=schedule)
    )
    assert result.held, [v.explanation for v in result.verdicts if v.valid is not True]
    assert (result.settled, result.stuck) == (True, False)
