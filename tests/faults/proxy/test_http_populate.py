"""POST /populate: validate all entries first, then create, keep or replace in order."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator

import pytest

from faults.proxy import ProxyServer
from faults.proxy.http import open_toxiproxy
from tests.faults.proxy.http_helpers import call, port_of


@pytest.fixture
async def api() -> AsyncIterator[tuple[ProxyServer, int]]:
    async with open_toxiproxy(seed=11) as (server, url):
        yield server, port_of(url)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _has_ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as sock:
            sock.bind(("::1", 0))
    except OSError:
        return False
    return True


@pytest.mark.parametrize("raw", [b"[]", b"null", b" [ ] "])
async def test_empty_input_gives_an_empty_array(api: tuple[ProxyServer, int], raw: bytes) -> None:
    reply = await call(api[1], "POST", "/populate", raw=raw)
    assert (reply.status, reply.json()) == (201, {"proxies": []})


async def test_creates_in_order(api: tuple[ProxyServer, int]) -> None:
    server, port = api
    body = [
        {"name": "one", "upstream": "127.0.0.1:9", "listen": "127.0.0.1:0"},
        {"NAME": "two", "upstream": "127.0.0.1:9", "enabled": False, "toxics": "ignored"},
    ]
    reply = await call(port, "POST", "/populate", body)
    assert reply.status == 201
    proxies = reply.json()["proxies"]
    assert [p["name"] for p in proxies] == ["one", "two"]
    assert proxies[0]["listen"] != "127.0.0.1:0"
    assert (proxies[0]["enabled"], proxies[1]["enabled"]) == (True, False)
    assert proxies == [server.get_proxy("one").to_json(), server.get_proxy("two").to_json()]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            [{"name": "a", "upstream": "b:1"}, {"upstream": "c:1"}],
            "missing required field: name at proxy 2",
        ),
        ([{"name": "a"}], "missing required field: upstream at proxy 1"),
        (
            [{"name": "a", "upstream": "b:1"}, {"name": "", "upstream": "b:1"}],
            "missing required field: name at proxy 2",
        ),
        (
            [{"name": "a", "upstream": "b:1"}, {}, {"name": 3}],
            "missing required field: name at proxy 2",
        ),
        (
            [{"name": "a", "upstream": "b:1"}, {"name": 3}],
            "bad request body: name must be a string at proxy 2, got number",
        ),
        (
            [{"name": "a", "upstream": "b:1"}, "x"],
            "bad request body: expected a JSON object at proxy 2, got string",
        ),
        (
            [{"name": "a", "upstream": "b:1", "enabled": "no"}],
            "bad request body: enabled must be a boolean at proxy 1, got string",
        ),
        ([{"name": "a", "upstream": "nocolon"}], "bad request body: upstream must be host:port"),
        ({"name": "a", "upstream": "b:1"}, "bad request body: expected a JSON array"),
    ],
)
async def test_everything_is_validated_before_anything_is_created(
    api: tuple[ProxyServer, int], body: object, message: str
) -> None:
    server, port = api
    reply = await call(port, "POST", "/populate", body)
    assert reply.status == 400
    assert reply.error.startswith(message), reply.error
    assert reply.json()["proxies"] == []
    assert server.proxies == {}


async def test_bad_json_is_400_with_proxies_array(api: tuple[ProxyServer, int]) -> None:
    reply = await call(api[1], "POST", "/populate", raw=b"")
    assert reply.json() == {"error": "bad request body: EOF", "status": 400, "proxies": []}


async def test_same_config_is_left_alone(api: tuple[ProxyServer, int]) -> None:
    server, port = api
    listen = f"127.0.0.1:{_free_port()}"
    entry = {"name": "keep", "listen": listen, "upstream": "127.0.0.1:9"}
    await call(port, "POST", "/proxies", entry)
    await call(port, "POST", "/proxies/keep/toxics", {"type": "latency"})
    await call(port, "POST", "/proxies/keep", {"enabled": False})

    reply = await call(port, "POST", "/populate", [entry])
    assert reply.status == 201
    (kept,) = reply.json()["proxies"]
    assert kept["enabled"] is False
    assert [t["name"] for t in kept["toxics"]] == ["latency_downstream"]
    assert kept == server.get_proxy("keep").to_json()


@pytest.mark.parametrize(
    ("stored", "written"),
    [
        ("127.0.0.1:{port}", "localhost:{port}"),
        ("localhost:{port}", "127.0.0.1:{port}"),
        pytest.param(
            "[::1]:{port}",
            "[0:0::1]:{port}",
            marks=pytest.mark.skipif(not _has_ipv6_loopback(), reason="no IPv6 loopback"),
        ),
    ],
)
async def test_same_address_written_differently_is_left_alone(
    api: tuple[ProxyServer, int], stored: str, written: str
) -> None:
    """Toxiproxy resolves the listen address before comparing: the proxy, its toxics and
    its live connections stay (the reference's own API suite checks this)."""
    server, port = api
    free = _free_port()
    await call(
        port,
        "POST",
        "/proxies",
        {"name": "db", "listen": stored.format(port=free), "upstream": "127.0.0.1:9"},
    )
    await call(port, "POST", "/proxies/db/toxics", {"type": "latency"})
    before = server.get_proxy("db")

    entry = {"name": "db", "listen": written.format(port=free), "upstream": "127.0.0.1:9"}
    reply = await call(port, "POST", "/populate", [entry])
    assert reply.status == 201
    (kept,) = reply.json()["proxies"]
    assert [t["name"] for t in kept["toxics"]] == ["latency_downstream"]
    assert server.get_proxy("db") is before
    assert kept == before.to_json()


async def test_different_upstream_or_listen_replaces(api: tuple[ProxyServer, int]) -> None:
    server, port = api
    await call(port, "POST", "/proxies", {"name": "swap", "upstream": "127.0.0.1:9"})
    await call(port, "POST", "/proxies/swap/toxics", {"type": "latency"})
    await call(port, "POST", "/proxies/swap", {"enabled": False})

    reply = await call(port, "POST", "/populate", [{"name": "swap", "upstream": "127.0.0.1:10"}])
    (swapped,) = reply.json()["proxies"]
    assert (swapped["upstream"], swapped["enabled"], swapped["toxics"]) == (
        "127.0.0.1:10",
        True,
        [],
    )
    assert server.get_proxy("swap").upstream == "127.0.0.1:10"


async def test_first_failure_stops_and_earlier_entries_stay(api: tuple[ProxyServer, int]) -> None:
    server, port = api
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        busy = taken.getsockname()[1]
        body = [
            {"name": "first", "upstream": "127.0.0.1:9"},
            {"name": "second", "upstream": "127.0.0.1:9", "listen": f"127.0.0.1:{busy}"},
            {"name": "third", "upstream": "127.0.0.1:9"},
        ]
        reply = await call(port, "POST", "/populate", body)
    assert reply.status == 500
    assert reply.error == f"listen tcp 127.0.0.1:{busy}: bind: address already in use"
    assert [p["name"] for p in reply.json()["proxies"]] == ["first"]
    assert sorted(server.proxies) == ["first"]
