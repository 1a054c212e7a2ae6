"""One proxy: a listener, its live connections, and its toxics (upstream and downstream)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import trio

from faults.proxy._address import bind_listener, split_host_port
from faults.proxy._connection import Connection
from faults.proxy._spec import ToxicSpec
from faults.proxy._stage import Emit
from faults.proxy.errors import BadRequest, InvalidToxic, ToxicExists, ToxicNotFound
from faults.proxy.toxics import TOXIC_TYPES

STREAMS = ("upstream", "downstream")


@dataclass(frozen=True, slots=True)
class ProxyRuntime:
    """What a server hands each proxy it builds: the run seed, where events go, where
    tasks run, how long an upstream may take to accept, the fast path's busy-poll budget."""

    seed: int
    emit: Emit
    spawn: Callable[..., None]
    dial_timeout: float = 5.0
    busy_poll_s: float = 0.0


class Proxy:
    """A Toxiproxy proxy. Create it through ``ProxyServer.create_proxy``."""

    def __init__(
        self, runtime: ProxyRuntime, name: str, listen: str, upstream: str, enabled: bool
    ) -> None:
        self.check_upstream(upstream)
        self._runtime = runtime
        self.name = name
        self.listen = listen
        self.upstream = upstream
        self.enabled = False
        self.connections: set[Connection] = set()
        self.connection_count = 0
        self._closed_bytes = 0
        self._toxics: dict[str, ToxicSpec] = {}
        self._listener: trio.socket.SocketType | None = None
        self._extra_listeners: list[tuple[trio.socket.SocketType, trio.CancelScope]] = []
        self._scope: trio.CancelScope | None = None
        self._connection_hooks: list[Callable[[Connection], None]] = []
        #: How to reach the upstream (default: a TCP dial from the proxy's own network
        #: namespace); a harness sets one to dial from another namespace (a container's).
        self.dialer: Callable[[str, int], Awaitable[trio.SocketStream]] | None = None
        if enabled:
            self.start()

    @staticmethod
    def check_upstream(upstream: Any) -> None:
        if not isinstance(upstream, str) or not upstream:
            raise BadRequest("missing required field: upstream")
        split_host_port(upstream, "upstream")

    @property
    def seed(self) -> int:
        return self._runtime.seed

    def emit(self, event: str, /, **fields: Any) -> None:
        self._runtime.emit(event, proxy=self.name, **fields)

    # -- lifecycle ----------------------------------------------------------------

    def start(self) -> None:
        """Bind the listener (raises ``BindError``) and start accepting."""
        if self.enabled:
            return
        sock, self.listen = bind_listener(self.listen)
        self._listener = sock
        self._scope = trio.CancelScope()
        self.enabled = True
        self._runtime.spawn(self._serve, sock, self._scope)

    def stop(self) -> None:
        """Close the listener and every connection."""
        if not self.enabled:
            return
        self.enabled = False
        if self._scope is not None:
            self._scope.cancel()
        if self._listener is not None:
            self._listener.close()
        for sock, scope in self._extra_listeners:
            scope.cancel()
            sock.close()
        self._extra_listeners.clear()
        for conn in list(self.connections):
            conn.abort(reason="proxy disabled")
        self._listener = None
        self._scope = None

    def serve_also(self, sock: trio.socket.SocketType) -> None:
        """Accept on another bound, listening socket too: one made in another network
        namespace (a sandboxed candidate's), so a client there reaches this proxy at the same
        address. Its connections get the same toxics; it closes with the proxy (``stop``)."""
        if not self.enabled:
            sock.close()
            raise BadRequest(f"proxy {self.name} is not listening")
        scope = trio.CancelScope()
        self._extra_listeners.append((sock, scope))
        self._runtime.spawn(self._serve, sock, scope)

    async def _serve(self, sock: trio.socket.SocketType, scope: trio.CancelScope) -> None:
        listener = trio.SocketListener(sock)
        with scope:
            async with trio.open_nursery() as nursery:
                while True:
                    try:
                        client = await listener.accept()
                    except (trio.ClosedResourceError, OSError):
                        return
                    index = self.connection_count
                    self.connection_count += 1
                    nursery.start_soon(self._handle, client, index)

    async def _handle(self, client: trio.SocketStream, index: int) -> None:
        host, port = split_host_port(self.upstream, "upstream")
        server: trio.SocketStream | None = None
        try:
            with trio.move_on_after(self._runtime.dial_timeout):
                if self.dialer is not None:
                    server = await self.dialer(host, int(port))
                else:
                    server = await trio.open_tcp_stream(host, port)
        except OSError as exc:
            self.emit("dial_failed", conn=index, upstream=self.upstream, error=str(exc))
        if server is None:
            client.socket.close()
            return
        conn = Connection(
            index,
            client,
            server,
            upstream=self.specs("upstream"),
            downstream=self.specs("downstream"),
            seed=self._runtime.seed,
            proxy=self.name,
            emit=self.emit,
            busy_poll_s=self._runtime.busy_poll_s,
        )
        self.connections.add(conn)
        self.emit("connection_opened", conn=index, upstream=self.upstream)
        for hook in list(self._connection_hooks):
            hook(conn)
        try:
            await conn.run()
        finally:
            self.connections.discard(conn)
            self._closed_bytes += conn.upstream.bytes_read + conn.downstream.bytes_read
            self.emit(
                "connection_closed",
                conn=index,
                reason=conn.reason,
                bytes_upstream=conn.upstream.bytes_read,
                bytes_downstream=conn.downstream.bytes_read,
            )

    @property
    def bytes_total(self) -> int:
        """Bytes that entered the proxy, both directions, over every connection so far."""
        live = sum(c.upstream.bytes_read + c.downstream.bytes_read for c in self.connections)
        return self._closed_bytes + live

    def on_connection(self, hook: Callable[[Connection], None]) -> Callable[[], None]:
        """Call ``hook`` for every new connection; returns a function that unregisters it."""
        self._connection_hooks.append(hook)
        return lambda: self._connection_hooks.remove(hook)

    # -- toxics -------------------------------------------------------------------

    def specs(self, stream: str) -> list[ToxicSpec]:
        return [t for t in self._toxics.values() if t.stream == stream]

    def toxics(self) -> list[ToxicSpec]:
        """Upstream toxics in insertion order, then downstream."""
        return self.specs("upstream") + self.specs("downstream")

    def get_toxic(self, name: str) -> ToxicSpec:
        try:
            return self._toxics[name]
        except KeyError:
            raise ToxicNotFound() from None

    def add_toxic(
        self,
        type: str,
        *,
        name: str | None = None,
        stream: str = "downstream",
        toxicity: float = 1.0,
        attributes: Any = None,
    ) -> ToxicSpec:
        stream = _check_stream(stream)
        cls = TOXIC_TYPES.get(type) if isinstance(type, str) else None
        if cls is None:
            raise InvalidToxic()
        if name is None or name == "":
            name = f"{type}_{stream}"
        if name in self._toxics:
            raise ToxicExists()
        spec = ToxicSpec(name, stream, _check_toxicity(toxicity), cls.from_json(attributes))
        self._toxics[name] = spec
        self._apply(stream)
        self.emit("toxic_added", **spec.to_json())
        return spec

    def update_toxic(
        self, name: str, *, attributes: Any = None, toxicity: float | None = None
    ) -> ToxicSpec:
        old = self.get_toxic(name)
        toxic = type(old.toxic).from_json(attributes, base=old.toxic.attributes)
        tox = old.toxicity if toxicity is None else _check_toxicity(toxicity)
        spec = ToxicSpec(old.name, old.stream, tox, toxic)
        self._toxics[name] = spec
        self._apply(spec.stream)
        self.emit("toxic_updated", **spec.to_json())
        return spec

    def remove_toxic(self, name: str) -> None:
        spec = self.get_toxic(name)
        del self._toxics[name]
        if spec.type == "timeout":
            # Removing a timeout closes the connections it was holding (as the reference).
            for conn in list(self.connections):
                if conn.direction(spec.stream).is_applied(name):
                    conn.abort(reason="timeout removed")
        self._apply(spec.stream)
        self.emit("toxic_removed", name=name, type=spec.type, stream=spec.stream)

    def remove_all_toxics(self) -> None:
        for name in list(self._toxics):
            self.remove_toxic(name)

    def _apply(self, stream: str) -> None:
        specs = self.specs(stream)
        for conn in self.connections:
            conn.direction(stream).set_specs(specs)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "listen": self.listen,
            "upstream": self.upstream,
            "enabled": self.enabled,
            "toxics": [t.to_json() for t in self.toxics()],
        }


def _check_stream(stream: Any) -> str:
    if not isinstance(stream, str) or stream.lower() not in STREAMS:
        raise BadRequest("stream was invalid, can be either upstream or downstream")
    return stream.lower()


def _check_toxicity(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise BadRequest(f"bad request body: toxicity must be a number, got {value!r}")
    try:
        result = float(value)
    except OverflowError:
        raise BadRequest("bad request body: toxicity is out of range") from None
    if not 0.0 <= result <= 1.0:
        raise BadRequest(f"bad request body: toxicity must be between 0 and 1, got {result}")
    return result
