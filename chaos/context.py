"""What a scenario's hooks get: ``RunContext``, the run's services, links, subjects and streams.

``chaos.run`` builds one ``RunContext`` per run and hands it to ``setup``, ``workload``,
``settled`` and ``final_state``; the nemesis reads the same object (through the small
``chaos.nemesis.NemesisContext`` protocol). Everything the context starts is entered on the
run's exit stack, so it stops when the run ends, however it ends.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import trio

from chaos.errors import ConfigError
from chaos.recorder import Recorder
from chaos.rng import derive_rng
from chaos.services import (
    ManagedProcess,
    NatsService,
    PostgresService,
    SkewFile,
    external_nats,
    external_postgres,
    open_nats,
    open_postgres,
    open_process_service,
)
from faults.proxy import Proxy, ProxyServer
from invariants.history import SERVICE_PREFIX

if TYPE_CHECKING:
    from chaos.sandbox.candidate import Candidate
    from chaos.scenario import Scenario
    from chaos.warm import WarmServices


@dataclass(frozen=True)
class Subject:
    """A message subject faults can target: where it is published and consumed."""

    nats_subject: str
    stream: str
    consume_link: str
    publish_link: str


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
        scenario: Scenario,
        seed: int,
        variant: str,
        run_dir: Path,
        stack: AsyncExitStack,
        proxies: ProxyServer,
        recorder: Recorder,
        externals: ExternalServices | None = None,
        candidate: Candidate | None = None,
        warm: WarmServices | None = None,
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
        self._services: dict[str, ManagedProcess] = {}
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
        elif self.warm is not None:
            pg = await self.warm.postgres(self)
        else:
            pg = await self.stack.enter_async_context(
                open_postgres(self.run_dir, log_sink=self.recorder.log_line)
            )
        self.dependencies.append(pg)
        return pg

    async def nats(self) -> NatsService:
        """The run's NATS with JetStream: embedded unless a URL was given."""
        if self.externals.nats_url:
            nats = external_nats(self.externals.nats_url)
        elif self.warm is not None:
            nats = await self.warm.nats_for(self)
        else:
            nats = await self.stack.enter_async_context(
                open_nats(self.run_dir, log_sink=self.recorder.log_line)
            )
        self.dependencies.append(nats)
        return nats

    # -- links --------------------------------------------------------------------------

    def add_link(self, name: str, upstream: str) -> str:
        """A proxy named ``name`` in front of ``upstream``; returns the address to dial."""
        proxy = self.proxies.create_proxy(name, "127.0.0.1:0", upstream)
        self._links[name] = proxy
        return proxy.listen

    def link(self, name: str) -> Proxy:
        try:
            return self._links[name]
        except KeyError:
            raise ConfigError(
                f"no link {name!r} in this run (links: {', '.join(self._links) or 'none'})"
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
    ) -> ManagedProcess:
        """Start a service under test (its wall clock skewable) and wait until it prints
        ``ready_line`` (if given; with ``wait=False`` call ``ready`` later, to start several
        at once). It is stopped and reaped when the run ends. In a graded run the candidate's
        program runs in place of the task's service (``chaos.sandbox``): same ready line,
        only the task's environment variables, its output logged but never history."""
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
        seen = {"count": 0}
        holder: list[ManagedProcess] = []

        def sink(service: str, stream: str, line: str) -> None:
            if ready_line is not None and ready_line in line:
                seen["count"] += 1
            self.recorder.log_line(service, stream, line)

        async def ready() -> bool:
            starts = holder[0].starts if holder else 1
            return ready_line is None or seen["count"] >= starts

        skew = SkewFile(self.run_dir / f"{name}.faketime")
        process = await self.stack.enter_async_context(
            open_process_service(
                name,
                list(argv),
                env={**(env or {}), "PYTHONUNBUFFERED": "1"},
                log_sink=sink,
                ready=ready if ready_line else None,
                faketime=skew,
                on_exit=self._on_exit,
                stop_grace=2.0,
                wait_ready=wait,
            )
        )
        holder.append(process)
        self._services[name] = process
        self.recorder.record(f"{SERVICE_PREFIX}{name}", "info", "start", {"pid": process.pid})
        return process

    async def ready(self, *processes: ManagedProcess) -> None:
        """Wait until every one of ``processes`` is ready, side by side."""
        async with trio.open_nursery() as nursery:
            for process in processes:
                nursery.start_soon(process.ready)

    def _on_exit(self, name: str, code: int, expected: bool) -> None:
        self.recorder.record(
            f"{SERVICE_PREFIX}{name}", "info", "exit", {"code": code, "expected": expected}
        )

    def service(self, name: str) -> ManagedProcess:
        try:
            return self._services[name]
        except KeyError:
            known = ", ".join(self._services) or "none"
            raise ConfigError(f"no service {name!r} in this run (services: {known})") from None

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
        return sys.executable


__all__ = ["ExternalServices", "RunContext", "Subject"]
