"""The pool of warm workers a batch dispatches to (``chaos.executor``'s local runs).

``WarmPool`` starts up to ``size`` worker processes (``python -m chaos.warm_worker``) when
first needed and sends each request to an idle one; ``WarmWorker`` is one such child seen
from the dispatcher: a request line out, an answer line back (the protocol is in
``chaos.warm_worker``). ``KeptWorker`` is the same child driven without trio, for a process
that keeps one between calls that are each their own ``trio.run`` or none (a Ray task's
worker process: ``chaos.executor_ray``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from collections import deque
from collections.abc import AsyncIterator, Iterable, Mapping
from contextlib import asynccontextmanager, suppress
from typing import Any

import trio

from chaos.services._spawn import PIPE, Child, spawn, with_pdeathsig
from chaos.stress import SWEEP_JOBS_ENV
from ground import _signals
from ground.errors import ChaosError, ConfigError


class WorkerGone(ChaosError):
    """The worker process ended before it answered."""


class WarmWorker:
    """A ``python -m chaos.warm_worker`` child: ``await worker.run(request)`` -> its answer.
    Open with ``open_warm_worker()``; one request at a time."""

    def __init__(self, child: Child, requests: trio.lowlevel.FdStream) -> None:
        self.child = child
        self._requests = requests
        self._buffer = bytearray()
        self._lock = trio.Lock()
        self.stderr_tail: list[str] = []
        #: Cancelled to let the worker go (a pool does it when the worker ended).
        self.scope = trio.CancelScope()

    @property
    def alive(self) -> bool:
        return self.child.returncode is None

    async def run(self, request: Mapping[str, Any]) -> dict[str, Any]:
        """Send one request, return the answer; ``WorkerGone`` if the worker ends first."""
        async with self._lock:
            try:
                await self._requests.send_all(json.dumps(dict(request)).encode() + b"\n")
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                raise WorkerGone(self._gone_message()) from None
            assert self.child.stdout is not None
            while b"\n" not in self._buffer:
                chunk = await self.child.stdout.receive_some(65536)
                if not chunk:
                    await self.child.wait()
                    raise WorkerGone(self._gone_message())
                self._buffer += chunk
            line, _, rest = bytes(self._buffer).partition(b"\n")
            self._buffer = bytearray(rest)
            answer: dict[str, Any] = json.loads(line)
            return answer

    def _gone_message(self) -> str:
        return _gone(self.child.returncode, self.stderr_tail)


def _gone(code: int | None, stderr_tail: Iterable[str]) -> str:
    lines = [line.strip(" |+-") for line in stderr_tail]
    lines = [line for line in lines if line]
    last = lines[-1] if lines else "no output"
    return f"the warm worker ended (exit code {code}): {last}"


#: The signals a warm worker stops on; a Ray worker blocks SIGINT, and a child inherits that.
_STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}


class KeptWorker:
    """A ``python -m chaos.warm_worker`` child driven without trio, kept by this process
    between calls: ``run(request)`` -> its answer, or None if it ended first
    (``gone_message()`` says how). One request at a time, from the thread that made it (it
    gets SIGTERM when that thread's process dies: it then stops its services and exits, as
    on Ctrl-C). ``close()`` closes its stdin: it stops its services and exits on its own,
    reaped by a later ``run`` or ``reap``."""

    def __init__(self) -> None:
        env = dict(os.environ)
        argv, preexec = with_pdeathsig(
            [sys.executable, "-m", "chaos.warm_worker"], signal.SIGTERM, env
        )
        stdin_r, self._stdin = os.pipe()
        self._stdout, stdout_w = os.pipe()
        stderr_r, stderr_w = os.pipe()
        mask = signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOP_SIGNALS)
        try:
            self.popen = subprocess.Popen(
                argv, stdin=stdin_r, stdout=stdout_w, stderr=stderr_w, env=env,
                start_new_session=True, preexec_fn=preexec,
            )  # fmt: skip
        except BaseException:
            for fd in (self._stdin, self._stdout, stderr_r):
                os.close(fd)
            raise
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
            for fd in (stdin_r, stdout_w, stderr_w):
                os.close(fd)
        self.pid = self.popen.pid
        self.stderr_tail: deque[str] = deque(maxlen=20)
        self._buffer = b""
        self._closed = False
        threading.Thread(target=self._drain, args=(stderr_r,), daemon=True).start()

    @property
    def alive(self) -> bool:
        return not self._closed and self.popen.poll() is None

    def _drain(self, fd: int) -> None:
        pending = b""
        with os.fdopen(fd, "rb", buffering=0) as stream:
            while chunk := stream.read(65536):
                pending += chunk
                *lines, pending = pending.split(b"\n")
                self.stderr_tail.extend(x.decode(errors="replace") for x in lines if x.strip())

    def run(self, request: Mapping[str, Any]) -> dict[str, Any] | None:
        """Send one request, return the answer; None if the worker ended first."""
        if self._closed:
            return None
        try:
            os.write(self._stdin, json.dumps(dict(request)).encode() + b"\n")
            while b"\n" not in self._buffer:
                chunk = os.read(self._stdout, 65536)
                if not chunk:
                    self.popen.wait()
                    return None
                self._buffer += chunk
        except OSError:  # its stdin closed: it ended
            self.popen.wait()
            return None
        except BaseException:  # interrupted mid-request: its answer would go to the next one
            self.close()
            raise
        line, _, self._buffer = self._buffer.partition(b"\n")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def gone_message(self) -> str:
        return _gone(self.popen.poll(), self.stderr_tail)

    def close(self) -> None:
        """Let it go: its stdin closed, it stops its services and exits."""
        if not self._closed:
            self._closed = True
            for fd in (self._stdin, self._stdout):
                with suppress(OSError):
                    os.close(fd)

    def reap(self, timeout: float | None = 0) -> bool:
        """Whether it has exited (and is reaped), waiting at most ``timeout`` seconds."""
        try:
            self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return False
        return True


async def _pump_stderr(worker: WarmWorker) -> None:
    stream = worker.child.stderr
    if stream is None:
        return
    pending = b""
    async with stream:
        while chunk := await stream.receive_some(65536):
            pending += chunk
            *lines, pending = pending.split(b"\n")
            worker.stderr_tail.extend(x.decode(errors="replace") for x in lines if x.strip())
            del worker.stderr_tail[:-20]


@asynccontextmanager
async def open_warm_worker(
    stop_grace_s: float = 60.0, concurrency: int | None = None
) -> AsyncIterator[WarmWorker]:
    """Start a worker process (own session; SIGTERM if this process dies); on exit close its
    stdin and wait for it to stop its services; if cancelled, interrupt it as Ctrl-C would.
    ``concurrency``: how many runs the batch keeps going at once (each trace records it)."""
    read, write = os.pipe()
    env = {**os.environ, SWEEP_JOBS_ENV: str(concurrency)} if concurrency else None
    try:
        child = spawn(
            [sys.executable, "-m", "chaos.warm_worker"],
            env=env,
            stdin=read,
            stdout=PIPE,
            stderr=PIPE,
            start_new_session=True,
            pdeathsig=signal.SIGTERM,
        )
    except BaseException:
        os.close(write)
        raise
    finally:
        os.close(read)
    requests = trio.lowlevel.FdStream(write)
    worker = WarmWorker(child, requests)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_pump_stderr, worker)
        try:
            yield worker
        except BaseException:
            with trio.CancelScope(shield=True):
                await requests.aclose()
                await _interrupt(child, stop_grace_s)
            raise
        else:
            with trio.CancelScope(shield=True):
                await requests.aclose()
                with trio.move_on_after(stop_grace_s):
                    await child.wait()
                    return
                await _interrupt(child, stop_grace_s)


async def _interrupt(child: Child, grace_s: float) -> None:
    if child.returncode is not None:
        await child.wait()
        return
    child.send_signal(signal.SIGINT)
    forwarded = False
    with trio.move_on_after(grace_s):
        while True:
            with trio.move_on_after(0.1):
                await child.wait()
                return
            if _signals.hurrying() and not forwarded:
                child.send_signal(signal.SIGINT)
                forwarded = True
    child.kill()
    await child.wait()


class WarmPool:
    """Up to ``size`` warm workers, started when first needed: ``await pool.run(request)``
    runs on an idle one. A worker that ended (crashed, killed) is replaced at the next
    request; its request's answer is ``WorkerGone``."""

    def __init__(self, nursery: trio.Nursery, size: int, concurrency: int | None = None) -> None:
        if size < 1:
            raise ConfigError(f"a warm pool needs at least one worker, got {size}")
        self._nursery = nursery
        self._limiter = trio.CapacityLimiter(size)
        self._idle: list[WarmWorker] = []
        self._stop = trio.Event()
        self.started = 0
        self._concurrency = concurrency

    async def _keep(self, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        async with open_warm_worker(concurrency=self._concurrency) as worker:
            self.started += 1
            task_status.started(worker)
            with worker.scope:
                await self._stop.wait()

    async def run(self, request: Mapping[str, Any]) -> dict[str, Any]:
        async with self._limiter:
            worker = self._idle.pop() if self._idle else await self._nursery.start(self._keep)
            try:
                answer = await worker.run(request)
            except WorkerGone:
                worker.scope.cancel()
                raise
            if answer.get("retire"):
                worker.scope.cancel()  # it is stopping; the next request starts a new one
            else:
                self._idle.append(worker)
            return answer

    def close(self) -> None:
        self._stop.set()


@asynccontextmanager
async def open_warm_pool(size: int, concurrency: int | None = None) -> AsyncIterator[WarmPool]:
    """A ``WarmPool``; on exit every worker stops its services (interrupted if cancelled).
    ``concurrency``: what each run's trace records as its batch's (default: none)."""
    async with trio.open_nursery() as nursery:
        pool = WarmPool(nursery, size, concurrency)
        try:
            yield pool
        finally:
            pool.close()
