"""The embedded Toxiproxy: trio TCP proxies with seeded toxics, and its HTTP API."""

from __future__ import annotations

from faults.proxy._spec import ToxicSpec
from faults.proxy.proxy import Proxy
from faults.proxy.server import Observer, ProxyServer, open_proxy_server

__all__ = [
    "Observer",
    "Proxy",
    "ProxyServer",
    "ToxicSpec",
    "open_proxy_server",
]
