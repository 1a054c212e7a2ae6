"""Kill `chaos run payments` at random moments; nothing of any run may outlive the next command.

24 real runs (about two minutes): SIGTERM, SIGHUP and two SIGINTs 0.02-0.6 s apart must end
in a cleanup and exit 128+N with one line; SIGKILL (the OOM killer's signal) must take every
child down at once and leave the rest (run dir, shm files, registration) to the next harness
command, here `chaos gc`. Moments and gaps come from a named stream of the test's seed.
Then one sweep is SIGKILLed: its workers get SIGTERM and clean up after themselves.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pytest

from chaos.services import default_run_parent, registry
from ground.rng import derive_rng
from replay.trace import read_trace

pytestmark = pytest.mark.slow

SEED = 8
RUNS_PER_KIND = 6
KINDS = ("term", "hup", "int2", "kill")
SIGNALS = {"term": signal.SIGTERM, "hup": signal.SIGHUP, "int2": signal.SIGINT}
OUTCOMES = {"term": "terminated", "hup": "hangup", "int2": "interrupted"}
#: From 0.4 s on the harness's own code runs (Python's start-up before it is not ours).
EARLIEST_S, LATEST_S = 0.4, 4.2


@dataclass
class Place:
    """Where the runs of this test live, and what was seen of them while they ran."""

    root: Path  # CHAOS_RUN_DIR
    reg: Path  # CHAOS_REGISTRY_DIR
    traces: Path
    harnesses: list[int] = field(default_factory=list)
    segments: list[tuple[int, int]] = field(default_factory=list)  # PostgreSQL SysV (key, id)
    ports: set[int] = field(default_factory=set)  # ports the runs listened on

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "CHAOS_RUN_DIR": str(self.root), "CHAOS_REGISTRY_DIR": str(self.reg)}


@pytest.fixture
def place(tmp_path: Path) -> Iterator[Place]:
    with open_place(tmp_path) as here:
        yield here


@contextlib.contextmanager
def open_place(tmp_path: Path) -> Iterator[Place]:
    """A runs' root and a registry of their own (removed after, whatever the runs left)."""
    root = Path(tempfile.mkdtemp(prefix="chaos-kill-runs-", dir=default_run_parent()))
    root.chmod(0o755)  # PostgreSQL runs as its own user and must reach its data dir
    reg = Path(tempfile.mkdtemp(prefix="chaos-kill-registry-", dir=default_run_parent()))
    here = Place(root, reg, tmp_path)
    try:
        yield here
    finally:  # a failing test must not leak either
        for pid in ours(here):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        gc = [sys.executable, "-m", "chaos", "gc"]
        subprocess.run(gc, env=here.env, capture_output=True, check=False)
        for path in (root, reg):
            shutil.rmtree(path, ignore_errors=True)


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return b""


def ours(place: Place, harness: int | None = None) -> list[int]:
    """Live processes of this test's runs (of the run of ``harness`` only, if given): by the
    run marker or the inherited CHAOS_RUN_DIR in their environment, or, for PostgreSQL
    (whose titles overwrite its environment), by a working dir inside the runs' root."""
    tag = f"CHAOS_RUN_DIR={place.root}".encode()
    reg = f"{registry.REGISTRY_MARKER}={place.reg}".encode()
    run = f"{registry.MARKER}={harness}-".encode()
    runs_dir = f"{place.root}/chaos-payments-{'' if harness is None else f'{harness}-'}"
    found = []
    for pid in (int(n) for n in os.listdir("/proc") if n.isdigit()):
        if pid == os.getpid():
            continue
        stat = _read(f"/proc/{pid}/stat")
        if not stat or stat[stat.rfind(b")") + 2 : stat.rfind(b")") + 3] == b"Z":
            continue
        env = _read(f"/proc/{pid}/environ").split(b"\0")
        try:
            cwd = os.readlink(f"/proc/{pid}/cwd")
        except OSError:
            cwd = ""
        if harness is None:
            if tag in env or reg in env or cwd.startswith(str(place.root) + "/"):
                found.append(pid)
        elif any(e.startswith(run) for e in env) or cwd.startswith(runs_dir):
            found.append(pid)
    return found


def shm_files(place: Place, harness: int | None = None) -> list[str]:
    """libfaketime's files of this test's runs (a run's pair is named chaos-<run id>, and a
    run id starts with its harness's pid)."""
    harnesses = place.harnesses if harness is None else [harness]
    keys = tuple(f"chaos-{h}-" for h in harnesses)
    return sorted(
        n
        for n in os.listdir("/dev/shm")
        if n.startswith(("faketime_", "sem.faketime_")) and any(k in n for k in keys)
    )


def leftovers(place: Place, harness: int | None = None) -> dict[str, list[str]]:
    """Everything of this test's runs (of ``harness``'s run only, if given) still there."""
    prefix = "" if harness is None else f"{harness}-"
    return {
        "processes": [str(p) for p in ours(place, harness)],
        "run dirs": sorted(p.name for p in place.root.iterdir() if prefix in p.name),
        "registrations": sorted(
            p.name for p in place.reg.iterdir() if p.name != ".gc.lock" and prefix in p.name
        ),
        "shm files": shm_files(place, harness),
    }


def sysv_segment(place: Place, harness: int) -> tuple[int, int] | None:
    """(key, shmid) of the run's PostgreSQL, from its postmaster.pid, while it runs."""
    for pidfile in place.root.glob(f"chaos-payments-{harness}-*/postgres-*/data/postmaster.pid"):
        try:
            key, shmid = (int(x) for x in pidfile.read_text().splitlines()[6].split())
            return key, shmid
        except (OSError, IndexError, ValueError):
            continue
    return None


def sysv_present(segment: tuple[int, int]) -> bool:
    for row in Path("/proc/sysvipc/shm").read_text().splitlines()[1:]:
        cols = row.split()
        if (int(cols[0]), int(cols[1])) == segment:
            return True
    return False


def listening_ports(pids: list[int]) -> set[int]:
    ports = set()
    for pid in pids:
        try:
            for conn in psutil.Process(pid).net_connections("tcp"):
                if conn.status == psutil.CONN_LISTEN:
                    ports.add(conn.laddr.port)
        except psutil.Error:
            continue
    return ports


def _running(pid: int) -> bool:
    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False


def tree(pid: int) -> list[int]:
    try:
        return [pid, *(c.pid for c in psutil.Process(pid).children(recursive=True))]
    except psutil.Error:
        return []


@dataclass
class Outcome:
    kind: str
    at: float
    rc: int | None = None
    finished_first: bool = False
    hung: bool = False
    stderr: list[str] = field(default_factory=list)
    left: dict[str, list[str]] = field(default_factory=dict)


def kill_one(place: Place, number: int, kind: str, at: float, gap: float) -> tuple[Outcome, int]:
    trace = place.traces / f"run{number}.trace"
    argv = [sys.executable, "-m", "chaos", "run", "payments", "--seed", str(number)]
    child = subprocess.Popen(
        [*argv, "--out", str(trace)],
        env=place.env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,  # our own signals only
    )
    place.harnesses.append(child.pid)
    outcome = Outcome(kind, at)
    time.sleep(at)
    ports = listening_ports(tree(child.pid))
    segment = sysv_segment(place, child.pid)
    if child.poll() is not None:
        outcome.finished_first = True
    elif kind == "kill":
        child.send_signal(signal.SIGKILL)
    else:
        child.send_signal(SIGNALS[kind])
        if kind == "int2":
            time.sleep(gap)
            if child.poll() is None:
                child.send_signal(signal.SIGINT)
    try:
        _, err = child.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        outcome.hung = True
        child.kill()
        _, err = child.communicate()
    outcome.rc = child.returncode
    outcome.stderr = err.decode(errors="replace").strip().splitlines()
    if kind == "kill":  # children die with their harness: give PostgreSQL's backends a moment
        deadline = time.monotonic() + 3
        while ours(place, child.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
    outcome.left = leftovers(place, child.pid)
    if kind != "kill" and not outcome.finished_first and trace.exists():
        end = read_trace(trace).end
        assert end is not None, f"run {number}: an interrupted run's trace has no end frame"
        if end["outcome"] in ("held", "violated"):  # the signal came as the run ended
            outcome.finished_first = True
        else:
            assert (end["outcome"], end["exit_code"]) == (OUTCOMES[kind], 128 + SIGNALS[kind])
    if segment is not None:
        place.segments.append(segment)
    place.ports |= ports
    return outcome, child.pid


def test_killed_runs_leave_nothing_after_the_next_command(place: Place) -> None:
    rng = derive_rng(SEED, "kill-test")
    plan = [kind for kind in KINDS for _ in range(RUNS_PER_KIND)]
    rng.shuffle(plan)
    plan.remove("kill")
    plan.append("kill")  # the last one is left for `chaos gc` (earlier ones: the next run)
    outcomes = []
    for number, kind in enumerate(plan):
        at, gap = rng.uniform(EARLIEST_S, LATEST_S), rng.uniform(0.02, 0.6)
        if number == len(plan) - 1:
            at = rng.uniform(2.0, LATEST_S)  # well inside the run: gc has something to reap
        outcome, _ = kill_one(place, number, kind, at, gap)
        outcomes.append(outcome)
        print(
            f"run {number:2d} {kind:4s} at {at:.2f}s -> exit {outcome.rc}"
            f"{' (finished first)' if outcome.finished_first else ''};"
            f" left: {sum(len(v) for v in outcome.left.values())} {outcome.left}"
        )
    hung = [o for o in outcomes if o.hung]
    assert hung == [], "runs hung"
    for o in outcomes:
        if o.finished_first:  # exit 0, or 128+N when the signal came before the exit
            assert o.rc in (0, -signal.SIGKILL, 128 + SIGNALS.get(o.kind, 0)), o
            assert o.left == {k: [] for k in o.left} or o.kind == "kill", o
            continue
        if o.kind == "kill":
            assert o.rc == -signal.SIGKILL
            assert o.left["processes"] == [], f"a child outlived its SIGKILLed harness: {o}"
            continue
        assert o.rc == 128 + SIGNALS[o.kind], o
        assert len(o.stderr) == 1, o.stderr
        assert o.stderr[0].startswith("chaos: error: "), o.stderr
        assert o.left == {k: [] for k in o.left}, f"a {o.kind} left something: {o}"
    signalled = [o for o in outcomes if not o.finished_first]
    assert len(signalled) >= 20, "too few runs were still running when their signal came"

    done = subprocess.run(
        [sys.executable, "-m", "chaos", "gc", "--json"],
        env=place.env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    killed_runs = [o for o in signalled if o.kind == "kill"]
    # the SIGKILLed runs' dirs were reaped by the next run that started, or now by gc
    print(f"chaos gc: reaped {len(report['reaped'])} run(s): {report}")
    assert report["errors"] == []
    if outcomes[-1].left["registrations"]:  # the last SIGKILLed run, reaped by gc
        assert [r["dirs"] for r in report["reaped"]] == [
            [str(place.root / d) for d in outcomes[-1].left["run dirs"]]
        ]
    everything = leftovers(place)
    assert everything == {k: [] for k in everything}, everything
    assert [s for s in place.segments if sysv_present(s)] == []
    survivors = ours(place)
    listening = {
        c.laddr.port
        for c in psutil.net_connections("tcp")
        if c.status == psutil.CONN_LISTEN and c.pid in survivors
    }
    assert listening & place.ports == set()
    assert killed_runs, "the plan has SIGKILLs"


def test_a_killed_sweep_takes_its_workers_down_cleanly(place: Place) -> None:
    sweep = subprocess.Popen(
        [sys.executable, "-m", "chaos", "sweep", "payments", "--seeds", "0-1", "--jobs", "2",
         "--out-dir", str(place.traces / "sweep")],
        env=place.env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )  # fmt: skip
    deadline = time.monotonic() + 30
    while len(list(place.reg.glob("*.run"))) < 2:  # both workers are in their runs
        assert time.monotonic() < deadline, "the sweep's workers did not start their runs"
        time.sleep(0.1)
    time.sleep(1.0)
    workers = [c.pid for c in psutil.Process(sweep.pid).children()]
    assert len(workers) == 2
    sweep.send_signal(signal.SIGKILL)
    sweep.wait()
    deadline = time.monotonic() + 60
    while any(_running(w) for w in workers):
        assert time.monotonic() < deadline, "a worker outlived its sweep"
        time.sleep(0.1)
    # each worker got SIGTERM and cleaned up after itself: nothing for gc to do
    assert leftovers(place) == {k: [] for k in leftovers(place)}
