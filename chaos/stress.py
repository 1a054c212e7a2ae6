"""The load a run sees, recorded in its trace, and CPU pressure to re-create it.

::

    load_snapshot()  -> {"loadavg": [1, 5, 15 min], "cpus": N, "sweep_jobs": J, "stress": S}
    open_stress(n)   -> n busy-loop processes for the block's life (chaos replay --stress,
                        chaos validate --stress); killed however the block ends

A failure that needs load to appear replays with fidelity 0 on a quiet machine. The trace's
header says what load the run started under (and its end frame what it ended under), so a
reader can tell; ``--stress N`` runs the replay beside N busy loops so the timing
coincidences load makes likely are likely again.

The busy loops are children of the trio thread with SIGKILL as their parent-death signal
(``chaos.services._spawn``) and their own session: a SIGKILLed harness takes them along; any
other exit kills and reaps them in a shielded ``finally``.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import trio

from chaos.services._spawn import DEVNULL, Child, spawn
from ground.errors import ConfigError

#: Set by ``chaos sweep`` for its workers: how many runs it keeps going at once.
SWEEP_JOBS_ENV = "CHAOS_SWEEP_JOBS"
#: The busy loops of the stress this process runs under (``open_stress``), for the record.
_stress: int | None = None
#: Most busy loops a stress may ask for (per CPU): more only slows the harness itself.
MAX_STRESS_PER_CPU = 8

_BUSY = "while True:\n    pass\n"


def cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def loadavg() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def load_snapshot() -> dict[str, Any]:
    """The machine's load now, the CPUs this process may use, the concurrency of the sweep
    this run belongs to (None outside a sweep) and the stress it runs under (None: none)."""
    jobs: int | None = None
    raw = os.environ.get(SWEEP_JOBS_ENV)
    if raw is not None and raw.isdigit():
        jobs = int(raw)
    return {"loadavg": loadavg(), "cpus": cpu_count(), "sweep_jobs": jobs, "stress": _stress}


def describe(load: Any) -> str:
    """One line for people, from a trace's ``load`` (missing fields are left out)."""
    if not isinstance(load, dict):
        return "not recorded"
    parts = []
    avg = load.get("loadavg")
    if isinstance(avg, list) and avg:
        parts.append("loadavg " + " ".join(f"{x:g}" for x in avg if isinstance(x, int | float)))
    if load.get("cpus") is not None:
        parts.append(f"{load['cpus']} cpu(s)")
    if load.get("sweep_jobs") is not None:
        parts.append(f"sweep --jobs {load['sweep_jobs']}")
    if load.get("stress"):
        parts.append(f"--stress {load['stress']}")
    return ", ".join(parts) or "not recorded"


def suggested_stress(load: Any, current: float | None = None) -> int:
    """How many busy loops bring this machine to the load a trace recorded: the recorded
    1-minute load average (or the sweep's ``--jobs``, whichever is larger) per recorded CPU,
    times this machine's CPUs, minus the load it carries now (``current``: its 1-minute load
    average, read when not given), since other work still running counts too; 1 to 8 per
    CPU. Without a recorded load: one per CPU."""
    if not isinstance(load, dict):
        return cpu_count()
    avg = load.get("loadavg")
    recorded = load.get("cpus")
    cpus = recorded if isinstance(recorded, int) and recorded > 0 else cpu_count()
    busy = float(avg[0]) if isinstance(avg, list) and avg else 0.0
    jobs = load.get("sweep_jobs")
    if isinstance(jobs, int):
        busy = max(busy, float(jobs))
    target = busy / cpus * cpu_count()
    if current is None:
        now = loadavg()
        current = now[0] if now else 0.0
    return max(1, min(round(target - current), MAX_STRESS_PER_CPU * cpu_count()))


def check_stress(n: int) -> int:
    limit = MAX_STRESS_PER_CPU * cpu_count()
    if not 1 <= n <= limit:
        raise ConfigError(f"--stress must be 1 to {limit} busy loops (8 per CPU), got {n}")
    return n


def parse_stress(value: str | None, auto: int) -> int | None:
    """A ``--stress`` option: None (none), "auto" (``auto`` loops) or a count."""
    if value is None:
        return None
    if value == "auto":
        return check_stress(min(auto, MAX_STRESS_PER_CPU * cpu_count()))
    if not value.isdigit():
        raise ConfigError(f"--stress takes a number of busy loops, got {value!r}")
    return check_stress(int(value))


@asynccontextmanager
async def open_stress(n: int) -> AsyncIterator[list[int]]:
    """``n`` busy-loop processes for the block's life; yields their pids."""
    global _stress
    check_stress(n)
    children: list[Child] = []
    previous = _stress
    try:
        for _ in range(n):
            children.append(
                spawn(
                    [sys.executable, "-c", _BUSY],
                    stdin=DEVNULL,
                    stdout=DEVNULL,
                    stderr=DEVNULL,
                    start_new_session=True,
                    pdeathsig=signal.SIGKILL,
                )
            )
        _stress = n
        yield [c.pid for c in children]
    finally:
        _stress = previous
        with trio.CancelScope(shield=True):
            for child in children:
                if child.returncode is None:
                    try:
                        os.killpg(child.pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
            with trio.move_on_after(5):
                for child in children:
                    await child.wait()


__all__ = [
    "SWEEP_JOBS_ENV",
    "check_stress",
    "cpu_count",
    "describe",
    "load_snapshot",
    "open_stress",
    "parse_stress",
    "suggested_stress",
]
