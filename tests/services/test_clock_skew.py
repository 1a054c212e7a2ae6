"""SkewFile: a real child's wall clock follows offsets changed while it runs."""

from __future__ import annotations

import math
import time
from pathlib import Path

import pytest
import trio
from svc_helpers import py

from chaos.services import (
    SkewFile,
    libfaketime_library,
    open_process_service,
    open_run_dir,
    registry,
)
from chaos.services.clock import format_offset
from ground.errors import ConfigError

CLOCK_PRINTER = py("import time\nwhile True:\n    print(time.time())\n    time.sleep(0.05)")


def test_library_ships_with_the_wheel() -> None:
    assert libfaketime_library().is_file()


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "+0.000000"), (3600, "+3600.000000"), (-3, "-3.000000"), (2.5, "+2.500000")],
)
def test_offsets_use_libfaketime_relative_syntax(seconds: float, text: str) -> None:
    assert format_offset(seconds) == text


@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_non_finite_offset_is_a_config_error(bad: float, tmp_path: Path) -> None:
    skew = SkewFile(tmp_path / "skew")
    with pytest.raises(ConfigError, match="finite"):
        skew.set_offset(bad)
    assert skew.offset == 0
    assert (tmp_path / "skew").read_text() == "+0.000000\n"


async def _offset_reaches(skews: list[float], target: float, within: float) -> float:
    """Wait until the child's latest reported skew is within 5 s of `target`."""
    with trio.move_on_after(within):
        while True:
            if skews and abs(skews[-1] - target) < 5:
                return skews[-1]
            await trio.sleep(0.02)
    return skews[-1] if skews else math.nan


async def test_child_clock_follows_offset_changes_while_running(tmp_path: Path) -> None:
    skews: list[float] = []

    def record(name: str, stream: str, line: str) -> None:
        if stream == "stdout":
            skews.append(float(line) - time.time())

    skew = SkewFile(tmp_path / "skew")
    async with open_process_service(
        "clock", CLOCK_PRINTER, faketime=skew, log_sink=record
    ) as clock:
        assert abs(await _offset_reaches(skews, 0, 2)) < 5
        skew.set_offset(3600)
        assert abs(await _offset_reaches(skews, 3600, 1) - 3600) < 5
        skew.set_offset(0)
        assert abs(await _offset_reaches(skews, 0, 1)) < 5
        ticks = len(skews)
        await trio.sleep(0.5)
        assert len(skews) - ticks >= 3  # time.sleep in the child does not hang
        shm = trio.Path(f"/dev/shm/faketime_shm_{clock.pid}")
        assert await shm.exists()
    # libfaketime's per-process semaphore and shared memory do not outlive the service
    assert not await shm.exists()
    assert not await trio.Path(f"/dev/shm/sem.faketime_sem_{clock.pid}").exists()


async def test_a_runs_skewed_services_share_one_named_pair_that_the_run_removes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CHAOS_REGISTRY_DIR", str(tmp_path / "registry"))
    skews: list[float] = []

    def record(name: str, stream: str, line: str) -> None:
        if stream == "stdout":
            skews.append(float(line) - time.time())

    with open_run_dir(parent=tmp_path) as run:
        current = registry.current()
        assert current is not None
        pair = [
            trio.Path(f"/dev/shm/sem.faketime_sem_chaos-{current.run_id}"),
            trio.Path(f"/dev/shm/faketime_shm_chaos-{current.run_id}"),
        ]
        skew = SkewFile(run / "skew")
        async with open_process_service(
            "clock", CLOCK_PRINTER, faketime=skew, log_sink=record
        ) as clock:
            skew.set_offset(-3600)
            assert abs(await _offset_reaches(skews, -3600, 2) + 3600) < 5
            assert [await p.exists() for p in pair] == [True, True]
            pid = clock.pid
            await clock.kill()  # a crash: libfaketime's destructor never runs
            assert not await trio.Path(f"/dev/shm/faketime_shm_{pid}").exists()
            assert not await trio.Path(f"/dev/shm/sem.faketime_sem_{pid}").exists()
    assert [await p.exists() for p in pair] == [False, False]
