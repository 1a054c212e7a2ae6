"""A service that fails to start names its cause (issue 22): the failing service's last log
lines, the other services' errors before it, the trace and the ``chaos show`` command. One
case per start-up failure mode, each a tiny folder pack in a tmp dir, run by ``chaos run`` on
real processes (and, for bad credentials, the embedded PostgreSQL)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

FAULTS = """\
[golden]
horizon_s = 2.0
min_events = 1
max_events = 1
links = ["client-app"]

[[golden.templates]]
kind = "partition"
params = { direction = "both" }
triggers = [{ type = "at_time", offset_s = [0.0, 1.0] }]
duration_s = [0.3, 0.5]
"""

SCENARIO = '''\
"""broken: a pack whose services fail to start, one way per test."""

from __future__ import annotations

from typing import Any

from chaos.context import RunContext
from chaos.scenario import RestartPolicy, Scenario


class Broken(Scenario):
    id = "broken"
    description = "services that fail to start"
    variants = {{"golden": "the only variant"}}
    invariants = ()
    restart = RestartPolicy.never()

    async def setup(self, ctx: RunContext) -> None:
{setup}

    async def workload(self, ctx: RunContext) -> None:
        pass

    async def settled(self, ctx: RunContext) -> bool:
        return True

    async def final_state(self, ctx: RunContext) -> dict[str, Any]:
        return {{}}


SCENARIO = Broken()
'''


def _pack(tmp_path: Path, setup: str, programs: dict[str, str]) -> Path:
    pack = tmp_path / "broken"
    pack.mkdir()
    body = textwrap.indent(textwrap.dedent(setup).strip(), " " * 8)
    (pack / "scenario.py").write_text(SCENARIO.format(setup=body), encoding="utf-8")
    (pack / "faults.toml").write_text(FAULTS, encoding="utf-8")
    (pack / "README.md").write_text("# broken\n\nServices that fail to start.\n", "utf-8")
    for name, text in programs.items():
        (pack / name).write_text(textwrap.dedent(text), encoding="utf-8")
    return pack


def _run(tmp_path: Path, pack: Path) -> str:
    """``chaos run`` from another directory: exit 3 and one line, returned."""
    cwd = tmp_path / "elsewhere"
    cwd.mkdir()
    done = subprocess.run(
        [sys.executable, "-m", "chaos", "run", str(pack), "--seed", "1"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
        check=False,
    )
    assert done.returncode == 3, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    line = lines[0]
    assert line.startswith("chaos: error: ")
    trace = "traces/broken-golden-seed1.trace"
    assert f"trace {trace}" in line, line
    assert f"`chaos show {trace}`" in line, line
    assert (cwd / trace).is_file()
    assert ": ;" not in line, line
    assert not line.rstrip().endswith(":"), line
    return line


def test_a_crash_at_import_shows_the_traceback_lines(tmp_path: Path) -> None:
    pack = _pack(
        tmp_path,
        'await ctx.start_service("app", ctx.pack_program("app.py"), ready_line="ready")',
        {"app.py": "print('loading', flush=True)\nimport no_such_module_xyz\nprint('ready')\n"},
    )
    line = _run(tmp_path, pack)
    assert "app exited with code 1 before it was ready" in line
    assert "ModuleNotFoundError: No module named 'no_such_module_xyz'" in line
    assert "app last lines: " in line
    assert "Traceback (most recent call last):" in line
    assert "no other service printed an error before it" in line


def test_a_port_in_use_names_the_address(tmp_path: Path) -> None:
    """Two services of the run bind one port: the second cannot."""
    app = """\
        import os, socket, time
        print("binding", os.environ["PORT"], flush=True)
        s = socket.socket()
        s.bind(("127.0.0.1", int(os.environ["PORT"])))
        s.listen()
        print("listening", flush=True)
        time.sleep(60)
        """
    setup = """\
        from chaos.services import free_port
        port = str(free_port())
        await ctx.start_service("first", ctx.pack_program("app.py"), env={"PORT": port},
                                ready_line="listening")
        await ctx.start_service("app", ctx.pack_program("app.py"), env={"PORT": port},
                                ready_line="listening")
        """
    pack = _pack(tmp_path, setup, {"app.py": app})
    line = _run(tmp_path, pack)
    assert "app exited with code 1 before it was ready: OSError: [Errno 98] Address already" in line
    assert "app last lines: " in line
    assert "binding" in line


def test_a_missing_binary_names_the_path(tmp_path: Path) -> None:
    pack = _pack(
        tmp_path,
        'await ctx.start_service("app", ["/no/such/dir/app-server"], ready_line="ready")',
        {},
    )
    line = _run(tmp_path, pack)
    assert "app could not start:" in line
    assert "No such file or directory" in line
    assert "/no/such/dir/app-server" in line


def test_a_program_that_never_prints_its_ready_line_shows_what_it_printed(
    tmp_path: Path,
) -> None:
    app = """\
        import time
        print("starting", flush=True)
        print("waiting for the config server", flush=True)
        time.sleep(60)
        """
    pack = _pack(
        tmp_path,
        'await ctx.start_service("app", ctx.pack_program("app.py"), ready_line="ready", '
        "ready_timeout_s=2.0)",
        {"app.py": app},
    )
    line = _run(tmp_path, pack)
    assert "app not ready after 2s: waiting for the config server" in line
    assert "app last lines: starting | waiting for the config server" in line


def test_bad_credentials_in_another_service_are_named(tmp_path: Path) -> None:
    """The issue's case: the service that never gets ready is not the one that failed; the
    one whose login PostgreSQL refused printed why, and the message shows it."""
    relay = """\
        import os, sys
        import psycopg
        print("relay connecting", flush=True)
        try:
            psycopg.connect(os.environ["DSN"], connect_timeout=5).close()
        except psycopg.Error as exc:
            print(f"relay: cannot connect: {exc}", file=sys.stderr, flush=True)
            sys.exit(1)
        print("ready", flush=True)
        """
    inventory = """\
        import time
        print("inventory waiting for the relay", flush=True)
        time.sleep(60)
        """
    setup = """\
        pg = await ctx.postgres()
        dsn = f"postgresql://nobody:wrong@{pg.host}:{pg.port}/postgres"
        await ctx.start_service("relay", ctx.pack_program("relay.py"), env={"DSN": dsn},
                                wait=False)
        await ctx.start_service("inventory", ctx.pack_program("inventory.py"),
                                ready_line="ready", ready_timeout_s=4.0)
        """
    pack = _pack(tmp_path, setup, {"relay.py": relay, "inventory.py": inventory})
    line = _run(tmp_path, pack)
    assert "inventory not ready after 4s: inventory waiting for the relay" in line
    assert "relay: relay: cannot connect:" in line, line
    assert "password authentication failed" in line or "does not exist" in line, line
    assert "relay exited with code 1" in line
