"""A child process run as a service: logs captured, readiness probed, faults, clean exit.

::

    open_process_service ─► spawn (own session) ─► pump stdout/stderr ─► log tail + log_sink
                                 │
                                 └─► ready probe (deadline) ─► yield ─► stop: SIGCONT,
                                                                          stop signal, grace,
                                                                          SIGKILL all, reap

The child leads its own session/process group; kill/pause/resume reach that group and every
descendant (see _reaper). Graceful stop signals go to the leader only. The child gets SIGKILL
if the harness dies (a parent-death signal, see _spawn) and carries its run's marker in its
environment (see registry), so nothing it leaves can outlive the next harness command.
"""

from __future__ import annotations

import math
import os
import signal
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import trio

from chaos.services import registry
from chaos.services._groups import unwrapped_errors
from chaos.services._incarnations import Incarnations
from chaos.services._logtail import LogTail, pump_lines
from chaos.services._reaper import ProcEntry, become_subreaper, family, reap_family, signal_family
from chaos.services._spawn import DEVNULL, PIPE, Child, spawn
from chaos.services.clock import SkewFile, release_faketime_state
from chaos.services.supervise import Record, RestartPolicy, supervise
from ground import _signals
from ground.errors import ConfigError, ServiceError

if TYPE_CHECKING:
    from chaos.services.zygote import Zygote

LogSink = Callable[[str, str, str], None]
"""`log_sink(service_name, stream, line)`, stream being "stdout" or "stderr"."""
ReadyProbe = Callable[[], Awaitable[bool]]
"""An async predicate that returns True once the service accepts work."""
ExitHook = Callable[[str, int, bool], None]
"""`on_exit(service_name, returncode, expected)`; expected is False when the service died."""

_POLL_INTERVAL = 0.01
_DRAIN_TIMEOUT = 0.5


@dataclass
class _Incarnation:
    """One start of the child: its trio process and what became of it."""

    proc: Child
    exited: trio.Event = field(default_factory=trio.Event)
    drained: trio.Event = field(default_factory=trio.Event)
    expected_exit: bool = False
    scope: trio.CancelScope = field(default_factory=lambda: trio.CancelScope(shield=True))


class ManagedProcess(Incarnations[_Incarnation]):
    """A running service child: pid, returncode, log tail and the faults that apply to it."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        *,
        nursery: trio.Nursery,
        env: Mapping[str, str] | None,
        cwd: Path | None,
        log_sink: LogSink | None,
        ready: ReadyProbe | None,
        ready_timeout: float,
        stop_signal: int,
        stop_grace: float,
        run_as: tuple[int, int] | None,
        faketime: SkewFile | None,
        on_exit: ExitHook | None,
        tail_lines: int,
        zygote: Zygote | None = None,
    ) -> None:
        self.name = name
        self._zygote = zygote
        self.argv = [str(a) for a in argv]
        self._nursery = nursery
        self._registration = registry.current()
        self._env = {**os.environ, **(env or {})}
        if faketime is not None:
            self._env.update(faketime.env())
            if self._registration is not None:
                self._env["FAKETIME_SHARED"] = self._registration.faketime_shared()
        if self._registration is not None:
            self._env.update(self._registration.marker_env())
        self._cwd = cwd
        self._log_sink = log_sink
        self._ready = ready
        self._ready_timeout = ready_timeout
        self._stop_signal = stop_signal
        self._stop_grace = stop_grace
        self._run_as = run_as
        self._on_exit = on_exit
        self.faketime = faketime
        self.tail = LogTail(tail_lines)
        self.starts = 0
        #: True while a supervisor restarts this service when it exits on its own
        #: (``chaos.services.supervise``): a restart that dies before it is ready is then
        #: the supervisor's to retry, not an error of whoever restarted it.
        self.supervised = False
        self._started = trio.Event()
        self._closing = False
        self._paused = False
        self._current: _Incarnation | None = None
        self._incarnations: list[_Incarnation] = []

    # -- state -------------------------------------------------------------------------

    @property
    def pid(self) -> int | None:
        """The pid of the current child (None before the first start)."""
        return self._current.proc.pid if self._current else None

    @property
    def returncode(self) -> int | None:
        """The current child's exit code, or None while it runs."""
        return self._current.proc.returncode if self._current else None

    @property
    def running(self) -> bool:
        return self._current is not None and self._current.proc.returncode is None

    def log_tail(self) -> str:
        return self.tail.text()

    # -- lifecycle ---------------------------------------------------------------------

    async def start(self, *, wait_ready: bool = True) -> bool:
        """Start the child (if not running) and wait until the ready probe passes (unless
        ``wait_ready`` is false: then ``await ready()`` later, e.g. for several at once).
        False when the harness killed this start before it was ready (a crash fault)."""
        if self.running:
            return True
        if self._closing:
            raise ServiceError(f"{self.name} is being stopped")
        become_subreaper()
        uid, gid = self._run_as if self._run_as is not None else (None, None)
        proc = await self._fork()
        try:
            proc = proc or spawn(
                self.argv,
                stdin=DEVNULL,
                stdout=PIPE,
                stderr=PIPE,
                env=self._env,
                cwd=self._cwd,
                start_new_session=True,
                user=uid,
                group=gid,
                extra_groups=None if self._run_as is None else [],
            )
        except OSError as exc:
            raise ServiceError(
                f"{self.name} could not start: {exc}", self.tail.text(), self.name
            ) from exc
        if self._registration is not None:
            self._registration.add_process(proc.pid, self.name)
        cur = _Incarnation(proc)
        self._current = cur
        self._incarnations.append(cur)
        self._paused = False
        self.starts += 1
        self._started.set()
        self._started = trio.Event()
        self._nursery.start_soon(self._watch, cur)
        if wait_ready:
            return await self._await_ready(cur)
        return True

    async def _fork(self) -> Child | None:
        """The child forked by the zygote, when there is one for this service (else None:
        exec as usual)."""
        zygote = self._zygote
        if zygote is None or self._run_as is not None or not zygote.accepts(self.argv, self._env):
            return None
        from chaos.services.zygote import ZygoteError

        try:
            return await zygote.fork(self.argv, self._env, self._cwd)
        except ZygoteError as exc:
            self.tail.add(f"(exec instead: {exc})")
            return None

    async def ready(self) -> bool:
        """Wait until the current child passes its ready probe (ServiceError if it cannot;
        False if the harness killed it first)."""
        if self._current is None:
            raise ServiceError(f"{self.name} has not been started")
        return await self._await_ready(self._current)

    def supervise(self, policy: RestartPolicy, record: Record) -> None:
        """Restart the service per ``policy`` whenever it exits on its own, until it is
        closed; ``record(f, value)`` is told of each restart (see ``supervise``)."""
        if not policy.restart or self.supervised:
            return
        self.supervised = True
        self._nursery.start_soon(supervise, self, policy, record)

    async def wait_started(self, after: int) -> None:
        """Until the service has been started more than ``after`` times in all."""
        while self.starts <= after:
            await self._started.wait()

    async def _watch(self, cur: _Incarnation) -> None:
        # Shielded: outside cancellation must not stop exit reporting; _close cancels it.
        with cur.scope:
            async with trio.open_nursery() as pumps:
                assert cur.proc.stdout is not None
                assert cur.proc.stderr is not None
                pumps.start_soon(pump_lines, cur.proc.stdout, self._emitter("stdout"))
                pumps.start_soon(pump_lines, cur.proc.stderr, self._emitter("stderr"))
                code = await cur.proc.wait()
                if self.faketime is not None:
                    release_faketime_state(cur.proc.pid)
                cur.exited.set()
                if self._on_exit is not None:
                    self._on_exit(self.name, code, cur.expected_exit)
            cur.drained.set()

    def _emitter(self, stream: str) -> Callable[[str], None]:
        def emit(line: str) -> None:
            self.tail.add(line, stream)
            if self._log_sink is not None:
                self._log_sink(self.name, stream, line)

        return emit

    async def _await_ready(self, cur: _Incarnation) -> bool:
        with trio.move_on_after(self._ready_timeout):
            while True:
                if cur.exited.is_set():
                    if cur.expected_exit:
                        # The harness killed it while it started (a crash fault during a
                        # restart): a fault like any other; whoever killed it starts it next.
                        return False
                    with trio.move_on_after(_DRAIN_TIMEOUT):
                        await cur.drained.wait()
                    raise ServiceError(
                        f"{self.name} exited with code {cur.proc.returncode} before it was "
                        f"ready: {self.tail.last(prefer_stderr=True)}",
                        self.tail.text(),
                        self.name,
                    )
                if self._ready is None or await self._ready():
                    return True
                await trio.sleep(_POLL_INTERVAL)
        raise ServiceError(
            f"{self.name} not ready after {self._ready_timeout:g}s: {self.tail.last()}",
            self.tail.text(),
            self.name,
        )

    async def wait(self) -> int:
        """Wait for the current child to exit; return its exit code."""
        if self._current is None:
            raise ServiceError(f"{self.name} has not been started")
        return await self._current.proc.wait()

    # -- faults ------------------------------------------------------------------------

    def _signal_service(self, sig: int, members: dict[int, ProcEntry] | None = None) -> None:
        """Signal the leader's process group and every descendant that left it (``members``:
        its family as the caller has just read it, else read here)."""
        cur = self._current
        if cur is None:
            return
        leader = cur.proc.pid
        if members is None:
            members = family(leader)
        if cur.proc.returncode is None:  # an unreaped leader keeps its pgid reserved
            try:
                os.killpg(leader, sig)
            except ProcessLookupError:
                pass
            members = {pid: e for pid, e in members.items() if e.pgid != leader}
        signal_family(members, sig)

    def send_signal(self, sig: int) -> None:
        """Send `sig` to the current child (the leader only)."""
        if self._current is not None and self._current.proc.returncode is None:
            self._current.proc.send_signal(sig)

    def pause(self) -> None:
        """SIGSTOP the whole service: its process group and all its descendants."""
        self._signal_service(signal.SIGSTOP)
        self._paused = self.running

    def resume(self) -> None:
        """SIGCONT the whole service."""
        self._signal_service(signal.SIGCONT)
        self._paused = False

    async def kill(self) -> None:
        """SIGKILL the whole service and reap it (a crash, as far as it knows)."""
        await self._kill({})

    async def _kill(self, known: dict[int, ProcEntry]) -> None:
        cur = self._current
        if cur is None:
            return
        now = family(cur.proc.pid)  # one read of /proc for both: it reads every process
        members = {**known, **now}
        if cur.proc.returncode is None:
            cur.expected_exit = True
        self._signal_service(signal.SIGKILL, now)
        self._paused = False
        await cur.proc.wait()
        await reap_family(members, cur.proc.pid)

    async def restart(self) -> bool:
        """Kill the child if it runs, then start the same argv with the same env again;
        False when the harness killed the new child before it was ready."""
        await self.kill()
        return await self.start()

    async def stop(self) -> None:
        """Graceful stop: SIGCONT, stop signal to the leader, grace period, then SIGKILL all."""
        cur = self._current
        if cur is None:
            return
        members = family(cur.proc.pid)
        if cur.proc.returncode is None:
            cur.expected_exit = True
            if self._paused:
                self._signal_service(signal.SIGCONT)
                self._paused = False
            self.send_signal(self._stop_signal)
            await _wait_or_hurry(cur.proc, self._stop_grace)
        await self._kill(members)

    async def _close(self) -> None:
        """Stop the child and its output pumps; runs shielded and bounded."""
        self._closing = True
        self.supervised = False
        with trio.CancelScope(shield=True):
            with trio.move_on_after(self._stop_grace + 10):
                await self.stop()
            if self._current is not None:
                with trio.move_on_after(_DRAIN_TIMEOUT):
                    await self._current.drained.wait()
        for cur in self._incarnations:
            cur.scope.cancel()
        self._nursery.cancel_scope.cancel()


async def _wait_or_hurry(proc: Child, grace: float) -> None:
    """Wait up to ``grace`` seconds for ``proc`` to exit, less if a second Ctrl-C (or
    SIGTERM) asks the harness to hurry."""
    with trio.move_on_after(grace):
        while not _signals.hurrying():
            with trio.move_on_after(0.1):
                await proc.wait()
                return


def _check_options(
    argv: Sequence[str], ready_timeout: float, stop_grace: float, tail_lines: int
) -> None:
    if isinstance(argv, str) or not argv:
        raise ConfigError(f"argv must be a non-empty list of strings, got {argv!r}")
    if not ready_timeout > 0:
        raise ConfigError(f"ready_timeout must be > 0, got {ready_timeout}")
    if not stop_grace >= 0:
        raise ConfigError(f"stop_grace must be >= 0, got {stop_grace}")
    if math.isinf(ready_timeout) or math.isinf(stop_grace):  # a cleanup must be bounded
        raise ConfigError(f"ready_timeout and stop_grace must be finite, got {ready_timeout}, "
                          f"{stop_grace}")  # fmt: skip
    if tail_lines < 1:
        raise ConfigError(f"tail_lines must be >= 1, got {tail_lines}")


@asynccontextmanager
async def open_process_service(
    name: str,
    argv: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    log_sink: LogSink | None = None,
    ready: ReadyProbe | None = None,
    ready_timeout: float = 30.0,
    stop_signal: int = signal.SIGTERM,
    stop_grace: float = 5.0,
    run_as: tuple[int, int] | None = None,
    faketime: SkewFile | None = None,
    on_exit: ExitHook | None = None,
    tail_lines: int = 200,
    wait_ready: bool = True,
    zygote: Zygote | None = None,
) -> AsyncIterator[ManagedProcess]:
    """Start `argv` as service `name`, wait until `ready`, stop it and reap it on exit.

    `env` adds to the harness's environment; `run_as` is a (uid, gid) to drop to;
    `faketime` makes the child's wall clock follow a SkewFile; `zygote` forks it from a
    pre-imported interpreter when it can (``chaos.services.zygote``), else it is exec'd.
    """
    _check_options(argv, ready_timeout, stop_grace, tail_lines)
    with unwrapped_errors():
        async with trio.open_nursery() as nursery:
            service = ManagedProcess(
                name,
                argv,
                nursery=nursery,
                env=env,
                cwd=cwd,
                log_sink=log_sink,
                ready=ready,
                ready_timeout=ready_timeout,
                stop_signal=stop_signal,
                stop_grace=stop_grace,
                run_as=run_as,
                faketime=faketime,
                on_exit=on_exit,
                tail_lines=tail_lines,
                zygote=zygote,
            )
            try:
                await service.start(wait_ready=wait_ready)
                yield service
            finally:
                await service._close()
