"""The Toxiproxy v2 HTTP API: server-wide rules and the /proxies endpoints, over real TCP."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator

import h11
import pytest
import trio

from faults.proxy import ProxyServer, http
from faults.proxy.http import open_toxiproxy
from tests.faults.proxy.http_helpers import call, open_echo_server, port_of


@pytest.fixture
async def api() -> AsyncIterator[tuple[ProxyServer, int]]:
    async with open_toxiproxy(seed=3) as (server, url):
        yield server, port_of(url)


def _taken_port() -> tuple[socket.socket, int]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(1)
    return sock, sock.getsockname()[1]


async def _refused(port: int) -> bool:
    try:
        stream = await trio.open_tcp_stream("127.0.0.1", port)
    except OSError:
        return True
    await stream.aclose()
    return False


def test_public_surface() -> None:
    assert sorted(http.__all__) == [
        "HttpLimits",
        "api_url",
        "open_http_api",
        "open_toxiproxy",
        "serve_http",
    ]
    assert all(callable(getattr(http, name)) for name in http.__all__)
    assert http.api_url("localhost", 8474) == "http://127.0.0.1:8474"
    assert http.api_url("::1", 1) == "http://[::1]:1"


# -- server-wide rules -----------------------------------------------------------------


async def test_every_response_carries_a_distinct_request_id(api: tuple[ProxyServer, int]) -> None:
    _, port = api
    replies = [
        await call(port, "GET", "/version"),
        await call(port, "GET", "/nope"),
        await call(port, "DELETE", "/version"),
        await call(port, "GET", "/proxies", headers=[("User-Agent", "Mozilla/5.0")]),
        await call(port, "POST", "/proxies", raw=b"{"),
        await call(port, "DELETE", "/proxies/missing"),
    ]
    ids = [r.headers.get("x-toxiproxy-request-id") for r in replies]
    assert all(ids), ids
    assert len(set(ids)) == len(ids)


@pytest.mark.parametrize("path", ["/proxies", "/version", "/nope", "/reset"])
async def test_browser_user_agent_is_forbidden(api: tuple[ProxyServer, int], path: str) -> None:
    _server, port = api
    reply = await call(port, "POST", path, {}, headers=[("User-Agent", "Mozilla/5.0 (X11)")])
    assert (reply.status, reply.body) == (403, b"User agent not allowed\n")
    assert reply.headers["content-type"].startswith("text/plain")
    ok = await call(port, "GET", "/proxies", headers=[("User-Agent", "curl/8.0 Mozilla/5.0")])
    assert ok.status == 200


@pytest.mark.parametrize(
    "path", ["/", "/nope", "/proxies/", "/proxies/a/b", "/proxies/a/toxics/b/c", "/version/x"]
)
async def test_unknown_path_is_404_text(api: tuple[ProxyServer, int], path: str) -> None:
    reply = await call(api[1], "GET", path)
    assert (reply.status, reply.body) == (404, b"404 page not found\n")


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("DELETE", "/proxies"),
        ("PUT", "/proxies"),
        ("GET", "/reset"),
        ("GET", "/populate"),
        ("POST", "/version"),
        ("PUT", "/proxies/p"),
        ("PUT", "/proxies/p/toxics"),
        ("DELETE", "/proxies/p/toxics"),
        ("PUT", "/proxies/p/toxics/t"),
        ("get", "/version"),
    ],
)
async def test_wrong_method_is_405_empty(
    api: tuple[ProxyServer, int], method: str, path: str
) -> None:
    reply = await call(api[1], method, path, {})
    assert (reply.status, reply.body) == (405, b"")


async def test_version(api: tuple[ProxyServer, int]) -> None:
    reply = await call(api[1], "GET", "/version")
    assert reply.status == 200
    assert reply.headers["content-type"] == "application/json"
    assert reply.json()["version"].startswith("2.12.0+chaos-harness.")


async def test_json_keys_case_insensitive_unknown_ignored_content_type_ignored(
    api: tuple[ProxyServer, int],
) -> None:
    server, port = api
    body = {"NAME": "pg", "Upstream": "127.0.0.1:5", "LiStEn": "127.0.0.1:0", "color": "red"}
    reply = await call(port, "POST", "/proxies", body, headers=[("Content-Type", "text/plain")])
    assert reply.status == 201, reply.body
    assert reply.json()["name"] == "pg"
    assert server.get_proxy("pg").upstream == "127.0.0.1:5"


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"", "bad request body: EOF"),
        (b" \r\n\t ", "bad request body: EOF"),
        (b"{", "bad request body: "),
        (b"{'name': 1}", "bad request body: "),
        (b"NaN", "bad request body: "),
        (b"\xff\xfe\x00", "bad request body: "),
        (b"[" * 200_000, "bad request body: "),
        (b"[]", "bad request body: expected a JSON object, got array"),
        (b'{"name": 5, "upstream": "a:1"}', "bad request body: name must be a string, got number"),
        (b'{"name": "a", "upstream": "a:1", "listen": ["x"]}', "bad request body: listen must"),
        (b'{"name": "a", "upstream": "a:1", "enabled": "yes"}', "bad request body: enabled must"),
        (b'{"name": "a", "upstream": {}}', "bad request body: upstream must be a string"),
    ],
)
async def test_bad_bodies_are_400(api: tuple[ProxyServer, int], raw: bytes, message: str) -> None:
    server, port = api
    reply = await call(port, "POST", "/proxies", raw=raw)
    assert reply.status == 400
    assert reply.error.startswith(message), reply.error
    assert server.proxies == {}


# -- /proxies ------------------------------------------------------------------------------


async def test_list_is_an_empty_object_then_name_to_proxy(api: tuple[ProxyServer, int]) -> None:
    server, port = api
    assert (await call(port, "GET", "/proxies")).json() == {}
    for name in ("b", "a"):
        await call(port, "POST", "/proxies", {"name": name, "upstream": "127.0.0.1:9"})
    listed = (await call(port, "GET", "/proxies")).json()
    assert list(listed) == ["a", "b"]
    assert listed["a"] == server.get_proxy("a").to_json()


async def test_create_reports_real_listen_and_carries_traffic(api: tuple[ProxyServer, int]) -> None:
    _, port = api
    async with open_echo_server() as echo:
        body = {"name": "echo", "listen": "127.0.0.1:0", "upstream": f"127.0.0.1:{echo}"}
        reply = await call(port, "POST", "/proxies", body)
        assert reply.status == 201
        proxy = reply.json()
        assert proxy == {
            "name": "echo",
            "listen": proxy["listen"],
            "upstream": f"127.0.0.1:{echo}",
            "enabled": True,
            "toxics": [],
        }
        host, listen_port = proxy["listen"].rsplit(":", 1)
        assert host == "127.0.0.1"
        assert int(listen_port) > 0
        with trio.fail_after(5):
            stream = await trio.open_tcp_stream(host, int(listen_port))
            async with stream:
                await stream.send_all(b"ping")
                assert await stream.receive_some(4) == b"ping"


async def test_create_localhost_and_disabled_listen(api: tuple[ProxyServer, int]) -> None:
    _, port = api
    probe, free = _taken_port()
    probe.close()
    made = await call(
        port,
        "POST",
        "/proxies",
        {"name": "l", "listen": f"localhost:{free}", "upstream": "127.0.0.1:9", "enabled": None},
    )
    assert made.status == 201
    assert (made.json()["listen"], made.json()["enabled"]) == (f"127.0.0.1:{free}", True)
    off = await call(
        port,
        "POST",
        "/proxies",
        {"name": "off", "listen": "127.0.0.1:0", "upstream": "127.0.0.1:9", "enabled": False},
    )
    assert (off.json()["listen"], off.json()["enabled"]) == ("127.0.0.1:0", False)
    on = await call(port, "POST", "/proxies/off", {"enabled": True})
    assert on.json()["enabled"] is True
    assert on.json()["listen"] != "127.0.0.1:0"


async def test_create_defaults_listen_to_loopback_and_ignores_toxics(
    api: tuple[ProxyServer, int],
) -> None:
    _, port = api
    body = {"name": "d", "upstream": "127.0.0.1:9", "toxics": [{"type": "latency"}]}
    reply = await call(port, "POST", "/proxies", body)
    assert reply.status == 201
    assert reply.json()["listen"].startswith("127.0.0.1:")
    assert reply.json()["toxics"] == []


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"upstream": "a:1"}, "missing required field: name"),
        ({"name": "", "upstream": "a:1"}, "missing required field: name"),
        ({"name": None, "upstream": "a:1"}, "missing required field: name"),
        ({"name": "x"}, "missing required field: upstream"),
        ({"name": "x", "upstream": ""}, "missing required field: upstream"),
    ],
)
async def test_create_missing_fields(
    api: tuple[ProxyServer, int], body: dict[str, object], message: str
) -> None:
    reply = await call(api[1], "POST", "/proxies", body)
    assert (reply.status, reply.error) == (400, message)


async def test_create_conflict_is_checked_before_binding(api: tuple[ProxyServer, int]) -> None:
    _server, port = api
    taken, busy = _taken_port()
    with taken:
        first = await call(port, "POST", "/proxies", {"name": "p", "upstream": "a:1"})
        assert first.status == 201
        again = {"name": "p", "upstream": "a:1", "listen": f"127.0.0.1:{busy}"}
        reply = await call(port, "POST", "/proxies", again)
        assert (reply.status, reply.error) == (409, "proxy already exists")
        missing_upstream = await call(port, "POST", "/proxies", {"name": "p"})
        assert missing_upstream.error == "missing required field: upstream"


async def test_create_bind_failure_is_500_and_creates_nothing(api: tuple[ProxyServer, int]) -> None:
    server, port = api
    taken, busy = _taken_port()
    with taken:
        body = {"name": "b", "upstream": "a:1", "listen": f"127.0.0.1:{busy}"}
        reply = await call(port, "POST", "/proxies", body)
    assert reply.status == 500
    assert reply.error == f"listen tcp 127.0.0.1:{busy}: bind: address already in use"
    assert "b" not in server.proxies
    assert (await call(port, "GET", "/proxies/b")).status == 404


async def test_get_and_delete(api: tuple[ProxyServer, int]) -> None:
    server, port = api
    assert (await call(port, "GET", "/proxies/x")).error == "proxy not found"
    await call(port, "POST", "/proxies", {"name": "x", "upstream": "a:1"})
    got = await call(port, "GET", "/proxies/x")
    assert (got.status, got.json()) == (200, server.get_proxy("x").to_json())
    listen = got.json()["listen"]
    deleted = await call(port, "DELETE", "/proxies/x")
    assert (deleted.status, deleted.body) == (204, b"")
    assert await _refused(port_of(listen))
    again = await call(port, "DELETE", "/proxies/x")
    assert (again.status, again.error) == (404, "proxy not found")


async def test_path_segments_are_percent_decoded(api: tuple[ProxyServer, int]) -> None:
    _, port = api
    await call(port, "POST", "/proxies", {"name": "my proxy", "upstream": "a:1"})
    assert (await call(port, "GET", "/proxies/my%20proxy?x=1")).json()["name"] == "my proxy"


@pytest.mark.parametrize("method", ["POST", "PATCH"])
async def test_update_is_partial(api: tuple[ProxyServer, int], method: str) -> None:
    _server, port = api
    created = await call(port, "POST", "/proxies", {"name": "u", "upstream": "127.0.0.1:9"})
    listen = created.json()["listen"]
    await call(port, "POST", "/proxies/u/toxics", {"type": "latency"})

    off = await call(port, method, "/proxies/u", {"enabled": False, "name": "ignored"})
    assert off.status == 200
    assert (off.json()["name"], off.json()["enabled"], off.json()["listen"]) == ("u", False, listen)
    assert await _refused(port_of(listen))

    on = await call(port, method, "/proxies/u", {"Enabled": True})
    assert (on.json()["enabled"], on.json()["listen"]) == (True, listen)
    assert not await _refused(port_of(listen))

    moved = await call(port, method, "/proxies/u", {"upstream": "127.0.0.1:10"})
    assert moved.json()["upstream"] == "127.0.0.1:10"
    assert [t["name"] for t in moved.json()["toxics"]] == ["latency_downstream"]
    assert (await call(port, method, "/proxies/u", {"enabled": None})).json()["enabled"] is True


async def test_update_errors(api: tuple[ProxyServer, int]) -> None:
    _, port = api
    missing = await call(port, "POST", "/proxies/none", raw=b"not json")
    assert (missing.status, missing.error) == (404, "proxy not found")
    await call(port, "POST", "/proxies", {"name": "e", "upstream": "a:1"})
    bad = await call(port, "POST", "/proxies/e", raw=b"")
    assert (bad.status, bad.error) == (400, "bad request body: EOF")
    wrong = await call(port, "PATCH", "/proxies/e", {"enabled": 1})
    assert wrong.error == "bad request body: enabled must be a boolean, got number"


async def test_reset_enables_proxies_and_removes_toxics(api: tuple[ProxyServer, int]) -> None:
    _server, port = api
    await call(port, "POST", "/proxies", {"name": "r", "upstream": "a:1", "enabled": False})
    await call(port, "POST", "/proxies/r/toxics", {"type": "timeout", "stream": "upstream"})
    reply = await call(port, "POST", "/reset")
    assert (reply.status, reply.body) == (204, b"")
    state = (await call(port, "GET", "/proxies/r")).json()
    assert (state["enabled"], state["toxics"]) == (True, [])


@pytest.mark.parametrize("field", ["upstream", "listen"])
@pytest.mark.parametrize(
    "port_text",
    [pytest.param("\u00b2", id="superscript-two"), pytest.param("1" * 5000, id="5000-digits")],
)
async def test_unparsable_port_digits_are_400(
    api: tuple[ProxyServer, int], field: str, port_text: str
) -> None:
    body = {"name": "u", "upstream": "127.0.0.1:9", field: f"127.0.0.1:{port_text}"}
    try:
        status: int | None = (await call(api[1], "POST", "/proxies", body)).status
    except h11.RemoteProtocolError:  # the connection was dropped without an answer
        status = None
    assert status == 400
