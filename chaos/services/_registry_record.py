"""A run registration on disk, read back: where the registry is, the markers a run's
children carry, who owns a registration (pid, start time, boot) and whether its run is over
(``staleness``). ``chaos.services.registry`` writes registrations and is this module's
public home.
"""

from __future__ import annotations

import errno
import json
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from chaos.services._reaper import read_entry

MARKER = "CHAOS_RUN_ID"
REGISTRY_MARKER = "CHAOS_RUN_REGISTRY"
_SUFFIX = ".run"
_SHM = Path("/dev/shm")


# -- where, who, when -------------------------------------------------------------------


def registry_dir() -> Path:
    """$CHAOS_REGISTRY_DIR, else /dev/shm/chaos-harness-<uid>, else <tmp>/chaos-harness-<uid>."""
    if env := os.environ.get("CHAOS_REGISTRY_DIR"):
        return Path(env)
    name = f"chaos-harness-{os.geteuid()}"
    if os.access(_SHM, os.W_OK | os.X_OK):
        return _SHM / name
    return Path(tempfile.gettempdir()) / name


def _ensure_private_dir(path: Path) -> Path:
    """Create ``path`` (0700) or check an existing one is a real dir of ours."""
    try:
        path.mkdir(mode=0o700, parents=True)
    except FileExistsError:
        pass
    st = path.lstat()
    if not path.is_dir() or path.is_symlink() or st.st_uid != os.geteuid():
        raise OSError(errno.EPERM, "not a private directory of this user", str(path))
    return path


def boot_id() -> str:
    """This boot's id (pids and start times mean nothing across a reboot)."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (None if it is gone)."""
    entry = read_entry(pid)
    return None if entry is None else entry.start


def process_alive(pid: int, start: int) -> bool:
    """Whether ``pid`` is still the process that started at ``start`` (zombies are dead)."""
    entry = read_entry(pid)
    return entry is not None and entry.start == start and entry.state not in ("Z", "X")


# -- a record, as read back -------------------------------------------------------------


@dataclass
class Record:
    """A registration file as read back: the owner and what it wrote down."""

    path: Path
    run_id: str
    owner: int
    start: int
    boot: str
    argv: list[str] = field(default_factory=list)
    created: float = 0.0
    dirs: list[Path] = field(default_factory=list)
    files: list[Path] = field(default_factory=list)
    processes: dict[int, tuple[int, str]] = field(default_factory=dict)
    registry: Path | None = None
    cgroups: list[Path] = field(default_factory=list)
    #: The run wrote down that it makes containers (its end removes those of its label).
    containers: bool = False

    @property
    def command(self) -> str:
        return " ".join(self.argv) or "?"


def parse(path: Path, text: str) -> Record | None:
    """A registration's lines -> Record (None when the header is unreadable); a cut-off last
    line (the owner died mid-write) is ignored."""
    lines = text.splitlines()
    try:
        head = json.loads(lines[0])
        record = Record(
            path,
            str(head["run"]),
            int(head["owner"]),
            int(head["start"]),
            str(head["boot"]),
            [str(a) for a in head.get("argv", [])],
            float(head.get("created", 0.0)),
            registry=path.parent,
        )
    except (IndexError, ValueError, KeyError, TypeError):
        return None
    for line in lines[1:]:
        try:
            item = json.loads(line)
            if "dir" in item:
                record.dirs.append(Path(item["dir"]))
            elif "file" in item:
                record.files.append(Path(item["file"]))
            elif "process" in item:
                record.processes[int(item["process"])] = (int(item["start"]), str(item["name"]))
            elif "cgroup" in item:
                record.cgroups.append(Path(item["cgroup"]))
            elif "containers" in item:
                record.containers = True
        except (ValueError, KeyError, TypeError):
            continue
    return record


def staleness(
    record: Record, *, boot: str, alive: Callable[[int, int], bool], lock: str
) -> str | None:
    """Why ``record``'s run is over (so what it left may be reaped), or None while it may live.

    ``lock`` is "held" (someone holds its flock), "free" (we just took it) or "unsupported"
    (the registry's filesystem has no flock: then the owner's pid + start time decide).
    """
    if lock == "held":
        return None
    if record.boot != boot:
        return "the machine has rebooted since"
    if not alive(record.owner, record.start):
        return f"its harness (pid {record.owner}) is gone"
    if lock == "free":
        return f"its harness (pid {record.owner}) let it go without cleaning up"
    return None
