"""A candidate's site in the process sandbox, its network: which links it dials and which
dial into it (read from its environment), the real dependencies it must not reach directly,
and inside its network namespace its links' listeners and tripwires on those dependencies'
ports.
"""

from __future__ import annotations

import re
from contextlib import suppress
from typing import Any

import trio

from chaos.sandbox._detect import Dependency
from chaos.sandbox._site_state import _SiteState

_ADDRESS = re.compile(r"(?:\[([0-9a-fA-F:]+)\]|([A-Za-z0-9.\-]+)):(\d{1,5})")


def _named_addresses(env: dict[str, str]) -> set[tuple[str, int]]:
    named: set[tuple[str, int]] = set()
    for value in env.values():
        for m in _ADDRESS.finditer(value):
            named.add((m.group(1) or m.group(2), int(m.group(3))))
    return named


def candidate_links(proxies: dict[str, Any], env: dict[str, str]) -> list[str]:
    """The links whose listen address the candidate's environment holds (it dials them)."""
    named = _named_addresses(env)
    found = []
    for name, proxy in proxies.items():
        host, _, port = proxy.listen.rpartition(":")
        if (host, int(port)) in named or ("localhost", int(port)) in named:
            found.append(name)
    return found


def inbound_links(proxies: dict[str, Any], env: dict[str, str], outbound: list[str]
                  ) -> list[str]:  # fmt: skip
    """The links into the candidate: those whose upstream is a loopback port its
    environment names (``PORT=8080`` or an address): it is the server there, and their
    clients (the workload) reach it through them (the proxy dials into its namespace)."""
    ports = {port for _, port in _named_addresses(env)}
    for value in env.values():
        if value.strip().isdigit():
            ports.add(int(value))
    found = []
    for name, proxy in proxies.items():
        host, _, port = proxy.upstream.rpartition(":")
        if name in outbound or host not in ("127.0.0.1", "localhost", "::1", "[::1]"):
            continue
        if int(port) in ports:
            found.append(name)
    return found


class _SiteNet(_SiteState):
    """The site's links, dependencies, listeners and tripwires."""

    def _candidate_links(self, env: dict[str, str]) -> list[str]:
        return candidate_links(self.ctx.proxies.proxies, env)

    def _inbound_links(self, env: dict[str, str], outbound: list[str]) -> list[str]:
        return inbound_links(self.ctx.proxies.proxies, env, outbound)

    def _dependencies(self) -> list[Dependency]:
        deps: list[Dependency] = []
        for service in getattr(self.ctx, "dependencies", []):
            kind = type(service).__name__
            if kind == "PostgresService":
                deps.append(Dependency("postgres", (service.host, service.port),
                                       postgres_dsn=service.dsn))  # fmt: skip
            elif kind == "NatsService":
                monitor = (
                    f"http://{service.host}:{service.monitor_port}"
                    if service.monitor_port
                    else None
                )
                deps.append(Dependency("nats", (service.host, service.port),
                                       nats_monitor=monitor))  # fmt: skip
        known = {d.address for d in deps}
        for name, proxy in self.ctx.proxies.proxies.items():
            if name in self.inbound:
                continue  # the candidate's own server, not a dependency
            host, _, port = proxy.upstream.rpartition(":")
            if (host, int(port)) not in known:
                known.add((host, int(port)))
                deps.append(Dependency(f"the upstream of link {name}", (host, int(port))))
        return deps

    def _proxied(self, conn: Any) -> None:
        if self.detector is not None:
            with suppress(OSError):
                host, port = conn.server.socket.getsockname()[:2]
                self.detector.proxied.add((str(host), int(port)))

    def _listen(self, links: list[str]) -> None:
        """Inside the namespace: each candidate link's listener, and tripwires on the ports
        of the real servers (anything else there is refused)."""
        assert self.netns is not None
        proxies = self.ctx.proxies.proxies
        addresses: list[tuple[str, int]] = []
        for name in links:
            host, _, port = proxies[name].listen.rpartition(":")
            addresses.append((host, int(port)))
        wires: dict[int, str] = {}
        assert self.detector is not None
        for dep in self.detector.dependencies:
            dep_port = dep.address[1]
            if dep_port not in {p for _, p in addresses}:
                wires.setdefault(dep_port, f"{dep.name} at {dep.address[0]}:{dep_port}")
        sockets = self.netns.listen(addresses + [("0.0.0.0", p) for p in wires])
        for name, sock in zip(links, sockets, strict=False):
            proxies[name].serve_also(trio.socket.from_stdlib_socket(sock))
        for sock, (_port, what) in zip(sockets[len(links) :], wires.items(), strict=True):
            self.tripwires.append((trio.socket.from_stdlib_socket(sock), what))
