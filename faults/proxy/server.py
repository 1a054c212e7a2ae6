"""The proxy server: a registry of proxies running in one trio nursery.

This is the in-process API the harness uses (no HTTP)::

    async with open_proxy_server(seed=7, observer=trace.record) as server:
        proxy = server.create_proxy("pg", "127.0.0.1:0", "127.0.0.1:5432")
        proxy.add_toxic("latency", attributes={"latency": 100, "jitter": 10})
        ...

Leaving the block closes every listener and connection. The HTTP API
(``faults.proxy.http``) is a thin layer over the same methods.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import trio

from faults.proxy.errors import BadRequest, ProxyExists, ProxyNotFound
from faults.proxy.proxy import Proxy, ProxyRuntime
from ground.errors import ConfigError
from ground.rng import SEED_MAX as RUN_SEED_BOUND
from ground.rng import check_seed

Observer = Callable[[dict[str, Any]], None]

#: Proxy names are path segments of the HTTP API.
_MAX_NAME = 256

#: A server's seed: any 64-bit value (a run hands it one derived from the run seed).
SEED_MAX = 2**64 - 1
#: The seeds ``chaos run --seed`` takes; ``open_toxiproxy`` (``chaos proxy serve --seed``)
#: takes the same.
RUN_SEED_MAX = RUN_SEED_BOUND


def check_options(
    seed: Any, dial_timeout: Any, busy_poll_us: Any, *, seed_max: int = SEED_MAX
) -> None:
    """Refuse server options no run could use (``ConfigError``), before anything starts."""
    if seed_max == RUN_SEED_MAX:
        check_seed(seed)
    elif isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= seed_max:
        raise ConfigError(f"seed must be between 0 and 2**64-1, got {seed!r}")
    if not isinstance(dial_timeout, int | float) or not (
        math.isfinite(dial_timeout) and dial_timeout > 0
    ):
        raise ConfigError(f"dial timeout must be a finite number > 0, got {dial_timeout!r}")
    if not isinstance(busy_poll_us, int | float) or not 0 <= busy_poll_us <= 1_000_000:
        raise ConfigError(f"busy_poll_us must be between 0 and 1000000, got {busy_poll_us}")


class ProxyServer:
    """Proxies by name. Methods are synchronous: binding happens at once, so errors are
    raised to the caller; traffic runs in the server's nursery. ``seed`` is any 64-bit
    value; see ``open_proxy_server`` for the rest."""

    def __init__(
        self,
        nursery: trio.Nursery,
        *,
        seed: int = 0,
        observer: Observer | None = None,
        dial_timeout: float = 5.0,
        busy_poll_us: float = 0.0,
    ) -> None:
        check_options(seed, dial_timeout, busy_poll_us)
        self._nursery = nursery
        self.seed = seed
        self.dial_timeout = dial_timeout
        #: Seconds an idle fast-path thread polls without sleeping (0: it sleeps at once).
        self.busy_poll_s = busy_poll_us / 1e6
        self._observers: list[Observer] = [observer] if observer else []
        self.proxies: dict[str, Proxy] = {}
        self._runtime = ProxyRuntime(seed, self.emit, self.spawn, dial_timeout, self.busy_poll_s)

    def emit(self, event: str, /, **fields: Any) -> None:
        record = {"event": event, **fields}
        for observer in self._observers:
            observer(record)

    def add_observer(self, observer: Observer) -> None:
        self._observers.append(observer)

    def spawn(self, fn: Callable[..., Awaitable[Any]], *args: Any) -> None:
        self._nursery.start_soon(fn, *args)

    # -- proxies ------------------------------------------------------------------

    def get_proxy(self, name: str) -> Proxy:
        try:
            return self.proxies[name]
        except KeyError:
            raise ProxyNotFound() from None

    def create_proxy(self, name: str, listen: str, upstream: str, *, enabled: bool = True) -> Proxy:
        _check_name(name)
        if name in self.proxies:
            raise ProxyExists()
        proxy = Proxy(self._runtime, name, listen, upstream, enabled)
        self.proxies[name] = proxy
        self.emit("proxy_created", **proxy.to_json())
        return proxy

    def update_proxy(
        self,
        name: str,
        *,
        listen: str | None = None,
        upstream: str | None = None,
        enabled: bool | None = None,
    ) -> Proxy:
        """Partial update; a new listen or upstream restarts the proxy (toxics kept)."""
        proxy = self.get_proxy(name)
        if upstream is not None:
            Proxy.check_upstream(upstream)
        restart = (listen is not None and listen != proxy.listen) or (
            upstream is not None and upstream != proxy.upstream
        )
        want_enabled = proxy.enabled if enabled is None else enabled
        if restart:
            old = (proxy.listen, proxy.upstream, proxy.enabled)
            proxy.stop()
            if listen is not None:
                proxy.listen = listen
            if upstream is not None:
                proxy.upstream = upstream
            if want_enabled:
                try:
                    proxy.start()
                except Exception:
                    # All or nothing: put the old configuration back, running as it was.
                    proxy.listen, proxy.upstream, was_enabled = old
                    if was_enabled:
                        proxy.start()
                    raise
        elif want_enabled:
            proxy.start()
        else:
            proxy.stop()
        self.emit("proxy_updated", **proxy.to_json())
        return proxy

    def delete_proxy(self, name: str) -> None:
        proxy = self.get_proxy(name)
        proxy.stop()
        del self.proxies[name]
        self.emit("proxy_deleted", name=name)

    def reset(self) -> None:
        """Enable every proxy and remove every toxic."""
        for proxy in self.proxies.values():
            proxy.remove_all_toxics()
            proxy.start()
        self.emit("reset")

    def close(self) -> None:
        for proxy in self.proxies.values():
            proxy.stop()


def _check_name(name: Any) -> None:
    if not isinstance(name, str) or not name:
        raise BadRequest("missing required field: name")
    if len(name) > _MAX_NAME or "/" in name:
        raise BadRequest(f"bad request body: invalid proxy name {name[:40]!r}")


@asynccontextmanager
async def open_proxy_server(
    *,
    seed: int = 0,
    observer: Observer | None = None,
    dial_timeout: float = 5.0,
    busy_poll_us: float = 0.0,
) -> AsyncIterator[ProxyServer]:
    """A proxy server whose proxies and connections all end when the block ends.

    ``busy_poll_us`` trades CPU for round-trip latency on toxic-free connections: an idle
    forwarding thread polls that long before it sleeps (off by default: a run shares its
    cores with the services under test).
    """
    check_options(seed, dial_timeout, busy_poll_us)
    async with trio.open_nursery() as nursery:
        server = ProxyServer(
            nursery,
            seed=seed,
            observer=observer,
            dial_timeout=dial_timeout,
            busy_poll_us=busy_poll_us,
        )
        try:
            yield server
        finally:
            server.close()
            nursery.cancel_scope.cancel()
