"""Sandbox uids: a process keeps a uid it found empty for its next candidate, and only then."""

from __future__ import annotations

import os
import subprocess

import pytest

from chaos.sandbox import _uids

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="sandbox uids need root")


def test_an_emptied_uid_is_kept_locked_for_the_next_candidate() -> None:
    first = _uids.lease_uid()
    assert first.kill_once()  # nothing of it runs
    first.release(clean=True)
    again = _uids.lease_uid()
    try:
        assert again.uid == first.uid  # kept: no scan for a free slot
    finally:
        again.release()  # not known clean: closed, the slot free for anyone


def test_a_uid_is_not_kept_when_something_of_it_was_left() -> None:
    lease = _uids.lease_uid()
    child = subprocess.Popen(["sleep", "60"], user=lease.uid, group=lease.gid)
    try:
        assert not lease.kill_once()  # a process of it was alive (and is killed)
    finally:
        child.wait()
    lease.release(clean=True)  # its files are gone, but a process was seen: not kept
    assert all(uid != lease.uid for uid, _ in _uids._kept)
    files_left = _uids.lease_uid()
    assert files_left.kill_once()
    files_left.release(clean=False)  # files of it may be left: not kept
    assert all(uid != files_left.uid for uid, _ in _uids._kept)
