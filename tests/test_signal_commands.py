"""Every command stops on SIGINT, SIGTERM and SIGHUP: exit 130/143/129 within seconds, its
line last on stderr, and nothing of it left: no process (sandboxed candidates, warm workers,
services), run dir, registration, /dev/shm file, mount, cgroup or listening port.

Each test starts a real command beside busy loops (``chaos.stress``: one per CPU), waits
until it is in the middle of its work (its runs registered, its trace open, its folder
begun), sends the signal and checks what is left. Quick commands that finish before the
signal lands are tried again (they never exit otherwise than 0 or 128+N).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pytest
import trio
from typer.main import get_command

from chaos import cli
from chaos.cli._new import render
from chaos.sandbox._uids import SLOTS, UID_BASE
from chaos.stress import cpu_count, open_stress
from replay.trace import TraceWriter, build_header
from tests.test_kill import Place, leftovers, open_place

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
STARTER = ROOT / "scenarios" / "payments" / "starter.py"
WORDS = {
    signal.SIGINT: "interrupted",
    signal.SIGTERM: "terminated (SIGTERM)",
    signal.SIGHUP: "hung up (SIGHUP)",
}
#: What the issue asks: stopped within this many seconds of the signal, on this 2-core
#: machine with busy loops on every core.
STOP_WITHIN_S = 5.0


@pytest.fixture
def place(tmp_path: Path) -> Iterator[Place]:
    with open_place(tmp_path) as here:
        yield here


@dataclass
class Tree:
    """What a command had running when the signal came."""

    processes: dict[int, float] = field(default_factory=dict)  # pid -> create time
    cgroups: set[Path] = field(default_factory=set)  # the sandbox's chaos-* cgroups
    ports: set[int] = field(default_factory=set)  # ports its processes listened on
    sandboxed: set[int] = field(default_factory=set)  # its processes of a sandbox uid


def snapshot(pid: int) -> Tree:
    tree = Tree()
    try:
        family = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    except psutil.Error:
        return tree
    for proc in family:
        with contextlib.suppress(psutil.Error, OSError):
            tree.processes[proc.pid] = proc.create_time()
            if _sandboxed(proc.pid):
                tree.sandboxed.add(proc.pid)
            for line in Path(f"/proc/{proc.pid}/cgroup").read_text().splitlines():
                path = line.split(":", 2)[2]
                if Path(path).name.startswith("chaos-"):
                    tree.cgroups.add(Path("/sys/fs/cgroup", path.lstrip("/")))
            for conn in proc.net_connections("tcp"):
                if conn.status == psutil.CONN_LISTEN:
                    tree.ports.add(conn.laddr.port)
    return tree


def _alive(pid: int, created: float) -> bool:
    try:
        proc = psutil.Process(pid)
        return proc.create_time() == created and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


@dataclass
class Stopped:
    code: int
    stderr: list[str]
    took_s: float
    tree: Tree
    stdout: str = ""


def stop_midway(
    place: Place,
    argv: list[str],
    ready: Callable[[subprocess.Popen[bytes]], bool],
    signum: int,
    cwd: Path,
    tries: int = 1,
) -> Stopped | None:
    """Run ``chaos ARGV``, send ``signum`` once ``ready(process)`` says it is mid-work, and
    wait for it; None if it finished first on every try (a quick command)."""
    for _ in range(tries):
        child = subprocess.Popen(
            [sys.executable, "-m", "chaos", *argv],
            cwd=cwd,
            env={**place.env, "COLUMNS": "200"},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,  # our signal only, not the test's
        )
        place.harnesses.append(child.pid)
        deadline = time.monotonic() + 120
        while child.poll() is None and not ready(child):
            assert time.monotonic() < deadline, f"chaos {argv} never got to its work"
            time.sleep(0.02)
        tree = snapshot(child.pid)
        if child.poll() is not None:  # finished first
            out, err = child.communicate()
            assert child.returncode == 0, err.decode()
            continue
        child.send_signal(signum)
        sent = time.monotonic()
        try:
            out, err = child.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            child.kill()
            out, err = child.communicate()
            pytest.fail(f"chaos {argv} did not stop within 120 s of {signal.Signals(signum).name}")
        took = time.monotonic() - sent
        lines = [ln for ln in err.decode(errors="replace").splitlines() if ln.strip()]
        return Stopped(child.returncode, lines, took, tree, out.decode(errors="replace"))
    return None


def assert_stopped_cleanly(place: Place, stopped: Stopped | None, signum: int) -> None:
    assert stopped is not None, "the command always finished before the signal"
    print(f"stopped in {stopped.took_s:.2f} s: exit {stopped.code}; {stopped.stderr[-1:]}")
    assert stopped.code == 128 + signum, stopped.stderr
    assert not any("Traceback" in line for line in stopped.stderr), stopped.stderr
    assert stopped.stderr[-1].startswith(f"chaos: error: {WORDS[signal.Signals(signum)]}: ")
    assert sum(line.startswith("chaos: error: ") for line in stopped.stderr) == 1
    assert stopped.took_s < STOP_WITHIN_S, f"stopped after {stopped.took_s:.1f} s"
    deadline = time.monotonic() + 5  # children die with their harness (PostgreSQL's backends)
    left = [p for p, t in stopped.tree.processes.items() if _alive(p, t)]
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = [p for p, t in stopped.tree.processes.items() if _alive(p, t)]
    assert left == [], [psutil.Process(p).cmdline() for p in left if psutil.pid_exists(p)]
    everything = leftovers(place)
    everything["shm files"] = sorted(
        name
        for name in os.listdir("/dev/shm")
        if any(f"chaos-{pid}-" in name for pid in stopped.tree.processes)
    )
    assert everything == {k: [] for k in everything}, everything
    assert [c for c in stopped.tree.cgroups if c.exists()] == []
    mounts = Path("/proc/self/mountinfo").read_text()
    assert str(place.root) not in mounts
    listening = {
        c.laddr.port
        for c in psutil.net_connections("tcp")
        if c.status == psutil.CONN_LISTEN and c.pid in stopped.tree.processes
    }
    assert listening == set()


def registered(place: Place, at_least: int = 1) -> Callable[[subprocess.Popen[bytes]], bool]:
    """Ready: the command's runs (its own or its workers') are registered and under way."""
    seen: list[float] = []

    def ready(_: subprocess.Popen[bytes]) -> bool:
        if len(list(place.reg.glob("*.run"))) < at_least:
            return False
        seen.append(time.monotonic())
        return time.monotonic() - seen[0] > 1.0  # a moment into them: services starting

    return ready


def has_open(path: Path) -> Callable[[subprocess.Popen[bytes]], bool]:
    """Ready: the command has ``path`` open (it is reading it)."""

    def ready(child: subprocess.Popen[bytes]) -> bool:
        try:
            fds = os.listdir(f"/proc/{child.pid}/fd")
        except OSError:
            return False
        for fd in fds:
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/{child.pid}/fd/{fd}") == str(path):
                    return True
        return False

    return ready


def exists(path: Path) -> Callable[[subprocess.Popen[bytes]], bool]:
    return lambda _: path.exists()


async def under_load(fn: Callable[[], None]) -> None:
    async with open_stress(cpu_count()):
        await trio.to_thread.run_sync(fn)


def big_trace(path: Path, events: int = 300_000) -> Path:
    """A trace long enough that reading and rendering it takes seconds."""
    with TraceWriter(path, build_header("payments", "sha256:0", "golden", 1)) as writer:
        writer.write_schedule({"seed": 1, "space_hash": "sha256:0", "events": []})
        for i in range(events):
            kind = "invoke" if i % 2 else "ok"
            op = {"process": i % 7, "type": kind, "f": "charge", "value": i, "time_ns": i}
            writer.write_event(op)
        writer.write_end("held", 0, 1.0)
    return path


def run_trace(place: Place, seed: int) -> Path:
    """A real run's trace (for replay)."""
    out = place.traces / f"seed{seed}.trace"
    done = subprocess.run(
        [sys.executable, "-m", "chaos", "run", "payments", "--seed", str(seed), "--out", str(out)],
        env=place.env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return out


# -- the commands that start runs ------------------------------------------------------------


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
async def test_run(place: Place, signum: int) -> None:
    args = ["run", "payments", "--seed", "3", "--out", str(place.traces / "r.trace")]

    def body() -> None:
        stopped = stop_midway(place, args, registered(place), signum, place.traces)
        assert_stopped_cleanly(place, stopped, signum)

    await under_load(body)


async def test_replay(place: Place) -> None:
    trace = run_trace(place, 2)

    def body() -> None:
        args = ["replay", str(trace), "--times", "3"]
        stopped = stop_midway(place, args, registered(place), signal.SIGINT, place.traces)
        assert_stopped_cleanly(place, stopped, signal.SIGINT)

    await under_load(body)


async def test_search_does_not_wait_for_the_watchdog(place: Place) -> None:
    """SIGTERM of `chaos search --jobs 2` exited only after the 30 s watchdog: a warm
    worker's run, stopped early, restarted its crashed consumer and waited for it."""
    args = ["search", "payments", "--variant", "ack-before-commit", "--jobs", "2",
            "--out", str(place.traces / "s.trace")]  # fmt: skip

    def body() -> None:
        stopped = stop_midway(place, args, registered(place, 2), signal.SIGTERM, place.traces)
        assert_stopped_cleanly(place, stopped, signal.SIGTERM)

    await under_load(body)


@pytest.mark.parametrize("jobs", ["1", "2"])  # in this process; side by side on warm workers
async def test_validate(place: Place, jobs: str) -> None:
    args = ["validate", "payments", "--seeds", "2", "--replays", "2", "--out-dir",
            str(place.traces / "v"), "--jobs", jobs]  # fmt: skip

    def body() -> None:
        stopped = stop_midway(place, args, registered(place), signal.SIGHUP, place.traces)
        assert_stopped_cleanly(place, stopped, signal.SIGHUP)

    await under_load(body)


async def test_sweep(place: Place) -> None:
    args = ["sweep", "payments", "--seeds", "0-5", "--jobs", "2", "--out-dir",
            str(place.traces / "sw")]  # fmt: skip

    def body() -> None:
        stopped = stop_midway(place, args, registered(place, 2), signal.SIGINT, place.traces)
        assert_stopped_cleanly(place, stopped, signal.SIGINT)

    await under_load(body)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
async def test_grade(place: Place, signum: int) -> None:
    """`chaos grade` called trio.run itself: SIGTERM at 40 s or Ctrl-C at 15 s, and it
    went on grading (SIGKILLed 60-90 s later)."""
    args = ["grade", "payments", "--impl", str(STARTER), "--seeds", "1,2", "--jobs", "2",
            "--out-dir", str(place.traces / "g")]  # fmt: skip

    def body() -> None:
        stopped = stop_midway(place, args, candidates_running(place), signum, place.traces)
        assert_stopped_cleanly(place, stopped, signum)
        assert stopped is not None
        if os.geteuid() == 0:  # the candidates ran as sandbox uids: none of them is left
            assert stopped.tree.sandboxed

    await under_load(body)


async def test_grade_on_ray_does_not_leave_what_ray_killed(place: Place) -> None:
    """With --ray, ray.init replaced the SIGTERM handler (exit 15, nothing cleaned up), and
    Ray SIGKILLs its workers' runs at shutdown: their dirs and the candidates' scratch
    mounts were left to a later command."""
    pytest.importorskip("ray")
    args = ["grade", "payments", "--impl", str(STARTER), "--seeds", "1,2", "--jobs", "2",
            "--ray", "local", "--out-dir", str(place.traces / "g")]  # fmt: skip

    def body() -> None:
        stopped = stop_midway(place, args, candidates_running(place), signal.SIGTERM,
                              place.traces)  # fmt: skip
        assert_stopped_cleanly(place, stopped, signal.SIGTERM)

    await under_load(body)


@pytest.mark.parametrize("after_s", [0.0, 0.3, 0.7, 1.1, 1.5])
async def test_grade_on_ray_stopped_while_its_driver_connects(place: Place, after_s: float) -> None:
    """Stopped while ray.init was connecting (Ray's servers up, no run yet), the process
    printed its line, then Ray's C++ threads aborted it as Python tore down: exit 134
    (SIGABRT), not 143, about one time in three."""
    pytest.importorskip("ray")
    args = ["grade", "payments", "--impl", str(STARTER), "--seeds", "1,2", "--jobs", "2",
            "--ray", "local", "--out-dir", str(place.traces / "g")]  # fmt: skip
    seen: list[float] = []

    def ray_starting(child: subprocess.Popen[bytes]) -> bool:
        if not seen:
            with contextlib.suppress(psutil.Error):
                for proc in psutil.Process(child.pid).children(recursive=True):
                    if "gcs_server" in " ".join(proc.cmdline()):
                        seen.append(time.monotonic())
                        break
            return False
        return time.monotonic() - seen[0] >= after_s

    def body() -> None:
        stopped = stop_midway(place, args, ray_starting, signal.SIGTERM, place.traces)
        assert_stopped_cleanly(place, stopped, signal.SIGTERM)

    await under_load(body)


def _sandboxed(pid: int) -> bool:
    with contextlib.suppress(psutil.Error):
        return UID_BASE <= psutil.Process(pid).uids().real < UID_BASE + SLOTS
    return False


def candidates_running(place: Place) -> Callable[[subprocess.Popen[bytes]], bool]:
    """Ready: both graded runs under way and (as root) a candidate running as its uid."""
    runs = registered(place, 2)

    def ready(child: subprocess.Popen[bytes]) -> bool:
        if not runs(child):
            return False
        if os.geteuid() != 0:
            return True
        with contextlib.suppress(psutil.Error):
            family = psutil.Process(child.pid).children(recursive=True)
            return any(_sandboxed(p.pid) for p in family)
        return False

    return ready


async def test_proxy_serve(place: Place) -> None:
    args = ["proxy", "serve", "--port", "0"]

    def body() -> None:
        def banner(child: subprocess.Popen[bytes]) -> bool:
            with contextlib.suppress(psutil.Error):
                found = psutil.Process(child.pid).net_connections("tcp")
                return any(c.status == psutil.CONN_LISTEN for c in found)
            return False

        stopped = stop_midway(place, args, banner, signal.SIGHUP, place.traces)
        assert_stopped_cleanly(place, stopped, signal.SIGHUP)
        assert stopped is not None
        assert stopped.stdout.startswith("chaos proxy: Toxiproxy API on http://127.0.0.1:")

    await under_load(body)


# -- the commands that read and write files ----------------------------------------------------


async def test_show(place: Place) -> None:
    trace = big_trace(place.traces / "big.trace")

    def body() -> None:
        stopped = stop_midway(place, ["show", str(trace)], has_open(trace), signal.SIGTERM,
                              place.traces, tries=5)  # fmt: skip
        assert_stopped_cleanly(place, stopped, signal.SIGTERM)

    await under_load(body)


async def test_report(place: Place) -> None:
    trace = big_trace(place.traces / "big.trace")
    page = place.traces / "big.html"

    def body() -> None:
        args = ["report", str(trace), "-o", str(page)]
        stopped = stop_midway(place, args, has_open(trace), signal.SIGHUP, place.traces, tries=5)
        assert_stopped_cleanly(place, stopped, signal.SIGHUP)
        assert sorted(p.name for p in place.traces.iterdir()) == ["big.trace"]  # no page

    await under_load(body)


async def test_task(place: Place) -> None:
    def body() -> None:
        for attempt in range(8):
            out = place.traces / f"harbor-{attempt}"
            args = ["task", "payments", "--format", "harbor", "-o", str(out)]
            stopped = stop_midway(place, args, exists(out), signal.SIGINT, place.traces)
            if stopped is not None:
                assert_stopped_cleanly(place, stopped, signal.SIGINT)
                assert not out.exists()  # nothing half-written is left for a candidate
                return
        pytest.fail("chaos task always finished before the signal")

    await under_load(body)


async def test_new(place: Place) -> None:
    """A quick command: the signal lands at delays spread over its life (start-up, imports,
    the writes). Each try either wrote the whole pack (exit 0) or stopped (130, one line)
    leaving nothing of it."""
    whole = sorted(render("outbox"))

    def body() -> None:
        stopped = 0
        for attempt in range(12):
            out = place.traces / f"pack-{attempt}"
            child = subprocess.Popen(
                [sys.executable, "-m", "chaos", "new", "outbox", str(out)], cwd=place.traces,
                env=place.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                start_new_session=True,
            )  # fmt: skip
            place.harnesses.append(child.pid)
            time.sleep(0.1 * attempt)
            child.send_signal(signal.SIGINT)
            _, err = child.communicate(timeout=60)
            lines = [ln for ln in err.decode(errors="replace").splitlines() if ln.strip()]
            if child.returncode == 0:
                assert sorted(p.name for p in out.iterdir()) == whole
                continue
            assert not out.exists()  # no half-written pack
            if child.returncode == -signal.SIGINT:  # before the interpreter ran a line of it
                assert lines == []
                continue
            if lines and lines[0].startswith("Fatal Python error: init_import_site"):
                continue  # in the interpreter's own start-up (site), before chaos's first line
            assert child.returncode == 130, lines
            (line,) = lines
            assert line.startswith("chaos: error: interrupted"), lines
            stopped += 1
        assert stopped, "chaos new always finished before the signal"

    await under_load(body)


STALE_RUNS = """
import os, sys
from pathlib import Path
from chaos.services import open_run_dir

held = []  # (a context manager dropped would clean up: these never are)
for n in range(int(sys.argv[2])):
    held.append(open_run_dir(prefix="chaos-stale-", parent=Path(sys.argv[1])))
    folder = held[-1].__enter__()
    for i in range(200):
        (folder / f"f{i}").write_bytes(b"x" * 64)
os._exit(0)  # as if SIGKILLed: every run registered, none cleaned up
"""


async def test_gc(place: Place) -> None:
    def body() -> None:
        argv = [sys.executable, "-c", STALE_RUNS, str(place.root), "150"]
        made = subprocess.run(argv, env=place.env, capture_output=True, text=True, check=False)
        assert made.returncode == 0, made.stderr
        total = len(list(place.reg.glob("*.run")))

        def reaping(_: subprocess.Popen[bytes]) -> bool:
            return len(list(place.reg.glob("*.run"))) < total

        stopped = stop_midway(place, ["gc"], reaping, signal.SIGTERM, place.traces)
        assert stopped is not None, "gc reaped 150 runs before the signal"
        assert stopped.code == 128 + signal.SIGTERM, stopped.stderr
        assert stopped.stderr[-1].startswith("chaos: error: terminated (SIGTERM): ")
        assert stopped.took_s < STOP_WITHIN_S
        # what it had not reaped yet is whole: the next command reaps it
        again = subprocess.run([sys.executable, "-m", "chaos", "gc"], env=place.env,
                               capture_output=True, text=True, check=False)  # fmt: skip
        assert again.returncode == 0, again.stderr
        assert leftovers(place) == {k: [] for k in leftovers(place)}

    await under_load(body)


def test_every_command_is_tried_here() -> None:
    """A new command gets its signal test here (named test_COMMAND)."""
    commands = set()
    for name, command in getattr(get_command(cli.app), "commands", {}).items():
        subs = getattr(command, "commands", {"": None})  # a group: its commands
        commands |= {f"{name} {sub}".strip() for sub in subs}
    assert "run" in commands
    tests = [name.removeprefix("test_") for name in globals() if name.startswith("test_")]
    tested = {name.split("_does_")[0].replace("_", " ") for name in tests}
    assert commands <= tested, commands - tested
