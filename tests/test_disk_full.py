"""A full disk wherever a command writes (a trace, a report, a task folder, a grade's or a
sweep's folder) is exit 3 with one line naming what was kept, never a traceback.

Each test mounts a small tmpfs (root only; skipped with the reason otherwise) and fills it
to leave a few KiB: room for the start of a trace, not for the rest.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from ground.errors import WriteError
from replay.trace import TraceWriter, build_header, read_trace
from tests.replay.report.samples import write_payments

STARTER = Path(__file__).resolve().parent.parent / "scenarios" / "payments" / "starter.py"

Fill = Callable[[int], Path]


@pytest.fixture
def full_disk(tmp_path: Path) -> Iterator[Fill]:
    """``fill(free_bytes)``: a 1 MiB tmpfs mounted for this test, filled up to leave about
    ``free_bytes``; returns its mount point."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs (a disk that fills up) needs root")
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m,mode=0777", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")

    def fill(free_bytes: int) -> Path:
        filler = mount / ".filler"
        with filler.open("wb", buffering=0) as stream:
            try:
                while stream.write(b"\0" * 4096):
                    pass
            except OSError:  # full
                pass
        os.truncate(filler, max(0, filler.stat().st_size - free_bytes))
        return mount

    try:
        yield fill
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def _chaos(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    # (wide: the progress lines are not wrapped in the middle of a path)
    env = {**os.environ, "CHAOS_REGISTRY_DIR": str(cwd / "registry"), "COLUMNS": "1000"}
    return subprocess.run(
        [sys.executable, "-m", "chaos", *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
        env=env,
        check=False,
    )


def _one_line(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 3, done.stderr
    assert "Traceback" not in done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("chaos: error: "), done.stderr
    return done.stderr.strip()


def test_the_trace_writer_keeps_what_it_wrote_and_fails_the_same_way(full_disk: Fill) -> None:
    disk = full_disk(16 * 1024)
    path = disk / "run.trace"
    writer = TraceWriter(path, build_header("demo", "sha256:0", "golden", 7))
    writer.write_schedule({"seed": 7, "space_hash": "sha256:0", "events": []})
    with pytest.raises(WriteError) as caught:
        for index in range(10_000):
            writer.write_event({"process": 0, "type": "invoke", "f": "write", "value": "x" * 512,
                                "time_ns": index})  # fmt: skip
    assert str(caught.value) == (
        f"cannot write trace {path}: No space left on device; what was written before is "
        f"kept in {path}.partial"
    )
    with pytest.raises(WriteError):  # the end frame too: no other error replaces it
        writer.write_end("held", 0, 1.0)
    writer.close()  # leaves the partial trace, releases the path, raises nothing
    kept = read_trace(Path(f"{path}.partial"))
    assert kept.partial
    assert kept.schedule is not None
    assert len(kept.events) > 10
    assert not path.exists()


@pytest.mark.slow
def test_chaos_run_on_a_full_disk_names_the_partial_trace(full_disk: Fill, tmp_path: Path) -> None:
    """`chaos run ... --out D/x.trace` with D full: a traceback (ENOSPC from close() in
    _claim.place's finally), exit 1, no verdict."""
    disk = full_disk(24 * 1024)
    trace = disk / "x.trace"
    line = _one_line(_chaos(tmp_path, "run", "payments", "--seed", "1", "--out", str(trace)))
    assert line == (
        f"chaos: error: cannot write trace {trace}: No space left on device; what was "
        f"written before is kept in {trace}.partial"
    )
    assert read_trace(Path(f"{trace}.partial")).partial
    assert not list((tmp_path / "registry").glob("*.run"))  # the run cleaned up


def test_chaos_run_on_a_disk_with_no_room_at_all(full_disk: Fill, tmp_path: Path) -> None:
    disk = full_disk(0)
    trace = disk / "x.trace"
    line = _one_line(_chaos(tmp_path, "run", "payments", "--out", str(trace)))
    assert line == (
        f"chaos: error: cannot write trace {trace}: No space left on device (nothing was kept)"
    )
    assert sorted(p.name for p in disk.iterdir()) == [".filler"]


def test_a_report_on_a_full_disk_leaves_the_old_one(full_disk: Fill, tmp_path: Path) -> None:
    trace = write_payments(tmp_path / "run.trace")
    disk = full_disk(1 << 20)
    (disk / "r.html").write_text("the report of yesterday")
    full_disk(4096)
    line = _one_line(_chaos(tmp_path, "report", str(trace), "-o", str(disk / "r.html")))
    assert line == (
        f"chaos: error: cannot write {disk / 'r.html'}: No space left on device (left as it was)"
    )
    assert (disk / "r.html").read_text() == "the report of yesterday"
    assert sorted(p.name for p in disk.iterdir()) == [".filler", "r.html"]  # no temp file


@pytest.mark.parametrize("format", ["folder", "harbor"])
def test_a_task_folder_on_a_full_disk_is_removed(
    full_disk: Fill, tmp_path: Path, format: str
) -> None:
    disk = full_disk(8 * 1024)
    out = disk / "task"
    line = _one_line(_chaos(tmp_path, "task", "payments", "--format", format, "-o", str(out)))
    assert line == (
        f"chaos: error: cannot write the task folder {out}: No space left on device (what "
        "was written was removed)"
    )
    assert not out.exists()


@pytest.mark.slow
def test_a_sweep_into_a_full_folder_is_exit_3_naming_each_kept_trace(
    full_disk: Fill, tmp_path: Path
) -> None:
    disk = full_disk(24 * 1024)
    done = _chaos(tmp_path, "sweep", "payments", "--seeds", "0-1", "--jobs", "2", "--out-dir",
                  str(disk / "sweep"))  # fmt: skip
    assert done.returncode == 3, done.stderr
    assert "Traceback" not in done.stderr
    assert "2 errors" in done.stdout
    for seed in (0, 1):
        trace = disk / "sweep" / f"golden-seed{seed}.trace"
        assert f"seed {seed}: error (cannot write trace {trace}: No space left on device" in (
            done.stderr
        )
    assert not list((tmp_path / "registry").glob("*.run"))


@pytest.mark.slow
def test_a_grade_into_a_full_folder_is_exit_3_and_its_junit_too(
    full_disk: Fill, tmp_path: Path
) -> None:
    disk = full_disk(0)
    done = _chaos(tmp_path, "grade", "payments", "--impl", str(STARTER), "--seeds", "1",
                  "--out-dir", str(disk))  # fmt: skip
    assert done.returncode == 3, done.stderr
    assert "Traceback" not in done.stderr
    assert "seed 1: error (cannot write trace" in done.stderr
    assert "No space left on device" in done.stderr
    assert "1 harness errors" in done.stdout
    # the grade's own output: a JUnit file on the full disk, the traces elsewhere
    junit = disk / "grade.xml"
    done = _chaos(tmp_path, "grade", "payments", "--impl", str(STARTER), "--seeds", "1",
                  "--out-dir", str(tmp_path / "traces"), "--junit", str(junit))  # fmt: skip
    assert "Traceback" not in done.stderr
    assert done.returncode == 3, done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        f"chaos: error: cannot write {junit}: No space left on device (not written)"
    )
