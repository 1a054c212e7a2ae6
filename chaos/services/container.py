"""A Docker container run as a service under test: output logged, ready line, faults, removal.

::

    open_container ─► holder (pause image, --network none) ─► its netns: the links' listeners
                   └► the service (--network container:<holder>) ─► attach (stdout/stderr
                      lines to the log sink) ─► ready probe ─► yield ─► stop, remove both

Network: the service has no network of its own. It joins the namespace of a *holder*
container (``--network none``: loopback only), in which the harness opens the listeners of
the links the service may use (``Proxy.serve_also``: same address as on the harness's side,
``127.0.0.1:PORT``), and from which links towards the service dial (``dial``). The holder
outlives the service's restarts, so a crash fault (kill + start) keeps its links. No Docker
network, no bridge, no address outside loopback is involved.

Faults, as for a process: ``kill`` (``docker kill``), ``restart`` (``docker start`` of the same
container: same filesystem, same command), ``pause``/``resume`` (``docker pause``/``unpause``:
the cgroup freezer), and clock skew: the libfaketime library and the run's skew file are
mounted read-only and preloaded (``DONT_FAKE_MONOTONIC=1``; images whose programs are static,
or not built on glibc, ignore it).

Removal: every container carries the labels ``chaos.run`` (the run id) and ``chaos.registry``;
the service and its holder are removed (``docker rm -f``) on every exit path of the ``async
with``, and ``_container_reap`` removes those of a run that died (SIGKILL): the registry's
reaper for every stale run, ``chaos gc`` also for runs whose registration is gone.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import trio

from chaos.services import registry
from chaos.services._container_reap import LABEL_REGISTRY, LABEL_RUN, LABEL_SERVICE
from chaos.services._groups import unwrapped_errors
from chaos.services._incarnations import Incarnations
from chaos.services._logtail import LogTail
from chaos.services._netns import NetNamespace
from chaos.services.clock import SkewFile, libfaketime_library
from chaos.services.images import _reason, check_images, docker_client, holder_image
from chaos.services.process import ExitHook, LogSink, ReadyProbe
from ground.errors import ConfigError, ServiceError

if TYPE_CHECKING:
    import docker

#: Where the clock's files appear inside a container.
CLOCK_DIR = "/run/chaos-clock"
FAKETIME_DIR = "/run/chaos-faketime"
_POLL_INTERVAL = 0.01
_DRAIN_TIMEOUT = 1.0


@dataclass
class _Incarnation:
    """One start of the container: its output reader and how it ended."""

    exited: trio.Event = field(default_factory=trio.Event)
    drained: trio.Event = field(default_factory=trio.Event)
    returncode: int | None = None
    oom_killed: bool = False
    expected_exit: bool = False
    pid: int | None = None


def _labels(name: str) -> dict[str, str]:
    labels = {LABEL_SERVICE: name, LABEL_REGISTRY: str(registry.registry_dir())}
    registration = registry.current()
    if registration is not None:  # written down before the container is created
        registration.add_containers()
        labels[LABEL_RUN] = registration.run_id
    return labels


class ContainerService(Incarnations[_Incarnation]):
    """A running service container and the faults that apply to it (``ManagedProcess``'s
    interface: ``name``, ``pid``, ``starts``, ``running``, ``paused``, ``exited``, ``died``,
    ``kill``, ``restart``, ``pause``, ``resume``, ``ready``, ``faketime``)."""

    def __init__(
        self,
        name: str,
        image: str,
        *,
        nursery: trio.Nursery,
        command: Sequence[str] | None,
        env: Mapping[str, str] | None,
        mounts: Mapping[str, str] | None,
        log_sink: LogSink | None,
        ready: ReadyProbe | None,
        ready_timeout: float,
        stop_grace: float,
        faketime: SkewFile | None,
        on_exit: ExitHook | None,
        create: Mapping[str, Any] | None,
        tail_lines: int = 200,
        strict_ready: bool = True,
    ) -> None:
        self.name = name
        self.image = image
        self.command = list(command) if command is not None else None
        self._nursery = nursery
        self._env = dict(env or {})
        self._mounts = dict(mounts or {})
        self._log_sink = log_sink
        self._ready = ready
        self._ready_timeout = ready_timeout
        self._stop_grace = stop_grace
        self._on_exit = on_exit
        self._create = dict(create or {})
        #: Whether an exit before the ready line is an error (else the ready probe decides).
        self.strict_ready = strict_ready
        self.faketime = faketime
        self.tail = LogTail(tail_lines)
        self.starts = 0
        self._paused = False
        self._current: _Incarnation | None = None
        self.holder_id: str | None = None
        self.container_id: str | None = None
        self.netns: NetNamespace | None = None
        self._client: docker.DockerClient = docker_client()
        self._token = trio.lowlevel.current_trio_token()
        self._served: list[Any] = []

    # -- state ----------------------------------------------------------------------------

    @property
    def pid(self) -> int | None:
        """The host pid of the container's first process (None before the first start)."""
        return self._current.pid if self._current else None

    @property
    def returncode(self) -> int | None:
        return self._current.returncode if self._current else None

    @property
    def running(self) -> bool:
        return self._current is not None and not self._current.exited.is_set()

    @property
    def oom_killed(self) -> bool:
        return self._current is not None and self._current.oom_killed

    def log_tail(self) -> str:
        return self.tail.text()

    # -- docker calls (blocking, in worker threads) -------------------------------------

    async def _call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        import docker.errors

        try:
            return await trio.to_thread.run_sync(lambda: fn(*args, **kwargs))
        except docker.errors.ImageNotFound as exc:
            raise ConfigError(f"image {self.image}: {_reason(exc)}") from None
        except docker.errors.APIError as exc:
            raise ServiceError(
                f"container {self.name} ({self.image}): {_reason(exc)}",
                self.tail.text(),
                self.name,
            ) from None

    # -- lifecycle ------------------------------------------------------------------------

    async def create(self) -> None:
        """The holder (running, its namespace ours) and the service's container (created)."""
        api = self._client.api
        holder = holder_image().ref
        await trio.to_thread.run_sync(check_images, [holder_image()])
        registration = registry.current()
        base = f"chaos-{registration.run_id}-{self.name}" if registration is not None else None
        self._base_name = base
        created = await self._call(
            api.create_container,
            holder,
            name=f"{base}-net" if base else None,
            labels={**_labels(self.name), "chaos.role": "holder"},
            host_config=api.create_host_config(network_mode="none", init=False),
        )
        self.holder_id = created["Id"]
        await self._call(api.start, self.holder_id)
        info = await self._call(api.inspect_container, self.holder_id)
        pid = int(info["State"]["Pid"])
        self.netns = NetNamespace.from_path(f"/proc/{pid}/ns/net")
        env = dict(self._env)
        binds = {host: {"bind": inside, "mode": "ro"} for host, inside in self._mounts.items()}
        if self.faketime is not None:
            library = libfaketime_library()
            self.faketime.path.parent.mkdir(parents=True, exist_ok=True)
            if not self.faketime.path.exists():
                self.faketime.set_offset(0.0)
            binds[str(self.faketime.path.parent)] = {"bind": CLOCK_DIR, "mode": "ro"}
            binds[str(library.parent)] = {"bind": FAKETIME_DIR, "mode": "ro"}
            env.update(
                LD_PRELOAD=f"{FAKETIME_DIR}/{library.name}",
                FAKETIME_TIMESTAMP_FILE=f"{CLOCK_DIR}/{self.faketime.path.name}",
                FAKETIME_NO_CACHE="1",
                DONT_FAKE_MONOTONIC="1",
                FAKETIME_FORCE_MONOTONIC_FIX="0",
            )
        extra_binds = self._create.pop("binds", {})
        binds.update(extra_binds)
        create_kwargs = {
            k: self._create.pop(k) for k in ("user", "working_dir") if k in self._create
        }
        self._create.setdefault("init", True)  # tini: signals reach the program as usual
        host_config = api.create_host_config(
            network_mode=f"container:{self.holder_id}",
            binds=binds,
            **self._create,
        )
        created = await self._call(
            api.create_container,
            self.image,
            command=self.command,
            environment=env,
            labels=_labels(self.name),
            host_config=host_config,
            name=self._base_name,
            stdin_open=False,
            tty=False,
            **create_kwargs,
        )
        self.container_id = created["Id"]

    def serve(self, proxy: Any) -> None:
        """Let the service reach ``proxy`` at its listen address, inside its namespace."""
        assert self.netns is not None
        host, _, port = proxy.listen.rpartition(":")
        (sock,) = self.netns.listen([(host, int(port))])
        proxy.serve_also(trio.socket.from_stdlib_socket(sock))

    async def dial(self, host: str, port: int) -> trio.SocketStream:
        """A TCP connection to ``host:port`` as seen from inside the container (a link's
        upstream that is the container itself)."""
        netns = self.netns
        if netns is None or netns.fd is None:
            raise OSError(f"container {self.name} has no network namespace any more")
        try:
            raw = netns.tcp_socket()
        except ServiceError as exc:
            raise OSError(str(exc)) from None
        sock = trio.socket.from_stdlib_socket(raw)
        try:
            await sock.connect((host, port))
        except BaseException:
            sock.close()
            raise
        return trio.SocketStream(sock)

    async def start(self, *, wait_ready: bool = True) -> bool:
        """Start the container; False when the harness killed it before it was ready (a
        crash fault during a restart, as ``ManagedProcess.start``)."""
        if self.running:
            return True
        if self.container_id is None:
            await self.create()
        api = self._client.api
        cur = _Incarnation()
        stream = await self._call(
            api.attach_socket, self.container_id, {"stdout": 1, "stderr": 1, "stream": 1}
        )
        await self._call(api.start, self.container_id)
        info = await self._call(api.inspect_container, self.container_id)
        cur.pid = int(info["State"]["Pid"]) or None
        self._current = cur
        self._paused = False
        self.starts += 1
        threading.Thread(
            target=self._read, args=(cur, stream), name=f"chaos-attach-{self.name}", daemon=True
        ).start()
        if wait_ready:
            return await self._await_ready(cur)
        return True

    def _read(self, cur: _Incarnation, sock: Any) -> None:
        """Worker thread: the container's output, line by line, then its exit status."""
        from docker.utils.socket import STDERR, frames_iter

        buffers = {"stdout": b"", "stderr": b""}
        try:
            for stream_id, chunk in frames_iter(sock, tty=False):
                name = "stderr" if stream_id == STDERR else "stdout"
                if not chunk:
                    continue
                data = buffers[name] + chunk
                *lines, buffers[name] = data.split(b"\n")
                if lines:
                    self._to_trio(self._emit_lines, name, lines)
        except Exception:  # the connection closed under us: the container is going away
            pass
        finally:
            for closable in (sock, getattr(sock, "_sock", sock)):
                with suppress(Exception):
                    closable.close()
        for name, rest in buffers.items():
            if rest:
                self._to_trio(self._emit_lines, name, [rest])
        code, oom = -1, False
        with suppress(Exception):
            code = int(self._client.api.wait(self.container_id, timeout=60)["StatusCode"])
            state = self._client.api.inspect_container(self.container_id)["State"]
            oom = bool(state.get("OOMKilled"))
        self._to_trio(self._ended, cur, code, oom)

    def _to_trio(self, fn: Callable[..., None], *args: Any) -> None:
        with suppress(trio.RunFinishedError):
            trio.from_thread.run_sync(fn, *args, trio_token=self._token)

    def _emit_lines(self, stream: str, lines: list[bytes]) -> None:
        for raw in lines:
            line = raw.decode(errors="replace").rstrip("\r")
            self.tail.add(line)
            if self._log_sink is not None:
                self._log_sink(self.name, stream, line)

    def _ended(self, cur: _Incarnation, code: int, oom: bool) -> None:
        cur.returncode = code
        cur.oom_killed = oom
        cur.exited.set()
        cur.drained.set()
        if self._on_exit is not None:
            self._on_exit(self.name, code, cur.expected_exit)

    async def ready(self) -> None:
        if self._current is None:
            raise ServiceError(f"{self.name} has not been started")
        await self._await_ready(self._current)

    async def _await_ready(self, cur: _Incarnation) -> bool:
        with trio.move_on_after(self._ready_timeout):
            while True:
                if cur.exited.is_set() and cur.expected_exit:
                    # The harness killed it while it started (a crash fault during a
                    # restart): a fault like any other; whoever killed it starts it next.
                    return False
                if cur.exited.is_set() and self.strict_ready:
                    raise ServiceError(
                        f"container {self.name} ({self.image}) exited with code "
                        f"{cur.returncode} before it was ready: {self.tail.last()}",
                        self.tail.text(),
                        self.name,
                    )
                if self._ready is None or await self._ready():
                    return True
                await trio.sleep(_POLL_INTERVAL)
        raise ServiceError(
            f"container {self.name} ({self.image}) not ready after {self._ready_timeout:g}s: "
            f"{self.tail.last()}",
            self.tail.text(),
            self.name,
        )

    async def wait(self) -> int:
        if self._current is None:
            raise ServiceError(f"{self.name} has not been started")
        await self._current.exited.wait()
        return self._current.returncode if self._current.returncode is not None else -1

    # -- faults ---------------------------------------------------------------------------

    def send_signal(self, sig: int) -> None:
        """Send ``sig`` to the container's first process."""
        if self.running and self.container_id is not None:
            with suppress(Exception):
                self._client.api.kill(self.container_id, signal=int(sig))

    def pause(self) -> None:
        """``docker pause``: freeze every process of the container."""
        if self.running and not self._paused and self.container_id is not None:
            with suppress(Exception):
                self._client.api.pause(self.container_id)
                self._paused = True

    def resume(self) -> None:
        """``docker unpause``."""
        if self._paused and self.container_id is not None:
            with suppress(Exception):
                self._client.api.unpause(self.container_id)
        self._paused = False

    async def kill(self) -> None:
        """``docker kill`` (SIGKILL to every process of it), and wait until it has exited."""
        cur = self._current
        if cur is None or cur.exited.is_set():
            return
        cur.expected_exit = True
        import docker.errors

        with suppress(docker.errors.APIError):
            if self._paused:
                await trio.to_thread.run_sync(self._client.api.unpause, self.container_id)
        self._paused = False
        with suppress(docker.errors.APIError):
            await trio.to_thread.run_sync(self._client.api.kill, self.container_id)
        with trio.move_on_after(30):
            await cur.exited.wait()

    async def restart(self) -> bool:
        """Kill it if it runs, then start the same container again (ready line again);
        False when the harness killed it again before it was ready."""
        await self.kill()
        return await self.start()

    async def stop(self) -> None:
        """SIGTERM, ``stop_grace`` seconds, then SIGKILL (``docker stop``)."""
        cur = self._current
        if cur is None or cur.exited.is_set():
            return
        cur.expected_exit = True
        if self._paused:
            self.resume()
        self.send_signal(signal.SIGTERM)
        from ground import _signals

        with trio.move_on_after(self._stop_grace):
            while not _signals.hurrying():
                with trio.move_on_after(0.1):
                    await cur.exited.wait()
                    return
        await self.kill()

    async def close(self) -> None:
        """Stop the service, remove it and its holder; shielded and bounded."""
        with trio.CancelScope(shield=True):
            with trio.move_on_after(self._stop_grace + 30):
                with suppress(ServiceError, ConfigError):
                    await self.stop()
            if self._current is not None:
                with trio.move_on_after(_DRAIN_TIMEOUT):
                    await self._current.drained.wait()
            with trio.move_on_after(60):
                await trio.to_thread.run_sync(self._remove)
            if self.netns is not None:
                self.netns.close()

    def _remove(self) -> None:
        for cid in (self.container_id, self.holder_id):
            if cid is not None:
                with suppress(Exception):
                    self._client.api.remove_container(cid, force=True, v=True)


@asynccontextmanager
async def open_container(
    name: str,
    image: str,
    *,
    command: Sequence[str] | None = None,
    env: Mapping[str, str] | None = None,
    mounts: Mapping[str, str] | None = None,
    log_sink: LogSink | None = None,
    ready: ReadyProbe | None = None,
    ready_timeout: float = 60.0,
    stop_grace: float = 5.0,
    faketime: SkewFile | None = None,
    on_exit: ExitHook | None = None,
    create: Mapping[str, Any] | None = None,
    wait_ready: bool = True,
    before_start: Callable[[ContainerService], None] | None = None,
    service_class: type[ContainerService] | None = None,
    strict_ready: bool = True,
) -> AsyncIterator[ContainerService]:
    """Run ``image`` as service ``name`` until the block ends; removed however it ends.

    ``mounts`` maps host paths to read-only paths inside; ``create`` passes more of Docker's
    host config (limits, tmpfs, read-only root, user); ``before_start`` is called once the
    service's network namespace exists and before its first process runs (open the links'
    listeners there)."""
    if isinstance(command, str):
        raise ConfigError(f"command must be a list of strings, got {command!r}")
    with unwrapped_errors():
        async with trio.open_nursery() as nursery:
            service = (service_class or ContainerService)(
                name,
                image,
                nursery=nursery,
                command=command,
                env=env,
                mounts=mounts,
                log_sink=log_sink,
                ready=ready,
                ready_timeout=ready_timeout,
                stop_grace=stop_grace,
                faketime=faketime,
                on_exit=on_exit,
                create=create,
                strict_ready=strict_ready,
            )
            try:
                await service.create()
                if before_start is not None:
                    before_start(service)
                await service.start(wait_ready=wait_ready)
                yield service
            finally:
                await service.close()
                nursery.cancel_scope.cancel()


__all__ = ["ContainerService", "open_container"]
