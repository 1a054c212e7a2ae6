"""Supervision on real child processes: restarts after a death, crashes while starting."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import trio
from svc_helpers import assert_reaped, proc_state, py

from chaos.services import RestartPolicy, open_process_service

FAST = RestartPolicy(initial_backoff_s=0.05, max_backoff_s=0.2)


async def test_a_service_that_exits_on_its_own_is_restarted_and_recorded(tmp_path: Path) -> None:
    counter = tmp_path / "starts"
    code = (
        "import pathlib, sys, time\n"
        f"p = pathlib.Path({str(counter)!r})\n"
        "n = int(p.read_text()) + 1 if p.exists() else 1\n"
        "p.write_text(str(n))\n"
        "print('up', n)\n"
        "time.sleep(0.1)\n"
        "sys.exit(3) if n < 3 else time.sleep(60)"
    )
    events: list[tuple[str, dict[str, Any]]] = []
    async with open_process_service("svc", py(code)) as p:
        p.supervise(FAST, lambda f, v: events.append((f, v)))
        with trio.fail_after(20):
            while p.starts < 3 or not p.tail.lines() or p.tail.lines()[-1] != "up 3":
                await trio.sleep(0.05)
        assert p.running
    assert [f for f, _ in events] == ["restart", "start", "restart", "start"]
    assert [v["code"] for f, v in events if f == "restart"] == [3, 3]
    assert [v["attempt"] for f, v in events if f == "restart"] == [1, 2]


async def test_a_kill_while_a_restart_is_starting_is_no_error() -> None:
    # The seed-10043 case: a crash fault lands while the restarted service is still starting.
    code = "import time\ntime.sleep(0.5)\nprint('ready')\ntime.sleep(60)"

    lines: list[str] = []

    async def ready() -> bool:
        return lines[-1:] == ["ready"]

    def sink(name: str, stream: str, line: str) -> None:
        lines.append(line)

    async with open_process_service("svc", py(code), ready=ready, log_sink=sink) as p:
        p.supervise(FAST, lambda f, v: None)
        await p.kill()
        lines.clear()
        results: list[bool] = []

        async def first_heal() -> None:  # the first crash's heal, waiting for "ready"
            results.append(await p.restart())

        async with trio.open_nursery() as nursery:
            nursery.start_soon(first_heal)
            await trio.sleep(0.2)
            await p.kill()  # the second crash, before the restart is ready
        assert results == [False]  # the first heal knows its start was cut short
        assert not p.running
        assert not p.died
        assert await p.restart()  # the second crash's heal
        assert p.running
        assert p.starts == 3


async def test_kill_takes_children_that_left_the_process_group(tmp_path: Path) -> None:
    pidfile = tmp_path / "child"
    code = (
        "import subprocess, sys, time\n"
        "c = subprocess.Popen([sys.executable, '-c', 'import os, time; os.setsid(); "
        "time.sleep(60)'])\n"
        f"open({str(pidfile)!r}, 'w').write(str(c.pid))\ntime.sleep(60)"
    )

    async def ready() -> bool:
        return pidfile.exists()

    async with open_process_service("svc", py(code), ready=ready) as p:
        child = int(pidfile.read_text())
        await trio.sleep(0.2)  # the child has called setsid
        assert proc_state(child) in "RS"
        await p.kill()
        assert p.returncode == -signal.SIGKILL
        assert_reaped(child)
