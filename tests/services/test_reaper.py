"""A service's family (chaos.services._reaper.family) on real processes: a subreaper walks only
its own tree, and finds what a read of every process finds: descendants, one that left for a
session of its own, and an orphan of the group handed back to it."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator

import pytest

from chaos.services import _reaper
from chaos.services._reaper import become_subreaper, family, read_entry

#: A leader (sh, its own session) with: a child in its group, a child that calls setsid, and
#: a grandchild whose parent exits at once (an orphan of the group: re-parented to us).
TREE = "sleep 60 & setsid sleep 61 & (sleep 62 &) ; wait"
SLEEPS = {"sleep 60", "sleep 61", "sleep 62"}  # setsid execs its sleep: same command line


def _sleeps(members: dict[int, _reaper.ProcEntry]) -> set[str]:
    names = set()
    for pid in members:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                names.add(f.read().replace(b"\0", b" ").decode().strip())
        except OSError:
            pass
    return names


@pytest.fixture
def tree() -> Iterator[subprocess.Popen[bytes]]:
    assert become_subreaper()
    leader = subprocess.Popen(["sh", "-c", TREE], start_new_session=True)
    try:
        deadline = time.monotonic() + 10
        while _sleeps(family(leader.pid)) != SLEEPS:
            assert time.monotonic() < deadline, _sleeps(family(leader.pid))
            time.sleep(0.02)
        yield leader
    finally:
        members = family(leader.pid)
        _reaper.signal_family(members, signal.SIGKILL)
        leader.kill()
        leader.wait()
        for pid in members:
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass


def test_a_subreaper_finds_the_family_in_its_own_tree_as_a_full_read_does(
    tree: subprocess.Popen[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    orphan = next(
        pid for pid, e in family(tree.pid).items() if _sleeps({pid: e}) == {"sleep 62"}
    )
    entry = read_entry(orphan)
    assert entry is not None
    assert entry.ppid == os.getpid()  # handed back to us, not to PID 1
    assert entry.pgid == tree.pid  # found by its group only

    def no_full_read() -> list[_reaper.ProcEntry]:
        raise AssertionError("read every process of the machine")

    with monkeypatch.context() as patch:
        patch.setattr(_reaper, "_all_entries", no_full_read)
        walked = family(tree.pid)
    with monkeypatch.context() as patch:
        patch.setattr(_reaper, "_subreaper", False)  # the full read, as before
        everything = family(tree.pid)
    assert set(walked) == set(everything)
    assert _sleeps(walked) == SLEEPS


def test_a_leader_outside_its_tree_is_looked_for_everywhere(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """PID 1 is no descendant of ours: the walk does not stand in for the full read."""
    calls = []
    real = _reaper._all_entries

    def counted() -> list[_reaper.ProcEntry]:
        calls.append(1)
        return real()

    assert become_subreaper()
    monkeypatch.setattr(_reaper, "_all_entries", counted)
    family(1)
    assert calls == [1]
