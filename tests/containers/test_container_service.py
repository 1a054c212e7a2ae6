"""A container as a service under test: output, ready line, the process faults, removal."""

from __future__ import annotations

import time

import pytest
import trio

from chaos.services import SkewFile, open_run_dir
from chaos.services.container import open_container
from chaos.services.images import docker_client

pytestmark = pytest.mark.docker

TICKER = (
    "import time\n"
    "print('ticker ready', flush=True)\n"
    "while True:\n"
    "    print('t', time.time(), flush=True)\n"
    "    time.sleep(0.05)\n"
)


async def test_clock_skew_pause_and_crash_reach_a_container(payments_image: str) -> None:
    lines: list[str] = []
    ready_count = {"n": 0}

    def sink(service: str, stream: str, line: str) -> None:
        lines.append(line)
        if "ticker ready" in line:
            ready_count["n"] += 1

    def times() -> list[float]:
        return [float(x.split()[1]) for x in lines if x.startswith("t ")]

    async def until(predicate: object) -> None:
        with trio.fail_after(30):  # a hang guard, not a timing assertion
            while not predicate():  # type: ignore[operator]
                await trio.sleep(0.02)

    with open_run_dir() as run:
        (run / "clock").mkdir()
        skew = SkewFile(run / "clock" / "faketime")
        async with open_container(
            "ticker",
            payments_image,
            command=["python", "-c", TICKER],
            log_sink=sink,
            ready=lambda: _true_when(ready_count["n"] >= 1),
            faketime=skew,
        ) as box:
            ids = (box.container_id, box.holder_id)
            await until(lambda: len(times()) >= 2)
            assert abs(times()[-1] - time.time()) < 600  # not skewed yet
            skew.set_offset(3600)
            await until(lambda: times()[-1] > time.time() + 3000)

            box.pause()
            state = docker_client().api.inspect_container(box.container_id)["State"]
            assert state["Status"] == "paused"
            box.resume()
            seen = len(times())
            await until(lambda: len(times()) > seen)

            first_pid = box.pid
            await box.kill()
            assert box.exited.is_set()
            assert not box.died  # the harness killed it
            ready_count["n"] = 0
            await box.restart()
            assert box.starts == 2
            assert box.pid != first_pid
            assert ready_count["n"] == 1
    for cid in ids:
        assert cid is not None
        assert not docker_client().api.containers(all=True, filters={"id": cid})


async def test_a_crash_while_it_restarts_is_a_fault_not_an_error(payments_image: str) -> None:
    """A second crash that lands before the restarted container is ready (a machine's two
    crash steps in a row) makes the restart return False, as a process's does: it raised
    "exited with code 137 before it was ready" and ended the run (bench/search.py's machine
    on payments_docker)."""
    ready = {"now": True}
    started: list[bool] = []
    with open_run_dir():
        async with open_container(
            "ticker",
            payments_image,
            command=["python", "-c", TICKER],
            ready=lambda: _true_when(ready["now"]),
        ) as box:
            ready["now"] = False  # the restart waits for a ready that does not come

            async def restart() -> None:
                started.append(await box.restart())

            async with trio.open_nursery() as nursery:
                nursery.start_soon(restart)
                with trio.fail_after(60):  # a hang guard, not a timing assertion
                    while box.starts < 2 or not box.running:
                        await trio.sleep(0.02)
                await box.kill()  # the second crash
    assert started == [False]


async def _true_when(value: bool) -> bool:
    return value
