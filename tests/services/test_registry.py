"""Run registrations: staleness, and reaping what a dead run left (real processes, real files)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from svc_helpers import assert_reaped, proc_state

from chaos.services import open_process_service, open_run_dir, registry
from chaos.services._spawn import spawn
from chaos.services.registry import Record, collect, parse, process_alive, staleness

BOOT = "boot-a"


def _record(owner: int = 4242, start: int = 1000, boot: str = BOOT) -> Record:
    return Record(Path("/r/x.run"), "4242-1000-1", owner, start, boot)


def _alive_only(pid: int, start: int) -> Callable[[int, int], bool]:
    """A fake process table holding exactly one process: ``pid`` started at ``start``."""

    def alive(p: int, s: int) -> bool:
        return (p, s) == (pid, start)

    return alive


# -- staleness: the pure decision ------------------------------------------------------


def test_a_held_lock_is_live_even_when_the_owner_looks_dead() -> None:
    # the lock is the proof of life: a process that inherited it still runs the run
    assert staleness(_record(), boot=BOOT, alive=lambda p, s: False, lock="held") is None


def test_a_free_lock_of_a_dead_owner_is_stale() -> None:
    reason = staleness(_record(), boot=BOOT, alive=lambda p, s: False, lock="free")
    assert reason == "its harness (pid 4242) is gone"


def test_a_reused_pid_is_not_the_owner() -> None:
    # pid 4242 runs again, but started at another time: a different process
    alive = _alive_only(4242, 2000)
    reason = staleness(_record(start=1000), boot=BOOT, alive=alive, lock="free")
    assert reason == "its harness (pid 4242) is gone"


def test_a_live_owner_that_let_go_is_stale() -> None:
    alive = _alive_only(4242, 1000)
    reason = staleness(_record(), boot=BOOT, alive=alive, lock="free")
    assert reason is not None
    assert "let it go" in reason


def test_another_boot_is_stale_whatever_the_pids_say() -> None:
    alive = _alive_only(4242, 1000)
    reason = staleness(_record(boot="boot-b"), boot=BOOT, alive=alive, lock="free")
    assert reason == "the machine has rebooted since"


def test_without_flock_the_owner_pid_and_start_time_decide() -> None:
    live = _alive_only(4242, 1000)
    reused = _alive_only(4242, 999)
    assert staleness(_record(), boot=BOOT, alive=live, lock="unsupported") is None
    assert staleness(_record(), boot=BOOT, alive=reused, lock="unsupported") is not None


def test_parse_ignores_a_cut_off_last_line_and_rejects_a_broken_header() -> None:
    head = {"run": "1-2-3", "owner": 1, "start": 2, "boot": BOOT, "argv": ["chaos", "run"]}
    text = "\n".join(
        [
            json.dumps(head),
            json.dumps({"dir": "/dev/shm/chaos-x"}),
            json.dumps({"process": 77, "start": 5, "name": "nats"}),
            '{"file": "/dev/shm/faketime_',  # the owner died mid-write
        ]
    )
    record = parse(Path("/r/1-2-3.run"), text)
    assert record is not None
    assert record.dirs == [Path("/dev/shm/chaos-x")]
    assert record.processes == {77: (5, "nats")}
    assert record.files == []
    assert record.command == "chaos run"
    assert parse(Path("/r/x.run"), '{"run": "1-2-3", "own') is None


def test_process_alive_checks_the_start_time() -> None:
    me = registry.start_ticks(os.getpid())
    assert me is not None
    assert process_alive(os.getpid(), me)
    assert not process_alive(os.getpid(), me + 1)
    assert not process_alive(_dead_pid(), 0)


# -- reaping real leftovers ------------------------------------------------------------


def _dead_pid() -> int:
    """The pid (and so a start time) of a process that has exited and been reaped."""
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


@pytest.fixture
def reg_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    path = tmp_path / "registry"
    path.mkdir(mode=0o700)
    monkeypatch.setenv("CHAOS_REGISTRY_DIR", str(path))
    yield path


def _fake_dead_run(reg_dir: Path, run_id: str, lines: list[dict[str, object]]) -> Path:
    """A registration as a SIGKILLed harness leaves it: unlocked, its owner gone."""
    owner = _dead_pid()
    head = {"run": run_id, "owner": owner, "start": 1, "boot": registry.boot_id(),
            "argv": ["chaos", "run", "payments"], "created": time.time()}  # fmt: skip
    path = reg_dir / f"{run_id}.run"
    path.write_text("".join(json.dumps(x) + "\n" for x in [head, *lines]))
    return path


def _assert_killed(proc: subprocess.Popen[bytes]) -> None:
    """``proc`` (a ``sleep 300``) is dead: killed, and reaped by the collection or by us."""
    assert proc.wait(timeout=5) in (0, -signal.SIGKILL)  # 0: the collection reaped it
    assert not Path(f"/proc/{proc.pid}").exists()


def _sleeper(env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    return subprocess.Popen(["sleep", "300"], env={**os.environ, **(env or {})})


@pytest.mark.parametrize("made_containers", [False, True])
def test_only_a_run_that_wrote_down_containers_asks_docker_for_them(
    made_containers: bool, reg_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from chaos.services import _container_reap

    asked: list[str] = []
    monkeypatch.setattr(_container_reap, "reap_run_containers", lambda run: asked.append(run) or [])
    run_id = "999999-1-2"
    path = _fake_dead_run(reg_dir, run_id, [{"containers": True}] if made_containers else [])
    record = parse(path, path.read_text())
    assert record is not None
    assert record.containers is made_containers
    assert [r.run_id for r in collect(reg_dir).reaped] == [run_id]
    assert asked == ([run_id] if made_containers else [])


def test_a_registration_writes_down_containers_once(reg_dir: Path) -> None:
    registration = registry.open_registration(reg_dir)
    try:
        assert not registration.record().containers
        registration.add_containers()
        registration.add_containers()
        lines = registration.path.read_text().splitlines()
        assert lines.count(json.dumps({"containers": True})) == 1
        assert registration.record().containers
    finally:
        registration.close()


def test_collect_reaps_exactly_what_the_dead_run_left(reg_dir: Path, tmp_path: Path) -> None:
    run_id = "999999-1-1"
    run_dir = tmp_path / "chaos-run-x"
    (run_dir / "sub").mkdir(parents=True)
    (run_dir / "sub" / "state").write_text("x")
    shm = Path("/dev/shm") / f"faketime_shm_chaos-{run_id}-test{os.getpid()}"
    shm.write_bytes(b"\0" * 64)
    marked = _sleeper({registry.MARKER: run_id, registry.REGISTRY_MARKER: str(reg_dir)})
    recorded = _sleeper()  # no marker, but written down by pid and start time
    stranger = _sleeper({registry.MARKER: "someone-else"})  # another run's: never touched
    reused = _sleeper()  # its pid is written down with another start time: pid reuse
    start = registry.start_ticks(recorded.pid)
    reused_start = registry.start_ticks(reused.pid)
    assert start is not None
    assert reused_start is not None
    path = _fake_dead_run(
        reg_dir,
        run_id,
        [
            {"dir": str(run_dir)},
            {"file": str(shm)},
            {"process": recorded.pid, "start": start, "name": "nats"},
            {"process": reused.pid, "start": reused_start - 1, "name": "old"},
        ],
    )
    try:
        report = collect(reg_dir)
        assert [r.run_id for r in report.reaped] == [run_id]
        reaped = report.reaped[0]
        assert "is gone" in reaped.reason
        assert sorted(k["pid"] for k in reaped.killed) == sorted([marked.pid, recorded.pid])
        assert reaped.dirs == [str(run_dir)]
        assert str(shm) in reaped.files
        _assert_killed(marked)
        _assert_killed(recorded)
        assert stranger.poll() is None
        assert proc_state(stranger.pid) != "Z"
        assert reused.poll() is None
        assert not run_dir.exists()
        assert not shm.exists()
        assert not path.exists()
        # a second collection finds nothing
        assert collect(reg_dir).empty
    finally:
        for p in (marked, recorded, stranger, reused):
            p.kill()
            p.wait()
        shm.unlink(missing_ok=True)


def test_a_dead_runs_sandbox_cgroups_are_emptied_and_removed(reg_dir: Path, tmp_path: Path) -> None:
    """A harness SIGKILLed while a candidate ran left the candidate's cgroups (and the
    candidate, which carries no marker): the next collection kills its members and removes
    them, and touches no directory that is not a sandbox cgroup."""
    from chaos.sandbox._cgroup import create_cgroup

    written: list[Path] = []
    group = create_cgroup(f"chaos-{uuid.uuid4().hex[:12]}", 64 << 20, 64, written.append)
    if group is None:
        pytest.skip("this machine lets this process make no cgroup (needs root)")
    assert written
    assert set(group.dirs) <= set(written)
    candidate = _sleeper()
    for procs in group.procs_files:
        Path(procs).write_text(str(candidate.pid))
    decoy = tmp_path / "chaos-not-a-cgroup"
    decoy.mkdir()
    _fake_dead_run(reg_dir, "999999-1-3", [{"cgroup": str(d)} for d in [*written, decoy]])
    try:
        report = collect(reg_dir)
        reaped = report.reaped[0]
        assert sorted(reaped.cgroups) == sorted(str(d) for d in group.dirs)
        assert reaped.cgroups_left == []
        assert reaped.complete
        _assert_killed(candidate)
        assert [d for d in written if d.exists()] == []
        assert decoy.is_dir()
        assert report.errors == []
    finally:
        candidate.kill()
        candidate.wait()
        group.try_remove()


def test_a_dead_runs_mounts_are_detached_before_its_dir_goes(reg_dir: Path, tmp_path: Path) -> None:
    """A graded run SIGKILLed (by Ray's shutdown, the OOM killer) left its candidate's
    scratch tmpfs mounted: the dir could not be removed, its registration was."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    run_dir = tmp_path / "chaos-sandbox-consumer-x"
    scratch = run_dir / "scr atch"  # (mountinfo escapes the space)
    scratch.mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(scratch)], check=True)
    (scratch / "left").write_text("by the candidate")
    _fake_dead_run(reg_dir, "999998-1-1", [{"dir": str(run_dir)}])
    try:
        report = collect(reg_dir)
        assert report.reaped[0].dirs == [str(run_dir)]
        assert not run_dir.exists()
        assert str(tmp_path) not in Path("/proc/self/mountinfo").read_text()
    finally:
        subprocess.run(["umount", "-l", str(scratch)], check=False, capture_output=True)


def test_a_live_run_is_left_alone(reg_dir: Path) -> None:
    live = registry.open_registration(reg_dir)
    child = _sleeper(live.marker_env())
    try:
        live.add_process(child.pid, "svc")
        report = collect(reg_dir, orphans=True)
        assert report.reaped == []
        assert report.orphans == []
        assert report.live == 1
        assert child.poll() is None
    finally:
        child.kill()
        child.wait()
        live.close()
    assert list(reg_dir.glob("*.run")) == []


def test_a_marked_process_whose_registration_is_gone_is_an_orphan(reg_dir: Path) -> None:
    env = {registry.MARKER: "123-4-5", registry.REGISTRY_MARKER: str(reg_dir)}
    orphan = _sleeper(env)
    other_registry = _sleeper({**env, registry.REGISTRY_MARKER: "/elsewhere"})
    try:
        assert collect(reg_dir).orphans == []  # only chaos gc scans for orphans
        assert orphan.poll() is None
        report = collect(reg_dir, orphans=True)
        assert [o["pid"] for o in report.orphans] == [orphan.pid]
        _assert_killed(orphan)
        assert other_registry.poll() is None
    finally:
        for p in (orphan, other_registry):
            p.kill()
            p.wait()


def test_an_unfinished_registration_is_removed(reg_dir: Path) -> None:
    tmp = reg_dir / ".1-2-3.tmp"
    tmp.write_text('{"run": "1-2-3"')
    collect(reg_dir)
    assert not tmp.exists()


# -- the live side: open_run_dir ---------------------------------------------------------


def _environ(pid: int) -> list[bytes]:
    return Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")


def _registrations(reg_dir: Path) -> list[Path]:
    return sorted(p for p in reg_dir.iterdir() if p.name != ".gc.lock")


async def test_children_of_a_run_carry_its_marker_and_are_written_down(reg_dir: Path) -> None:
    with open_run_dir() as run:
        current = registry.current()
        assert current is not None
        async with open_process_service("svc", ["sleep", "300"]) as svc:
            assert svc.pid is not None
            environ = _environ(svc.pid)
            assert f"{registry.MARKER}={current.run_id}".encode() in environ
            text = current.path.read_text()
            assert f'"process": {svc.pid}' in text
            assert json.dumps({"dir": str(run)}) in text
    assert registry.current() is None
    assert not run.exists()
    assert _registrations(reg_dir) == []


async def test_a_run_dir_reaps_a_dead_run_first(reg_dir: Path, tmp_path: Path) -> None:
    left = tmp_path / "left-behind"
    left.mkdir()
    marked = _sleeper({registry.MARKER: "88-8-8", registry.REGISTRY_MARKER: str(reg_dir)})
    try:
        _fake_dead_run(reg_dir, "88-8-8", [{"dir": str(left)}])
        with open_run_dir():
            assert not left.exists()
            _assert_killed(marked)
    finally:
        marked.kill()
        marked.wait()


async def test_what_a_run_leaves_running_is_killed_when_its_dir_closes(reg_dir: Path) -> None:
    # a service's daemon that escaped its process group and was never handed back
    with open_run_dir():
        current = registry.current()
        assert current is not None
        escaped = _sleeper(current.marker_env())
    _assert_killed(escaped)


# -- children die with the harness ------------------------------------------------------

_HARNESS = """
import sys, trio, trio._core._thread_cache as cache
from chaos.services import open_process_service, open_run_dir

cache.IDLE_TIMEOUT = 0.05   # trio's worker threads exit at once when idle

async def main():
    with open_run_dir():
        async with open_process_service("svc", ["sleep", "300"]) as svc:
            await trio.to_thread.run_sync(lambda: None)   # a worker thread comes and goes
            await trio.sleep(0.5)
            print(svc.pid, flush=True)
            await trio.sleep(300)

trio.run(main)
"""


def test_a_service_outlives_worker_threads_and_dies_with_its_harness(reg_dir: Path) -> None:
    harness = subprocess.Popen(
        [sys.executable, "-c", _HARNESS], stdout=subprocess.PIPE, env={**os.environ}
    )
    try:
        assert harness.stdout is not None
        pid = int(harness.stdout.readline())
        assert proc_state(pid) in ("S", "R")  # alive after its spawning thread's peers left
        harness.send_signal(signal.SIGKILL)
        harness.wait()
        deadline = time.monotonic() + 5
        while Path(f"/proc/{pid}").exists() and proc_state(pid) != "Z":
            assert time.monotonic() < deadline, "the service outlived its harness"
            time.sleep(0.02)
    finally:
        harness.kill()
        harness.communicate()
    report = collect(reg_dir)  # the run dir and registration the harness left
    assert len(report.reaped) == 1
    assert report.reaped[0].dirs


async def test_spawned_child_is_waited_for_and_reaped() -> None:
    child = spawn(["sh", "-c", "exit 7"])
    assert await child.wait() == 7
    assert child.returncode == 7
    assert_reaped(child.pid)


async def test_spawn_refuses_a_missing_program() -> None:
    with pytest.raises(FileNotFoundError):
        spawn(["/nonexistent/program"])
    with pytest.raises(FileNotFoundError):
        spawn(["no-such-program-anywhere"])


def test_chaos_gc_says_what_it_removed(reg_dir: Path, tmp_path: Path) -> None:
    left = tmp_path / "chaos-payments-77-7-7"
    left.mkdir()
    marked = _sleeper({registry.MARKER: "77-7-7", registry.REGISTRY_MARKER: str(reg_dir)})
    try:
        _fake_dead_run(reg_dir, "77-7-7", [{"dir": str(left)}])
        env = {**os.environ, "CHAOS_REGISTRY_DIR": str(reg_dir)}
        chaos = [sys.executable, "-m", "chaos", "gc"]
        done = subprocess.run(chaos, env=env, capture_output=True, text=True, check=True)
        lines = done.stdout.splitlines()
        assert lines[0].startswith("run 77-7-7 (chaos run payments): its harness (pid ")
        assert f"  killed pid {marked.pid}: sleep 300" in lines
        assert f"  removed {left}/" in lines
        assert (
            lines[-1] == "reaped 1 dead run(s): 1 process(es), 1 dir(s), 0 shm file(s)/segment(s)"
        )
        _assert_killed(marked)
        again = subprocess.run([*chaos, "--json"], env=env, capture_output=True, text=True)
        assert again.returncode == 0
        assert json.loads(again.stdout) == {
            "errors": [],
            "live_runs": 0,
            "orphans": [],
            "reaped": [],
            "registry": str(reg_dir),
        }
    finally:
        marked.kill()
        marked.wait()


def test_a_tmp_registration_of_a_live_owner_is_left_to_it(reg_dir: Path) -> None:
    """Between creating its ``.tmp`` and locking it, a registering run holds no lock: a
    collection then must not take the file for one a dead harness left (it did, under load:
    the owner's rename failed, "cannot register the run")."""
    me = registry.read_entry(os.getpid())
    assert me is not None
    alive = reg_dir / f".{os.getpid()}-{me.start}-1.tmp"
    alive.write_text("")
    dead = reg_dir / f".{_dead_pid()}-1-1.tmp"
    dead.write_text("")
    collect(reg_dir)
    assert alive.exists()
    assert not dead.exists()
