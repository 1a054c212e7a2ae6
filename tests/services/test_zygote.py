"""The zygote (chaos.services.zygote) on real processes: services forked from a pre-imported
interpreter behave as exec'd ones (logs, exit codes, stop/kill/pause, clock skew)."""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
import trio
from svc_helpers import assert_reaped, proc_state

from chaos.services import SkewFile, open_process_service
from chaos.services._reaper import read_entry
from chaos.services.zygote import Zygote, current, enabled, open_zygote, open_zygotes, using
from ground.errors import ServiceError

SVC = [sys.executable, "-m", "tests.services.zygote_svc"]
PRELOAD = ("asyncio", "json")
UNBUF = {"PYTHONUNBUFFERED": "1"}  # as RunContext.start_service sets it
ROOT = str(Path(__file__).resolve().parents[2])


@pytest.fixture
async def zygote(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Zygote]:
    # tests.services.zygote_svc must import from any working directory (one test runs the
    # service in tmp_path): the project root on PYTHONPATH, for the zygote and its requests.
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))
    )
    async with open_zygote(PRELOAD, tmp_path) as z:
        yield z


def _lines(seen: list[tuple[str, str, str]], stream: str) -> list[str]:
    return [line for _, s, line in seen if s == stream]


async def _never() -> bool:
    return False


async def _state_is(pid: int, wanted: Callable[[str], bool]) -> bool:
    """Whether ``pid``'s /proc state satisfies ``wanted`` within 5 s (a bound, not a timing)."""
    with trio.move_on_after(5):
        while not wanted(proc_state(pid)):
            await trio.sleep(0.01)
        return True
    return False


async def test_a_forked_service_logs_and_exits_zero(zygote: Zygote) -> None:
    seen: list[tuple[str, str, str]] = []
    async with open_process_service(
        "echoer", [*SVC, "echo"], log_sink=lambda *a: seen.append(a), env=UNBUF, zygote=zygote
    ) as p:
        assert zygote.forks == 1
        assert await p.wait() == 0
        await p.exited.wait()
        await trio.sleep(0.1)
    assert _lines(seen, "stdout") == ["hello", "bye"]
    assert _lines(seen, "stderr") == ["oops"]
    assert p.pid is not None
    assert_reaped(p.pid)


async def test_the_service_gets_its_env_cwd_argv_session_and_the_harness_as_parent(
    zygote: Zygote, tmp_path: Path
) -> None:
    seen: list[tuple[str, str, str]] = []
    async with open_process_service(
        "env",
        [*SVC, "env", "a b"],
        env={"ZYGOTE_TEST_X": "42", **UNBUF},
        cwd=tmp_path,
        log_sink=lambda *a: seen.append(a),
        zygote=zygote,
    ) as p:
        assert await p.wait() == 0
        await p.exited.wait()
        await trio.sleep(0.1)
    out = _lines(seen, "stdout")
    assert zygote.forks == 1
    assert out == [
        "x=42",
        f"cwd={tmp_path}",
        "argv=['env', 'a b']",
        f"path0={tmp_path}",
        "main=__main__",
        f"ppid={os.getpid()}",
        f"pgid={p.pid}",
    ]


async def _gc_lines(zygote: Zygote | None) -> list[str]:
    seen: list[tuple[str, str, str]] = []
    async with open_process_service(
        "gc", [*SVC, "gc"], log_sink=lambda *a: seen.append(a), env=UNBUF, zygote=zygote
    ) as p:
        assert await p.wait() == 0
        await p.exited.wait()
        await trio.sleep(0.1)
    return _lines(seen, "stdout")


async def test_a_forked_services_collector_never_walks_the_zygotes_imports(
    zygote: Zygote,
) -> None:
    # the zygote froze what its imports made: a fork's collections skip (and do not copy)
    # those pages; what the service makes itself is collected as usual
    assert await _gc_lines(zygote) == ["walks_preloaded=False", "walks_its_own=True"]
    assert zygote.forks == 1
    # exec'd (no zygote), the same service's collector walks everything
    assert await _gc_lines(None) == ["walks_preloaded=True", "walks_its_own=True"]


@pytest.mark.parametrize("code", [3, 0])
async def test_exit_codes_are_reported(zygote: Zygote, code: int) -> None:
    async with open_process_service(
        "exiter", [*SVC, "exit", str(code)], env=UNBUF, zygote=zygote
    ) as p:
        assert await p.wait() == code
    assert zygote.forks == 1


async def test_an_uncaught_exception_exits_1_with_its_traceback(zygote: Zygote) -> None:
    with pytest.raises(ServiceError, match="exited with code 1 before it was ready") as info:
        async with open_process_service(
            "raiser", [*SVC, "raise"], ready=_never, env=UNBUF, zygote=zygote
        ):
            pytest.fail("must not become ready")
    assert "RuntimeError: boom from the service" in info.value.log_tail
    assert "Traceback" in info.value.log_tail


async def test_a_sigkill_before_ready_is_reported_as_minus_9(zygote: Zygote) -> None:
    lines: list[str] = []
    with pytest.raises(ServiceError, match="exited with code -9 before it was ready"):
        async with open_process_service(
            "victim",
            [*SVC, "sleep"],
            ready=_never,
            log_sink=lambda _s, _t, line: lines.append(line),
            env=UNBUF,
            zygote=zygote,
            wait_ready=False,
        ) as p:
            assert zygote.forks == 1
            while "ready" not in lines:
                await trio.sleep(0.01)
            assert p.pid is not None
            os.kill(p.pid, signal.SIGKILL)
            await p.ready()


async def test_stop_kill_pause_and_restart_reach_the_forked_service(zygote: Zygote) -> None:
    async with open_process_service("sleeper", [*SVC, "sleep"], env=UNBUF, zygote=zygote) as p:
        first = p.pid
        assert first is not None
        p.pause()  # signals are delivered asynchronously: wait (bounded) for the state
        assert await _state_is(first, lambda state: state == "T")
        p.resume()
        assert await _state_is(first, lambda state: state != "T")
        await p.kill()  # a crash fault
        assert p.returncode == -9
        assert_reaped(first)
        await p.restart()
        second = p.pid
        assert second is not None
        assert second != first
        assert zygote.forks == 2
        await p.stop()
        assert p.returncode == -signal.SIGTERM
        assert_reaped(second)


async def test_per_service_clock_skew_and_a_change_while_running(
    zygote: Zygote, tmp_path: Path
) -> None:
    base = str(time.time() - time.monotonic())
    seen: dict[str, list[int]] = {"skewed": [], "plain": []}

    def sink(service: str, stream: str, line: str) -> None:
        if line.startswith("skew="):
            seen[service].append(int(line.removeprefix("skew=")))

    skew = SkewFile(tmp_path / "skewed.faketime", 3600)
    plain = SkewFile(tmp_path / "plain.faketime", 0)
    async with (
        open_process_service(
            "skewed", [*SVC, "clock", base], faketime=skew, log_sink=sink, env=UNBUF, zygote=zygote
        ),
        open_process_service(
            "plain", [*SVC, "clock", base], faketime=plain, log_sink=sink, env=UNBUF, zygote=zygote
        ),
    ):
        assert zygote.forks == 2
        while not seen["skewed"] or not seen["plain"]:
            await trio.sleep(0.05)
        skew.set_offset(-500)
        count = len(seen["skewed"])
        while len(seen["skewed"]) < count + 3:
            await trio.sleep(0.05)
    assert seen["skewed"][0] == 3600
    assert seen["skewed"][-1] == -500
    assert set(seen["plain"]) == {0}


def _faketime_files() -> set[str]:
    return {n for n in os.listdir("/dev/shm") if n.startswith(("faketime_", "sem.faketime_"))}


async def test_outside_a_run_the_zygote_and_a_killed_skewed_fork_leave_no_libfaketime_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No registration here: libfaketime would make a semaphore + shared memory pair named
    # after the zygote's pid, which its _exit never removes (nor a SIGKILLed fork's).
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))
    )
    before = _faketime_files()
    async with open_zygote(PRELOAD, tmp_path) as zygote:
        pair = {n for n in _faketime_files() - before if "-zygote-" in n}
        assert len(pair) == 2, _faketime_files() - before  # its own, named after this process
        skew = SkewFile(tmp_path / "skewed.faketime", 3600)
        async with open_process_service(
            "skewed", [*SVC, "sleep"], faketime=skew, env=UNBUF, zygote=zygote
        ) as p:
            assert zygote.forks == 1
            await p.kill()  # a crash fault
        zygote_pid = zygote.child.pid
    assert p.pid is not None
    pids = {str(zygote_pid), str(p.pid)}
    left = _faketime_files() - before
    assert {n for n in left if n.rsplit("_", 1)[-1] in pids or "-zygote-" in n} == set()


async def test_anything_but_python_dash_m_is_execd(zygote: Zygote) -> None:
    async with open_process_service(
        "plain", [sys.executable, "-c", "print(1)"], env=UNBUF, zygote=zygote
    ) as p:
        assert await p.wait() == 0
        entry = read_entry(os.getpid())
        assert entry is not None
    assert zygote.forks == 0
    assert not zygote.accepts([*SVC, "echo"], {**os.environ, "PYTHONHASHSEED": "7"})
    assert zygote.accepts([*SVC, "echo"], {**os.environ, "PYTHONUNBUFFERED": "1"})


async def test_chaos_zygote_0_turns_it_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHAOS_ZYGOTE", "0")
    assert not enabled()
    async with open_zygotes(tmp_path) as get:
        assert await get(PRELOAD) is None
    monkeypatch.setenv("CHAOS_ZYGOTE", "1")
    async with open_zygotes(tmp_path) as get:
        assert await get(()) is None
        z = await get(PRELOAD)
        assert z is not None
        assert await get(PRELOAD) is z
    assert z.child.returncode is not None  # the zygote exits with the block


async def test_a_missing_preload_module_means_no_zygote(tmp_path: Path) -> None:
    async with open_zygotes(tmp_path) as get:
        assert await get(("no_such_module_for_the_zygote",)) is None


async def test_only_a_zygote_passed_in_forks_never_the_current_one(zygote: Zygote) -> None:
    # The sandbox (a graded candidate) starts its program with open_process_service and no
    # zygote: the run's current zygote must not reach it.
    with using(zygote):
        assert current() is zygote
        async with open_process_service("x", [*SVC, "exit", "0"], env=UNBUF) as p:
            assert await p.wait() == 0
    assert zygote.forks == 0
    assert current() is None
