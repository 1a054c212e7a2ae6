"""Shared helpers for the service-layer tests."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

PY = sys.executable


def assert_reaped(pid: int) -> None:
    """The pid is gone: no live process and no zombie left behind."""
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert not Path(f"/proc/{pid}/stat").exists()


def proc_state(pid: int) -> str:
    """The one-letter state of a process from /proc/<pid>/stat (R, S, T, Z, ...)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat[stat.rfind(")") + 2]


def py(code: str) -> list[str]:
    """argv running `code` in a fresh unbuffered Python."""
    return [PY, "-u", "-c", code]


def pids_mentioning(text: str) -> list[int]:
    """Pids of live (non-zombie) processes whose command line contains `text`."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            if text in cmdline and proc_state(int(entry.name)) != "Z":
                found.append(int(entry.name))
        except (OSError, IndexError):
            continue
    return found


def children_of(pid: int) -> list[int]:
    """Pids whose parent is `pid` (from /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat[stat.rfind(")") + 2 :].split()[1]) == pid:
                found.append(int(entry.name))
    return found
