"""Executors (chaos.executor): the long-tail rules, the executor flags' bad input, and local
runs that time out or lose their worker (real ``chaos run`` children of a tiny pack)."""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
import trio

from chaos import cli
from chaos.cli import _optional_values
from chaos.executor import (
    LOST_RETRIES,
    LocalExecutor,
    RunOutcome,
    RunSpec,
    check_run_timeout,
    with_retries,
)
from chaos.services import default_run_parent
from ground.errors import EXIT_HARNESS, EXIT_HELD, EXIT_VIOLATED, ConfigError
from replay.trace import read_trace
from tests.ray.packs import HANG_SEED, WAIT_SEED, write_tiny_pack

CANDIDATE = Path(__file__).resolve().parent / "grading" / "candidates" / "infinite_loop.py"


# -- retries: only a lost worker, at most twice -----------------------------------------------


class Script:
    """Attempts that return the scripted outcomes in turn, counting the calls."""

    def __init__(self, *outcomes: RunOutcome) -> None:
        self.outcomes = list(outcomes)
        self.calls = 0

    async def __call__(self) -> RunOutcome:
        self.calls += 1
        return self.outcomes.pop(0)


def lost(seed: int = 1) -> RunOutcome:
    return RunOutcome(seed, EXIT_HARNESS, error="lost", lost_worker="the worker was lost")


async def test_a_violation_is_never_retried() -> None:
    attempt = Script(RunOutcome(1, EXIT_VIOLATED, {"verdicts": []}), RunOutcome(1, EXIT_HELD))
    outcome = await with_retries(attempt)
    assert attempt.calls == 1
    assert outcome.outcome == "violated"
    assert (outcome.attempts, outcome.lost) == (1, [])


async def test_a_harness_error_or_timeout_is_not_retried() -> None:
    for first in (
        RunOutcome(1, EXIT_HARNESS, error="postgres did not start"),
        RunOutcome(1, EXIT_HARNESS, error="timed out after 3 s", timed_out=True),
    ):
        attempt = Script(first, RunOutcome(1, EXIT_HELD))
        await with_retries(attempt)
        assert attempt.calls == 1


async def test_a_lost_worker_is_retried_and_reported() -> None:
    attempt = Script(lost(), RunOutcome(1, EXIT_HELD))
    outcome = await with_retries(attempt)
    assert attempt.calls == 2
    assert outcome.outcome == "held"
    assert (outcome.attempts, outcome.lost) == (2, ["the worker was lost"])


async def test_a_worker_lost_three_times_is_an_error_after_two_retries() -> None:
    attempt = Script(lost(), lost(), lost(), RunOutcome(1, EXIT_HELD))
    outcome = await with_retries(attempt)
    assert attempt.calls == 1 + LOST_RETRIES == 3
    assert outcome.outcome == "error"
    assert outcome.attempts == 3
    assert len(outcome.lost) == 3
    assert "worker lost on all 3 attempts" in outcome.error


# -- bad input ----------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [0.0, -1.0, math.nan, math.inf, -math.inf])
def test_bad_run_timeouts(value: float) -> None:
    with pytest.raises(ConfigError, match="--run-timeout"):
        check_run_timeout(value)


def test_good_run_timeouts() -> None:
    assert check_run_timeout(None) is None
    assert check_run_timeout(0.5) == 0.5


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["sweep", "p", "--ray"], ["sweep", "p", "--ray=local"]),
        (["sweep", "p", "--ray", "--json"], ["sweep", "p", "--ray=local", "--json"]),
        (["sweep", "--ray", "p", "--json"], ["sweep", "--ray=local", "p", "--json"]),
        (["sweep", "p", "--ray", "10.0.0.1:6379"], ["sweep", "p", "--ray", "10.0.0.1:6379"]),
        (["sweep", "p", "--ray", "auto"], ["sweep", "p", "--ray", "auto"]),
        (["sweep", "p", "--ray=h:1"], ["sweep", "p", "--ray=h:1"]),
        (["run", "--", "--ray"], ["run", "--", "--ray"]),
    ],
)
def test_a_bare_ray_flag_means_a_local_instance(argv: list[str], expected: list[str]) -> None:
    assert _optional_values(argv) == expected


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _chaos(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "chaos", *args], capture_output=True, text=True, timeout=120
    )


COMMANDS = {
    "sweep": ["sweep", "payments", "--seeds", "0-1"],
    "validate": ["validate", "payments"],
    "grade": ["grade", "payments", "--impl", str(CANDIDATE), "--public"],
}
BAD = [
    (["--run-timeout", "0"], "--run-timeout must be > 0 seconds"),
    (["--run-timeout", "-3"], "--run-timeout must be > 0 seconds"),
    (["--run-timeout", "nan"], "--run-timeout must be a finite number"),
    (["--ray", "host:port:x"], "bad Ray address 'host:port:x'"),
    (["--ray=nohost"], "bad Ray address 'nohost'"),
    (["--ray", "h:70000"], "port must be between 1 and 65535"),
    (["--ray", "--ray-cpus", "0"], "--ray-cpus must be a number > 0"),
    (["--ray-cpus", "2"], "--ray-cpus goes with --ray"),
]


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize(("flags", "message"), BAD)
def test_bad_executor_flags_are_one_line_exit_2(
    command: str, flags: list[str], message: str, tmp_path: Path
) -> None:
    done = _chaos(*COMMANDS[command], *flags, "--out-dir", str(tmp_path / "out"))
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert message in lines[0]
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("command", ["sweep", "grade", "validate"])
def test_jobs_0_is_one_line_exit_2(command: str) -> None:
    done = _chaos(*COMMANDS[command], "--jobs", "0")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "chaos: error: --jobs must be between 1 and 64, got 0"
    ]


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_an_unreachable_ray_address_is_one_line_exit_2(command: str, tmp_path: Path) -> None:
    pytest.importorskip("ray")
    address = f"127.0.0.1:{_closed_port()}"
    done = _chaos(*COMMANDS[command], "--ray", address, "--out-dir", str(tmp_path / "out"))
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert lines == [f"chaos: error: cannot reach Ray at {address}: Connection refused"]
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_ray_without_ray_installed_names_the_extra(
    command: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    with pytest.raises(SystemExit) as exited:
        cli.main([*COMMANDS[command], "--ray"])
    assert exited.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines == [
        "chaos: error: --ray needs Ray, which is not installed: pip install -e '.[ray]'"
    ]


# -- local runs: a timeout keeps what was recorded; a lost worker is run again ---------------


@pytest.fixture
def run_root(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    root = Path(tempfile.mkdtemp(prefix="chaos-exec-runs-", dir=default_run_parent()))
    root.chmod(0o755)
    monkeypatch.setenv("CHAOS_RUN_DIR", str(root))
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def tiny(tmp_path: Path) -> Path:
    return write_tiny_pack(tmp_path / "tiny")


@pytest.mark.slow
async def test_a_hanging_local_run_times_out_with_what_it_recorded(
    tiny: Path, tmp_path: Path, run_root: Path
) -> None:
    spec = RunSpec(str(tiny), HANG_SEED, (), tmp_path)
    [hung] = await LocalExecutor(run_timeout=2.0)([spec], 1)
    assert (hung.outcome, hung.timed_out, hung.attempts) == ("timeout", True, 1)
    assert hung.error == "timed out after 2 s"
    assert hung.trace is not None
    trace = read_trace(hung.trace)
    assert [e["f"] for e in trace.events if e["process"] == "workload"] == ["step"]
    assert trace.verdicts == []
    assert os.listdir(run_root) == []


def _child_running(seed: int, warm: bool) -> psutil.Process | None:
    """The worker running ``seed``: its cold ``chaos run`` child, or the warm worker."""
    for child in psutil.Process().children(recursive=True):
        try:
            cmdline = child.cmdline()
        except psutil.Error:
            continue
        if warm and "chaos.warm_worker" in cmdline:
            return child
        if not warm and "run" in cmdline and "--seed" in cmdline and str(seed) in cmdline:
            return child
    return None


@pytest.mark.slow
@pytest.mark.parametrize("warm", [False, True], ids=["cold", "warm"])
async def test_a_local_worker_killed_mid_run_is_run_again(
    tiny: Path, tmp_path: Path, run_root: Path, warm: bool
) -> None:
    control = tiny / "control"
    spec = RunSpec(str(tiny), WAIT_SEED, (), tmp_path)
    done: list[RunOutcome] = []

    async def sweep() -> None:
        executor = LocalExecutor(warm=warm)
        done.extend(await executor([spec], 1))
        assert executor.used_warm is warm

    async with trio.open_nursery() as nursery:
        nursery.start_soon(sweep)
        with trio.fail_after(60):
            while not (control / f"started-{WAIT_SEED}").exists():
                await trio.sleep(0.05)
        child = _child_running(WAIT_SEED, warm)
        assert child is not None
        os.kill(child.pid, signal.SIGKILL)
        (control / f"started-{WAIT_SEED}").unlink()
        (control / "release").touch()
    [outcome] = done
    assert outcome.outcome == "held"
    assert outcome.attempts == 2
    [lost] = outcome.lost
    if warm:
        assert lost.startswith("the warm worker ended (exit code -9)"), lost
    else:
        assert lost == "the worker was killed by SIGKILL"
    assert outcome.trace == spec.trace
    assert read_trace(spec.trace).end is not None


def test_the_sweep_summary_counts_timeouts_and_retries() -> None:
    from chaos.sweep import SweepReport

    held = RunOutcome(1, EXIT_HELD, {"verdicts": [], "timings": {"setup": 0.4}}, attempts=2,
                      lost=["the worker was killed by SIGKILL"])  # fmt: skip
    hung = RunOutcome(2, EXIT_HARNESS, error="timed out after 3 s", timed_out=True)
    report = SweepReport("tiny", "golden", [held, hung], wall_s=6.0)
    summary = report.to_json()
    assert (summary["held"], summary["timeouts"], summary["errors"]) == (1, 1, 0)
    assert (summary["retried"], summary["lost_workers"]) == (1, 1)
    assert summary["seeds"][0]["timings"] == {"setup": 0.4}
    assert summary["seeds"][1]["outcome"] == "timeout"
    assert report.exit_code == EXIT_HARNESS
    json.dumps(summary)


@pytest.mark.parametrize(
    ("host", "loopback"),
    [("127.0.0.1", True), ("127.3.2.1", True), ("localhost", True), ("::1", True),
     ("10.0.0.5", False), ("head", False), ("192.0.2.2", False), ("::", False)],
)  # fmt: skip
def test_a_loopback_ray_address_is_recognised(host: str, loopback: bool) -> None:
    # A loopback host is the one Ray would rewrite to this machine's outward IP (a cluster on
    # 127.0.0.1 then cannot be reached): connect keeps it (tests/ray/test_ray_cluster.py).
    from chaos.executor_ray import _is_loopback, check_address

    assert _is_loopback(host) is loopback
    if ":" not in host:
        assert check_address(f"{host}:6379") == (host, 6379)


def test_a_candidate_spec_crosses_to_a_worker_as_it_is(tmp_path: Path) -> None:
    """A graded RunSpec carries its candidate as data: to_dict/from_dict give it back
    unchanged (the program not hashed again), a warm run is allowed, and a cold run's
    command line holds the same candidate as ``chaos run --impl`` flags."""
    from chaos.sandbox.candidate import CandidateSpec, Limits, Program

    program_file = tmp_path / "main.py"
    program_file.write_text("print('ready')\n")
    program = Program.from_path(program_file)
    spec = CandidateSpec(
        program, Limits(cpu_s=12.5, memory_mb=256), "uid", None, (tmp_path / "key",)
    )
    run = RunSpec("payments", 7, (), tmp_path, candidate=spec)
    data = json.loads(json.dumps(run.to_dict()))
    again = RunSpec.from_dict(data)
    assert again == run
    assert again.candidate == spec
    assert LocalExecutor(warm=True).warm_for([again])
    argv = again.argv()
    assert argv[argv.index("--impl") + 1] == str(program_file)
    limits = [argv[i + 1] for i, a in enumerate(argv) if a == "--limit"]
    assert Limits.parse(limits) == spec.limits
    assert argv[argv.index("--isolation") + 1] == "uid"
    assert argv[argv.index("--hide") + 1] == str(tmp_path / "key")
    # the program's hash is carried, not recomputed: a changed file still names the old one
    program_file.write_text("print('changed')\n")
    assert RunSpec.from_dict(data).candidate.program.sha256 == program.sha256  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "change",
    [
        {"program": {"path": "/x", "kind": "shell", "entry": "", "sha256": "0"}},
        {"limits": {"cpu_s": -1}},
        {"limits": {"no_such_limit": 1}},
    ],
)
def test_a_bad_candidate_spec_is_refused(change: dict[str, object], tmp_path: Path) -> None:
    from chaos.sandbox.candidate import CandidateSpec, Limits, Program

    (tmp_path / "main.py").write_text("")
    data = CandidateSpec(Program.from_path(tmp_path / "main.py"), Limits()).to_dict()
    with pytest.raises(ConfigError):
        CandidateSpec.from_dict({**data, **change})
