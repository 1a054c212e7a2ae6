"""open_process_service on real child processes: logs, readiness, faults, clean exit."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
import trio
from svc_helpers import assert_reaped, proc_state, py

from chaos.services import ManagedProcess, free_port, open_process_service, tcp_accepting
from ground.errors import ConfigError, ServiceError

TICKER = py("import time\nfor i in range(100000):\n    print(i)\n    time.sleep(0.02)")


async def test_log_sink_receives_stdout_and_stderr_lines() -> None:
    seen: list[tuple[str, str, str]] = []
    code = "import sys\nprint('hello')\nprint('oops', file=sys.stderr)\nprint('bye')"
    async with open_process_service("echoer", py(code), log_sink=lambda *a: seen.append(a)) as p:
        assert await p.wait() == 0
        await trio.sleep(0.1)
    assert ("echoer", "stdout", "hello") in seen
    assert ("echoer", "stderr", "oops") in seen
    assert [line for _, s, line in seen if s == "stdout"] == ["hello", "bye"]
    assert p.tail.lines()[-1] in {"bye", "oops"}


async def test_early_exit_raises_service_error_with_log_tail() -> None:
    code = "import sys\nprint('config broken: port 0')\nsys.exit(3)"
    with pytest.raises(ServiceError) as info:
        async with open_process_service("svc", py(code), ready=_never):
            pytest.fail("must not become ready")
    assert "exited with code 3" in str(info.value)
    assert "config broken: port 0" in info.value.log_tail


async def _never() -> bool:
    return False


async def test_not_ready_before_deadline_raises_and_reaps() -> None:
    pids: list[int] = []

    def record(name: str, stream: str, line: str) -> None:
        pids.append(int(line))

    code = "import os, time\nprint(os.getpid())\ntime.sleep(60)"
    with pytest.raises(ServiceError, match=r"not ready after 0\.5s"):
        async with open_process_service(
            "slow", py(code), ready=_never, ready_timeout=0.5, log_sink=record
        ):
            pytest.fail("must not become ready")
    assert_reaped(pids[0])


async def test_tcp_readiness_probe_waits_for_listener() -> None:
    port = free_port()
    code = (
        "import socket, time\ntime.sleep(0.3)\ns = socket.socket()\n"
        f"s.bind(('127.0.0.1', {port}))\ns.listen()\nprint('listening')\ntime.sleep(60)"
    )
    async with open_process_service(
        "listener", py(code), ready=lambda: tcp_accepting("127.0.0.1", port)
    ) as p:
        assert await tcp_accepting("127.0.0.1", port)
        assert p.running
    assert_reaped(p.pid or 0)


async def _lines_after(p: ManagedProcess, seconds: float) -> int:
    before = len(p.tail.lines())
    await trio.sleep(seconds)
    return len(p.tail.lines()) - before


async def _more_lines(p: ManagedProcess) -> None:
    """Wait (up to 30 s, so a loaded machine is not a failure) for a new line of output."""
    before = len(p.tail.lines())
    with trio.fail_after(30):
        while len(p.tail.lines()) == before:
            await trio.sleep(0.02)


async def test_pause_stops_output_and_resume_continues() -> None:
    async with open_process_service("ticker", TICKER, tail_lines=100000) as p:
        await _more_lines(p)
        p.pause()
        with trio.fail_after(30):
            while proc_state(p.pid or 0) != "T":
                await trio.sleep(0.01)
        await trio.sleep(0.5)  # lines printed before the stop may still be in the pipe
        assert await _lines_after(p, 0.4) == 0
        p.resume()
        await _more_lines(p)
        p.pause()
    assert p.returncode == -signal.SIGTERM
    assert_reaped(p.pid or 0)


async def test_kill_then_restart_runs_the_same_command_again() -> None:
    exits: list[tuple[str, int, bool]] = []
    code = "import os, time\nprint('pid', os.getpid())\ntime.sleep(60)"
    async with open_process_service(
        "svc", py(code), env={"CHAOS_MARK": "x"}, on_exit=lambda *a: exits.append(a)
    ) as p:
        first = p.pid or 0
        await p.kill()
        assert p.returncode == -signal.SIGKILL
        assert not p.died
        assert_reaped(first)
        await p.restart()
        assert p.running
        assert p.pid != first
        assert p.starts == 2
        await trio.sleep(0.3)
        assert f"pid {p.pid}" in p.tail.lines()
    assert exits[0] == ("svc", -signal.SIGKILL, True)
    assert exits[1] == ("svc", -signal.SIGTERM, True)


async def test_unexpected_exit_is_reported_as_died() -> None:
    exits: list[tuple[str, int, bool]] = []
    code = "import time, sys\ntime.sleep(0.2)\nsys.exit(7)"
    async with open_process_service("svc", py(code), on_exit=lambda *a: exits.append(a)) as p:
        assert not p.died
        with trio.fail_after(5):
            await p.exited.wait()
        assert p.died
        assert p.returncode == 7
    assert exits == [("svc", 7, False)]


async def test_exit_takes_grandchildren_and_ignores_sigterm_holdouts(tmp_path: Path) -> None:
    pidfile = tmp_path / "grandchild"
    code = (
        "import signal, subprocess, sys, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        f"g = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        f"open({str(pidfile)!r}, 'w').write(str(g.pid))\nprint('up')\ntime.sleep(60)"
    )
    async with open_process_service(
        "parent", py(code), ready=lambda: _exists(pidfile), stop_grace=0.3
    ) as p:
        grandchild = int(pidfile.read_text())
        assert proc_state(grandchild) in "RS"
    assert p.returncode == -signal.SIGKILL
    assert_reaped(p.pid or 0)
    assert_reaped(grandchild)  # re-parented to the harness (a subreaper) and waited on


async def _exists(path: Path) -> bool:
    return await trio.Path(path).exists()


async def test_paused_child_is_resumed_and_stopped_gracefully() -> None:
    seen: list[str] = []
    code = (
        "import signal, sys, time\n"
        "def bye(*_):\n    print('bye')\n    sys.exit(0)\n"
        "signal.signal(signal.SIGTERM, bye)\nprint('up')\ntime.sleep(60)"
    )

    async def handler_installed() -> bool:  # 'up' is printed after the SIGTERM handler is set
        return "up" in seen

    async with open_process_service(
        "svc",
        py(code),
        log_sink=lambda n, s, line: seen.append(line),
        ready=handler_installed,
        stop_grace=5,
    ) as p:
        p.pause()
    assert p.returncode == 0
    assert "bye" in seen


async def test_cancellation_mid_startup_leaves_nothing_behind() -> None:
    pids: list[int] = []
    code = "import os, time\nprint(os.getpid())\ntime.sleep(60)"
    with trio.move_on_after(0.5) as scope:
        async with open_process_service(
            "svc", py(code), ready=_never, log_sink=lambda n, s, line: pids.append(int(line))
        ):
            pytest.fail("must not become ready")
    assert scope.cancelled_caught
    assert_reaped(pids[0])


async def test_cancelled_body_still_reaps_the_child() -> None:
    with trio.move_on_after(0.3):
        async with open_process_service("svc", TICKER) as p:
            await trio.sleep_forever()
    assert_reaped(p.pid or 0)


async def test_error_in_body_propagates_unwrapped() -> None:
    with pytest.raises(KeyError):
        async with open_process_service("svc", TICKER) as p:
            raise KeyError("boom")
    assert_reaped(p.pid or 0)


async def test_missing_executable_raises_service_error(tmp_path: Path) -> None:
    with pytest.raises(ServiceError, match="could not start"):
        async with open_process_service("svc", [str(tmp_path / "nope")]):
            pytest.fail("must not start")


@pytest.mark.parametrize(
    ("argv", "options", "message"),
    [
        ([], {}, "argv must be a non-empty list"),
        ("sleep 1", {}, "argv must be a non-empty list"),
        (["true"], {"ready_timeout": 0}, "ready_timeout must be > 0, got 0"),
        (["true"], {"stop_grace": -1}, "stop_grace must be >= 0, got -1"),
        (["true"], {"ready_timeout": float("nan")}, "ready_timeout must be > 0, got nan"),
        (["true"], {"stop_grace": float("nan")}, "stop_grace must be >= 0, got nan"),
        (["true"], {"stop_grace": float("inf")}, "must be finite, got 30.0, inf"),
        (["true"], {"tail_lines": 0}, "tail_lines must be >= 1, got 0"),
    ],
)
async def test_bad_options_are_config_errors(
    argv: list[str], options: dict[str, float], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        async with open_process_service("svc", argv, **options):  # type: ignore[arg-type]
            pytest.fail("must not start")
