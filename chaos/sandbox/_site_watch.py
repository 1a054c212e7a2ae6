"""A candidate's site in the process sandbox, while it runs: the monitor (about ten times a
second: the launcher's status file, the cgroup's OOM kills and refused forks, CPU seconds,
processes, scratch size; about once a second the bypass detector), the tripwires' watch,
and containment when a limit is reached.
"""

from __future__ import annotations

import json
import os
import re
import signal
from contextlib import suppress
from typing import Any

import trio

from chaos.sandbox._box import used_bytes
from chaos.sandbox._detect import watch_tripwire
from chaos.sandbox._site_state import _SiteState
from chaos.sandbox._uids import processes_of, tasks_of
from chaos.sandbox.candidate import (
    BYPASS,
    CPU,
    FILE_SIZE,
    MEMORY,
    PROCESSES,
)
from chaos.services._reaper import family, read_entry, signal_family
from ground.errors import ServiceError

_TICK_S = 0.1
_DETECT_EVERY = 10  # ticks
_OOM_WORDS = re.compile(r"MemoryError|Cannot allocate memory|out of memory|bad_alloc", re.I)


def _proc_stat(pid: int) -> tuple[float, int] | None:
    """(CPU seconds, threads) of one process from /proc/PID/stat."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    fields = data[data.rfind(b")") + 2 :].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks, int(fields[17])


class _SiteWatch(_SiteState):
    """The site while it runs: status, limits, bypasses, containment."""

    def _give_up(self, start: int, why: str) -> None:
        if start not in self.given_up:
            self.given_up.add(start)
            self.report.not_ready += 1
            self.report.notes.append(f"start {start}: {why}; the run went on without it")
            self._record("not_ready", {"start": start, "why": why})

    def _on_exit(self, name: str, code: int, expected: bool) -> None:
        """The launcher ended (the run's end, or a crash fault killing the service)."""
        self._record("exit", {"code": code, "expected": expected, "launcher": True})
        launcher = self.process.pid if self.process is not None else None
        if launcher is not None and launcher not in self.exited:
            self._read_status()
        if launcher is not None and launcher not in self.exited:  # killed with the launcher
            self.exited.add(launcher)
            ended = {"signame": "SIGKILL"} if code == -9 else {"code": code}
            self.report.exits.append({**ended, "t": round(self.now(), 3), "expected": expected})

    def end_boost(self, start: int) -> None:
        """Take back the start's boost (``START_NICE``): every process of the candidate whose
        main thread runs at a negative nice goes to 0 (only the main thread the launcher
        boosted can hold one: the kernel gives nothing it creates the boost, and the
        candidate cannot raise its own priority). Once per start; a candidate that made
        itself nicer is left so."""
        if start in self.unboosted or self.uid is None:
            return
        self.unboosted.add(start)
        for pid in self._candidate_pids():
            with suppress(OSError):
                if os.getpriority(os.PRIO_PROCESS, pid) < 0:
                    os.setpriority(os.PRIO_PROCESS, pid, 0)

    def _boost_over(self) -> None:
        """The current start's boost ends when it is ready (at once without a ready line),
        was given up, or has had ``ready_s`` since the monitor first saw it: the monitor's
        own check, whatever the ready line does and whether or not the pack waits for it."""
        process = self.process
        if process is None or process.starts in self.unboosted:
            return
        start = process.starts
        since = self.boost_seen.setdefault(start, trio.current_time())
        late = trio.current_time() - since > self.limits.ready_s
        ready = self.ready_at is not None and self.ready_at.ready(start)
        if ready or late or start in self.given_up:
            self.end_boost(start)

    def contain(self, reason: str, detail: str) -> None:
        """Stop the candidate for ``reason``: record it, refuse restarts, kill its processes."""
        self.flag.touch()
        if self.report.contain(reason, detail, self.now()):
            self._record("contained", {"reason": reason, "detail": detail})
        self._kill_candidate()

    def _candidate_pids(self) -> set[int]:
        """Every process of the candidate (the launcher, which is ours, excluded): its
        cgroup's members when it has one (every process it starts is born in it and cannot
        leave it: one file read, ten times a second), else the launcher's process family (a
        scan of every process on the machine)."""
        if self.cgroup is not None:
            return self.cgroup.members()
        pids: set[int] = set()
        if self.process is not None and self.process.pid is not None:
            pids.update(family(self.process.pid))
        return pids

    def _kill_candidate(self) -> None:
        if self.cgroup is not None:
            self.cgroup.kill()
        if self.process is not None and self.process.pid is not None:
            signal_family(family(self.process.pid), signal.SIGKILL)
        if self.uid is not None:
            for pid in processes_of(self.uid.uid):
                with suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)

    async def _monitor(self) -> None:
        tick = 0
        while True:
            await trio.sleep(_TICK_S)
            tick += 1
            # Limits first: a fork bomb's processes die of SIGXCPU (in the status file)
            # while it sits at its process limit; what it reached is the reason, not how
            # one of its processes ended.
            self._check_resources(tick)
            self._read_status()
            self._boost_over()
            if tick % _DETECT_EVERY == 0 and self.detector is not None:
                pids = self._candidate_pids()
                if pids:
                    found = await trio.to_thread.run_sync(self.detector.find, pids)
                    if found:
                        self.contain(BYPASS, found[0])

    async def _tripwire(self, sock: trio.socket.SocketType, what: str) -> None:
        await watch_tripwire(sock, what, self.contain)

    def _read_status(self) -> None:
        try:
            with self.status_path.open("rb") as f:
                f.seek(self.status_offset)
                data = f.read()
        except OSError:
            return
        end = data.rfind(b"\n") + 1
        self.status_offset += end
        for line in data[:end].splitlines():
            try:
                event = json.loads(line)
            except ValueError:
                continue
            self._status_event(event)

    def _status_event(self, event: dict[str, Any]) -> None:
        kind, launcher = event.get("event"), int(event.get("launcher", 0))
        if kind == "started":
            self.report.starts += 1
        elif kind == "exit" or (kind == "gone" and launcher not in self.exited):
            self.exited.add(launcher)
            ended: dict[str, Any] = {k: event[k] for k in ("code", "signame") if k in event}
            if kind == "gone" and self.root:  # init was killed, and the candidate with it
                ended = {"signame": event.get("signame", "SIGKILL")}
            ended.update(t=round(self.now(), 3), expected=self.stopping)
            self.report.exits.append(ended)
            self._record("candidate_exit", ended)
            if kind == "gone":
                self.gone.add(launcher)
            signame = event.get("signame")
            if signame == "SIGXCPU":
                self.contain(CPU, f"killed by SIGXCPU after {self.limits.cpu_s:g} CPU seconds")
            elif signame == "SIGXFSZ":
                self.contain(FILE_SIZE, f"killed by SIGXFSZ: a file over "
                                        f"{self.limits.file_size_mb} MiB")  # fmt: skip
            elif (self.cgroup is None or not self.cgroup.limits_memory) and any(
                _OOM_WORDS.search(line) for line in self.stderr_tail
            ):
                self.contain(MEMORY, f"an allocation failed at its {self.limits.memory_mb} MiB "
                                     "address-space limit")  # fmt: skip
        elif kind in ("gone", "refused"):
            self.gone.add(launcher)
        elif kind == "error":
            self.gone.add(launcher)
            raise ServiceError(f"sandbox for {self.name}: {event.get('message')}")

    def _check_resources(self, tick: int) -> None:
        limits = self.limits
        cgroup = self.cgroup
        if cgroup is not None:
            if cgroup.oom_kills():
                self.contain(MEMORY, f"killed at its {limits.memory_mb} MiB memory limit")
            if cgroup.pids_refused():
                self.contain(PROCESSES, f"a fork refused at its limit of {limits.processes} "
                                        "processes and threads")  # fmt: skip
        cpu, threads = self._sample()
        # The process limit first: a fork bomb at its limit also burns CPU (every refused
        # fork spins), and a loaded machine may first look at it when both are reached.
        if threads >= limits.processes:  # the rlimit may refuse before the cgroup does
            self.contain(PROCESSES, f"reached its limit of {limits.processes} processes and "
                                    "threads")  # fmt: skip
        if cpu >= limits.cpu_s:
            if self.uid is not None and tasks_of(self.uid.uid) >= limits.processes:
                # Its RLIMIT_NPROC refused the forks (it counts the uid's tasks wherever
                # they are, and a fork bomb at it spins): the limit it reached comes first.
                self.contain(PROCESSES, f"reached its limit of {limits.processes} processes "
                                        "and threads (its uid's)")  # fmt: skip
            else:
                self.contain(CPU, f"used {cpu:.1f} CPU seconds (limit {limits.cpu_s:g})")
        if tick % 5 == 0:
            if self.box_mounted:
                st = os.statvfs(self.box.path)
                used = (st.f_blocks - st.f_bfree) * st.f_frsize - self.box_base
                full = st.f_bavail * st.f_frsize < (1 << 20)
            else:
                used = used_bytes([self.box.scratch, self.box.tmp])
                full = used >= limits.file_size_mb << 20
            if full:
                self.contain(FILE_SIZE, f"filled its scratch directory ({used >> 20} MiB of "
                                        f"{limits.file_size_mb})")  # fmt: skip

    def _sample(self) -> tuple[float, int]:
        """(CPU seconds so far over every process it ever had, threads now)."""
        cgroup_cpu = self.cgroup.cpu_s() if self.cgroup is not None else None
        tasks = self.cgroup.tasks() if self.cgroup is not None else None
        if cgroup_cpu is not None and tasks is not None:  # two files, whatever it runs
            self.report.add_cpu(self.name, cgroup_cpu)
            return cgroup_cpu, tasks
        threads = 0
        for pid in self._candidate_pids():
            entry = read_entry(pid)
            got = _proc_stat(pid)
            if entry is None or got is None:
                continue
            cpu, n = got
            threads += n
            self.cpu_seen[(pid, entry.start)] = cpu
        total = cgroup_cpu if cgroup_cpu is not None else sum(self.cpu_seen.values())
        self.report.add_cpu(self.name, total)
        return total, threads
