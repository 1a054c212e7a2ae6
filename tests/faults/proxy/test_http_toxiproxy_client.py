"""toxiproxy-python 0.1.1, unchanged, drives the embedded API (and real traffic through it).

The client is blocking (``requests``), so it runs in a worker thread while the API and an
echo server run in the test's trio loop.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest
import trio
from toxiproxy import Toxiproxy
from toxiproxy.api import APIConsumer
from toxiproxy.exceptions import InvalidToxic, NotFound, ProxyExists

from faults.proxy.http import open_toxiproxy
from tests.faults.proxy.http_helpers import open_echo_server, port_of

LATENCY_MS = 300


@pytest.fixture(autouse=True)
def _restore_api_consumer() -> Iterator[None]:
    """The client keeps its server address in class attributes: put them back."""
    host, port = APIConsumer.host, APIConsumer.port
    yield
    APIConsumer.host, APIConsumer.port = host, port


def _address(listen: str) -> tuple[str, int]:
    host, port = listen.rsplit(":", 1)
    return host, int(port)


def _round_trip(listen: str, payload: bytes = b"ping") -> float:
    """Seconds for ``payload`` to come back through the proxy at ``listen`` (blocking)."""
    with socket.create_connection(_address(listen), timeout=10) as sock:
        start = time.monotonic()
        sock.sendall(payload)
        got = b""
        while len(got) < len(payload):
            data = sock.recv(65536)
            assert data, "proxy closed the connection"
            got += data
        assert got == payload
        return time.monotonic() - start


def _refused(listen: str) -> bool:
    try:
        socket.create_connection(_address(listen), timeout=5).close()
    except ConnectionRefusedError:
        return True
    return False


def _client_flow(api_port: int, echo_port: int) -> None:
    toxiproxy = Toxiproxy()
    toxiproxy.update_api_consumer("127.0.0.1", api_port)
    assert toxiproxy.running()
    assert b"2.12.0" in toxiproxy.version()
    upstream = f"127.0.0.1:{echo_port}"

    # create, list, get
    proxy = toxiproxy.create(upstream=upstream, name="echo")
    assert proxy.enabled is True
    assert proxy.listen.startswith("127.0.0.1:")
    assert not proxy.listen.endswith(":0")
    with pytest.raises(ProxyExists):
        toxiproxy.create(upstream=upstream, name="echo")
    assert list(toxiproxy.proxies()) == ["echo"]
    fetched = toxiproxy.get_proxy("echo")
    assert (fetched.listen, fetched.upstream) == (proxy.listen, upstream)
    assert toxiproxy.get_proxy("nope") is None
    assert _round_trip(proxy.listen) >= 0

    # toxics: add, list, a latency that really delays, remove
    proxy.add_toxic(type="latency", attributes={"latency": LATENCY_MS})
    toxics = proxy.toxics()
    assert list(toxics) == ["latency_downstream"]
    toxic = toxics["latency_downstream"]
    assert (toxic.type, toxic.stream, toxic.toxicity) == ("latency", "downstream", 1.0)
    assert toxic.attributes == {"latency": LATENCY_MS, "jitter": 0}
    assert _round_trip(proxy.listen) >= 0.9 * LATENCY_MS / 1000
    with pytest.raises(InvalidToxic):
        proxy.add_toxic(type="no_such_toxic")
    with pytest.raises(ProxyExists):  # 409 on a toxic name clash
        proxy.add_toxic(type="latency")
    assert proxy.destroy_toxic("latency_downstream") is True
    assert proxy.toxics() == {}
    with pytest.raises(NotFound):
        proxy.destroy_toxic("latency_downstream")

    # disable / enable keep the port
    proxy.disable()
    assert proxy.enabled is False
    assert _refused(proxy.listen)
    proxy.enable()
    assert toxiproxy.get_proxy("echo").listen == proxy.listen
    assert _round_trip(proxy.listen) >= 0
    with proxy.down():
        assert _refused(proxy.listen)
    assert toxiproxy.get_proxy("echo").enabled is True

    # reset: every toxic removed, every proxy enabled
    proxy.add_toxic(type="timeout", stream="upstream", attributes={"timeout": 0})
    proxy.disable()
    assert toxiproxy.reset() is True
    assert toxiproxy.get_proxy("echo").enabled is True
    assert proxy.toxics() == {}

    # populate (client side: create, or replace when listen/upstream differ)
    created = toxiproxy.populate(
        [
            {"name": "echo", "upstream": upstream, "listen": proxy.listen},
            {"name": "second", "upstream": upstream, "listen": "127.0.0.1:0"},
        ]
    )
    assert [p.name for p in created] == ["second"]
    assert sorted(toxiproxy.proxies()) == ["echo", "second"]
    assert _round_trip(created[0].listen) >= 0

    # destroy
    assert toxiproxy.destroy(proxy) is True
    assert _refused(proxy.listen)
    toxiproxy.destroy_all()
    assert toxiproxy.proxies() == {}


async def test_toxiproxy_python_full_flow() -> None:
    async with open_echo_server() as echo, open_toxiproxy(seed=9) as (server, url):
        await trio.to_thread.run_sync(_client_flow, port_of(url), echo)
        assert server.proxies == {}
