"""Bad options are refused before anything starts: one line, exit 2, nothing started or written."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ground._checks import check_duration, check_port, check_seed
from ground._paths import check_out_dir, check_out_file
from ground.errors import ConfigError

SENTINEL = b"a good trace, to be left alone"


def _chaos(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    root, reg = tmp_path / "runs", tmp_path / "registry"
    root.mkdir(exist_ok=True)
    env = {**os.environ, "CHAOS_RUN_DIR": str(root), "CHAOS_REGISTRY_DIR": str(reg)}
    return subprocess.run(
        [sys.executable, "-m", "chaos", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env=env,
        check=False,
    )


def _refused(tmp_path: Path, args: list[str], needle: str) -> None:
    done = _chaos(tmp_path, *args)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("chaos: error: ")
    assert needle in lines[0], lines[0]
    assert done.stdout == ""
    # nothing started: no run dir, no registration
    assert list((tmp_path / "runs").iterdir()) == []
    reg = tmp_path / "registry"
    assert not reg.exists() or [p for p in reg.iterdir() if p.suffix == ".run"] == []


@pytest.mark.parametrize(
    ("option", "needle"),
    [
        (["--postgres-dsn", "notadsn"], "bad postgres dsn 'notadsn'"),
        (["--postgres-dsn", "postgresql://h:99999/db"], "bad postgres dsn"),
        (["--nats-url", "http://x"], "bad nats url 'http://x'"),
        (["--nats-url", "nats://h:0"], "port must be between 1 and 65535"),
        (["--seed", str(2**63)], "seed must be between 0 and 2**63-1"),
        (["--no-faults", "--impl", "x.py"], "--no-faults does not go with --impl"),
    ],
)
def test_run_refuses_bad_options_without_touching_the_trace(
    tmp_path: Path, option: list[str], needle: str
) -> None:
    trace = tmp_path / "good.trace"
    trace.write_bytes(SENTINEL)
    _refused(tmp_path, ["run", "payments", "--seed", "7", "--out", str(trace), *option], needle)
    assert trace.read_bytes() == SENTINEL


def test_a_scenario_that_needs_its_own_postgres_refuses_an_external_one(tmp_path: Path) -> None:
    trace = tmp_path / "good.trace"
    trace.write_bytes(SENTINEL)
    dsn = "postgresql://chaos@127.0.0.1:5432/postgres"
    args = ["run", "leases", "--seed", "1", "--out", str(trace), "--postgres-dsn", dsn]
    _refused(tmp_path, args, "scenario leases needs a PostgreSQL of its own")
    assert trace.read_bytes() == SENTINEL


def test_run_out_under_a_file_says_so(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("x")
    out = tmp_path / "afile" / "x.trace"
    _refused(
        tmp_path, ["run", "payments", "--out", str(out)], f"{tmp_path / 'afile'} is not a folder"
    )


@pytest.mark.parametrize("command", ["run", "search"])
def test_an_unwritable_out_is_refused_before_the_first_run(tmp_path: Path, command: str) -> None:
    _refused(tmp_path, [command, "payments", "--out", "/proc/x.trace"], "cannot write trace")


def test_run_out_is_a_folder(tmp_path: Path) -> None:
    _refused(tmp_path, ["run", "payments", "--out", str(tmp_path)], "is a folder")


def test_search_checks_its_budget_first(tmp_path: Path) -> None:
    _refused(tmp_path, ["search", "payments", "--max-examples", "0"], "--max-examples")


def test_sweep_refuses_an_out_of_range_seed_before_making_its_folder(tmp_path: Path) -> None:
    folder = tmp_path / "new"
    args = ["sweep", "payments", "--seeds", str(2**64), "--out-dir", str(folder)]
    _refused(tmp_path, args, "seed must be between 0 and 2**63-1")
    assert not folder.exists()


@pytest.mark.parametrize("command", ["sweep", "validate"])
def test_an_out_dir_that_is_a_file_is_refused(tmp_path: Path, command: str) -> None:
    (tmp_path / "afile").write_text("x")
    extra = ["--seeds", "0"] if command == "sweep" else []
    args = [command, "payments", *extra, "--out-dir", str(tmp_path / "afile")]
    _refused(tmp_path, args, "is a file, not a folder")
    args = [command, "payments", *extra, "--out-dir", str(tmp_path / "afile" / "sub")]
    _refused(tmp_path, args, "is not a folder")


def test_validate_refuses_an_unwritable_out_dir(tmp_path: Path) -> None:
    _refused(tmp_path, ["validate", "payments", "--out-dir", "/proc/x"], "cannot use --out-dir")


@pytest.mark.parametrize("value", ["inf", "nan", "-1"])
def test_proxy_serve_refuses_a_non_finite_dial_timeout(tmp_path: Path, value: str) -> None:
    _refused(tmp_path, ["proxy", "serve", "--dial-timeout", value], "dial timeout must be")


# -- the checks themselves ---------------------------------------------------------------


def test_the_same_bounds_everywhere() -> None:
    assert check_seed(0) == 0
    assert check_seed(2**63 - 1) == 2**63 - 1
    for bad in (-1, 2**63):
        with pytest.raises(ConfigError, match="seed must be between 0 and 2"):
            check_seed(bad)
    for value in (float("nan"), float("inf"), -float("inf"), 0.0, -1.0):
        with pytest.raises(ConfigError):
            check_duration(value, "--x")
    assert check_duration(0.0, "--x", zero_ok=True) == 0.0
    assert check_port(0, any_ok=True) == 0
    for port in (0, 65536):
        with pytest.raises(ConfigError, match="between 1 and 65535"):
            check_port(port)


def test_output_checks_create_nothing(tmp_path: Path) -> None:
    target = tmp_path / "a" / "b" / "t.trace"
    assert check_out_file(target, "--out", "trace") == target
    assert check_out_dir(tmp_path / "x" / "y", "--out-dir") == tmp_path / "x" / "y"
    assert sorted(tmp_path.iterdir()) == []  # the probe file is gone, no folder was made


@pytest.mark.parametrize(
    "args",
    [
        ["replay", "missing.trace", "--stress", "0"],
        ["replay", "missing.trace", "--stress", "9999"],
        ["validate", "payments", "--stress", "200"],
        ["validate", "payments", "--stress", "0"],
    ],
)
def test_a_bad_stress_is_refused_before_anything_runs(tmp_path: Path, args: list[str]) -> None:
    _refused(tmp_path, args, "--stress")
    assert not (tmp_path / "traces").exists()


STARTER = str(Path(__file__).resolve().parent.parent / "scenarios" / "payments" / "starter.py")


@pytest.mark.parametrize(
    ("limit", "needle"),
    [
        ("memory_mb=1000000000000000", "memory_mb must be at most 1048576, got 1000000000000000"),
        ("cpu_s=1e9", "--limit cpu_s must be at most 86400, got 1000000000"),
        ("processes=10000000", "--limit processes must be at most 65536"),
        ("open_files=99999999", "--limit open_files must be at most 1048576"),
        ("wall_s=1e300", "--limit wall_s must be at most 86400"),
        ("term_s=601", "--limit term_s must be at most 600, got 601"),
    ],
)
def test_each_limit_has_a_maximum(tmp_path: Path, limit: str, needle: str) -> None:
    """`--limit memory_mb=10**15` was accepted (and overflowed the rlimit in the sandbox)."""
    for command in (["run", "payments", "--impl"], ["grade", "payments", "--public", "--impl"]):
        _refused(tmp_path, [*command, STARTER, "--limit", limit], needle)
    assert not (tmp_path / "traces").exists()
