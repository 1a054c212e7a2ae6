"""SIGINT, SIGTERM and SIGHUP: exit codes, the guarded trio run, and the one line they print."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from chaos import _signals


def test_each_signal_has_its_exit_code_and_outcome() -> None:
    assert [_signals.exit_code(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)] == [
        130,
        143,
        129,
    ]
    assert [_signals.outcome(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)] == [
        "interrupted",
        "terminated",
        "hangup",
    ]
    assert _signals.outcome(None) == "interrupted"  # a cancellation without a signal
    assert _signals.describe(signal.SIGTERM) == "terminated (SIGTERM)"
    assert _signals.Interrupted(signal.SIGHUP).exit_code == 129


def test_a_run_without_a_signal_ends_as_interrupted_130() -> None:
    assert _signals.received() is None
    assert _signals.stop_outcome() == ("interrupted", 130)


@pytest.fixture
def handlers() -> Iterator[None]:
    """Install the CLI's handlers for one test, then put pytest's back."""
    saved = {s: signal.getsignal(s) for s in _signals.HANDLED}
    _signals.install()
    try:
        yield
    finally:
        for signum, handler in saved.items():
            signal.signal(signum, handler)
        _signals._installed = False
        _signals._reset_for_tests()


def test_a_signal_in_plain_code_raises_interrupted(handlers: None) -> None:
    with pytest.raises(_signals.Interrupted) as caught:
        signal.raise_signal(signal.SIGHUP)
        for _ in range(1000):  # the handler runs between bytecodes
            pass
    assert caught.value.signum == signal.SIGHUP
    assert _signals.stop_outcome() == ("hangup", 129)
    signal.raise_signal(signal.SIGINT)  # a second one while the first unwinds: no raise
    assert _signals.received() == signal.SIGHUP


def test_a_synchronous_cleanup_is_not_cut_short(handlers: None) -> None:
    steps = []
    with pytest.raises(_signals.Interrupted) as caught:
        with _signals.deferred():
            signal.raise_signal(signal.SIGTERM)
            for _ in range(1000):
                pass
            steps.append("cleanup done")
    assert steps == ["cleanup done"]
    assert caught.value.signum == signal.SIGTERM


def test_a_guarded_run_cancels_its_work_and_cleanup_finishes_whatever_comes(
    handlers: None,
) -> None:
    steps: list[str] = []

    async def work() -> None:
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            await trio.sleep(30)
            steps.append("not cancelled")
        finally:
            with trio.CancelScope(shield=True):
                steps.append("cleanup starts")
                os.kill(os.getpid(), signal.SIGINT)  # a second signal during the cleanup
                os.kill(os.getpid(), signal.SIGINT)  # and a third
                while not _signals.hurrying():
                    await trio.sleep(0.01)
                await trio.sleep(0.05)
                steps.append("cleanup done")

    with pytest.raises(_signals.Interrupted) as caught:
        _signals.run(work)
    assert caught.value.signum == signal.SIGTERM  # the first signal decides
    assert caught.value.exit_code == 143
    assert steps == ["cleanup starts", "cleanup done"]


def test_a_guarded_run_returns_its_result_without_a_signal(handlers: None) -> None:
    async def work(x: int) -> int:
        await trio.lowlevel.checkpoint()
        return x + 1

    assert _signals.run(work, 41) == 42


def test_an_error_is_an_error_when_no_signal_came(handlers: None) -> None:
    async def work() -> None:
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        _signals.run(work)


def test_without_the_cli_handlers_run_is_plain_trio_run() -> None:
    async def work() -> str:
        return "done"

    assert not _signals.installed()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    assert _signals.run(work) == "done"


# -- the chaos program --------------------------------------------------------------------


def _python(code: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CHAOS_REGISTRY_DIR": str(tmp_path / "registry")}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )


def test_ctrl_c_during_the_clis_imports_is_one_line(tmp_path: Path) -> None:
    done = _python(
        """
        import builtins, os, signal, sys
        real_import = builtins.__import__

        def importing(name, *args, **kwargs):
            if name == "typer":  # Ctrl-C lands while the CLI imports its dependencies
                os.kill(os.getpid(), signal.SIGINT)
            return real_import(name, *args, **kwargs)

        builtins.__import__ = importing
        sys.argv = ["chaos", "--version"]
        from chaos.__main__ import main
        main()
        """,
        tmp_path,
    )
    assert done.returncode == 130, done.stderr
    assert done.stderr.splitlines() == ["chaos: error: interrupted before the command started"]


def test_the_watchdog_ends_a_cleanup_that_hangs_and_still_removes_the_run(
    tmp_path: Path,
) -> None:
    done = _python(
        f"""
        import os, signal, sys, trio
        from chaos import _signals
        from chaos.services import open_process_service, open_run_dir

        _signals.install()
        _signals.CLEANUP_LIMIT_S = 0.5

        async def work():
            with open_run_dir(parent={str(tmp_path)!r}) as run:
                async with open_process_service("svc", ["sleep", "300"]) as svc:
                    print(svc.pid, run, flush=True)
                    try:
                        os.kill(os.getpid(), signal.SIGTERM)
                        await trio.sleep(30)
                    finally:
                        with trio.CancelScope(shield=True):
                            await trio.sleep(300)  # a cleanup that never ends

        _signals.run(work)
        """,
        tmp_path,
    )
    assert done.returncode == 143, done.stderr
    assert done.stderr.splitlines() == [
        "chaos: error: terminated (SIGTERM): the cleanup took too long; stopped what was left"
    ]
    pid, run = done.stdout.split()
    assert not Path(run).exists()
    assert not Path(f"/proc/{pid}").exists() or _state(int(pid)) == "Z"


def _state(pid: int) -> str:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat[stat.rfind(")") + 2]
