"""payments_docker end to end on a real Docker daemon: run, replay, search, validate."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from chaos.scenario import load_scenario
from chaos.services.images import docker_client
from faults.schedule import generate
from replay.trace import read_trace

pytestmark = [pytest.mark.slow, pytest.mark.docker]


def chaos(
    *args: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "chaos", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        check=False,
        timeout=600,
    )


def containers_of(trace: Path) -> list[str]:
    """The ids of the containers a trace's run started."""
    found = []
    for event in read_trace(trace).events:
        value = event.get("value")
        if event.get("f") == "start" and isinstance(value, dict) and value.get("container"):
            found.append(str(value["container"]))
    return found


def gone(container_ids: list[str]) -> bool:
    api = docker_client().api
    return not any(api.containers(all=True, filters={"id": cid}) for cid in container_ids)


def test_a_golden_run_with_a_crash_and_clock_skew_on_the_consumer_container_holds(
    payments_image: str, tmp_path: Path
) -> None:
    done = chaos("run", "payments_docker", "--seed", "5", "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(done.stdout)
    trace = Path(tmp_path / result["trace"])
    events = list(read_trace(trace).events)
    kinds = {str(e.get("f")) for e in events if e.get("process") == "nemesis"}
    assert {"crash", "clock_skew"} <= kinds
    starts = [e for e in events if e.get("process") == "service:consumer" and e.get("f") == "start"]
    assert len(starts) == 2
    assert starts[1]["value"].get("restart") is True
    assert starts[0]["value"]["image"] == payments_image
    # The schedule is the seed's, as on the process backend: same seed, same schedule.
    scenario = load_scenario("payments_docker")
    assert read_trace(trace).schedule == generate(scenario.fault_space("golden"), 5).to_dict()
    started = containers_of(trace)
    assert len(started) == 2  # gateway and consumer (a restart starts the same container)
    assert gone(started)


def test_the_failing_variant_fails_and_its_trace_replays(
    payments_image: str, tmp_path: Path
) -> None:
    done = chaos("run", "payments_docker", "--variant", "no-idempotency", "--seed", "2",
                 "--json", cwd=tmp_path)  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    result = json.loads(done.stdout)
    failed = [v["name"] for v in result["verdicts"] if not v["valid"]]
    assert failed == ["exactly_once"]
    replay = chaos("replay", result["trace"], "--times", "2", cwd=tmp_path)
    assert replay.returncode == 0, replay.stdout + replay.stderr
    assert "2/2 (100%)" in replay.stdout
    assert gone(containers_of(tmp_path / result["trace"]))


def test_validate_holds_the_golden_and_catches_the_variant(
    payments_image: str, tmp_path: Path
) -> None:
    done = chaos("validate", "payments_docker", "--seeds", "2", "--replays", "1", "--json",
                 cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


def test_search_finds_the_variants_violation(payments_image: str, tmp_path: Path) -> None:
    done = chaos("search", "payments_docker", "--variant", "no-idempotency", "--max-examples",
                 "4", "--max-shrinks", "2", "--json", cwd=tmp_path)  # fmt: skip
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    found = json.loads(done.stdout)
    assert found["found"] is True, found
