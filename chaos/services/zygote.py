"""A zygote: a pre-imported Python that forks a scenario's own services instead of exec'ing.

::

    warm worker (child subreaper) ──spawn──► zygote: imports Scenario.zygote_preload, waits
        │   request: argv [python, -m, MODULE, ...], env, cwd + stdout/stderr fds (SCM_RIGHTS)
        │                                      └─fork─► intermediate ─fork─► service; exits
        └─ the service is re-parented to the warm worker: pid, waitpid/pidfd, exit code

A service costs a fresh interpreter's start-up and imports (the payments consumer ~0.15
CPU-s, most of it psycopg, asyncio, nats-py); a fork of the zygote does not. Only warm
workers use one, only for scenarios that list modules in ``Scenario.zygote_preload``, and
only for ``RunContext.start_service`` / ``run_to_completion`` starts of ``[sys.executable,
"-m", MODULE, ...]`` whose interpreter-relevant environment matches the zygote's; a graded
candidate's program (``chaos.sandbox``) never is. Anything else, or a zygote that failed,
takes the exec path. ``CHAOS_ZYGOTE=0`` turns it off.

The four things a fork of a pre-started interpreter would lose, and how they are kept:

- clock skew: the zygote is started with libfaketime preloaded, ``FAKETIME_NO_CACHE=1`` and a
  neutral "+0" timestamp file; libfaketime looks ``FAKETIME_TIMESTAMP_FILE`` up with getenv()
  on every clock call, so the service's own skew file (set in its environment after the
  fork) is what it follows, changes included (tests/services/test_zygote.py).
- cleanup: the zygote carries the warm worker's registry marker; a forked service's
  ``/proc/PID/environ`` is the zygote's, so a SIGKILLed worker's zygote and services are
  reaped by the next command; each service is also written down in its run's registration
  by pid and start time (as every service is) and stopped through its pid as before.
- exit status: the service is the harness's child (re-parented, the harness being a child
  subreaper), waited on with a pidfd and ``waitpid`` as any child.
- parent death: the service sets ``PR_SET_PDEATHSIG`` (SIGKILL) once re-parented, then checks
  that its parent is the harness (else exits).
"""

from __future__ import annotations

import array
import contextvars
import json
import os
import signal
import socket
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager, contextmanager
from pathlib import Path

import trio

from chaos.services import registry
from chaos.services._reaper import become_subreaper, read_entry
from chaos.services._spawn import DEVNULL, Child, spawn
from chaos.services.clock import SkewFile

ENV = "CHAOS_ZYGOTE"
_MAIN = Path(__file__).with_name("_zygote_main.py")
_START_TIMEOUT_S = 60.0
_FORK_TIMEOUT_S = 10.0
_POLL_S = 0.02
#: Environment variables the interpreter or libfaketime read at start-up: a request is
#: served only when its values equal the zygote's (every PYTHON* variable too).
_STARTUP_VARS = (
    "LD_PRELOAD",
    "LD_LIBRARY_PATH",
    "FAKETIME_NO_CACHE",
    "DONT_FAKE_MONOTONIC",
    "FAKETIME_FORCE_MONOTONIC_FIX",
    "PYTHONUNBUFFERED",
)

_current: contextvars.ContextVar[Zygote | None] = contextvars.ContextVar(
    "chaos_zygote", default=None
)


def enabled() -> bool:
    """Whether warm workers fork opted-in services from a zygote: yes unless ``CHAOS_ZYGOTE``
    is ``0``/``no``/``off``/``false``."""
    return os.environ.get(ENV, "1").strip().lower() not in {"0", "no", "off", "false"}


def current() -> Zygote | None:
    """The zygote of the run in progress (None: exec every service)."""
    return _current.get()


@contextmanager
def using(zygote: Zygote | None) -> Iterator[None]:
    """Make ``zygote`` the one ``current()`` returns inside the block."""
    token = _current.set(zygote)
    try:
        yield
    finally:
        _current.reset(token)


class ZygoteError(Exception):
    """The zygote could not fork a service (the caller takes the exec path)."""


class ForkedChild(Child):
    """A service forked by the zygote and re-parented to this process: a ``Child``."""

    def __init__(
        self, pid: int, stdout: trio.lowlevel.FdStream, stderr: trio.lowlevel.FdStream
    ) -> None:
        self.pid = pid
        self.stdout = stdout
        self.stderr = stderr
        self._code: int | None = None
        try:
            self._pidfd: int | None = os.pidfd_open(pid)
        except (AttributeError, OSError):
            self._pidfd = None
        self._wait_lock = trio.Lock()

    def _poll(self) -> int | None:
        if self._code is None:
            try:
                got, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:  # not ours: cannot happen once re-parented
                self._code = 255
            else:
                if got:
                    self._code = os.waitstatus_to_exitcode(status)
        return self._code

    @property
    def returncode(self) -> int | None:
        return self._poll()

    async def wait(self) -> int:
        async with self._wait_lock:
            if self._poll() is None and self._pidfd is not None:
                await trio.lowlevel.wait_readable(self._pidfd)
            while (code := self._poll()) is None:  # noqa: ASYNC110 - no pidfd: poll
                await trio.sleep(_POLL_S)
            if self._pidfd is not None:
                fd, self._pidfd = self._pidfd, None
                os.close(fd)
            return code

    def send_signal(self, sig: int) -> None:
        if self._poll() is None:  # not reaped: the pid is still this service's
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass


class Zygote:
    """A running zygote: ``accepts(argv, env)``, ``await fork(argv, env, cwd)``."""

    def __init__(
        self,
        child: Child,
        sock: trio.socket.SocketType,
        env: Mapping[str, str],
        inherited_preload: str | None,
    ) -> None:
        self.child = child
        self._sock = sock
        self._env = dict(env)
        self._inherited_preload = inherited_preload
        self._lock = trio.Lock()
        self.broken = False
        self.forks = 0

    def accepts(self, argv: Sequence[str], env: Mapping[str, str]) -> bool:
        """True for ``[this python, -m, MODULE, ...]`` with the zygote's start-up variables
        (a request without libfaketime is served too: it keeps a neutral "+0" clock)."""
        if self.broken or len(argv) < 3 or argv[0] != sys.executable or argv[1] != "-m":
            return False
        keys = {*_STARTUP_VARS, *(k for k in {*env, *self._env} if k.startswith("PYTHON"))}
        skewed = "FAKETIME_TIMESTAMP_FILE" in env
        for key in keys:
            if key in {"FAKETIME_NO_CACHE", "DONT_FAKE_MONOTONIC", "FAKETIME_FORCE_MONOTONIC_FIX"}:
                if skewed and env.get(key) != self._env.get(key):
                    return False
            elif key == "LD_PRELOAD" and not skewed:
                if env.get(key) != self._inherited_preload:
                    return False
            elif env.get(key) != self._env.get(key):
                return False
        return True

    async def fork(self, argv: Sequence[str], env: Mapping[str, str], cwd: Path | None) -> Child:
        """Fork ``argv`` with ``env`` in ``cwd``; its stdout/stderr are pipes (trio streams).
        ``ZygoteError`` if the zygote cannot (the caller then execs)."""
        request = json.dumps(
            {"argv": list(argv), "env": dict(env), "cwd": str(cwd) if cwd else os.getcwd()}
        ).encode()
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        answer: dict[str, object] = {"error": "no answer"}
        try:
            # Shielded: a request sent must get its answer, or a service would run unknown.
            with trio.CancelScope(shield=True):
                async with self._lock:
                    with trio.move_on_after(_FORK_TIMEOUT_S):
                        fds = array.array("i", [out_w, err_w])
                        await self._sock.sendmsg(
                            [request], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)]
                        )
                        reply = await self._sock.recv(65536)
                        answer = json.loads(reply) if reply else {"error": "it is gone"}
            pid = answer.get("pid")
            if not isinstance(pid, int):
                self.broken = True
                raise ZygoteError(f"the zygote did not fork {argv[2]}: {answer.get('error')}")
        except (OSError, ValueError) as exc:
            self.broken = True
            os.close(out_r)
            os.close(err_r)
            raise ZygoteError(f"the zygote did not fork {argv[2]}: {exc}") from exc
        except BaseException:
            os.close(out_r)
            os.close(err_r)
            raise
        finally:
            os.close(out_w)
            os.close(err_w)
        entry = read_entry(pid)
        child = ForkedChild(pid, trio.lowlevel.FdStream(out_r), trio.lowlevel.FdStream(err_r))
        if entry is None or entry.ppid != os.getpid():  # pragma: no cover - not a subreaper
            self.broken = True
            child.send_signal(signal.SIGKILL)
            raise ZygoteError(f"the forked {argv[2]} is not this process's child")
        self.forks += 1
        return child


@asynccontextmanager
async def open_zygote(preload: Sequence[str], run_dir: Path) -> AsyncIterator[Zygote]:
    """Start a zygote that imports ``preload`` (``ZygoteError`` if it cannot); it runs under
    libfaketime with a neutral skew file in ``run_dir`` and the current registration's
    marker, and exits when the block ends."""
    if not become_subreaper():
        raise ZygoteError("this process cannot be a child subreaper")
    neutral = SkewFile(run_dir / "zygote.faketime")
    env = {**os.environ, **neutral.env(), "PYTHONUNBUFFERED": "1"}
    registration = registry.current()
    async with AsyncExitStack() as stack:
        # libfaketime's pair: the run's, or one of the zygote's own outside a run (never
        # libfaketime's per-process files: the zygote ends with _exit, which skips the
        # library's destructor that removes them)
        if registration is not None:
            env["FAKETIME_SHARED"] = registration.faketime_shared()
            env.update(registration.marker_env())
        else:
            env["FAKETIME_SHARED"] = stack.enter_context(registry.open_faketime_shared("zygote"))
        async with _started_zygote(preload, env, registration) as zygote:
            yield zygote


@asynccontextmanager
async def _started_zygote(
    preload: Sequence[str], env: dict[str, str], registration: registry.Registration | None
) -> AsyncIterator[Zygote]:
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        child = spawn(
            [sys.executable, str(_MAIN), *preload],
            env=env,
            stdin=theirs.fileno(),
            stdout=DEVNULL,
            stderr=None,
            start_new_session=True,
        )
    except OSError as exc:
        ours.close()
        raise ZygoteError(f"the zygote could not start: {exc}") from exc
    finally:
        theirs.close()
    if registration is not None:
        registration.add_process(child.pid, "zygote")
    sock = trio.socket.from_stdlib_socket(ours)
    zygote = Zygote(child, sock, env, os.environ.get("LD_PRELOAD"))
    try:
        reply = b""
        with trio.move_on_after(_START_TIMEOUT_S):
            reply = await sock.recv(65536)
        answer = json.loads(reply) if reply else {"error": "it exited"}
        if answer.get("ready") is not True:
            raise ZygoteError(f"the zygote did not start: {answer.get('error', answer)}")
        yield zygote
    finally:
        with trio.CancelScope(shield=True):
            sock.close()  # the zygote exits at end of file
            with trio.move_on_after(2):
                await child.wait()
            if child.returncode is None:
                child.kill()
                await child.wait()


@asynccontextmanager
async def open_zygotes(
    run_dir: Path,
) -> AsyncIterator[Callable[[Sequence[str]], Awaitable[Zygote | None]]]:
    """``await get(preload)``: a zygote that imported ``preload``, started at the first ask
    (one per distinct list; a broken one is replaced); None when ``preload`` is empty, the
    zygote is turned off (``CHAOS_ZYGOTE=0``) or cannot start (said once on stderr). All
    exit when the block ends."""
    async with AsyncExitStack() as stack:
        zygotes: dict[tuple[str, ...], Zygote | None] = {}

        async def get(preload: Sequence[str]) -> Zygote | None:
            key = tuple(preload)
            if not key or not enabled():
                return None
            found = zygotes.get(key)
            if key not in zygotes or (found is not None and found.broken):
                try:
                    zygotes[key] = await stack.enter_async_context(open_zygote(key, run_dir))
                except ZygoteError as exc:
                    print(f"chaos: {exc}; services are exec'd", file=sys.stderr)
                    zygotes[key] = None
            return zygotes[key]

        yield get
