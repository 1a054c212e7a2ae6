"""`chaos run leases` on real PostgreSQL, processes and proxies: the golden worker holds under
every variant's exposing fault, each variant holds without faults and is caught, on a known
seed, by the invariant it declares, with the signals its diagnosis path names in the trace.

Each test runs its scenarios side by side (they mostly wait): 16-17 s each on 2 cores
(30 s under heavy load); the file about 55 s with the database tests.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from chaos.run import RunOptions, RunResult, run_scenario
from chaos.scenario import load_scenario
from chaos.services import default_run_parent
from faults.model import FaultSchedule
from faults.schedule import generate
from replay.trace import read_trace
from tests.test_run_payments import assert_nothing_left

pytestmark = pytest.mark.slow

LEASES = load_scenario("leases")
DEFECTS = ("no-fencing", "wall-clock-expiry", "renew-without-owner-check")
#: A seed of each variant's own space that exposes it (measured: every seed tried does).
SEED = 1


@pytest.fixture
def run_root(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Runs put their temp dirs here, so the test can see that nothing is left behind."""
    root = Path(tempfile.mkdtemp(prefix="chaos-test-runs-", dir=default_run_parent()))
    root.chmod(0o755)  # PostgreSQL runs as its own user and must reach its data directory
    monkeypatch.setenv("CHAOS_RUN_DIR", str(root))
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


async def run_side_by_side(
    cases: dict[str, tuple[str, FaultSchedule]], out: Path
) -> dict[str, RunResult]:
    """name -> (variant, schedule): every run at once; name -> its result."""
    results: dict[str, RunResult] = {}

    async def one(name: str, variant: str, schedule: FaultSchedule) -> None:
        options = RunOptions(
            LEASES, schedule.seed, variant, out=out / f"{name}.trace", schedule=schedule
        )
        results[name] = await run_scenario(options)

    async with trio.open_nursery() as nursery:
        for name, (variant, schedule) in cases.items():
            nursery.start_soon(one, name, variant, schedule)
    return results


def exposing(variant: str) -> FaultSchedule:
    return generate(LEASES.fault_space(variant), SEED)


def no_faults() -> FaultSchedule:
    space = LEASES.fault_space("golden")
    return FaultSchedule(seed=SEED, space_hash=space.content_hash(), events=())


def verdicts(result: RunResult) -> dict[str, object]:
    return {v.name: v.valid for v in result.verdicts}


ALL_HELD = {
    "fencing_tokens": True,
    "exclusive_leases": True,
    "job_recovered": True,
    "lease_failover": True,
}


async def test_golden_holds_on_a_seed_and_under_every_variants_exposing_fault(
    tmp_path: Path, run_root: Path
) -> None:
    cases = {"seed-3": ("golden", generate(LEASES.fault_space("golden"), 3))}
    cases |= {f"under-{v}": ("golden", exposing(v)) for v in DEFECTS}
    results = await run_side_by_side(cases, tmp_path)
    assert {name: verdicts(r) for name, r in results.items()} == dict.fromkeys(cases, ALL_HELD)
    assert all(r.settled for r in results.values())
    # a long pause of the holder or its database link cut hands the lease on: golden recovers
    for name in ("under-no-fencing", "under-renew-without-owner-check"):
        holders = {
            e["value"]["holder"]
            for e in results[name].history
            if e["process"] == "lease-audit" and e["f"] == "grant" and e["type"] == "ok"
        }
        assert len(holders) >= 2, name
    assert_nothing_left(run_root)


async def test_each_variant_holds_when_no_fault_is_injected(tmp_path: Path) -> None:
    results = await run_side_by_side({v: (v, no_faults()) for v in DEFECTS}, tmp_path)
    assert {v: verdicts(r) for v, r in results.items()} == dict.fromkeys(DEFECTS, ALL_HELD)


async def test_each_variant_is_caught_by_its_invariant_with_its_diagnosis_signals(
    tmp_path: Path,
) -> None:
    results = await run_side_by_side({v: (v, exposing(v)) for v in DEFECTS}, tmp_path)
    for variant, result in results.items():
        caught = LEASES.catches[variant]
        assert verdicts(result) == {**ALL_HELD, caught: False}, variant
        events = read_trace(result.trace).events
        missing = [s.what for s in LEASES.signals[variant] if not s.found_in(events)]
        assert missing == [], variant
