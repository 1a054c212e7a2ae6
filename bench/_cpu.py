"""CPU accounting for benchmarks: the CPU seconds of every child the harness reaps, by program.

``subprocess.Popen`` reaps with ``os.waitpid``, which drops the child's resource usage; while
``ChildCpu`` is active it reaps with ``os.wait4`` instead and keeps each child's user+system
seconds (its own plus those of the descendants it reaped: a PostgreSQL postmaster's include
every backend's) under a short name of its program. ``RUSAGE_SELF`` is the harness's own.
Used by bench/sweep.py (``--breakdown``); nothing in the harness imports it.
"""

from __future__ import annotations

import os
import resource
import subprocess
from collections import defaultdict
from types import TracebackType
from typing import Any

_ORIGINAL = subprocess.Popen._internal_poll.__defaults__  # type: ignore[attr-defined]


def program(argv: list[str]) -> str:
    """``postgres``, ``nats-server``, ``python -m scenarios.payments.consumer`` -> ``consumer``."""
    args = [a for a in argv if not a.startswith("--pdeathsig")]
    if args and args[0].endswith("setpriv"):
        args = args[args.index("--") + 1 :] if "--" in args else args[1:]
    if "-m" in args:
        return args[args.index("-m") + 1].rsplit(".", 1)[-1]
    return os.path.basename(args[0]) if args else "?"


class ChildCpu:
    """``with ChildCpu() as cpu: ...`` then ``cpu.by_program`` (seconds) and ``cpu.self_s``."""

    def __init__(self) -> None:
        self.by_program: dict[str, float] = defaultdict(float)
        self.count: dict[str, int] = defaultdict(int)
        self._argv: dict[int, list[str]] = {}
        self.self_s = 0.0

    def __enter__(self) -> ChildCpu:
        argvs = self._argv
        original_init = subprocess.Popen.__init__

        def init(popen: Any, args: Any, *a: Any, **kw: Any) -> None:
            original_init(popen, args, *a, **kw)
            argvs[popen.pid] = [str(x) for x in args]

        def waitpid(pid: int, flags: int) -> tuple[int, int]:
            got, status, usage = os.wait4(pid, flags)
            if got:
                name = program(argvs.pop(got, ["?"]))
                self.by_program[name] += usage.ru_utime + usage.ru_stime
                self.count[name] += 1
            return got, status

        self._init = original_init
        subprocess.Popen.__init__ = init  # type: ignore[method-assign,assignment]
        defaults = list(_ORIGINAL)
        defaults[1] = waitpid
        subprocess.Popen._internal_poll.__defaults__ = tuple(defaults)  # type: ignore[attr-defined]
        self._self0 = _self_cpu()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.self_s = _self_cpu() - self._self0
        subprocess.Popen.__init__ = self._init  # type: ignore[method-assign]
        subprocess.Popen._internal_poll.__defaults__ = _ORIGINAL  # type: ignore[attr-defined]

    @property
    def children_s(self) -> float:
        return sum(self.by_program.values())


def _self_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime
