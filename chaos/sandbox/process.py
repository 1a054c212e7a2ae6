"""The process sandbox: a candidate as a child process, isolated by the kernel's own means.

As root (``isolation="root"``), for each run: a uid of its own (``_uids``), a scratch
directory on a size-limited tmpfs it owns, a network namespace holding only its links'
listeners (the proxies accept there; their upstream dials stay outside) and tripwires on the
real dependencies' ports, a cgroup (memory, processes, CPU time) when the machine offers one,
and a launcher (``_launch.py``) that builds a private mount tree and pid namespace, sets the
rlimits, drops to the uid and execs the program with a scrubbed environment. Not root
(``isolation="user"``): the same minus uid, namespaces and cgroup; direct connections to a
dependency are then refused by nothing, only detected (``_detect``).

A monitor samples the candidate about ten times a second: how it ended (the launcher's status
file), the cgroup's OOM kills and refused forks, CPU seconds, processes, its scratch size,
and about once a second the bypass detector. Reaching a limit *contains* it: its processes
are killed (the launcher stays, idle, so the harness never sees the service "exit before it
was ready"), a restart by a crash fault is refused, and the report says why. When the run
ends the candidate gets SIGTERM and ``Limits.term_s`` to exit; then everything it started is
killed, its cgroup, uid, mounts, namespace and files removed.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import uuid
from contextlib import suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any

import trio

from chaos.errors import ConfigError, ServiceError
from chaos.sandbox import _mounts
from chaos.sandbox._cgroup import Cgroup, create_cgroup
from chaos.sandbox._detect import BypassDetector, Dependency, watch_tripwire
from chaos.sandbox._uids import SHARED_FOLDERS, UidLease, lease_uid, processes_of, remove_owned
from chaos.sandbox.candidate import (
    BYPASS,
    CPU,
    FILE_SIZE,
    IGNORED_SIGTERM,
    MEMORY,
    PROCESSES,
    Candidate,
    Program,
    tree_sha256,
)
from chaos.services import (
    ManagedProcess,
    SkewFile,
    default_run_parent,
    libfaketime_library,
    open_process_service,
    registry,
)
from chaos.services._netns import NetNamespace
from chaos.services._reaper import family, read_entry, signal_family
from invariants.history import SERVICE_PREFIX

if TYPE_CHECKING:
    from chaos.context import RunContext

LAUNCHER = Path(__file__).resolve().with_name("_launch.py")
_TICK_S = 0.1
_REAP_PATIENCE_S = 15.0
_DETECT_EVERY = 10  # ticks
_MAX_LOG_LINES = 20_000
_OOM_WORDS = re.compile(r"MemoryError|Cannot allocate memory|out of memory|bad_alloc", re.I)
_ADDRESS = re.compile(r"(?:\[([0-9a-fA-F:]+)\]|([A-Za-z0-9.\-]+)):(\d{1,5})")
_libc = ctypes.CDLL(None, use_errno=True)
_MNT_DETACH = 2


ISOLATIONS = ("root", "uid", "user")
_namespaces: bool | None = None


def namespaces_available() -> bool:
    """Whether this process may create mount, pid and network namespaces (root, and
    CAP_SYS_ADMIN: a default Docker container has not). Probed once, in a child."""
    global _namespaces
    if _namespaces is None:
        if os.geteuid() != 0:
            _namespaces = False
        else:
            probe = (
                "import ctypes,sys;l=ctypes.CDLL(None,use_errno=True);"
                "sys.exit(0 if l.unshare(0x40000000|0x20000000|0x00020000)==0 else 1)"
            )
            done = subprocess.run(
                [sys.executable, "-I", "-S", "-c", probe], check=False, capture_output=True
            )
            _namespaces = done.returncode == 0
    return _namespaces


def default_isolation() -> str:
    """root (namespaces, own uid, cgroup) when possible, else uid (own uid, rlimits) as
    root without namespaces, else user (rlimits and detection only)."""
    if os.geteuid() != 0:
        return "user"
    return "root" if namespaces_available() else "uid"


class ProcessSandbox:
    """Runs candidates as sandboxed child processes (see the module docstring)."""

    name = "process"

    def __init__(self, isolation: str | None = None) -> None:
        if isolation not in (None, *ISOLATIONS):
            raise ConfigError(
                f"--isolation must be one of {', '.join(ISOLATIONS)}, got {isolation!r}"
            )
        self.requested = isolation
        self.isolation = isolation or default_isolation()

    def check(self, program: Program | None = None) -> None:
        if not sys.platform.startswith("linux"):
            raise ConfigError("the process sandbox needs Linux")
        if self.isolation in ("root", "uid") and os.geteuid() != 0:
            raise ConfigError(f"--isolation {self.isolation} needs the harness to run as root")
        if self.isolation == "root" and not namespaces_available():
            raise ConfigError(
                "--isolation root needs namespaces (CAP_SYS_ADMIN); this machine refuses them"
            )
        if self.isolation == "uid" and program is not None and program.kind == "python":
            # the interpreter as the candidate starts it (a virtual environment's link) and
            # the real one it leads to
            started = Path(sys.executable)
            closed = _closed_to_others(started.parent) or _closed_to_others(started.resolve())
            if closed is not None:
                raise ConfigError(
                    f"--isolation uid: the candidate's own uid cannot reach Python "
                    f"({closed} is closed to other users); install Python where every user "
                    "can run it, or use --isolation root"
                )

    async def start(
        self,
        ctx: RunContext,
        candidate: Candidate,
        name: str,
        env: dict[str, str],
        ready_line: str | None,
        wait: bool,
    ) -> ManagedProcess:
        site = _Site(ctx, candidate, name, self.isolation)
        return await site.start(env, ready_line, wait)


def _copy_program(candidate: Candidate, into: Path) -> None:
    """A root-owned, world-readable copy, whose hash the report carries: what runs is what
    the grade hashed (the grade checks it), whatever changes the original meanwhile."""
    into.mkdir(mode=0o755)
    for source, relative in candidate.program.files():
        target = into / relative
        target.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
        shutil.copyfile(source, target)
        mode = 0o755 if os.access(source, os.X_OK) else 0o644
        target.chmod(mode)
    for folder in [into, *(p for p in into.rglob("*") if p.is_dir())]:
        folder.chmod(0o755)
    program = candidate.program
    copied = into / program.path.name if program.path.is_file() else into
    candidate.report.sha256 = tree_sha256(copied)


def _named_addresses(env: dict[str, str]) -> set[tuple[str, int]]:
    named: set[tuple[str, int]] = set()
    for value in env.values():
        for m in _ADDRESS.finditer(value):
            named.add((m.group(1) or m.group(2), int(m.group(3))))
    return named


def candidate_links(proxies: dict[str, Any], env: dict[str, str]) -> list[str]:
    """The links whose listen address the candidate's environment holds (it dials them)."""
    named = _named_addresses(env)
    found = []
    for name, proxy in proxies.items():
        host, _, port = proxy.listen.rpartition(":")
        if (host, int(port)) in named or ("localhost", int(port)) in named:
            found.append(name)
    return found


def inbound_links(proxies: dict[str, Any], env: dict[str, str], outbound: list[str]
                  ) -> list[str]:  # fmt: skip
    """The links into the candidate: those whose upstream is a loopback port its
    environment names (``PORT=8080`` or an address): it is the server there, and their
    clients (the workload) reach it through them (the proxy dials into its namespace)."""
    ports = {port for _, port in _named_addresses(env)}
    for value in env.values():
        if value.strip().isdigit():
            ports.add(int(value))
    found = []
    for name, proxy in proxies.items():
        host, _, port = proxy.upstream.rpartition(":")
        if name in outbound or host not in ("127.0.0.1", "localhost", "::1", "[::1]"):
            continue
        if int(port) in ports:
            found.append(name)
    return found


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


def _closed_to_others(path: Path) -> Path | None:
    """The first folder on the way to ``path`` (or the file itself) another user cannot
    pass (or run), if any."""
    for folder in reversed(path.parents):
        if not folder.stat().st_mode & stat.S_IXOTH:
            return folder
    mode = path.stat().st_mode
    return None if mode & stat.S_IXOTH and mode & stat.S_IROTH else path


def _tasks_of(uid: int) -> int:
    """Threads of every process of ``uid`` (what RLIMIT_NPROC counts)."""
    total = 0
    for pid in processes_of(uid):
        try:
            total += len(os.listdir(f"/proc/{pid}/task"))
        except OSError:
            continue
    return total


def _du(path: Path, limit: int = 20_000) -> int:
    total, seen = 0, 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            seen += 1
            if seen > limit:
                return total
            with suppress(OSError):
                total += os.lstat(os.path.join(root, name)).st_blocks * 512
    return total


def _sandbox_dir(name: str) -> Path:
    """A fresh folder for one candidate, written down with the run's registration (so
    ``chaos gc`` removes it if the harness dies) when there is one."""
    registration = registry.current()
    if registration is not None:
        return registration.make_dir(default_run_parent(), f"chaos-sandbox-{name}-")
    return Path(tempfile.mkdtemp(prefix=f"chaos-sandbox-{name}-", dir=default_run_parent()))


class _Site:
    """One candidate in one run: everything the process sandbox made for it."""

    def __init__(self, ctx: RunContext, candidate: Candidate, name: str, isolation: str) -> None:
        self.ctx = ctx
        self.candidate = candidate
        self.name = name
        self.root = isolation == "root"
        self.isolation = isolation
        self.limits = candidate.limits
        self.report = candidate.report
        self.report.isolation = isolation
        self.dir = _sandbox_dir(name)
        self.status_path = self.dir / "status.jsonl"
        self.flag = self.dir / "contained"
        self.t0 = trio.current_time()
        self.process: ManagedProcess | None = None
        self.cgroup: Cgroup | None = None
        self.uid: UidLease | None = None
        self.netns: NetNamespace | None = None
        self.scratch_mounted = False
        self.detector: BypassDetector | None = None
        self.tripwires: list[tuple[trio.socket.SocketType, str]] = []
        #: Links whose upstream the candidate serves (tenants' API): dialled into it.
        self.inbound: list[str] = []
        self.gone: set[int] = set()
        self.exited: set[int] = set()
        self.status_offset = 0
        self.ready_start = 0
        self.start_times: dict[int, float] = {}
        self.given_up: set[int] = set()
        self.cpu_seen: dict[tuple[int, int], float] = {}
        self.lines = 0
        self.stopping = False
        self.stderr_tail: list[str] = []

    # -- setup --------------------------------------------------------------------------

    async def start(
        self, env: dict[str, str], ready_line: str | None, wait: bool
    ) -> ManagedProcess:
        stack = self.ctx.stack
        stack.push_async_callback(self._cleanup)  # first in, last out: after the process
        if self.isolation == "uid":  # its scratch and program are reached by path
            self.dir.chmod(0o711)
        scratch = self._scratch()
        _copy_program(self.candidate, self.dir / "program")
        clock = self.dir / "clock"
        clock.mkdir(mode=0o755)
        skew = SkewFile(clock / "faketime")
        links = self._candidate_links(env)
        self.inbound = self._inbound_links(env, links)
        self.detector = BypassDetector(self._dependencies())
        for proxy in self.ctx.proxies.proxies.values():
            stack.callback(proxy.on_connection(self._proxied))
        if self.root:
            self.netns = NetNamespace()
            self._listen(links)
            for name in self.inbound:  # the candidate serves them inside its namespace
                proxy = self.ctx.proxies.proxies[name]
                proxy.dialer = self.netns.dial
                stack.callback(setattr, proxy, "dialer", None)
        if self.uid is not None:
            limits = self.limits
            self.cgroup = create_cgroup(
                f"chaos-{uuid.uuid4().hex[:12]}", limits.memory_mb << 20, limits.processes
            )
        shared = None
        if not self.root:
            # the machine's /dev/shm: libfaketime would make a pair per candidate process,
            # left behind by every crash; one pair of its own, removed however it ends
            # (with a root of its own, its /dev/shm is a private tmpfs)
            owner = (self.uid.uid, self.uid.gid) if self.uid else None
            shared = stack.enter_context(registry.open_faketime_shared("candidate", owner))
        config = self._config(env, scratch, skew, shared)
        path = self.dir / "launch.json"
        path.write_text(json.dumps(config))
        path.chmod(0o600)

        nursery = await stack.enter_async_context(trio.open_nursery())
        stack.callback(nursery.cancel_scope.cancel)
        nursery.start_soon(self._monitor)
        for sock, what in self.tripwires:
            nursery.start_soon(self._tripwire, sock, what)

        holder: list[ManagedProcess] = []

        def sink(service: str, stream: str, line: str) -> None:
            starts = holder[0].starts if holder else 1
            if ready_line is not None and ready_line in line:
                self.ready_start = starts
            if stream == "stderr":
                self.stderr_tail = [*self.stderr_tail[-19:], line]
            self.lines += 1
            if self.lines <= _MAX_LOG_LINES:  # never an @op: a candidate writes no evidence
                self.ctx.recorder.record(
                    f"{SERVICE_PREFIX}{service}", "info", "log", line[:2000], stream=stream
                )
            elif self.lines == _MAX_LOG_LINES + 1:
                self.ctx.recorder.record(
                    f"{SERVICE_PREFIX}{service}", "info", "log",
                    f"(output truncated after {_MAX_LOG_LINES} lines)", stream=stream,
                )  # fmt: skip

        async def ready() -> bool:
            process = holder[0] if holder else None
            start = process.starts if process else 1
            launcher = process.pid if process else None
            since = self.start_times.setdefault(start, trio.current_time())
            if ready_line is None or self.ready_start >= start:
                return True
            if self.report.contained or launcher in self.gone:
                self._give_up(start, "it ended before it printed its ready line")
                return True
            if trio.current_time() - since > self.limits.ready_s:
                self._give_up(start, f"no ready line within {self.limits.ready_s:g} s")
                return True
            return False

        process = await stack.enter_async_context(
            open_process_service(
                self.name,
                [sys.executable, "-I", "-S", str(LAUNCHER), str(path)],
                log_sink=sink,
                ready=ready,
                ready_timeout=self.limits.ready_s + 30,
                faketime=skew,
                on_exit=self._on_exit,
                stop_grace=self.limits.term_s + 1,
                wait_ready=False,
            )
        )
        holder.append(process)
        self.process = process
        stack.push_async_callback(self._stop)
        if wait:
            await process.ready()
        return process

    def _scratch(self) -> Path:
        scratch = self.dir / "scratch"
        scratch.mkdir(mode=0o700)
        if self.isolation in ("root", "uid"):
            self.uid = lease_uid()
        if self.root and self.uid is not None:
            size = self.limits.file_size_mb << 20
            data = f"size={size},mode=0700,uid={self.uid.uid},gid={self.uid.gid}"
            if _libc.mount(b"tmpfs", os.fsencode(scratch), b"tmpfs", 2 | 4, data.encode()) != 0:
                err = os.strerror(ctypes.get_errno())
                raise ServiceError(f"sandbox: cannot mount the scratch tmpfs: {err}")
            self.scratch_mounted = True
        tmp = scratch / "tmp"
        tmp.mkdir(mode=0o700)
        if self.uid is not None:
            os.chown(tmp, self.uid.uid, self.uid.gid)
            os.chown(scratch, self.uid.uid, self.uid.gid)
        return scratch

    def _candidate_links(self, env: dict[str, str]) -> list[str]:
        return candidate_links(self.ctx.proxies.proxies, env)

    def _inbound_links(self, env: dict[str, str], outbound: list[str]) -> list[str]:
        return inbound_links(self.ctx.proxies.proxies, env, outbound)

    def _dependencies(self) -> list[Dependency]:
        deps: list[Dependency] = []
        for service in getattr(self.ctx, "dependencies", []):
            kind = type(service).__name__
            if kind == "PostgresService":
                deps.append(Dependency("postgres", (service.host, service.port),
                                       postgres_dsn=service.dsn))  # fmt: skip
            elif kind == "NatsService":
                monitor = (
                    f"http://{service.host}:{service.monitor_port}"
                    if service.monitor_port
                    else None
                )
                deps.append(Dependency("nats", (service.host, service.port),
                                       nats_monitor=monitor))  # fmt: skip
        known = {d.address for d in deps}
        for name, proxy in self.ctx.proxies.proxies.items():
            if name in self.inbound:
                continue  # the candidate's own server, not a dependency
            host, _, port = proxy.upstream.rpartition(":")
            if (host, int(port)) not in known:
                known.add((host, int(port)))
                deps.append(Dependency(f"the upstream of link {name}", (host, int(port))))
        return deps

    def _proxied(self, conn: Any) -> None:
        if self.detector is not None:
            with suppress(OSError):
                host, port = conn.server.socket.getsockname()[:2]
                self.detector.proxied.add((str(host), int(port)))

    def _listen(self, links: list[str]) -> None:
        """Inside the namespace: each candidate link's listener, and tripwires on the ports
        of the real servers (anything else there is refused)."""
        assert self.netns is not None
        proxies = self.ctx.proxies.proxies
        addresses: list[tuple[str, int]] = []
        for name in links:
            host, _, port = proxies[name].listen.rpartition(":")
            addresses.append((host, int(port)))
        wires: dict[int, str] = {}
        assert self.detector is not None
        for dep in self.detector.dependencies:
            dep_port = dep.address[1]
            if dep_port not in {p for _, p in addresses}:
                wires.setdefault(dep_port, f"{dep.name} at {dep.address[0]}:{dep_port}")
        sockets = self.netns.listen(addresses + [("0.0.0.0", p) for p in wires])
        for name, sock in zip(links, sockets, strict=False):
            proxies[name].serve_also(trio.socket.from_stdlib_socket(sock))
        for sock, (_port, what) in zip(sockets[len(links) :], wires.items(), strict=True):
            self.tripwires.append((trio.socket.from_stdlib_socket(sock), what))

    def _config(
        self, env: dict[str, str], scratch: Path, skew: SkewFile, shared: str | None
    ) -> dict[str, Any]:
        limits = self.limits
        program = self.candidate.program
        entry = program.entry or program.path.name
        try:
            faketime: Path | None = libfaketime_library()
        except ServiceError:
            faketime = None
        if self.root:
            home, tmp, where = _mounts.SCRATCH, "/tmp", _mounts.PROGRAM
            clock_file = f"{_mounts.RUN}/clock/{skew.path.name}"
            preload = f"{_mounts.RUN}/{faketime.name}" if faketime else None
        else:
            home, tmp, where = str(scratch), str(scratch / "tmp"), str(self.dir / "program")
            clock_file = str(skew.path)
            preload = str(faketime) if faketime else None
        # With a root of its own, the real interpreter (its prefix and the task's libraries
        # are mounted); without, this one as started: from a virtual environment, the
        # environment's packages (resolving the link would leave them behind)
        python = str(Path(sys.executable).resolve()) if self.root else sys.executable
        argv = (
            [python, "-s", f"{where}/{entry}"] if program.kind == "python" else [f"{where}/{entry}"]
        )
        child_env = {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "HOME": home,
            "TMPDIR": tmp,
            "LANG": "C.UTF-8",
            "PYTHONUNBUFFERED": "1",
            **env,
        }
        if preload:
            child_env.update(
                LD_PRELOAD=preload,
                FAKETIME_TIMESTAMP_FILE=clock_file,
                FAKETIME_NO_CACHE="1",
                DONT_FAKE_MONOTONIC="1",
                FAKETIME_FORCE_MONOTONIC_FIX="0",
            )
            if shared is not None:
                child_env["FAKETIME_SHARED"] = shared
        cpu = int(limits.cpu_s) + 1
        rlimits: dict[str, list[int]] = {
            "cpu": [cpu, cpu + 1],
            "fsize": [limits.file_size_mb << 20] * 2,
            "nofile": [limits.open_files] * 2,
            "core": [0, 0],
        }
        if self.uid is not None:
            rlimits["nproc"] = [limits.processes] * 2
        else:  # the harness's uid: its own processes and threads count too
            rlimits["nproc"] = [_tasks_of(os.getuid()) + limits.processes] * 2
        if self.cgroup is None or not self.cgroup.limits_memory:
            rlimits["as"] = [limits.memory_mb << 20] * 2
        config: dict[str, Any] = {
            "mode": self.isolation,
            "status": str(self.status_path),
            "contained": str(self.flag),
            "netns": self.netns.path if self.netns else None,
            "cgroups": self.cgroup.procs_files if self.cgroup else [],
            "uid": self.uid.uid if self.uid else None,
            "gid": self.uid.gid if self.uid else None,
            "rlimits": rlimits,
            "cwd": home,
            "argv": argv,
            "env": child_env,
        }
        if self.root:
            config["root"] = _mounts.mount_plan(
                root_dir=self._root_dir(),
                scratch=scratch,
                program=self.dir / "program",
                clock_dir=skew.path.parent,
                faketime_library=faketime,
                libraries=self.candidate.libraries,
                hidden=self._hidden(),
            )
        return config

    def _root_dir(self) -> Path:  # the mount point of the candidate's root tmpfs
        root = self.dir / "root"
        root.mkdir(mode=0o755)
        return root

    def _hidden(self) -> tuple[Path, ...]:
        project = Path(__file__).resolve().parents[2]
        return (*self.candidate.hidden, project, self.ctx.scenario.path, self.ctx.run_dir)

    # -- while it runs ------------------------------------------------------------------

    def now(self) -> float:
        return trio.current_time() - self.t0

    def _record(self, f: str, value: Any) -> None:
        self.ctx.recorder.record(f"{SERVICE_PREFIX}{self.name}", "info", f, value)

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

    def contain(self, reason: str, detail: str) -> None:
        """Stop the candidate for ``reason``: record it, refuse restarts, kill its processes."""
        self.flag.touch()
        if self.report.contain(reason, detail, self.now()):
            self._record("contained", {"reason": reason, "detail": detail})
        self._kill_candidate()

    def _candidate_pids(self) -> set[int]:
        """Every process of the candidate (the launcher, which is ours, excluded)."""
        pids: set[int] = set()
        if self.process is not None and self.process.pid is not None:
            pids.update(family(self.process.pid))
        if self.cgroup is not None:
            pids.update(self.cgroup.members())
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
            self._read_status()
            self._check_resources(tick)
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
        if cpu >= limits.cpu_s:
            self.contain(CPU, f"used {cpu:.1f} CPU seconds (limit {limits.cpu_s:g})")
        if threads >= limits.processes:  # the rlimit may refuse before the cgroup does
            self.contain(PROCESSES, f"reached its limit of {limits.processes} processes and "
                                    "threads")  # fmt: skip
        if tick % 5 == 0:
            scratch = self.dir / "scratch"
            if self.scratch_mounted:
                st = os.statvfs(scratch)
                used = (st.f_blocks - st.f_bfree) * st.f_frsize
                full = st.f_bavail * st.f_frsize < (1 << 20)
            else:
                used = _du(scratch)
                full = used >= limits.file_size_mb << 20
            if full:
                self.contain(FILE_SIZE, f"filled its scratch directory ({used >> 20} MiB of "
                                        f"{limits.file_size_mb})")  # fmt: skip

    def _sample(self) -> tuple[float, int]:
        """(CPU seconds so far over every process it ever had, threads now)."""
        cgroup_cpu = self.cgroup.cpu_s() if self.cgroup is not None else None
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

    # -- the end ------------------------------------------------------------------------

    async def _stop(self) -> None:
        """SIGTERM, ``term_s`` to exit, else contained; runs before the service is closed."""
        self.stopping = True
        process = self.process
        with trio.CancelScope(shield=True):
            self._read_status()
            if process is None or not process.running or process.pid in self.gone:
                return
            if process.paused:
                process.resume()
            process.send_signal(signal.SIGTERM)
            with trio.move_on_after(self.limits.term_s):
                while process.pid not in self.gone:
                    await trio.sleep(0.02)
                    self._read_status()
                return
            if not self.flag.exists():
                self.contain(
                    IGNORED_SIGTERM, f"still running {self.limits.term_s:g} s after SIGTERM"
                )

    async def _cleanup(self) -> None:
        """After the service is closed: final readings, then remove everything it had."""
        with trio.CancelScope(shield=True):
            with suppress(ServiceError):
                self._read_status()
            self._sample()
            deadline = trio.current_time() + _REAP_PATIENCE_S
            while True:  # a fork bomb's hundreds of processes take a moment to die
                gone = self.cgroup is None or self.cgroup.try_remove()
                gone = (self.uid is None or self.uid.kill_once()) and gone
                if gone or trio.current_time() > deadline:
                    break
                await trio.sleep(0.05)
            if not gone:
                self.report.notes.append(
                    f"processes or a cgroup of it survived {_REAP_PATIENCE_S:g} s of SIGKILL"
                )
            self._remove()

    def _remove(self) -> None:
        if self.uid is not None:
            # what the candidate's uid made in the machine's shared folders (with uid
            # isolation it sees them: e.g. libfaketime's faketime_shm_<pid>, never removed by
            # a killed process); the uid is this run's alone until released
            remove_owned(self.uid.uid, SHARED_FOLDERS)
            self.uid.release()
        if self.detector is not None:
            self.detector.close()
        for sock, _ in self.tripwires:
            sock.close()
        if self.netns is not None:
            self.netns.close()
        if self.scratch_mounted:
            _libc.umount2(os.fsencode(self.dir / "scratch"), _MNT_DETACH)
        shutil.rmtree(self.dir, ignore_errors=True)


__all__ = [
    "LAUNCHER",
    "ProcessSandbox",
    "candidate_links",
    "default_isolation",
    "inbound_links",
    "namespaces_available",
]
