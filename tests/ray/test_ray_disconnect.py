"""``disconnect`` of a local Ray instance and the warm workers its Ray workers kept: they have
stopped their servers when it returns, and a warm worker of this process's own (a local
pool's, beside Ray in a trainer) is left alone. Real Ray, a tiny pack's runs."""

from __future__ import annotations

from pathlib import Path

import psutil
import pytest
import trio

from chaos.executor import RunSpec, warm_request
from chaos.warm_pool import KeptWorker
from ground.errors import EXIT_HELD
from tests.ray.packs import write_tiny_pack

ray = pytest.importorskip("ray")

from chaos.executor_ray import RayExecutor, connect, disconnect  # noqa: E402

pytestmark = pytest.mark.slow


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_disconnect_waits_for_the_kept_workers_and_leaves_this_process_own(
    tmp_path: Path,
) -> None:
    tiny = write_tiny_pack(tmp_path / "tiny")
    out = tmp_path / "out"
    out.mkdir()
    own = KeptWorker()  # this process's own warm worker, as a local pool keeps one
    try:
        assert not ray.is_initialized()
        assert connect("local")
        try:
            outcomes = trio.run(RayExecutor(), [RunSpec(str(tiny), 0, (), out)], 1)
        finally:
            disconnect()
        [outcome] = outcomes
        assert outcome.outcome == "held", outcome.error
        kept = int(outcome.worker.rsplit("warm worker pid ", 1)[1])
        assert kept != own.pid
        assert _gone(kept)  # stopped (its servers with it) before disconnect returned
        assert own.alive
        answer = own.run(warm_request(RunSpec(str(tiny), 3, (), out)))
        assert answer is not None
        assert answer["exit_code"] == EXIT_HELD, answer
    finally:
        own.close()
        assert own.reap(timeout=60)
