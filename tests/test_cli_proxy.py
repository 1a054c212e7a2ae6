"""``chaos proxy serve`` as a real subprocess, and the CLI's error-to-exit-code mapping."""

from __future__ import annotations

import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import metadata
from pathlib import Path

import pytest
import typer

from chaos import cli
from ground.errors import ChaosError, ConfigError, TraceFormatError


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _chaos(*args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "chaos", *args], capture_output=True, text=True, timeout=timeout
    )


@contextmanager
def _serving(*args: str) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """``chaos proxy serve ARGS`` running; yields the process and its banner line."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "chaos", "proxy", "serve", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        with selectors.DefaultSelector() as selector:
            selector.register(proc.stdout, selectors.EVENT_READ)
            assert selector.select(timeout=30), "no banner within 30 s"
        yield proc, proc.stdout.readline().rstrip("\n")
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=30)


def _version(port: int) -> dict[str, str]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/version", timeout=10) as reply:
        assert reply.headers["X-Toxiproxy-Request-Id"]
        payload: dict[str, str] = json.loads(reply.read())
        return payload


@pytest.mark.parametrize(
    ("signum", "word"),
    [(signal.SIGINT, "interrupted"), (signal.SIGTERM, "terminated (SIGTERM)"),
     (signal.SIGHUP, "hung up (SIGHUP)")],
)  # fmt: skip
def test_serve_answers_and_stops_on_a_signal_as_every_command(
    signum: signal.Signals, word: str
) -> None:
    port = _free_port()
    with _serving("--port", str(port), "--seed", "7") as (proc, banner):
        assert banner == f"chaos proxy: Toxiproxy API on http://127.0.0.1:{port} (seed 7)"
        assert _version(port)["version"].startswith("2.12.0")
        proc.send_signal(signum)
        _, stderr = proc.communicate(timeout=30)
        assert proc.returncode == 128 + signum
        assert stderr == f"chaos: error: {word}: stopped; nothing half-written was left\n"
    with socket.socket() as again:  # nothing listens on its port any more
        again.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # (TIME_WAIT is fine)
        again.bind(("127.0.0.1", port))
        again.listen(1)


def test_serve_port_in_use_is_exit_2_with_one_line() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        busy = taken.getsockname()[1]
        result = _chaos("proxy", "serve", "--port", str(busy))
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr == (
        f"chaos: error: listen tcp 127.0.0.1:{busy}: bind: address already in use\n"
    )


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--port", "abc"], "--port"),
        (["--port", "70000"], "--port"),
        (["--seed", "x"], "--seed"),
        (["--dial-timeout", "0"], "dial timeout must be > 0"),
        (["--dial-timeout", "inf"], "dial timeout must be a finite number > 0, got inf"),
        (["--seed", "-1"], "seed must be between 0 and 2**63-1, got -1"),
        (["--seed", str(2**63)], f"seed must be between 0 and 2**63-1, got {2**63}"),
        (["--host", "example.com"], "host must be an IP address or localhost"),
        (["--bogus"], "--bogus"),
    ],
)
def test_bad_flags_are_exit_2_with_one_line(args: list[str], needle: str) -> None:
    result = _chaos("proxy", "serve", *args)
    assert result.returncode == 2
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("chaos: error: ")
    assert needle in lines[0]


def test_version_flag() -> None:
    result = _chaos("--version")
    assert result.returncode == 0
    assert result.stdout == f"chaos-harness {metadata.version('chaos-harness')}\n"


@pytest.fixture
def extra_commands(monkeypatch: pytest.MonkeyPatch) -> typer.Typer:
    """The real app with a few test commands that raise, registered for this test only."""
    monkeypatch.setattr(cli.app, "registered_commands", list(cli.app.registered_commands))

    @cli.app.command("raise-config")
    def _config() -> None:
        raise ConfigError("latency must be >= 0, got -5")

    @cli.app.command("raise-trace")
    def _trace() -> None:
        raise TraceFormatError("bad magic")

    @cli.app.command("raise-chaos")
    def _chaos_error() -> None:
        raise ChaosError("harness broke")

    @cli.app.command("raise-group")
    def _group() -> None:
        raise ExceptionGroup("nursery", [ExceptionGroup("inner", [ConfigError("bad seed")])])

    @cli.app.command("exit-1")
    def _exit() -> None:
        raise typer.Exit(1)

    return cli.app


@pytest.mark.parametrize(
    ("command", "code", "message"),
    [
        ("raise-config", 2, "latency must be >= 0, got -5"),
        ("raise-trace", 2, "bad magic"),
        ("raise-chaos", 3, "harness broke"),
        ("raise-group", 2, "bad seed"),
    ],
)
def test_errors_map_to_exit_codes(
    extra_commands: typer.Typer,
    capsys: pytest.CaptureFixture[str],
    command: str,
    code: int,
    message: str,
) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main([command])
    assert exited.value.code == code
    assert capsys.readouterr().err == f"chaos: error: {message}\n"


def test_exit_codes_from_commands_pass_through(extra_commands: typer.Typer) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(["exit-1"])
    assert exited.value.code == 1


def test_a_group_fails_like_its_first_chaos_error(
    extra_commands: typer.Typer, capsys: pytest.CaptureFixture[str]
) -> None:
    @cli.app.command("raise-mixed")
    def _mixed() -> None:  # what failed after the cause, in sibling tasks, follows from it
        raise ExceptionGroup("nursery", [KeyError("y"), ConfigError("x")])

    with pytest.raises(SystemExit) as exited:
        cli.main(["raise-mixed"])
    assert exited.value.code == 2
    assert capsys.readouterr().err == "chaos: error: x\n"


def test_a_bug_propagates_under_a_test(extra_commands: typer.Typer) -> None:
    @cli.app.command("raise-bug")
    def _bug() -> None:
        raise ExceptionGroup("nursery", [KeyError("y")])

    with pytest.raises(ExceptionGroup):
        cli.main(["raise-bug"])


def test_a_bug_is_one_line_and_exit_3_from_the_program(tmp_path: Path) -> None:
    """The chaos program never shows a traceback: a bug is one line naming it, exit 3 (its
    traceback only with CHAOS_TRACEBACK=1)."""
    code = (
        "import sys; from chaos import cli\n"
        "@cli.app.command('raise-bug')\n"
        "def _bug() -> None:\n"
        "    raise ExceptionGroup('nursery', [KeyError('y')])\n"
        "sys.argv = ['chaos', 'raise-bug']\n"
        "from chaos.__main__ import main\n"
        "main()\n"
    )
    for debug, lines in (("", 1), ("1", None)):
        env = {**os.environ, "CHAOS_TRACEBACK": debug}
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              timeout=60, env=env, cwd=tmp_path, check=False)  # fmt: skip
        assert done.returncode == 3
        first = done.stderr.splitlines()[0]
        assert first.startswith("chaos: error: internal error: ExceptionGroup: nursery")
        if lines is not None:
            assert len(done.stderr.splitlines()) == lines, done.stderr
            assert "CHAOS_TRACEBACK=1 shows where" in first
        else:
            assert "Traceback" in done.stderr
            assert "KeyError" in done.stderr
