"""The Ray executor: each run a Ray task, on a local Ray instance or an existing cluster.

::

    caller (chaos sweep/validate/grade --ray [ADDRESS])          Ray worker (any node)
      connect(ADDRESS): syntax, TCP reach, ray.init   ──┐
      RunSpec as plain data, warm? ──────────────────── ► _run_on_worker(spec, timeout, warm)
                                                           temp dir; warm: the run sent to
                                                           the warm worker this Ray worker
                                                           keeps between tasks (_run_kept);
                                                           else chaos.executor.run_one: a
                                                           ``chaos run ... --json`` child
      RunOutcome + trace bytes  ◄────────────────────── ─ exit code, JSON verdict, error
      trace written under the local --out-dir              line, timings, the trace's bytes
                                                           (TRACE.partial's if cut short)

One run per task, ``num_cpus`` per task (``--ray-cpus``), Ray's own retries off: a task
whose worker process or node dies (``WorkerCrashedError``, ``NodeDiedError``, ...) is
submitted again by ``chaos.executor.with_retries``, at most twice, and reported; a run that
ended (held, violated, harness error, timeout) is never run again. ``--run-timeout`` is
enforced on the worker by ``run_one`` itself, so a task waiting for a free CPU is not timed.

Ray is an optional extra (``pip install -e '.[ray]'``), imported only when ``--ray`` is
given; every worker needs chaos-harness (same version) and Ray installed, and the packs and
candidates it is given by path (see docs/scale.md).

Warm workers: a task runs warm under the local executor's rule (``can_run_warm``: no
``--run-timeout``, no run arguments, ``CHAOS_WARM`` on the caller); its Ray worker process
keeps one ``chaos.warm_pool.KeptWorker`` for the job's later tasks, which gets SIGTERM (and
stops its servers) when that process ends, and ``disconnect`` waits for those a local
instance's workers kept.

Size (about 700 lines): one module because it is everything that touches Ray (an optional
extra, imported nowhere else): the task, the connection to a local or existing cluster and its
cleanup on every way a command ends (Ray's shutdown SIGKILLs workers' runs).
"""

from __future__ import annotations

import atexit
import contextlib
import ipaddress
import json
import logging
import math
import os
import re
import shutil
import signal
import socket
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import ModuleType
from typing import Any

import psutil
import trio

from chaos.executor import (
    LOST_RETRIES,
    OnOutcome,
    RunOutcome,
    RunSpec,
    can_run_warm,
    run_child,
    run_one,
    warm_outcome,
    warm_request,
    with_retries,
)
from chaos.warm_pool import KeptWorker
from ground import _signals
from ground.errors import EXIT_HARNESS, ConfigError

INSTALL_HINT = "pip install -e '.[ray]'"
LOCAL = "local"
#: Seconds to wait for a TCP connection to the cluster's address before ``ray.init``.
REACH_TIMEOUT_S = 5.0
MAX_CPUS = 1024.0
_POLL_S = 0.2
#: How long ``disconnect`` waits for the runs of a stopped local instance to finish their
#: cleanup before it removes their temp dirs (they are reaped later otherwise).
ORPHAN_WAIT_S = 60.0
_STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}
#: A task's temp dir: chaos-ray-WORKERPID-RANDOM (reaped by a later task once that pid died).
_TMP_PREFIX = "chaos-ray-"
_ADDRESS = re.compile(
    r"(?P<scheme>ray://)?(?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)"
    r":(?P<port>[0-9]{1,5})"
)


def import_ray() -> ModuleType:
    """The ``ray`` module, or ConfigError naming the extra to install."""
    try:
        import ray
    except ImportError:
        raise ConfigError(f"--ray needs Ray, which is not installed: {INSTALL_HINT}") from None
    module: ModuleType = ray
    return module


def check_address(address: str) -> tuple[str, int] | None:
    """``local`` (a new local instance), ``auto`` (the cluster ``ray start`` runs here, or
    $RAY_ADDRESS), ``HOST:PORT`` (a cluster's GCS) or ``ray://HOST:PORT`` (Ray Client):
    (host, port) to reach first, None for local/auto; ConfigError for anything else."""
    if address in (LOCAL, "auto"):
        return None
    match = _ADDRESS.fullmatch(address)
    if match is None:
        raise ConfigError(
            f"bad Ray address {address!r}: want HOST:PORT, ray://HOST:PORT, auto, or no "
            "address (a local Ray instance)"
        )
    port = int(match["port"])
    if not 1 <= port <= 65535:
        raise ConfigError(f"bad Ray address {address!r}: port must be between 1 and 65535")
    return match["host"].strip("[]"), port


def check_cpus(cpus: float) -> float:
    """``--ray-cpus``: CPUs Ray reserves per run, finite and > 0."""
    if not (math.isfinite(cpus) and 0 < cpus <= MAX_CPUS):
        raise ConfigError(f"--ray-cpus must be a number > 0 and <= {MAX_CPUS:g}, got {cpus}")
    return cpus


def _reach(address: str, host: str, port: int) -> None:
    try:
        with socket.create_connection((host, port), timeout=REACH_TIMEOUT_S):
            pass
    except OSError as exc:
        why = exc.strerror or str(exc) or type(exc).__name__
        raise ConfigError(f"cannot reach Ray at {address}: {why}") from None


@contextmanager
def _quiet_stderr() -> Iterator[None]:
    """File descriptor 2 to a scratch file: a failed ``ray.init`` must be one line, not the
    20 s of retries its C++ client logs against an address that is no Ray cluster."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with tempfile.TemporaryFile() as sink:
            os.dup2(sink.fileno(), 2)
            try:
                yield
            finally:
                sys.stderr.flush()
                os.dup2(saved, 2)
    finally:
        os.close(saved)


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@contextmanager
def _loopback_kept(ray: ModuleType, where: tuple[str, int] | None) -> Iterator[None]:
    """Let ``ray.init`` keep a loopback address (a cluster whose nodes were started with
    ``--node-ip-address 127.0.0.1``). Ray replaces 127.0.0.1/localhost/::1 by this machine's
    outward IP, where such a cluster does not listen: without this, ``ray.init`` would try
    that IP for about 13 minutes, deaf to SIGTERM. Ray does so only while it runs as a
    cluster (``ray_constants.ENABLE_RAY_CLUSTER``, private): false for the call."""
    constants = getattr(getattr(ray, "_private", None), "ray_constants", None)
    if where is None or not _is_loopback(where[0]) or constants is None:
        yield
        return
    saved = getattr(constants, "ENABLE_RAY_CLUSTER", True)
    constants.ENABLE_RAY_CLUSTER = False
    try:
        yield
    finally:
        constants.ENABLE_RAY_CLUSTER = saved


def connect(address: str = LOCAL) -> bool:
    """Connect this process to Ray: start a local instance (``local``) or join a cluster.
    True when this call connected (the caller then calls ``disconnect``); False when the
    process was already connected (a test's shared instance). Bad syntax, an unreachable
    address or a failed ``ray.init`` is a ConfigError, before any run starts."""
    where = check_address(address)
    ray = import_ray()
    if ray.is_initialized():
        return False
    if where is not None:
        _reach(address, *where)
    options: dict[str, Any] = {
        "logging_level": logging.WARNING,
        "log_to_driver": False,
    }
    if address == LOCAL:
        options["include_dashboard"] = False
        # Ray starts its workers at nice 15, and a run's processes inherit it: on a machine
        # shared with other work the runs would get less CPU than a local sweep's, and their
        # timing would drift. A local instance runs them at the caller's priority.
        options["_system_config"] = {"worker_niceness": 0}
    try:
        with _quiet_stderr(), _loopback_kept(ray, where), _sigterm_kept(ray, address == LOCAL):
            ray.init(address=address, **options)  # (_quiet_stderr: Ray's notes)
    except Exception as exc:  # ConnectionError, RuntimeError, ValueError...: all one line
        lines = str(exc).strip().splitlines()
        why = lines[0] if lines else type(exc).__name__
        raise ConfigError(f"cannot connect to Ray at {address}: {why}") from None
    if address == LOCAL:
        _local_sessions.append(_session_dir(ray))
    return True


@contextmanager
def _sigterm_kept(ray: ModuleType, local: bool) -> Iterator[None]:
    """``ray.init`` replaces SIGTERM's handler with ``sys.exit(15)``: the harness's handler
    (``ground._signals``: clean up, exit 143) is put back when it returns, and a SIGTERM that
    Ray's caught meanwhile stops the command as the harness's would (Ray shut down first)."""
    kept = signal.getsignal(signal.SIGTERM)
    try:
        yield
    except BaseException as exc:  # a failed init, or a signal: never leave it half-started
        signal.signal(signal.SIGTERM, kept)
        with _signals.deferred(), contextlib.suppress(Exception):
            _shutdown(ray, local)  # (a half-initialised core worker aborts the process at exit)
        if isinstance(exc, SystemExit) and exc.code == signal.SIGTERM:
            _signals.caught(signal.SIGTERM)  # raises Interrupted (noted as the harness's own)
        raise
    finally:
        if signal.getsignal(signal.SIGTERM) is not kept:
            signal.signal(signal.SIGTERM, kept)


def _ray_processes(ray: ModuleType) -> list[psutil.Process]:
    """This process's descendants that are Ray's own: its servers and agents (a program
    under Ray's package folder) and its workers (``ray::...``). A caller's other children
    (a trainer's own processes, warm workers) are not among them."""
    home = os.path.dirname(getattr(ray, "__file__", "") or "") + os.sep
    found = []
    with contextlib.suppress(psutil.Error):
        for proc in psutil.Process().children(recursive=True):
            with contextlib.suppress(psutil.Error):
                argv = proc.cmdline()
                if any(a.startswith(home) or a.startswith("ray::") for a in argv[:3]):
                    found.append(proc)
    return found


def _shutdown(ray: ModuleType, local: bool) -> None:
    """``ray.shutdown``, then nothing of a local instance left running. Ray stops the
    servers it started itself, but not what they started in turn: a raylet's dashboard and
    runtime-env agents, still importing on a loaded machine when their raylet is killed, run
    on for seconds before they look for their parent (seen: alive after the command ended).
    The processes Ray's shutdown leaves are SIGKILLed here, for a ``local``
    instance ``connect`` started only: the nodes of a cluster this process started itself
    (``ray.cluster_utils``) and joined by address are not this command's to stop."""
    before = _ray_processes(ray) if local else []
    ray.shutdown()
    left = [p for p in before if p.is_running()]
    for proc in left:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    # Gone or a zombie: once their raylet died they are PID 1's, which may never reap them.
    deadline = time.monotonic() + AGENT_WAIT_S
    while any(_alive(p.pid) for p in left) and time.monotonic() < deadline:
        time.sleep(0.02)


#: How long the processes a Ray shutdown left may take to die once SIGKILLed.
AGENT_WAIT_S = 5.0

#: The session folders (logs, sockets) of the local instances ``connect`` started.
_local_sessions: list[Path | None] = []


def _session_dir(ray: ModuleType) -> Path | None:
    try:  # not a public API: without it the session's logs simply stay (Ray's default)
        return Path(ray._private.worker._global_node.get_session_dir_path())
    except Exception:
        return None


def _kept_workers(ray: ModuleType) -> list[psutil.Process]:
    """The warm workers this process's Ray workers keep (``_run_kept``): their children
    running ``-m chaos.warm_worker`` (a local pool's workers, this process's own, are not)."""
    found = []
    for worker in _ray_processes(ray):
        with contextlib.suppress(psutil.Error):
            for proc in worker.children():
                with contextlib.suppress(psutil.Error):
                    if "chaos.warm_worker" in proc.cmdline()[1:4]:
                        found.append(proc)
    return found


def _running(proc: psutil.Process) -> bool:
    try:
        return bool(proc.status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False


def disconnect() -> None:
    """Leave Ray. A local instance started by ``connect`` stops with all its workers, and
    its session folder (``/tmp/ray/session_*``: logs, sockets) is removed."""
    ray = import_ray()
    kept = _kept_workers(ray)
    if ray.is_initialized():
        _shutdown(ray, local=bool(_local_sessions))
    # The warm workers the local instance's workers kept: SIGTERMed as their Ray worker died,
    # they stop their PostgreSQL and nats-server; gone (or a zombie) before this returns.
    deadline = time.monotonic() + ORPHAN_WAIT_S
    while any(_running(p) for p in kept) and time.monotonic() < deadline:
        time.sleep(0.05)
    for proc in kept:
        with contextlib.suppress(psutil.Error):
            if _running(proc):
                proc.kill()
    # Ray SIGKILLs what its workers started (their `chaos run` children): the runs of the
    # tasks it cut short (Ctrl-C, SIGTERM of the command) are reaped here, not later.
    from chaos.services.registry import collect_quietly

    collect_quietly()
    while _local_sessions:
        session = _local_sessions.pop()
        if session is not None:
            shutil.rmtree(session, ignore_errors=True)
        # The runs of the workers that just died (cancelled tasks) are stopping their
        # services; once they have, nothing is left of their temp dirs either.
        deadline = time.monotonic() + ORPHAN_WAIT_S
        while _reap_orphans(Path(tempfile.gettempdir())) and time.monotonic() < deadline:
            time.sleep(0.2)


# -- the task -------------------------------------------------------------------------------


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[:1] != ["Z"]


def _in_use(folder: Path) -> bool:
    """Whether a live process names ``folder`` on its command line (a ``chaos run --out``
    still placing its trace there after its worker died)."""
    needle = str(folder).encode()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if needle in (entry / "cmdline").read_bytes():
                    return True
            except OSError:
                continue
    return False


def _reap_orphans(parent: Path) -> int:
    """Remove the temp dirs of tasks whose worker process died (SIGKILL, a node's OOM
    killer, a cancelled task): the pid in the name is gone and no live process still
    writes there. Returns how many such dirs are still written to."""
    busy = 0
    for folder in parent.glob(f"{_TMP_PREFIX}*-*"):
        pid = folder.name.removeprefix(_TMP_PREFIX).split("-", 1)[0]
        if not pid.isdigit() or _alive(int(pid)):
            continue
        if _in_use(folder):
            busy += 1
            continue
        shutil.rmtree(folder, ignore_errors=True)
    return busy


#: This Ray worker process's warm worker, kept between its tasks (None until the first
#: warm run, and after one that retired or ended). Ray runs one task at a time in a worker
#: process, from its main thread, and keeps the process for the job's later tasks.
_kept: KeptWorker | None = None
#: Kept workers let go (retired, or ended), reaped by a later task.
_let_go: list[KeptWorker] = []


def _run_kept(spec: RunSpec) -> RunOutcome:
    """``spec`` on this process's kept warm worker (started at the first warm task): the
    same run a local warm pool makes, its PostgreSQL and nats-server kept for the next task."""
    global _kept
    _let_go[:] = [worker for worker in _let_go if not worker.reap()]
    if _kept is None or not _kept.alive:
        _kept = KeptWorker()
    worker = _kept
    started, started_wall = time.monotonic(), time.time()
    answer = worker.run(warm_request(spec))
    gone = ""
    if answer is None or answer.get("retire"):
        # ended, or stopping: the next task starts a fresh one
        gone = worker.gone_message() if answer is None else ""
        worker.close()
        _let_go.append(worker)
        _kept = None
    outcome = warm_outcome(spec, answer, gone, started, started_wall)
    outcome.worker = f"{_where()} warm worker pid {worker.pid}"
    return outcome


def _let_kept_go() -> None:
    """At this process's exit: its kept worker stops its services (stdin closed; and it gets
    SIGTERM when this process ends, whichever comes first)."""
    if _kept is not None:
        _kept.close()


atexit.register(_let_kept_go)


def _run_on_worker(
    spec_data: dict[str, Any], run_timeout: float | None, warm: bool = False
) -> dict[str, Any]:
    """The Ray task: one run on this worker, in a private temp dir; its outcome as plain data
    with the trace's bytes. ``warm``: on this worker process's kept warm worker (``_run_kept``),
    else a cold ``chaos run`` child (and then ``run_timeout`` is enforced here)."""
    spec = RunSpec.from_dict(spec_data)
    _reap_orphans(Path(tempfile.gettempdir()))
    with tempfile.TemporaryDirectory(prefix=f"{_TMP_PREFIX}{os.getpid()}-") as tmp:
        candidate = spec.candidate
        if candidate is not None:  # a graded run: the candidate must not read the traces
            candidate = candidate.with_hidden(Path(tmp))
        local = replace(spec, out_dir=Path(tmp), candidate=candidate)
        on_kept = warm and can_run_warm([local], True, run_timeout)
        if on_kept:
            outcome = _run_kept(local)
        else:
            # Ray's workers block SIGINT, and a child inherits the mask: the run could then
            # not be stopped as Ctrl-C stops it (a timeout). Unblocked for its children only.
            mask = signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOP_SIGNALS)
            try:
                outcome = trio.run(run_one, local, run_timeout)
            finally:
                signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        data = outcome.to_dict()
        trace = outcome.trace
        data["trace_bytes"] = trace.read_bytes() if trace is not None else None
        data["trace_partial"] = trace is not None and trace.suffix == ".partial"
        data["worker"] = outcome.worker if on_kept else _where()
        return data


def _where() -> str:
    """Where a task runs: ``HOST node NODE pid PID`` (NODE: the first 12 hex digits of the
    Ray node's id, which tells apart the nodes of one host)."""
    try:
        node = f" node {import_ray().get_runtime_context().get_node_id()[:12]}"
    except Exception:  # not in a Ray worker
        node = ""
    return f"{socket.gethostname()}{node} pid {os.getpid()}"


def _replay_on_worker(
    name: str, blob: bytes, times: int, scenario: str | None = None
) -> dict[str, Any]:
    """The Ray task of a replay: ``chaos replay TRACE --times N --json`` on this worker, the
    trace rebuilt from its bytes in a private temp dir; the report with each replay's
    trace bytes."""
    _reap_orphans(Path(tempfile.gettempdir()))
    with tempfile.TemporaryDirectory(prefix=f"{_TMP_PREFIX}{os.getpid()}-") as tmp:
        trace = Path(tmp) / name
        trace.write_bytes(blob)
        argv = [sys.executable, "-m", "chaos", "replay", str(trace), "--times", str(times),
                "--json", *(("--scenario", scenario) if scenario else ())]  # fmt: skip
        mask = signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOP_SIGNALS)
        try:
            code, out, err = trio.run(run_child, argv)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        lines = err.decode(errors="replace").strip().splitlines()
        data: dict[str, Any] = {
            "exit_code": code,
            "error": lines[-1] if lines else "",
            "replays": [],
        }
        try:
            report = json.loads(out) if out.strip() else None
        except ValueError:
            report = None
        for replay in (report or {}).get("replays", []):
            path = Path(replay["trace"])
            data["replays"].append(
                {
                    "name": path.name,
                    "bytes": path.read_bytes() if path.is_file() else None,
                    "verdicts": {str(v.get("name")): v.get("valid") for v in replay["verdicts"]},
                    "error": replay.get("error"),
                }
            )
        return data


def _lost_errors(ray: ModuleType) -> tuple[type[BaseException], ...]:
    """Ray's errors that mean the worker (process, node, object) was lost mid-run."""
    names = (
        "WorkerCrashedError", "NodeDiedError", "LocalRayletDiedError", "ObjectLostError",
        "OwnerDiedError", "ObjectFetchTimedOutError", "RaySystemError",
    )  # fmt: skip
    return tuple(getattr(ray.exceptions, name) for name in names if hasattr(ray.exceptions, name))


def _first_line(exc: BaseException) -> str:
    lines = [line for line in str(exc).strip().splitlines() if line.strip()]
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__


def _receive(spec: RunSpec, data: dict[str, Any]) -> RunOutcome:
    """A task's result as a local outcome; the trace written under the local out dir."""
    outcome = RunOutcome(
        int(data["seed"]),
        int(data["exit_code"]),
        data.get("result"),
        str(data.get("error") or ""),
        float(data.get("wall_s") or 0.0),
        timed_out=bool(data.get("timed_out")),
        lost_worker=str(data.get("lost_worker") or ""),
        worker=str(data.get("worker") or ""),
    )
    blob = data.get("trace_bytes")
    if blob is not None:
        path = spec.trace
        if data.get("trace_partial"):
            path = path.with_name(path.name + ".partial")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(blob)
        except OSError as exc:
            outcome.exit_code = EXIT_HARNESS
            outcome.error = f"cannot write trace {path}: {exc.strerror or exc}"
            return outcome
        outcome.trace = path
        if outcome.result is not None:
            outcome.result = {**outcome.result, "trace": str(path)}
    return outcome


class _Waiter:
    """One poll of every task in flight (``ray.wait``, no blocking) each ``_POLL_S``, waking
    the run whose task finished: a thousand runs in flight cost one call per poll."""

    def __init__(self, ray: ModuleType) -> None:
        self._ray = ray
        self._pending: dict[Any, trio.Event] = {}

    async def wait(self, ref: Any) -> None:
        event = self._pending[ref] = trio.Event()
        try:
            await event.wait()
        finally:
            self._pending.pop(ref, None)

    async def run(self) -> None:
        while True:
            if self._pending:
                refs = list(self._pending)
                ready, _ = self._ray.wait(refs, num_returns=len(refs), timeout=0)
                for ref in ready:
                    event = self._pending.pop(ref, None)
                    if event is not None:
                        event.set()
            await trio.sleep(_POLL_S)


@dataclass
class RayExecutor:
    """Runs each spec as a Ray task (``num_cpus=cpus``) on the cluster this process is
    connected to (``connect``). ``max_in_flight`` bounds the tasks submitted at once (None:
    all of them; the cluster's free CPUs decide how many run); the ``jobs`` argument of a
    call is not used: the cluster schedules. Each task runs on a warm worker its Ray worker
    process keeps for the job's later tasks (``chaos.warm``: kept PostgreSQL and nats-server,
    a graded run's candidate started fresh in its sandbox), under the local executor's rule
    (``warm``, default ``CHAOS_WARM``; no ``run_timeout``, no run arguments), else as a
    cold ``chaos run`` child."""

    cpus: float = 1.0
    run_timeout: float | None = None
    retries: int = LOST_RETRIES
    max_in_flight: int | None = None
    address: str = LOCAL
    warm: bool | None = None
    kind: str = field(default="ray", init=False)
    #: Whether the last batch ran on warm workers.
    used_warm: bool | None = field(default=None, init=False)

    async def __call__(
        self, specs: Sequence[RunSpec], jobs: int, progress: OnOutcome | None = None
    ) -> list[RunOutcome]:
        ray = import_ray()
        if not ray.is_initialized():
            raise ConfigError("not connected to Ray (chaos.executor_ray.connect first)")
        task = ray.remote(_run_on_worker).options(
            num_cpus=self.cpus, max_retries=0, retry_exceptions=False
        )
        lost_errors = _lost_errors(ray)
        limiter = trio.CapacityLimiter(self.max_in_flight or max(1, len(specs)))
        outcomes: list[RunOutcome | None] = [None] * len(specs)

        on_warm = self.used_warm = can_run_warm(specs, self.warm, self.run_timeout)

        async def attempt(spec: RunSpec) -> RunOutcome:
            ref = task.remote(spec.to_dict(), self.run_timeout, on_warm)
            try:
                await waiter.wait(ref)
            except BaseException:
                # Ctrl-C or the caller cancelled: kill the worker; its run gets SIGTERM (its
                # parent-death signal) and removes what it started.
                ray.cancel(ref, force=True)
                raise
            try:
                data = ray.get(ref)
            except lost_errors as exc:
                why = f"the worker was lost ({_first_line(exc)})"
                return RunOutcome(spec.seed, EXIT_HARNESS, error=why, lost_worker=why)
            except Exception as exc:  # the task itself failed: a harness error
                return RunOutcome(spec.seed, EXIT_HARNESS, error=_first_line(exc))
            return _receive(spec, data)

        async def one(index: int, spec: RunSpec) -> None:
            async with limiter:
                outcome = await with_retries(lambda: attempt(spec), self.retries)
            outcomes[index] = outcome
            if progress is not None:
                progress(outcome)

        waiter = _Waiter(ray)
        async with trio.open_nursery() as outer:
            outer.start_soon(waiter.run)
            async with trio.open_nursery() as nursery:
                for index, spec in enumerate(specs):
                    nursery.start_soon(one, index, spec)
            outer.cancel_scope.cancel()
        return [o for o in outcomes if o is not None]

    async def replay(
        self, trace: Path, times: int, *, scenario: str | None = None
    ) -> list[dict[str, Any]]:
        """Replay ``trace`` ``times`` times in one Ray task; each replay's trace is written
        beside it (``NAME.replay-N.trace``). One dict per replay: ``trace``, ``verdicts``
        (name -> valid), ``error``; one error entry per replay when the task failed."""
        ray = import_ray()
        task = ray.remote(_replay_on_worker).options(
            num_cpus=self.cpus, max_retries=LOST_RETRIES, retry_exceptions=False
        )
        ref = task.remote(trace.name, await trio.Path(trace).read_bytes(), times, scenario)
        waiter = _Waiter(ray)
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(waiter.run)
                await waiter.wait(ref)
                nursery.cancel_scope.cancel()
        except BaseException:
            ray.cancel(ref, force=True)
            raise
        try:
            data = ray.get(ref)
        except Exception as exc:
            failed = {"trace": str(trace), "verdicts": {}, "error": _first_line(exc)}
            return [failed] * times
        out: list[dict[str, Any]] = []
        for replay in data["replays"]:
            local = trace.with_name(replay["name"])
            if replay["bytes"] is not None:
                await trio.Path(local).write_bytes(replay["bytes"])
            out.append({"trace": str(local), "verdicts": replay["verdicts"],
                        "error": replay["error"]})  # fmt: skip
        if not out:
            why = data["error"] or f"chaos replay exited {data['exit_code']}"
            out = [{"trace": str(trace), "verdicts": {}, "error": why}] * times
        return out

    def describe(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "address": self.address,
            "cpus_per_run": self.cpus,
            "run_timeout_s": self.run_timeout,
            "warm": self.used_warm,
        }


__all__ = [
    "INSTALL_HINT",
    "RayExecutor",
    "check_address",
    "check_cpus",
    "connect",
    "disconnect",
    "import_ray",
]
