"""`chaos sweep`: seeds side by side in worker processes."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from chaos.services import default_run_parent
from chaos.sweep import SeedResult, SweepReport, parse_seeds
from ground.errors import ConfigError


@pytest.mark.parametrize(
    ("text", "seeds"),
    [("7", [7]), ("0-3", [0, 1, 2, 3]), ("5,1,3-4", [1, 3, 4, 5]), (" 2 , 2 ", [2])],
)
def test_parse_seeds(text: str, seeds: list[int]) -> None:
    assert parse_seeds(text) == seeds


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a-b", "bad seeds 'a-b'"),
        ("5-1", "bad seed range '5-1'"),
        ("-3", "bad seed"),
        ("0-100000", "too many seeds"),
        ("", "bad seeds"),
    ],
)
def test_bad_seeds(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_seeds(text)


def test_report_exit_code_and_summary() -> None:
    held = SeedResult(1, 0, {"verdicts": [{"name": "exactly_once", "valid": True}]})
    violated = SeedResult(2, 1, {"verdicts": [{"name": "exactly_once", "valid": False}]})
    error = SeedResult(3, 3, error="postgres did not start")
    report = SweepReport("payments", "golden", [held, violated, error], wall_s=6.0)
    summary = report.to_json()
    assert (summary["held"], summary["violated"], summary["errors"]) == (1, 1, 1)
    assert summary["violations_by_invariant"] == {"exactly_once": 1}
    assert summary["runs_per_minute"] == 30.0
    assert report.exit_code == 1
    assert SweepReport("p", "g", [held, error]).exit_code == 3
    assert SweepReport("p", "g", [held]).exit_code == 0


@pytest.fixture
def run_root(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    root = Path(tempfile.mkdtemp(prefix="chaos-sweep-runs-", dir=default_run_parent()))
    root.chmod(0o755)
    monkeypatch.setenv("CHAOS_RUN_DIR", str(root))
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _chaos(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "chaos", *args], capture_output=True, text=True, timeout=300
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["sweep", "nosuch", "--seeds", "0-1"], "unknown scenario 'nosuch'"),
        (["sweep", "payments", "--seeds", "x"], "bad seeds 'x'"),
        (["sweep", "payments", "--seeds", "1", "--jobs", "0"], "--jobs must be between 1 and 64"),
        (["sweep", "payments", "--seeds", "1", "--variant", "nope"], "no variant 'nope'"),
    ],
)
def test_bad_input_is_one_line_exit_2(args: list[str], message: str) -> None:
    done = _chaos(*args)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1
    assert message in lines[0]


@pytest.mark.slow
def test_sweep_two_seeds_side_by_side(tmp_path: Path, run_root: Path) -> None:
    done = _chaos(
        "sweep", "payments", "--seeds", "0-1", "--jobs", "2", "--json",
        "--out-dir", str(tmp_path),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert (summary["runs"], summary["held"], summary["errors"]) == (2, 2, 0)
    assert [s["seed"] for s in summary["seeds"]] == [0, 1]
    for row in summary["seeds"]:
        assert Path(row["trace"]).is_file()
    assert list(run_root.iterdir()) == []


@pytest.mark.slow
def test_ctrl_c_interrupts_every_worker_and_leaves_nothing(tmp_path: Path, run_root: Path) -> None:
    child = subprocess.Popen(
        [sys.executable, "-m", "chaos", "sweep", "payments", "--seeds", "0-3", "--jobs", "2",
         "--out-dir", str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            family = psutil.Process(child.pid).children(recursive=True)
            lines = [" ".join(_cmdline(p)) for p in family]
            consumers = [line for line in lines if "scenarios.payments.consumer" in line]
            # With the zygote (warm workers), services are forks that show its command line:
            # two zygotes and at least four forked services mean both jobs are mid-run.
            forked = [line for line in lines if "_zygote_main.py" in line]
            if len(consumers) >= 2 or len(forked) >= 6:
                break
            time.sleep(0.05)
        os.killpg(child.pid, signal.SIGINT)  # as a terminal's Ctrl-C: the whole group
        _, stderr = child.communicate(timeout=120)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == 130, stderr
    assert list(run_root.iterdir()) == []
    leftovers = [
        p
        for p in psutil.process_iter(["cmdline"])
        if str(run_root) in " ".join(p.info["cmdline"] or [])
    ]
    assert leftovers == []


def _cmdline(process: psutil.Process) -> list[str]:
    try:
        return process.cmdline()
    except psutil.Error:
        return []
