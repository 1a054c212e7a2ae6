"""The Toxiproxy v2 HTTP API over a ``ProxyServer``, on trio + h11.

Toxiproxy's own clients work against it unchanged::

    async with open_toxiproxy(seed=7) as (server, url):
        ...  # url == "http://127.0.0.1:40123"; point toxiproxy-python, curl, ... at it

or, for a server you already hold::

    async with open_http_api(server, port=8474) as url:
        ...

Each client connection is served by its own task; whatever one client sends ends at most
its own connection (see ``faults.proxy._http_wire``), never the server.
"""

from __future__ import annotations

import functools
import ipaddress
import itertools
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trio

from faults.proxy._address import bind_listener, join_host_port
from faults.proxy._http_routes import handle
from faults.proxy._http_wire import HttpLimits, serve_connection
from faults.proxy.server import (
    RUN_SEED_MAX,
    Observer,
    ProxyServer,
    check_options,
    open_proxy_server,
)
from ground.errors import ConfigError

__all__ = ["HttpLimits", "api_url", "open_http_api", "open_toxiproxy", "serve_http"]

_log = logging.getLogger(__name__)
_LIMITS = HttpLimits()


async def serve_http(
    server: ProxyServer,
    host: str = "127.0.0.1",
    port: int = 8474,
    *,
    limits: HttpLimits = _LIMITS,
    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve the API on ``host:port`` until cancelled; reports the bound port to
    ``task_status`` (so port 0 works). Raises ``BindError`` or ``ConfigError`` at once."""
    async with _bind(host, port) as listener:
        task_status.started(_bound_port(listener))
        await _serve(server, listener, limits)


@asynccontextmanager
async def open_http_api(
    server: ProxyServer, host: str = "127.0.0.1", port: int = 0, *, limits: HttpLimits = _LIMITS
) -> AsyncIterator[str]:
    """Serve the API for ``server`` while the block runs; yields its base URL."""
    async with _bind(host, port) as listener, trio.open_nursery() as nursery:
        nursery.start_soon(_serve, server, listener, limits)
        try:
            yield api_url(host, _bound_port(listener))
        finally:
            nursery.cancel_scope.cancel()


@asynccontextmanager
async def open_toxiproxy(
    host: str = "127.0.0.1",
    port: int = 0,
    seed: int = 0,
    *,
    observer: Observer | None = None,
    dial_timeout: float = 5.0,
    busy_poll_us: float = 0.0,
    limits: HttpLimits = _LIMITS,
) -> AsyncIterator[tuple[ProxyServer, str]]:
    """A proxy server and its HTTP API (the API port is bound first, so a taken port
    raises a plain ``BindError``); yields the server and the API's base URL. ``seed`` is a
    run seed (0 to 2**63-1, as ``chaos run --seed``); bad options raise ``ConfigError``
    before anything is bound."""
    check_options(seed, dial_timeout, busy_poll_us, seed_max=RUN_SEED_MAX)
    async with _bind(host, port) as listener:
        url = api_url(host, _bound_port(listener))
        async with (
            open_proxy_server(
                seed=seed, observer=observer, dial_timeout=dial_timeout, busy_poll_us=busy_poll_us
            ) as server,
            trio.open_nursery() as nursery,
        ):
            nursery.start_soon(_serve, server, listener, limits)
            try:
                yield server, url
            finally:
                nursery.cancel_scope.cancel()


def api_url(host: str, port: int) -> str:
    """The base URL a client uses for an API bound to ``host:port``."""
    return f"http://{join_host_port('127.0.0.1' if host == 'localhost' else host, port)}"


def _bind(host: str, port: int) -> trio.SocketListener:
    if host != "localhost":
        try:
            ipaddress.ip_address(host)
        except ValueError:
            raise ConfigError(f"host must be an IP address or localhost, got {host!r}") from None
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise ConfigError(f"port must be in 0..65535, got {port!r}")
    sock, _ = bind_listener(join_host_port(host, port))
    return trio.SocketListener(sock)


def _bound_port(listener: trio.SocketListener) -> int:
    port: int = listener.socket.getsockname()[1]
    return port


async def _serve(server: ProxyServer, listener: trio.SocketListener, limits: HttpLimits) -> None:
    ids = itertools.count(1)
    handler = functools.partial(handle, server)

    def new_id() -> str:
        return str(next(ids))

    async def client(stream: trio.SocketStream) -> None:
        try:
            await serve_connection(stream, handler, limits, new_id)
        except Exception:
            # Go's net/http does the same on a handler panic: log, drop this connection.
            _log.exception("HTTP API: unexpected error; client connection closed")
        finally:
            await trio.aclose_forcefully(stream)

    await trio.serve_listeners(client, [listener])
