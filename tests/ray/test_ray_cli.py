"""``chaos sweep --ray`` with its own local Ray instance, stopped by Ctrl-C mid-run: one
line, exit 130, and nothing left (no Ray process, no run, no task temp dir)."""

from __future__ import annotations

import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest

from tests.ray.packs import WAIT_SEED, write_tiny_pack

pytest.importorskip("ray")
pytestmark = pytest.mark.slow


def _running(process: psutil.Process) -> bool:
    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _cmdline(process: psutil.Process) -> str:
    try:
        return " ".join(process.cmdline())
    except psutil.Error:
        return ""


def test_ctrl_c_of_a_ray_sweep_leaves_nothing(tmp_path: Path) -> None:
    tiny = write_tiny_pack(tmp_path / "tiny")
    started = tiny / "control" / f"started-{WAIT_SEED}"
    sweep = subprocess.Popen(
        [sys.executable, "-m", "chaos", "sweep", str(tiny), "--seeds", str(WAIT_SEED),
         "--ray", "--out-dir", str(tmp_path / "out")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 180
        while not started.exists():
            assert sweep.poll() is None, sweep.communicate()
            assert time.monotonic() < deadline, "the run never started"
            time.sleep(0.1)
        everything = psutil.Process(sweep.pid).children(recursive=True)
        workers = [p.pid for p in everything if "ray::" in _cmdline(p)]
        sweep.send_signal(signal.SIGINT)
        _, err = sweep.communicate(timeout=180)
    finally:
        if sweep.poll() is None:
            sweep.kill()
            sweep.wait()
    assert sweep.returncode == 130, err
    assert err.strip().splitlines()[-1].startswith("chaos: error: interrupted")
    deadline = time.monotonic() + 120
    while any(_running(p) for p in everything):
        assert time.monotonic() < deadline, [p.pid for p in everything if _running(p)]
        time.sleep(0.2)
    assert workers
    for pid in workers:
        assert not list(Path(tempfile.gettempdir()).glob(f"chaos-ray-{pid}-*"))
