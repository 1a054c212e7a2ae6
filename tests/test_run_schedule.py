"""``chaos run --schedule FILE``, and a schedule travelling with a ``RunSpec`` (its command
line, its plain-data form, a warm worker's request): bad input refused before anything
starts; a good schedule is the run's schedule, under its seed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import trio

from chaos import warm, warm_worker
from chaos.executor import LocalExecutor, RunSpec
from chaos.scenario import load_scenario
from faults._draw import assemble
from faults.model import FaultEvent, FaultSchedule
from ground.errors import ConfigError
from replay.trace import read_trace

NO_IDEMPOTENCY = load_scenario("payments").fault_space("no-idempotency")


def twice_redelivered(seed: int = 7) -> FaultSchedule:
    """One redelivery (count 2) of the first order: what exposes no-idempotency."""
    event = FaultEvent.from_dict(
        {"id": "f0", "kind": "redeliver", "target": "subject:orders", "params": {"count": 2},
         "trigger": {"type": "on_message", "subject": "orders", "n": 1}}
    )  # fmt: skip
    return assemble(NO_IDEMPOTENCY, seed, [event])


def chaos(
    tmp_path: Path, *args: str, timeout: float = 60, own_dirs: bool = True
) -> subprocess.CompletedProcess[str]:
    """``chaos ARGS`` in ``tmp_path``; ``own_dirs``: with run and registry dirs of its own
    (to see that nothing started; a real run keeps the usual ones)."""
    root, reg = tmp_path / "runs", tmp_path / "registry"
    root.mkdir(exist_ok=True)
    env = dict(os.environ)
    if own_dirs:
        env |= {"CHAOS_RUN_DIR": str(root), "CHAOS_REGISTRY_DIR": str(reg)}
    return subprocess.run(
        [sys.executable, "-m", "chaos", *args],
        capture_output=True, text=True, timeout=timeout, cwd=tmp_path, env=env, check=False,
    )  # fmt: skip


def write(tmp_path: Path, name: str, content: Any) -> Path:
    path = tmp_path / name
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    return path


def bad_files(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    good = twice_redelivered().to_dict()
    unknown_subject = json.loads(json.dumps(good))
    unknown_subject["events"][0]["target"]["name"] = "nowhere"
    unknown_link = json.loads(json.dumps(good))
    unknown_link["events"][0] = {
        "id": "f0", "kind": "partition", "target": "link:nowhere", "params": {},
        "trigger": {"type": "at_time", "offset_s": 0.0}, "duration_s": 1.0,
    }  # fmt: skip
    no_hash = {k: v for k, v in good.items() if k != "space_hash"}
    no_events = {k: v for k, v in good.items() if k != "events"}
    bad_kind = json.loads(json.dumps(good))
    bad_kind["events"][0]["kind"] = "meteor"
    return {
        "missing": (tmp_path / "no-such.json", "cannot read: No such file or directory"),
        "not json": (write(tmp_path, "a.json", "{"), "not JSON"),
        "a list": (write(tmp_path, "b.json", [good]), "must be a JSON object"),
        "no space_hash": (write(tmp_path, "c.json", no_hash), "space_hash is required"),
        # a file without events was a fault-free run, exit 0
        "no events": (write(tmp_path, "g.json", no_events), "events is required"),
        "bad kind": (write(tmp_path, "d.json", bad_kind), "kind must be one of"),
        "unknown subject": (
            write(tmp_path, "e.json", unknown_subject),
            "scenario payments has no subject 'nowhere' (it has: orders)",
        ),
        "unknown link": (write(tmp_path, "f.json", unknown_link), "has no link 'nowhere'"),
    }


@pytest.mark.parametrize(
    "case",
    ["missing", "not json", "a list", "no space_hash", "no events", "bad kind",
     "unknown subject", "unknown link"],
)  # fmt: skip
def test_a_bad_schedule_file_is_one_line_exit_2_before_anything_starts(
    tmp_path: Path, case: str
) -> None:
    path, needle = bad_files(tmp_path)[case]
    done = chaos(tmp_path, "run", "payments", "--schedule", str(path))
    assert done.returncode == 2, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(f"chaos: error: --schedule {path}: ")
    assert needle in lines[0], lines[0]
    assert done.stdout == ""
    assert list((tmp_path / "runs").iterdir()) == []  # nothing started
    assert not (tmp_path / "traces").exists()


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--seed", "8"], "--seed 8 differs from the seed 7 of --schedule"),
        (["--no-faults"], "--schedule does not go with --no-faults"),
        (["--impl", "x.py"], "--schedule does not go with --impl"),
    ],
)
def test_options_that_conflict_with_a_schedule_are_refused(
    tmp_path: Path, args: list[str], needle: str
) -> None:
    path = write(tmp_path, "s.json", twice_redelivered(7).to_dict())
    done = chaos(tmp_path, "run", "payments", "--schedule", str(path), *args)
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [done.stderr.strip()]
    assert needle in done.stderr
    assert list((tmp_path / "runs").iterdir()) == []


def test_a_run_spec_carries_its_schedule(tmp_path: Path) -> None:
    schedule = twice_redelivered(7).to_dict()
    spec = RunSpec("payments", 7, (), tmp_path, "no-idempotency", "x.trace", schedule)
    assert RunSpec.from_dict(json.loads(json.dumps(spec.to_dict()))) == spec
    argv = spec.argv()
    at = argv.index("--schedule")
    assert Path(argv[at + 1]) == tmp_path / "x.trace.schedule.json"
    assert json.loads(Path(argv[at + 1]).read_text()) == schedule
    assert argv[argv.index("--seed") + 1] == "7"
    plain = RunSpec("payments", 7, (), tmp_path)
    assert "--schedule" not in plain.argv()
    assert RunSpec.from_dict({k: v for k, v in plain.to_dict().items() if k != "schedule"}) == (
        plain
    )  # a spec of an older sender
    assert LocalExecutor().warm_for([spec]) == warm.enabled()  # a schedule is no run argument
    with pytest.raises(ConfigError, match="not the run seed 8"):
        RunSpec("payments", 8, (), tmp_path, schedule=schedule)


def test_a_warm_request_with_a_bad_schedule_is_a_bad_request_answer(tmp_path: Path) -> None:
    bad = twice_redelivered(7).to_dict()
    bad["events"][0]["target"]["name"] = "nowhere"
    request = {"scenario": "payments", "seed": 7, "out": str(tmp_path / "t"), "schedule": bad}
    answer = trio.run(warm_worker.run_one, request, None, {})
    assert answer["exit_code"] == 2
    assert "has no subject 'nowhere'" in answer["error"]
    other_seed = {**request, "schedule": twice_redelivered(8).to_dict()}
    assert trio.run(warm_worker.run_one, other_seed, None, {})["exit_code"] == 2
    assert not (tmp_path / "t").exists()


@pytest.mark.slow
def test_run_schedule_runs_exactly_that_schedule_under_its_seed(tmp_path: Path) -> None:
    schedule = twice_redelivered(7)
    path = write(tmp_path, "s.json", schedule.to_dict())
    trace = tmp_path / "t.trace"
    done = chaos(
        tmp_path, "run", "payments", "--variant", "no-idempotency", "--schedule", str(path),
        "--seed", "7", "--json", "--out", str(trace), timeout=300, own_dirs=False,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr  # the redelivery breaks exactly_once
    result = json.loads(done.stdout)
    assert result["schedule"] == schedule.to_dict()
    assert result["seed"] == 7
    assert [v["name"] for v in result["verdicts"] if v["valid"] is False] == ["exactly_once"]
    recorded = read_trace(trace)
    assert recorded.schedule == schedule.to_dict()
    assert recorded.header["seed"] == 7


@pytest.mark.slow
def test_a_warm_worker_runs_the_schedule_of_its_request(tmp_path: Path) -> None:
    schedule = twice_redelivered(3)
    spec = RunSpec("payments", 3, (), tmp_path, "no-idempotency", schedule=schedule.to_dict())
    [outcome] = trio.run(LocalExecutor(warm=True), [spec], 1)
    assert outcome.outcome == "violated", outcome.error
    assert outcome.result is not None
    assert outcome.result["schedule"] == schedule.to_dict()
    assert read_trace(spec.trace).schedule == schedule.to_dict()
