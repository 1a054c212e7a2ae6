"""A witness is reproducible or says it is not (issue 22): search replays its shrunk witness
(``--replays``, default 5), keeps the smallest schedule of the shrink path that violates
again at least 4 of 5 times, prints the fidelity it measured, and reports a racy witness
with its rate."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from chaos._shrink import Outcome
from chaos.search import SearchResult, required_witness
from chaos.search_scenario import _witness
from faults.model import FaultSchedule
from invariants import Verdict
from tests.doc_pack import write_doc_pack


def test_required_is_four_of_five() -> None:
    assert [required_witness(n) for n in (1, 3, 5, 10)] == [1, 3, 4, 8]


class _Runs:
    """The search's runner, scripted: how many of each schedule's replays violate."""

    def __init__(self, again: dict[bytes, int]) -> None:
        self.again = again
        self.traces: dict[bytes, Path] = {k: Path(f"{i}.trace") for i, k in enumerate(again)}
        self.asked: list[int] = []

    def progress(self, _message: str) -> None:
        pass

    def __call__(self, schedules: Sequence[FaultSchedule]) -> list[Outcome]:
        key = schedules[0].to_msgpack()
        self.asked.append(len(schedules))
        bad = self.again[key]
        return [
            Outcome((Verdict("counted_once", n >= bad, ""),)) for n in range(len(schedules))
        ]


def _schedule(seed: int) -> FaultSchedule:
    return FaultSchedule(seed=seed, space_hash="h", events=())


def _found(schedule: FaultSchedule) -> SearchResult:
    return SearchResult(True, 3, 2, schedule, (Verdict("counted_once", False, ""),))


def test_a_witness_that_reproduces_is_kept_with_its_fidelity() -> None:
    shrunk = _schedule(1)
    runs = _Runs({_schedule(2).to_msgpack(): 5, shrunk.to_msgpack(): 4})
    result = _witness(_found(shrunk), runs, 5)  # type: ignore[arg-type]
    assert result.schedule == shrunk
    assert result.fidelity == (4, 5)
    assert not result.racy
    assert runs.asked == [5]


def test_a_racy_witness_says_so_with_its_best_rate() -> None:
    shrunk = _schedule(1)
    runs = _Runs({_schedule(3).to_msgpack(): 0, _schedule(2).to_msgpack(): 0,
                  shrunk.to_msgpack(): 2})  # fmt: skip
    result = _witness(_found(shrunk), runs, 5)  # type: ignore[arg-type]
    assert result.racy
    assert result.fidelity == (2, 5)
    assert result.schedule == shrunk
    assert runs.asked == [5, 5, 5]  # the budget: three schedules of the shrink path


def test_search_prints_the_fidelity_it_measured(tmp_path: Path) -> None:
    pack = write_doc_pack(tmp_path / "tally")
    done = subprocess.run(
        [sys.executable, "-m", "chaos", "search", str(pack), "--variant", "no-dedupe",
         "--max-examples", "4", "--jobs", "2", "--replays", "3", "--json"],
        capture_output=True, text=True, timeout=600, cwd=tmp_path, check=False,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    data = json.loads(done.stdout)
    assert data["found"] is True
    assert data["fidelity"] == {"reproduced": 3, "replays": 3, "required": 3}
    assert data["racy"] is False
