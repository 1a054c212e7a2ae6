"""What a scenario's hooks get: ``RunContext``, the run's services, links, subjects and streams.

``chaos.run`` builds one ``RunContext`` per run and hands it to ``setup``, ``workload``,
``settled`` and ``final_state``; the nemesis reads the same object (through the small
``chaos.nemesis.NemesisContext`` protocol). Everything the context starts is entered on the
run's exit stack, so it stops when the run ends, however it ends.

Size (about 580 lines): ``RunContext`` is the whole API a pack's hooks get (services,
containers, links, subjects, streams, readers); one class, documented in docs/scenarios.md.
"""

from __future__ import annotations

import functools
import secrets
import sys
from collections.abc import Iterable, Mapping, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import trio

from chaos.recorder import Recorder
from chaos.services import (
    ManagedProcess,
    NatsService,
    PostgresReader,
    PostgresService,
    RestartPolicy,
    SkewFile,
    create_reader,
    drop_role,
    external_nats,
    external_postgres,
    open_nats,
    open_postgres,
    open_process_service,
    require_passwords,
    zygote,
)
from chaos.services.container import ContainerService, open_container
from chaos.services.images import Image, image_ref
from chaos.services.nats import check_external_nats
from chaos.services.postgres import check_external_postgres
from chaos.services.ready import ReadyLine
from faults.proxy import Proxy, ProxyServer
from ground._moved import moved
from ground.errors import ConfigError
from ground.rng import derive_rng
from invariants.history import SERVICE_PREFIX

if TYPE_CHECKING:
    from chaos.nemesis.protocol import Subject

#: Old paths of names that moved (a DeprecationWarning naming the new one, for one release).
__getattr__ = moved(__name__, {"Subject": "chaos.nemesis"})


# What the context reads of the scenario, the candidate and the warm servers it is given: the
# types that hold them (``chaos.scenario.Scenario``, ``chaos.sandbox.Candidate``,
# ``chaos.warm.WarmServices``) use ``RunContext`` in their own signatures, so they sit above
# this module and the context sees them through these protocols.


class TaskView(Protocol):
    @property
    def service(self) -> str: ...


class ScenarioView(Protocol):
    """The scenario of a run as its context uses it (``chaos.scenario.Scenario``)."""

    @property
    def id(self) -> str: ...

    @property
    def path(self) -> Path: ...

    @property
    def subjects(self) -> Mapping[str, Subject]: ...

    @property
    def restart(self) -> RestartPolicy: ...

    @property
    def images(self) -> Sequence[str | Image]: ...

    @property
    def task(self) -> TaskView | None: ...


class StandIn(Protocol):
    """A graded run's candidate (``chaos.sandbox.Candidate``): it starts in place of the
    task's service."""

    def replaces(self, name: str) -> bool: ...

    async def start(
        self,
        ctx: RunContext,
        name: str,
        env: dict[str, str],
        ready_line: str | None,
        wait: bool,
    ) -> ManagedProcess | ContainerService: ...


class KeptServers(Protocol):
    """A warm worker's kept servers (``chaos.warm.WarmServices``): a fresh database and
    stream on them for each run."""

    async def postgres(self, ctx: RunContext) -> PostgresService: ...

    async def nats_for(self, ctx: RunContext) -> NatsService: ...


@dataclass(frozen=True)
class ExternalServices:
    """Services a user points the run at instead of embedded ones (``--postgres-dsn``,
    ``--nats-url``); other runs may share them."""

    postgres_dsn: str | None = None
    nats_url: str | None = None

    @property
    def shared(self) -> bool:
        return bool(self.postgres_dsn or self.nats_url)


class RunContext:
    """What a scenario's hooks use: services, links, the recorder, named random streams."""

    def __init__(
        self,
        *,
        scenario: ScenarioView,
        seed: int,
        variant: str,
        run_dir: Path,
        stack: AsyncExitStack,
        proxies: ProxyServer,
        recorder: Recorder,
        externals: ExternalServices | None = None,
        candidate: StandIn | None = None,
        warm: KeptServers | None = None,
    ) -> None:
        self.scenario = scenario
        self.seed = seed
        self.variant = variant
        self.run_dir = run_dir
        self.stack = stack
        self.proxies = proxies
        self.recorder = recorder
        self.externals = externals or ExternalServices()
        #: A graded run's candidate: it runs in place of the task's service (chaos grade).
        self.candidate = candidate
        #: A warm worker's servers (``chaos.warm``), shared one run at a time.
        self.warm = warm
        #: The services the candidate runs as in this run (the task's service, or each of its
        #: instances ``<service>-N``).
        self.candidate_services: list[str] = []
        #: The run's real servers (what a candidate must reach only through links).
        self.dependencies: list[PostgresService | NatsService] = []
        #: When the workload started (trio time); ``at_time`` triggers count from it.
        self.workload_t0 = trio.current_time()
        #: The scenario's own bookkeeping between hooks.
        self.state: dict[str, Any] = {}
        #: The scenario's subjects for this run (setup may rename them, e.g. per run).
        self.subjects: dict[str, Subject] = dict(scenario.subjects)
        self._links: dict[str, Proxy] = {}
        self._services: dict[str, ManagedProcess | ContainerService] = {}
        self._deliveries: dict[str, int] = {}
        self._delivery_changed = trio.Event()
        self._link_subjects: dict[str, list[tuple[str, Subject]]] = {}

    @property
    def shared_services(self) -> bool:
        """True when the run uses external services that other runs may share: then a
        scenario must give its streams, subjects and tables names of their own."""
        return self.externals.shared

    def rng(self, *names: object) -> Any:
        """A named random stream of this run (``random.Random``)."""
        return derive_rng(self.seed, "scenario", *names)

    # -- dependencies -------------------------------------------------------------------

    async def postgres(self) -> PostgresService:
        """The run's PostgreSQL: embedded (own cluster, free port) unless a DSN was given."""
        if self.externals.postgres_dsn:
            pg = external_postgres(self.externals.postgres_dsn)
            await check_external_postgres(pg)  # unreachable, refusing: exit 3, one line
        elif self.warm is not None:
            pg = await self.warm.postgres(self)
        else:
            pg = await self.stack.enter_async_context(
                open_postgres(self.run_dir, log_sink=self.recorder.log_line)
            )
            # Only the harness logs in as the superuser: programs get roles (create_role).
            await trio.to_thread.run_sync(require_passwords, pg)
        self.dependencies.append(pg)
        return pg

    async def postgres_reader(
        self,
        pg: PostgresService,
        *,
        database: str | None = None,
        writers: Mapping[str, Iterable[str]] | None = None,
        tables: Iterable[tuple[str, str]] = (),
    ) -> PostgresReader:
        """The harness's reader of ``database`` (default ``pg``'s) on ``pg``: how a scenario
        reads what a program under test can write (``chaos.services.create_reader``: a
        role that cannot escalate, reading plain data only, or refusing with
        ``Unreadable``). ``writers``: schema -> the roles whose tables there it reads;
        ``tables``: the harness's own ``(schema, table)`` it reads. Make it before the
        writers run. Closed when the run ends; on a shared server its role has a name of its
        own and is dropped."""
        name = f"chaos_{secrets.token_hex(4)}_reader" if self.shared_services else "chaos_reader"
        make = functools.partial(
            create_reader, pg, name=name, database=database, writers=writers, tables=tables
        )
        reader = await trio.to_thread.run_sync(make)
        if self.shared_services:

            async def drop() -> None:
                with trio.CancelScope(shield=True), trio.move_on_after(10):
                    await trio.to_thread.run_sync(
                        functools.partial(drop_role, pg, name, database=reader.database)
                    )

            self.stack.push_async_callback(drop)
        self.stack.callback(reader.close)
        return reader

    async def nats(self) -> NatsService:
        """The run's NATS with JetStream: embedded unless a URL was given."""
        if self.externals.nats_url:
            nats = external_nats(self.externals.nats_url)
            await check_external_nats(nats)  # unreachable, not NATS, refusing: exit 3
        elif self.warm is not None:
            nats = await self.warm.nats_for(self)
        else:
            nats = await self.stack.enter_async_context(
                open_nats(self.run_dir, log_sink=self.recorder.log_line)
            )
        self.dependencies.append(nats)
        return nats

    # -- links --------------------------------------------------------------------------

    def add_link(self, name: str, upstream: str, *, upstream_in: str | None = None) -> str:
        """A proxy named ``name`` in front of ``upstream``; returns the address to dial.

        ``upstream_in`` names a container service (``start_container``) whose network the
        upstream address belongs to: the proxy dials it from inside that container's
        namespace (``127.0.0.1:PORT`` there is the container's own port)."""
        container = None
        if upstream_in is not None:
            found = self._services.get(upstream_in)
            if not isinstance(found, ContainerService):
                raise ConfigError(
                    f"link {name}: upstream_in={upstream_in!r} is not a container of this run"
                )
            container = found
        proxy = self.proxies.create_proxy(name, "127.0.0.1:0", upstream)
        if container is not None:
            proxy.dialer = container.dial
        self._links[name] = proxy
        return proxy.listen

    def link(self, name: str) -> Proxy:
        try:
            return self._links[name]
        except KeyError:
            raise ConfigError(
                f"no link {name!r} in this run (links: {', '.join(self._links) or 'none'})"
                f"{self._absent_hint()}"
            ) from None

    def subject(self, name: str) -> Subject:
        try:
            return self.subjects[name]
        except KeyError:
            known = ", ".join(self.subjects) or "none"
            raise ConfigError(f"no subject {name!r} in this scenario (subjects: {known})") from None

    def observe_subjects(self) -> None:
        """Watch every subject's links at the message level (deliveries, acks, publishes)."""
        for name, subject in self.subjects.items():
            consume = self.link(subject.consume_link)
            consume.add_toxic("nats_observe", name="observe-down", stream="downstream")
            consume.add_toxic("nats_observe", name="observe-up", stream="upstream")
            self._link_subjects.setdefault(subject.consume_link, []).append((name, subject))
            if subject.publish_link != subject.consume_link:
                self.link(subject.publish_link).add_toxic(
                    "nats_observe", name="observe-up", stream="upstream"
                )

    def on_proxy_event(self, event: Mapping[str, Any]) -> None:
        """Count message deliveries per subject (a proxy observer)."""
        if event.get("event") != "nats_delivery":
            return
        for name, subject in self._link_subjects.get(str(event.get("proxy")), []):
            if str(event.get("subject", "")).startswith(subject.nats_subject):
                self._deliveries[name] = self._deliveries.get(name, 0) + 1
                self._delivery_changed.set()
                self._delivery_changed = trio.Event()

    async def wait_deliveries(self, subject: str, n: int) -> None:
        """Until the ``n``-th message has been delivered on ``subject``."""
        self.subject(subject)
        while self._deliveries.get(subject, 0) < n:
            await self._delivery_changed.wait()

    def deliveries(self, subject: str) -> int:
        return self._deliveries.get(subject, 0)

    # -- services under test ------------------------------------------------------------

    async def start_service(
        self,
        name: str,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        ready_line: str | None = None,
        wait: bool = True,
        restart: RestartPolicy | None = None,
        ready_timeout_s: float = 30.0,
    ) -> ManagedProcess | ContainerService:
        """Start a service under test (its wall clock skewable) and wait until it prints
        ``ready_line`` (if given; with ``wait=False`` call ``ready`` later, to start several
        at once). It is stopped and reaped when the run ends. It is supervised as in
        production: when it fails on its own (a non-zero exit, a signal the harness did not
        send) it is restarted with backoff, each restart a
        ``restart`` event of ``service:NAME`` in the trace (``restart``: a ``RestartPolicy``;
        default ``Scenario.restart``; ``RestartPolicy.never()`` opts out). In a graded run
        the candidate's program runs in place of the task's service (``chaos.sandbox``):
        same ready line, only the task's environment variables, its output logged but never
        history. ``ready_timeout_s``: how long it may take to print its ready line (default
        30 s); a service that exits first, or never prints it, fails the run (exit 3) with its
        last log lines, the other services' errors before it and the trace."""
        if self.candidate is not None and self.candidate.replaces(name):
            candidate = await self.candidate.start(self, name, dict(env or {}), ready_line, wait)
            self._services[name] = candidate
            self.candidate_services.append(name)
            self.recorder.record(
                f"{SERVICE_PREFIX}{name}",
                "info",
                "start",
                {"pid": candidate.pid, "candidate": True},
            )
            return candidate
        ready = ReadyLine(ready_line)

        def sink(service: str, stream: str, line: str) -> None:
            ready.saw(line)
            self.recorder.log_line(service, stream, line)

        skew = SkewFile(self.run_dir / f"{name}.faketime")
        process = await self.stack.enter_async_context(
            open_process_service(
                name,
                list(argv),
                env={**(env or {}), "PYTHONUNBUFFERED": "1"},
                log_sink=sink,
                ready=ready.probe(),
                faketime=skew,
                on_exit=self._on_exit,
                stop_grace=2.0,
                wait_ready=wait,
                zygote=zygote.current(),
                ready_timeout=ready_timeout_s,
            )
        )
        ready.attach(process)
        self._services[name] = process
        self.recorder.record(f"{SERVICE_PREFIX}{name}", "info", "start", {"pid": process.pid})
        policy = self.scenario.restart if restart is None else restart
        if policy.restart:
            self._supervise(process, policy)
        return process

    async def start_container(
        self,
        name: str,
        image: str,
        *,
        command: Sequence[str] | None = None,
        env: Mapping[str, str] | None = None,
        ready_line: str | None = None,
        links: Sequence[str] = (),
        mounts: Mapping[str, str] | None = None,
        writable: Sequence[str] = (),
        wait: bool = True,
    ) -> ContainerService | ManagedProcess:
        """Start ``image`` as the service under test ``name`` (a Docker container) and wait
        until it prints ``ready_line``; removed when the run ends, however it ends.

        The container has no network but ``links``: each named link's listener is opened
        inside its network namespace at the same address (``127.0.0.1:PORT``), so the
        addresses ``add_link`` returned work in its ``env`` as they are. To reach a port of
        the container, add a link with ``upstream_in=name``. ``mounts`` maps host paths to
        read-only paths inside; ``writable`` names folders inside that get a fresh host
        folder of the run (``<run dir>/<name>/<folder>``). Its output goes to the trace like
        a process's, and the process faults apply (crash, pause, clock skew). The image must
        be one the scenario declares (``Scenario.images``): they are checked before the run.
        In a graded run the candidate runs in place of the task's service, as with
        ``start_service``."""
        if self.candidate is not None and self.candidate.replaces(name):
            return await self.start_service(
                name, list(command or ["true"]), env=env, ready_line=ready_line, wait=wait
            )
        declared = [image_ref(i) for i in self.scenario.images]
        if image not in declared:
            raise ConfigError(
                f"container {name}: image {image!r} is not declared in the scenario's images "
                f"({', '.join(declared) or 'none'})"
            )
        for link in links:
            self.link(link)
        if name in self._services:
            raise ConfigError(f"a service named {name!r} is already running")
        binds: dict[str, dict[str, str]] = {}
        for inside in writable:
            host = self.run_dir / name / inside.strip("/").replace("/", "_")
            host.mkdir(parents=True, exist_ok=True)
            binds[str(host)] = {"bind": inside, "mode": "rw"}
        ready = ReadyLine(ready_line)

        def sink(service: str, stream: str, line: str) -> None:
            ready.saw(line)
            self.recorder.log_line(service, stream, line)

        clock_dir = self.run_dir / f"{name}.clock"
        clock_dir.mkdir(exist_ok=True)

        def open_links(service: ContainerService) -> None:
            for link in links:
                service.serve(self.link(link))

        container = await self.stack.enter_async_context(
            open_container(
                name,
                image,
                command=command,
                env={**(env or {}), "PYTHONUNBUFFERED": "1"},
                mounts=mounts,
                log_sink=sink,
                ready=ready.probe(),
                faketime=SkewFile(clock_dir / "faketime"),
                on_exit=self._on_exit,
                stop_grace=2.0,
                create={"binds": binds} if binds else None,
                wait_ready=wait,
                before_start=open_links,
            )
        )
        ready.attach(container)
        self._services[name] = container
        self.recorder.record(
            f"{SERVICE_PREFIX}{name}",
            "info",
            "start",
            {"pid": container.pid, "container": container.container_id, "image": image},
        )
        return container

    def _supervise(self, process: ManagedProcess, policy: RestartPolicy) -> None:
        def record(f: str, value: dict[str, Any]) -> None:
            if f == "start":
                value = {"pid": process.pid, **value}
            self.recorder.record(f"{SERVICE_PREFIX}{process.name}", "info", f, value)

        process.supervise(policy, record)

    async def ready(self, *processes: ManagedProcess | ContainerService) -> None:
        """Wait until every one of ``processes`` is ready, side by side."""
        async with trio.open_nursery() as nursery:
            for process in processes:
                nursery.start_soon(process.ready)

    def _on_exit(self, name: str, code: int, expected: bool) -> None:
        self.recorder.record(
            f"{SERVICE_PREFIX}{name}", "info", "exit", {"code": code, "expected": expected}
        )

    def harness_failures(self) -> list[str]:
        """What of the harness's own died on its own during the run, one line each: its
        embedded servers (PostgreSQL, NATS), and every service started here that is not the
        task's (in a graded run, the candidate's; in a plain run, the pack's implementation
        of it; a pack without a task has only its servers). A service the nemesis crashed
        did not die on its own."""
        task = self.scenario.task
        found = []
        for e in self.recorder.events:
            value = e.get("value")
            if e.get("f") != "exit" or not str(e.get("process")).startswith(SERVICE_PREFIX):
                continue
            name = str(e["process"])[len(SERVICE_PREFIX) :]
            if task is None or name in self.candidate_services:
                continue
            if name == task.service or name.startswith(f"{task.service}-"):
                continue
            if isinstance(value, Mapping) and value.get("expected") is False:
                found.append(f"{name} exited with code {value.get('code')}")
        for dep in self.dependencies:
            if dep.process is not None and dep.process.died:
                found.append(f"{dep.process.name} died")
        return found

    def service(self, name: str) -> ManagedProcess | ContainerService:
        try:
            return self._services[name]
        except KeyError:
            known = ", ".join(self._services) or "none"
            raise ConfigError(
                f"no service {name!r} in this run (services: {known}){self._absent_hint()}"
            ) from None

    def _absent_hint(self) -> str:
        """How a pack makes every command refuse such a space before its first run."""
        if self.variant == "golden":
            return ""
        return (
            f"; if variant {self.variant!r} lacks it, name it in Scenario.absent and every "
            "command refuses a space naming it before the first run"
        )

    async def run_to_completion(
        self, name: str, argv: Sequence[str], *, env: Mapping[str, str] | None = None
    ) -> int:
        """Run a workload process until it exits; its ``@op`` lines join the history."""
        async with open_process_service(
            name,
            list(argv),
            env={**(env or {}), "PYTHONUNBUFFERED": "1"},
            log_sink=self.recorder.log_line,
            stop_grace=2.0,
            zygote=zygote.current(),
        ) as process:
            self.recorder.record(f"{SERVICE_PREFIX}{name}", "info", "start", {"pid": process.pid})
            code = await process.wait()
            with trio.move_on_after(2):
                await process.exited.wait()
        self.recorder.record(
            f"{SERVICE_PREFIX}{name}", "info", "exit", {"code": code, "expected": True}
        )
        return code

    @staticmethod
    def python() -> str:
        """The harness's Python interpreter: start a pack's Python programs with it."""
        return sys.executable

    def pack_file(self, name: str) -> Path:
        """A file of the scenario's own folder (``Scenario.path``); ConfigError naming the
        path when it does not exist."""
        path = self.scenario.path / name
        if not path.is_file():
            raise ConfigError(f"scenario {self.scenario.id}: no file {path} in the pack's folder")
        return path

    def pack_program(self, name: str, *args: str) -> list[str]:
        """The argv that runs the pack's program ``name`` (a ``.py`` file in the pack's
        folder) with the harness's Python: ``[python, /abs/pack/name, *args]``. The program
        runs as a script, so the pack's folder is first on its ``sys.path``: it imports its
        sibling modules by plain name (``import common``), and the harness's packages
        (``chaos``, ``invariants``) as installed. Works the same from any directory."""
        return [self.python(), str(self.pack_file(name)), *args]


__all__ = ["ExternalServices", "RunContext"]
