"""The run floor: runs from synchronous code, in this process, on servers kept between runs."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from chaos.floor import RunFloor
from chaos.run import RunOptions
from chaos.scenario import load_scenario
from chaos.services import default_run_parent
from faults.schedule import generate
from replay.trace import read_trace


@pytest.fixture
def run_root(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    root = Path(tempfile.mkdtemp(prefix="chaos-floor-runs-", dir=default_run_parent()))
    root.chmod(0o755)
    registry = Path(tempfile.mkdtemp(prefix="chaos-floor-reg-"))
    monkeypatch.setenv("CHAOS_RUN_DIR", str(root))
    monkeypatch.setenv("CHAOS_REGISTRY_DIR", str(registry))
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(registry, ignore_errors=True)


def children() -> list[psutil.Process]:
    me = psutil.Process()
    found = me.children(recursive=True)
    return [c for c in found if c.is_running() and c.status() != psutil.STATUS_ZOMBIE]


@pytest.mark.slow
@pytest.mark.parametrize("warm", [True, False])
def test_runs_on_the_floor_keep_its_servers_and_leave_nothing(
    warm: bool, run_root: Path, tmp_path: Path
) -> None:
    scenario = load_scenario("payments")
    space = scenario.fault_space("no-idempotency")
    with RunFloor(warm=warm) as floor:
        results = [
            floor.run(
                RunOptions(
                    scenario,
                    seed,
                    variant="no-idempotency",
                    out=tmp_path / f"{seed}.trace",
                    schedule=generate(space, seed),
                )
            )
            for seed in (1, 2)
        ]
        assert floor.runs == ((2, 2) if warm else (2, 0))
        kept = list(run_root.iterdir())
        assert len(kept) == 1  # the floor's own registered dir: "chaos-floor-*"
        assert kept[0].name.startswith("chaos-floor-")
    for seed, result in zip((1, 2), results, strict=True):
        assert result.exit_code in (0, 1)
        assert result.final_state["published"]  # the workload ran, the stores were read
        assert read_trace(tmp_path / f"{seed}.trace").schedule == result.schedule.to_dict()
    # Closed: the servers, services and zygote are gone, and so is the floor's dir.
    assert children() == []
    assert list(run_root.iterdir()) == []
