"""`chaos run payments`: the real scenario on real PostgreSQL, NATS and processes."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import trio

from chaos.run import RunOptions, run_scenario
from chaos.scenario import load_scenario
from chaos.services import default_run_parent
from faults.model import FaultSchedule
from faults.schedule import generate
from replay.trace import read_trace

pytestmark = pytest.mark.slow


@pytest.fixture
def run_root(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Runs put their temp dirs here, so a test can see that nothing is left behind.

    Beside the default run dirs (not under pytest's private tmp_path): PostgreSQL runs as
    its own user and must be able to reach its data directory.
    """
    root = Path(tempfile.mkdtemp(prefix="chaos-test-runs-", dir=default_run_parent()))
    root.chmod(0o755)
    monkeypatch.setenv("CHAOS_RUN_DIR", str(root))
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def assert_nothing_left(run_root: Path) -> None:
    """No temp dir, no child process, no listening port (proxies) is left."""
    assert list(run_root.iterdir()) == []
    me = psutil.Process()
    children = me.children(recursive=True)
    alive = [c for c in children if c.is_running() and c.status() != psutil.STATUS_ZOMBIE]
    assert alive == []
    listening = [c for c in me.net_connections("tcp") if c.status == psutil.CONN_LISTEN]
    assert listening == []


# 24: the consumer crashed mid-database-work (after 2,211 bytes of its Postgres link)
@pytest.mark.parametrize("seed", [0, 7, 11, 24])
async def test_golden_holds(seed: int, tmp_path: Path, run_root: Path) -> None:
    scenario = load_scenario("payments")
    result = await run_scenario(RunOptions(scenario, seed, out=tmp_path / "t.trace"))
    assert result.settled
    assert [(v.name, v.valid) for v in result.verdicts] == [
        ("exactly_once", True),
        ("no_lost_messages", True),
        ("consistent_final_state", True),
        ("workload", True),
    ]
    assert result.exit_code == 0
    trace = read_trace(tmp_path / "t.trace")
    assert not trace.partial
    assert trace.schedule == generate(scenario.fault_space("golden"), seed).to_dict()
    assert_nothing_left(run_root)


def forced_redelivery(scenario: Any, count: int) -> FaultSchedule:
    space = scenario.fault_space("golden")
    return FaultSchedule.from_dict(
        {
            "seed": 0,
            "space_hash": space.content_hash(),
            "events": [
                {
                    "id": "f0",
                    "kind": "redeliver",
                    "target": "subject:orders",
                    "params": {"count": count},
                    "trigger": {"type": "on_message", "subject": "orders", "n": 3},
                }
            ],
        }
    )


def deliveries(events: list[dict[str, Any]]) -> list[int]:
    return [
        e["value"]["delivery"]
        for e in events
        if e["process"] == "proxy" and e["f"] == "nats_delivery"
    ]


async def test_golden_survives_forced_redelivery(tmp_path: Path, run_root: Path) -> None:
    scenario = load_scenario("payments")
    schedule = forced_redelivery(scenario, 3)
    result = await run_scenario(
        RunOptions(scenario, 5, out=tmp_path / "t.trace", schedule=schedule)
    )
    dropped = [e for e in result.history if e["f"] == "frame_dropped"]
    assert len(dropped) == 3
    assert len({e["value"]["stream_sequence"] for e in dropped}) == 1  # one message, 3 times
    assert sorted(deliveries(result.history))[-3:] == [2, 3, 4]
    assert result.held
    skipped = [
        e
        for e in result.history
        if e["process"] == "consumer" and e["type"] == "ok" and e.get("skipped")
    ]
    assert len(skipped) == 3  # the golden consumer recognised every redelivery


async def test_no_idempotency_variant_is_caught_by_exactly_once(
    tmp_path: Path, run_root: Path
) -> None:
    scenario = load_scenario("payments")
    schedule = forced_redelivery(scenario, 1)
    result = await run_scenario(
        RunOptions(
            scenario, 5, variant="no-idempotency", out=tmp_path / "t.trace", schedule=schedule
        )
    )
    verdicts = {v.name: v for v in result.verdicts}
    assert verdicts["exactly_once"].valid is False
    assert "(x2)" in verdicts["exactly_once"].explanation
    assert verdicts["no_lost_messages"].valid is True
    assert result.exit_code == 1
    assert_nothing_left(run_root)


async def test_cancelling_mid_run_leaves_nothing_behind(tmp_path: Path, run_root: Path) -> None:
    scenario = load_scenario("payments")
    with trio.move_on_after(2.0) as scope:
        await run_scenario(RunOptions(scenario, 7, out=tmp_path / "t.trace"))
    assert scope.cancelled_caught
    assert_nothing_left(run_root)
    trace = read_trace(tmp_path / "t.trace")
    assert trace.end is not None
    assert trace.end["outcome"] == "interrupted"


class _Boom(Exception):
    pass


async def test_an_exception_mid_run_leaves_nothing_behind(
    tmp_path: Path, run_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    scenario = load_scenario("payments")

    async def workload(ctx: Any) -> None:
        await trio.sleep(0.5)
        raise _Boom("workload failed")

    monkeypatch.setattr(scenario, "workload", workload)
    with pytest.RaisesGroup(_Boom, allow_unwrapped=True, flatten_subgroups=True):
        await run_scenario(RunOptions(scenario, 7, out=tmp_path / "t.trace"))
    assert_nothing_left(run_root)
    trace = read_trace(tmp_path / "t.trace")
    assert trace.end is not None
    assert trace.end["outcome"] == "error"


def _chaos(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "chaos", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
    )


def test_cli_json_verdict(tmp_path: Path, run_root: Path) -> None:
    out = tmp_path / "run.trace"
    done = _chaos("run", "payments", "--seed", "3", "--json", "--out", str(out))
    assert done.returncode == 0, done.stderr
    verdict = json.loads(done.stdout)
    assert {"scenario", "variant", "seed", "schedule", "verdicts", "held", "trace"} <= set(verdict)
    assert verdict["held"] is True
    assert verdict["seed"] == 3
    assert verdict["trace"] == str(out)
    assert [v["name"] for v in verdict["verdicts"]] == [
        "exactly_once",
        "no_lost_messages",
        "consistent_final_state",
        "workload",  # the run's own: the producer published every planned order
    ]
    # One schedule shape everywhere: {seed, space_hash, events}, as the trace holds it.
    assert verdict["schedule"] == read_trace(out).schedule
    assert set(verdict["schedule"]) == {"seed", "space_hash", "events"}
    assert {v["verdict"] for v in verdict["verdicts"]} == {"held"}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["run", "nosuch", "--seed", "1"], "unknown scenario 'nosuch'"),
        (["run", "payments", "--seed", "-1"], "seed must be between 0 and 2**63-1, got -1"),
        (["run", "payments", "--seed", "abc"], "Invalid value for '--seed'"),
        (["run", "payments", "--variant", "nope"], "scenario payments has no variant 'nope'"),
        (["run", "payments", "--out", "/proc/nope/t.trace"], "cannot write trace"),
    ],
)
def test_cli_bad_input_is_one_line_and_exit_2(
    args: list[str], message: str, run_root: Path
) -> None:
    done = _chaos(*args)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("chaos: error: ")
    assert message in lines[0]
    assert list(run_root.iterdir()) == []


def test_ctrl_c_mid_run_removes_everything(tmp_path: Path, run_root: Path) -> None:
    child = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "chaos",
            "run",
            "payments",
            "--seed",
            "7",
            "--out",
            str(tmp_path / "t.trace"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        # Wait until the run is in its workload (the consumer is up), then interrupt.
        for _ in range(200):
            if any(
                "consumer" in " ".join(p.cmdline())
                for p in psutil.Process(child.pid).children(recursive=True)
                if p.is_running()
            ):
                break
            trio_sleep = 0.05
            subprocess.run(["sleep", str(trio_sleep)], check=True)
        child.send_signal(signal.SIGINT)
        _, stderr = child.communicate(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == 130, stderr
    assert stderr.strip().splitlines()[-1].startswith("chaos: error: interrupted")
    assert list(run_root.iterdir()) == []
    assert read_trace(tmp_path / "t.trace").end["outcome"] == "interrupted"


def every_kind_schedule(scenario: Any) -> FaultSchedule:
    """One fault of each kind, on each trigger type, in a single run."""
    space = scenario.fault_space("golden")

    def at(offset: float) -> dict[str, Any]:
        return {"type": "at_time", "offset_s": offset}

    events = [
        ("partition", "link:consumer-postgres", {"direction": "both"}, at(0.2), 0.6),
        ("latency", "link:consumer-gateway", {"latency_ms": 50, "jitter_ms": 10}, at(0.1), 0.8),
        (
            "bandwidth",
            "link:consumer-nats",
            {"rate_kbps": 50},
            {"type": "after_bytes", "link": "consumer-nats", "n_bytes": 2000},
            0.5,
        ),
        ("reset_peer", "link:consumer-gateway", {"timeout_ms": 0}, at(1.0), 0.3),
        (
            "slow_close",
            "link:consumer-postgres",
            {"delay_ms": 100},
            {"type": "on_connection", "link": "consumer-postgres", "n": 1},
            1.0,
        ),
        (
            "redeliver",
            "subject:orders",
            {"count": 2},
            {"type": "on_message", "subject": "orders", "n": 4},
            None,
        ),
        (
            "duplicate_publish",
            "subject:orders",
            {"count": 1},
            {"type": "on_message", "subject": "orders", "n": 2},
            None,
        ),
        (
            "crash",
            "service:consumer",
            {"restart_after_s": 0.2},
            {"type": "on_message", "subject": "orders", "n": 12},
            None,
        ),
        ("pause", "service:consumer", {}, at(1.2), 0.4),
        ("clock_skew", "service:consumer", {"offset_s": -3600.0}, at(0.3), 1.0),
    ]
    return FaultSchedule.from_dict(
        {
            "seed": 0,
            "space_hash": space.content_hash(),
            "events": [
                {
                    "id": f"f{i}",
                    "kind": kind,
                    "target": target,
                    "params": params,
                    "trigger": trigger,
                    "duration_s": duration,
                }
                for i, (kind, target, params, trigger, duration) in enumerate(events)
            ],
        }
    )


async def test_golden_survives_every_fault_kind(tmp_path: Path, run_root: Path) -> None:
    scenario = load_scenario("payments")
    schedule = every_kind_schedule(scenario)
    result = await run_scenario(
        RunOptions(scenario, 9, out=tmp_path / "t.trace", schedule=schedule)
    )
    phases: dict[str, list[str]] = {}
    for e in result.history:
        if e["process"] == "nemesis":
            phases.setdefault(e["value"]["fault_id"], []).append(e["value"]["phase"])
    assert phases == {f"f{i}": ["apply", "heal"] for i in range(10)}
    assert any(e["f"] == "frame_duplicated" for e in result.history)
    assert any(
        e["f"] == "exit" and e["value"]["code"] == -9
        for e in result.history
        if e["process"] == "service:consumer"
    )
    assert result.settled
    assert result.held, [v.explanation for v in result.verdicts]
    assert_nothing_left(run_root)


async def test_external_services_are_isolated_per_run_and_cleaned(
    tmp_path: Path, run_root: Path
) -> None:
    """Point the run at already-running services (started here, standing in for a user's
    own PostgreSQL and NATS): two runs in a row each get their own schema and stream, and
    leave neither behind."""
    from chaos.services import open_nats, open_postgres, open_run_dir

    scenario = load_scenario("payments")
    with open_run_dir(prefix="external-", parent=run_root) as services_dir:
        async with open_postgres(services_dir) as pg, open_nats(services_dir) as nats:
            for seed in (3, 4):
                result = await run_scenario(
                    RunOptions(
                        scenario,
                        seed,
                        out=tmp_path / f"{seed}.trace",
                        postgres_dsn=pg.dsn,
                        nats_url=nats.url,
                    )
                )
                assert result.held, [v.explanation for v in result.verdicts]
            schemas = await trio.to_thread.run_sync(
                _rows, pg.dsn, "SELECT nspname FROM pg_namespace WHERE nspname LIKE 'chaos_%'"
            )
            assert schemas == []
            tables = await trio.to_thread.run_sync(
                _rows, pg.dsn, "SELECT tablename FROM pg_tables WHERE schemaname = 'public'"
            )
            assert tables == []
            roles = await trio.to_thread.run_sync(
                _rows, pg.dsn, "SELECT rolname FROM pg_roles WHERE rolname LIKE 'chaos_%'"
            )
            assert roles == []  # the consumer's own role of each run
            jsz = await trio.to_thread.run_sync(_get, f"http://127.0.0.1:{nats.monitor_port}/jsz")
            assert jsz["streams"] == 0


def _rows(dsn: str, sql: str) -> list[tuple[Any, ...]]:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute(sql).fetchall()  # type: ignore[arg-type]


def _get(url: str) -> Any:
    import urllib.request

    with urllib.request.urlopen(url, timeout=5) as response:
        return json.loads(response.read())
