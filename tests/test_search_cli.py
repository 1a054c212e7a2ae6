"""`chaos search` on the command line: bad input, a harness error, one real search."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

import chaos.search
import chaos.search_scenario
from chaos import cli
from chaos.executor import BatchFn, LocalExecutor, OnOutcome, RunOutcome, RunSpec
from chaos.scenario import load_scenario
from replay.trace import read_trace


def search_temp_dirs(root: Path | None = None) -> set[Path]:
    return set((root or Path(tempfile.gettempdir())).glob("chaos-search-payments-*"))


def chaos_exit(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as info:
        cli.main(["search", *args])
    out, err = capsys.readouterr()
    assert isinstance(info.value.code, int)
    return info.value.code, out, err


def one_error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.startswith("chaos: error:")]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["payments", "--invariant", "nope"], "unknown invariant 'nope'"),
        (["payments", "--variant", "bogus"], "has no variant 'bogus'"),
        (["payments", "--max-examples", "0"], "--max-examples must be between 1 and 1000"),
        (["payments", "--max-shrinks", "501"], "--max-shrinks must be between 0 and 500"),
        (["payments", "--seed", "-1"], "seed must be between 0 and 2**63-1"),
        (["no-such-scenario"], "no-such-scenario"),
        (["payments", "--space", "neutral"], "--space must be one of variant, golden"),
        (["payments", "--resume", "/no/such.trace"], "--resume /no/such.trace: cannot read"),
        (["payments", "--jobs", "0"], "--jobs must be between 1 and 64, got 0"),
        (["payments", "--jobs", "-2"], "--jobs must be between 1 and 64, got -2"),
    ],
)
def test_bad_input_exits_2_with_one_line(
    capsys: pytest.CaptureFixture[str], args: list[str], fragment: str
) -> None:
    code, out, err = chaos_exit(capsys, *args)
    assert code == 2
    assert fragment in one_error_line(err)
    assert out == ""


class BrokenExecutor(LocalExecutor):
    """Every run a harness error, as a worker reports one (exit 3, a partial trace left)."""

    @asynccontextmanager
    async def session(self, jobs: int, *, warm_pool: bool) -> AsyncIterator[BatchFn]:
        async def run_batch(
            specs: Sequence[RunSpec], progress: OnOutcome | None = None
        ) -> list[RunOutcome]:
            outcomes = []
            for spec in specs:
                spec.argv()  # writes the schedule file, as a real worker's command line does
                partial = spec.trace.with_name(spec.trace.name + ".partial")
                partial.write_bytes(b"partial")
                outcome = RunOutcome(spec.seed, 3, error="postgres exited with code 1 during setup")
                outcome.trace = partial
                outcomes.append(outcome)
            return outcomes

        yield run_batch


def test_a_harness_error_exits_3_and_leaves_nothing(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # The worker side is the executor's (tests/test_executor.py); here: what search does with
    # a run that came to no verdict.
    monkeypatch.setattr(chaos.search_scenario, "LocalExecutor", BrokenExecutor)
    # a temp dir of this test's own: another search running on the machine is not ours
    own_tmp = tmp_path / "tmp"
    own_tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(own_tmp))
    before = search_temp_dirs()
    out_path = tmp_path / "found.trace"
    code, out, err = chaos_exit(capsys, "payments", "--json", "--out", str(out_path))
    assert code == 3
    assert "postgres exited with code 1 during setup" in one_error_line(err)
    assert out == ""
    assert not out_path.exists()
    assert search_temp_dirs() == before
    assert list(own_tmp.iterdir()) == []


@pytest.mark.slow
def test_a_real_search_finds_exactly_once_and_its_trace_replays(tmp_path: Path) -> None:
    trace = tmp_path / "found.trace"
    own_tmp = tmp_path / "tmp"  # another search running on the machine is not ours
    own_tmp.mkdir()

    def chaos_cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "chaos", *args],
            capture_output=True,
            text=True,
            timeout=600,
            env={**os.environ, "TMPDIR": str(own_tmp)},
        )

    done = chaos_cli(
        "search", "payments", "--variant", "no-idempotency", "--max-examples", "5",
        "--json", "--out", str(trace),
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    found: dict[str, Any] = json.loads(done.stdout)
    assert found["found"] is True
    assert (found["scenario"], found["variant"], found["trace"]) == (
        "payments", "no-idempotency", str(trace),
    )  # fmt: skip
    assert 1 <= found["tried"] <= 5 + chaos.search.DEFAULT_MAX_SHRINKS
    assert found["schedule"]["events"], "a violation needs at least one fault"
    violated = [v["name"] for v in found["verdicts"] if v["valid"] is False]
    assert "exactly_once" in violated
    recorded = read_trace(trace)
    assert not recorded.partial
    assert recorded.schedule is not None
    assert recorded.schedule == found["schedule"]
    assert recorded.header["variant"] == "no-idempotency"
    assert search_temp_dirs(own_tmp) == set()

    # The witness may hang on a race (a crash of the consumer on the 2nd delivery, while
    # the 1st order's ack is in flight): its replays reproduce it with a measured fidelity,
    # not always (exit 0 only when all of them do). It must reproduce at least once: in
    # five, or (a witness whose race is rare: CI once saw 0 of 5) in fifteen more.
    matched, outputs = 0, []
    for times in (5, 15):
        replayed = chaos_cli("replay", str(trace), "--times", str(times), "--json")
        assert replayed.returncode in (0, 1), replayed.stdout + replayed.stderr
        report = json.loads(replayed.stdout)
        assert len(report["replays"]) == times, report
        matched += report["matched"]
        outputs.append(replayed.stdout)
        if matched:
            break
    assert matched >= 1, outputs


@pytest.mark.slow
def test_search_finds_no_idempotency_from_the_golden_space_and_shrinks_it(
    tmp_path: Path,
) -> None:
    trace = tmp_path / "golden.trace"

    def chaos_cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "chaos", *args], capture_output=True, text=True, timeout=900
        )

    # Search seed 1's first draw loses the 6th order's ack twice (and publishes the 19th
    # twice, which JetStream stores once): a redelivery, charged again, every time. Seed 0's
    # first draw crashes the consumer, which may land between its charge and its commit and
    # then breaks consistent_final_state as well.
    done = chaos_cli(
        "search", "payments", "--variant", "no-idempotency", "--space", "golden",
        "--invariant", "exactly_once", "--seed", "1", "--json", "--out", str(trace),
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    found: dict[str, Any] = json.loads(done.stdout)
    assert found["found"] is True
    assert 1 <= len(found["schedule"]["events"]) <= 2
    assert [v["name"] for v in found["verdicts"] if v["valid"] is False] == ["exactly_once"]
    recorded = read_trace(trace)
    assert recorded.schedule is not None
    assert recorded.schedule == found["schedule"]
    # drawn from the golden space, not the variant's own
    golden = load_scenario("payments").fault_space("golden")
    assert recorded.schedule["space_hash"] == golden.content_hash()

    wrong = chaos_cli("search", "payments", "--resume", str(trace))  # golden, not the variant
    assert wrong.returncode == 2
    assert "a trace of payments variant no-idempotency" in wrong.stderr
    unspaced = chaos_cli(
        "search", "payments", "--variant", "no-idempotency", "--resume", str(trace)
    )
    assert unspaced.returncode == 2
    assert "another fault space" in unspaced.stderr

    resumed = chaos_cli(
        "search", "payments", "--variant", "no-idempotency", "--space", "golden",
        "--resume", str(trace), "--max-shrinks", "1", "--json", "--out", str(tmp_path / "r.trace"),
    )  # fmt: skip
    assert resumed.returncode == 1, resumed.stderr
    again: dict[str, Any] = json.loads(resumed.stdout)
    assert len(again["schedule"]["events"]) <= len(found["schedule"]["events"])
    assert again["shrink_runs"] <= 1
