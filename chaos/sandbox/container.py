"""The container sandbox (``chaos grade --sandbox docker``): a candidate in a Docker container.

For each run, the candidate's program (a copy, read-only at ``/candidate``) runs in a
container of an image built from this machine's Python and the task's libraries (nothing
else: no harness, no pack, no trace, no key is in it), with:

- a read-only root, and one writable folder: ``/scratch`` (its home, cwd and ``TMPDIR``), a
  tmpfs of ``file_size_mb``; it survives a crash fault's restart, as a disk would;
- cgroup limits: memory (``memory_mb``, no swap), processes (``pids_limit``), one CPU; and
  rlimits: CPU seconds, file size, open files, no core files;
- user ``nobody`` (65534), every capability dropped, ``no-new-privileges``, ``tini`` as init
  (so SIGTERM reaches the program as it would outside);
- no network of its own: the namespace of a holder container, which holds loopback, its
  links' listeners (opened there by the harness: same addresses as in its environment) and
  tripwires on the real servers' ports (a connection there is a ``bypassed link``);
- the clock-skew file and libfaketime mounted read-only, so clock faults reach it.

A monitor reads the container's cgroup ten times a second (CPU time, OOM kills, processes)
and its scratch fill; how the program ended (OOM kill, SIGXCPU, an allocation or write that
failed at its limit) is read when it exits. Reaching a limit *contains* it with the same
reasons as the process sandbox (``chaos.sandbox.candidate.REASONS``): the container is
killed, a later crash fault's restart refused, the seed graded 0. When the run ends the
candidate gets SIGTERM and ``term_s`` to exit; then the container and its holder are removed.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import tempfile
from contextlib import suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any

import trio

from chaos.sandbox._detect import watch_tripwire
from chaos.sandbox.candidate import (
    CPU,
    FILE_SIZE,
    IGNORED_SIGTERM,
    MEMORY,
    PROCESSES,
    Candidate,
    Program,
)
from chaos.services import SkewFile, default_run_parent, registry
from chaos.services.container import ContainerService, open_container
from chaos.services.images import Image, check_images, docker_client, holder_image, python_image
from ground.errors import ConfigError
from invariants.history import SERVICE_PREFIX

if TYPE_CHECKING:
    from chaos.context import RunContext

_TICK_S = 0.1
_MAX_LOG_LINES = 20_000
_OOM_WORDS = re.compile(r"MemoryError|Cannot allocate memory|out of memory|bad_alloc", re.I)
_FSIZE_WORDS = re.compile(r"File too large|No space left on device|EFBIG|ENOSPC", re.I)
NOBODY = "65534:65534"
CANDIDATE_DIR = "/candidate"
SCRATCH = "/scratch"


def candidate_image(libraries: tuple[str, ...]) -> Image:
    """The candidate's image: this Python and the task's libraries, nothing else."""
    return python_image("chaos-candidate", libraries=libraries)


class ContainerSandbox:
    """Runs candidates in Docker containers (see the module docstring)."""

    name = "docker"
    isolation = "docker"

    def __init__(self, libraries: tuple[str, ...] = ()) -> None:
        self.libraries = tuple(libraries)

    def check(self, program: Program | None = None) -> None:
        if os.geteuid() != 0:
            raise ConfigError(
                "--sandbox docker needs the harness to run as root (it opens the links' "
                "listeners inside the candidate's network namespace)"
            )
        docker_client()
        check_images([holder_image(), candidate_image(self.libraries)])

    async def start(
        self,
        ctx: RunContext,
        candidate: Candidate,
        name: str,
        env: dict[str, str],
        ready_line: str | None,
        wait: bool,
    ) -> ContainerService:
        site = _Site(ctx, candidate, name, candidate_image(self.libraries).ref)
        return await site.start(env, ready_line, wait)


class _Boxed(ContainerService):
    """The candidate's container: a restart after a containment is refused; the end is
    SIGTERM, ``term_s``, then ``ignored SIGTERM``."""

    site: _Site

    async def start(self, *, wait_ready: bool = True) -> bool:
        if self.site.report.contained:
            self.site.record("restart_refused", {"why": "contained"})
            return True  # (as before: not an interrupted start)
        self.site.cpu_base += self.site.cpu_last  # a new start: a fresh cgroup
        self.site.cpu_last = 0.0
        started = await super().start(wait_ready=wait_ready)
        self.site.report.starts += 1
        self.site.started_at[self.starts] = trio.current_time()
        return started

    async def stop(self) -> None:
        site = self.site
        site.stopping = True
        if not self.running:
            return
        if self.paused:
            self.resume()
        self.send_signal(signal.SIGTERM)
        with trio.move_on_after(site.limits.term_s):
            await self.exited.wait()
            return
        site.contain(IGNORED_SIGTERM, f"still running {site.limits.term_s:g} s after SIGTERM")
        await self.kill()


class _Site:
    """One candidate in one run: its folder, container, monitor and report."""

    def __init__(self, ctx: RunContext, candidate: Candidate, name: str, image: str) -> None:
        self.ctx = ctx
        self.candidate = candidate
        self.name = name
        self.image = image
        self.limits = candidate.limits
        self.report = candidate.report
        self.report.isolation = "docker"
        self.t0 = trio.current_time()
        self.dir = _sandbox_dir(name)
        self.service: _Boxed | None = None
        self.tripwires: list[tuple[trio.socket.SocketType, str]] = []
        #: Links whose upstream the candidate serves (tenants' API): dialled into it.
        self.inbound: list[str] = []
        self.stderr_tail: list[str] = []
        self.lines = 0
        self.ready_start = 0
        self.started_at: dict[int, float] = {}
        self.given_up: set[int] = set()
        self.stopping = False
        self.cpu_base = 0.0
        self.cpu_last = 0.0

    def now(self) -> float:
        return trio.current_time() - self.t0

    def record(self, f: str, value: Any) -> None:
        self.ctx.recorder.record(f"{SERVICE_PREFIX}{self.name}", "info", f, value)

    # -- setup ----------------------------------------------------------------------------

    async def start(self, env: dict[str, str], ready_line: str | None, wait: bool
                    ) -> ContainerService:  # fmt: skip
        from chaos.sandbox._box import copy_program
        from chaos.sandbox.process import candidate_links, inbound_links

        stack = self.ctx.stack
        stack.callback(shutil.rmtree, self.dir, True)  # last: after the container is gone
        program_dir = self.dir / "program"
        copy_program(self.candidate, program_dir)
        clock = self.dir / "clock"
        clock.mkdir(mode=0o755)
        skew = SkewFile(clock / "faketime")
        proxies = self.ctx.proxies.proxies
        links = candidate_links(proxies, env)
        self.inbound = inbound_links(proxies, env, links)
        for link in self.inbound:  # reset once the container is gone (the stack unwinds)
            stack.callback(setattr, proxies[link], "dialer", None)
        program = self.candidate.program
        entry = program.entry or program.path.name
        target = f"{CANDIDATE_DIR}/{entry}"
        command = ["python", "-s", target] if program.kind == "python" else [target]
        limits = self.limits
        cpu = int(limits.cpu_s) + 1
        from docker.types import Ulimit

        memory, fsize = limits.memory_mb << 20, limits.file_size_mb << 20
        create: dict[str, Any] = {
            "binds": {str(program_dir): {"bind": CANDIDATE_DIR, "mode": "ro"}},
            "read_only": True,
            "tmpfs": {SCRATCH: f"size={limits.file_size_mb + 16}m,mode=1777,uid=65534,gid=65534"},
            "mem_limit": memory,
            "memswap_limit": memory,
            "pids_limit": limits.processes,
            "nano_cpus": 1_000_000_000,
            "cap_drop": ["ALL"],
            "security_opt": ["no-new-privileges"],
            "init": True,
            "ulimits": [
                Ulimit(name="cpu", soft=cpu, hard=cpu + 1),
                Ulimit(name="fsize", soft=fsize, hard=fsize),
                Ulimit(name="nofile", soft=limits.open_files, hard=limits.open_files),
                Ulimit(name="core", soft=0, hard=0),
            ],
            "user": NOBODY,
            "working_dir": SCRATCH,
        }
        child_env = {"HOME": SCRATCH, "TMPDIR": SCRATCH, "LANG": "C.UTF-8",
                     "PYTHONUNBUFFERED": "1", **env}  # fmt: skip

        def sink(service: str, stream: str, line: str) -> None:
            box = self.service
            if ready_line is not None and ready_line in line:
                self.ready_start = box.starts if box is not None else 1
            if stream == "stderr":
                self.stderr_tail = [*self.stderr_tail[-19:], line]
            self.lines += 1
            if self.lines <= _MAX_LOG_LINES:  # never an @op: a candidate writes no evidence
                self.ctx.recorder.record(
                    f"{SERVICE_PREFIX}{service}", "info", "log", line[:2000], stream=stream
                )

        async def ready() -> bool:
            box = self.service
            start = box.starts if box is not None else 1
            since = self.started_at.setdefault(start, trio.current_time())
            if ready_line is None or self.ready_start >= start:
                return True
            if self.report.contained or (box is not None and not box.running):
                self._give_up(start, "it ended before it printed its ready line")
                return True
            if trio.current_time() - since > limits.ready_s:
                self._give_up(start, f"no ready line within {limits.ready_s:g} s")
                return True
            return False

        def before_start(service: ContainerService) -> None:
            assert isinstance(service, _Boxed)
            service.site = self
            self.service = service
            for link in links:
                service.serve(proxies[link])
            for link in self.inbound:  # the candidate serves them: dialled from inside
                proxies[link].dialer = service.dial
            self._tripwires(service, links)

        nursery = await stack.enter_async_context(trio.open_nursery())
        stack.callback(nursery.cancel_scope.cancel)
        service = await stack.enter_async_context(
            open_container(
                self.name,
                self.image,
                command=command,
                env=child_env,
                log_sink=sink,
                ready=ready,
                ready_timeout=limits.ready_s + 30,
                stop_grace=limits.term_s + 1,
                faketime=skew,
                on_exit=self._on_exit,
                create=create,
                wait_ready=False,
                before_start=before_start,
                service_class=_Boxed,
                strict_ready=False,
            )
        )
        for sock, what in self.tripwires:
            nursery.start_soon(self._tripwire, sock, what)
        nursery.start_soon(self._monitor)
        stack.push_async_callback(self._final)
        if wait:
            await service.ready()
        return service

    def _tripwires(self, service: ContainerService, links: list[str]) -> None:
        """Listeners on the real servers' ports inside the namespace: a dial there is a
        bypass (the kernel refuses any other port: nothing listens)."""
        assert service.netns is not None
        taken = {int(self.ctx.proxies.proxies[n].listen.rpartition(":")[2]) for n in links}
        wires: dict[int, str] = {}
        for dep in self.ctx.dependencies:
            for port in (dep.port, getattr(dep, "monitor_port", None)):
                if port and port not in taken:
                    wires.setdefault(int(port), f"{type(dep).__name__[:-7].lower()} at "
                                                f"{dep.host}:{port}")  # fmt: skip
        for proxy in self.ctx.proxies.proxies.values():
            if proxy.name in self.inbound:
                continue  # the candidate's own server's port: it listens there
            port = int(proxy.upstream.rpartition(":")[2])
            if port not in taken:
                wires.setdefault(port, f"the upstream of link {proxy.name} ({proxy.upstream})")
        sockets = service.netns.listen([("0.0.0.0", p) for p in wires])
        for sock, what in zip(sockets, wires.values(), strict=True):
            self.tripwires.append((trio.socket.from_stdlib_socket(sock), what))

    # -- while it runs --------------------------------------------------------------------

    def _give_up(self, start: int, why: str) -> None:
        if start not in self.given_up:
            self.given_up.add(start)
            self.report.not_ready += 1
            self.report.notes.append(f"start {start}: {why}; the run went on without it")
            self.record("not_ready", {"start": start, "why": why})

    def contain(self, reason: str, detail: str) -> None:
        """Stop the candidate for ``reason``: record it, refuse restarts, kill it."""
        if self.report.contain(reason, detail, self.now()):
            self.record("contained", {"reason": reason, "detail": detail})
        box = self.service
        if box is not None and box.container_id is not None and box.running:
            with suppress(Exception):
                box._client.api.kill(box.container_id)

    def _on_exit(self, name: str, code: int, expected: bool) -> None:
        box = self.service
        ended: dict[str, Any] = {"code": code}
        if code > 128:
            with suppress(ValueError):
                ended = {"signame": signal.Signals(code - 128).name}
        ended.update(t=round(self.now(), 3), expected=expected or self.stopping)
        self.report.exits.append(ended)
        self.record("candidate_exit", ended)
        if expected:
            return
        signame = ended.get("signame")
        if box is not None and box.oom_killed:
            self.contain(MEMORY, f"killed at its {self.limits.memory_mb} MiB memory limit")
        elif signame == "SIGXCPU":
            self.contain(CPU, f"killed by SIGXCPU after {self.limits.cpu_s:g} CPU seconds")
        elif signame == "SIGXFSZ" or any(_FSIZE_WORDS.search(x) for x in self.stderr_tail):
            self.contain(FILE_SIZE, f"a write failed at its {self.limits.file_size_mb} MiB "
                                    "file size limit")  # fmt: skip
        elif any(_OOM_WORDS.search(x) for x in self.stderr_tail):
            self.contain(MEMORY, f"an allocation failed at its {self.limits.memory_mb} MiB "
                                 "limit")  # fmt: skip

    async def _tripwire(self, sock: trio.socket.SocketType, what: str) -> None:
        await watch_tripwire(sock, what, self.contain)

    async def _monitor(self) -> None:
        tick = 0
        while True:
            await trio.sleep(_TICK_S)
            tick += 1
            with suppress(OSError, ValueError):
                self._check(tick)

    def _cgroup(self, controller: str) -> Path | None:
        """The container's cgroup folder of ``controller`` (v1), or its v2 folder; None
        when it is not running (a pid read then could be anyone's)."""
        box = self.service
        pid = box.pid if box is not None else None
        cid = box.container_id if box is not None else None
        if pid is None or box is None or cid is None or not box.running:
            return None
        try:
            lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
        except OSError:
            return None
        unified = None
        for line in lines:
            _, controllers, path = line.split(":", 2)
            if cid not in path:
                continue  # not the container's (its pid ended, and was reused)
            if controller in controllers.split(","):
                return Path("/sys/fs/cgroup", controller, path.lstrip("/"))
            if controllers == "":
                unified = Path("/sys/fs/cgroup", path.lstrip("/"))
        if unified is not None and (unified / "cgroup.controllers").exists():
            return unified
        return None

    def _read(self, controller: str, *names: str) -> str | None:
        folder = self._cgroup(controller)
        if folder is None:
            return None
        for name in names:
            with suppress(OSError):
                return (folder / name).read_text()
        return None

    def _check(self, tick: int) -> None:
        limits = self.limits
        usage = self._read("cpuacct", "cpuacct.usage")
        if usage is not None:
            cpu = int(usage) / 1e9
        else:
            stat = self._read("cpu", "cpu.stat") or ""
            found = re.search(r"usage_usec (\d+)", stat)
            cpu = int(found.group(1)) / 1e6 if found else 0.0
        self.cpu_last = max(self.cpu_last, cpu)
        self.report.add_cpu(self.name, self.cpu_base + cpu)  # one entry per instance
        if self.cpu_base + cpu >= limits.cpu_s:
            self.contain(CPU, f"used {self.cpu_base + cpu:.1f} CPU seconds (limit "
                              f"{limits.cpu_s:g})")  # fmt: skip
        oom = self._read("memory", "memory.oom_control", "memory.events") or ""
        found = re.search(r"oom_kill (\d+)", oom)
        if found and int(found.group(1)) > 0:
            self.contain(MEMORY, f"killed at its {limits.memory_mb} MiB memory limit")
        pids = self._read("pids", "pids.current")
        if pids is not None and int(pids) >= limits.processes:
            self.contain(PROCESSES, f"reached its limit of {limits.processes} processes and "
                                    "threads")  # fmt: skip
        events = self._read("pids", "pids.events") or ""
        found = re.search(r"max (\d+)", events)
        if found and int(found.group(1)) > 0:
            self.contain(PROCESSES, f"a fork refused at its limit of {limits.processes} "
                                    "processes and threads")  # fmt: skip
        box = self.service
        if tick % 5 == 0 and box is not None and box.pid is not None and box.running:
            with suppress(OSError):
                st = os.statvfs(f"/proc/{box.pid}/root{SCRATCH}")
                used = (st.f_blocks - st.f_bfree) * st.f_frsize
                if used >= limits.file_size_mb << 20:
                    self.contain(FILE_SIZE, f"filled its scratch directory ({used >> 20} MiB "
                                            f"of {limits.file_size_mb})")  # fmt: skip

    async def _final(self) -> None:
        """Runs before the container is removed: a last reading, the tripwires closed."""
        with suppress(OSError, ValueError):
            self._check(0)
        for sock, _ in self.tripwires:
            sock.close()


def _sandbox_dir(name: str) -> Path:
    registration = registry.current()
    if registration is not None:
        return registration.make_dir(default_run_parent(), f"chaos-docker-{name}-")
    return Path(tempfile.mkdtemp(prefix=f"chaos-docker-{name}-", dir=default_run_parent()))


__all__ = ["ContainerSandbox", "candidate_image"]
