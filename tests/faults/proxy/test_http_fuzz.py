"""Hypothesis throws junk at every endpoint of the HTTP API; every answer must be a sane
4xx/2xx (or the one legitimate 5xx: a bind failure), and the server must keep serving."""

from __future__ import annotations

import json
import socket
from typing import Any
from urllib.parse import quote

import trio
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from faults.proxy.http import open_toxiproxy
from faults.proxy.toxics import TOXIC_TYPES
from tests.faults.proxy.http_helpers import call, port_of

_FIELDS = ["name", "listen", "upstream", "enabled", "type", "stream", "toxicity", "attributes"]
_ATTRIBUTES = sorted({a for cls in TOXIC_TYPES.values() for a in cls.attribute_names})
_NAMES = ["p", "t", "latency_downstream", "q", "", "%2F", "..", "p/toxics"]


def _cased(words: list[str]) -> st.SearchStrategy[str]:
    return st.sampled_from(words).flatmap(
        lambda w: st.sampled_from([w, w.upper(), w.title(), w.swapcase()])
    )


_huge = st.integers(min_value=-(10**30), max_value=10**30) | st.sampled_from(
    [2**63, -(2**63) - 1, 2**64]
)
_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-5, max_value=70000)
    | _huge
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20)
)
_json = st.recursive(
    _scalars,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(_cased(_FIELDS + _ATTRIBUTES) | st.text(max_size=8), inner, max_size=5)
    ),
    max_leaves=12,
)


def _mostly(good: st.SearchStrategy[Any], junk: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """``good`` three times in four, else ``junk``."""
    return st.integers(0, 3).flatmap(lambda i: junk if i == 0 else good)


#: BUSY is replaced by the API's own port on the way out: binding it must be a 500.
_ports = st.sampled_from(["0", "0", "0", "BUSY", "70000", "-1", "", "x", "00", "1.5"])
_hosts = st.sampled_from(["127.0.0.1", "localhost", "", "[::1]", "example.com", "256.0.0.1"])
_address = _mostly(st.builds("{}:{}".format, _hosts, _ports), st.text(max_size=16) | _json)
_proxy = st.fixed_dictionaries(
    {},
    optional={
        "name": _mostly(st.sampled_from(_NAMES) | st.text(max_size=8), _json),
        "listen": _address,
        "upstream": _address,
        "enabled": _mostly(st.booleans() | st.none(), _json),
        "toxics": _json,
    },
)
_toxic = st.fixed_dictionaries(
    {},
    optional={
        "type": _mostly(st.sampled_from([*TOXIC_TYPES, "nope"]), _json),
        "name": _mostly(st.sampled_from(_NAMES) | st.text(max_size=8), _json),
        "stream": _mostly(_cased(["upstream", "downstream", "sideways"]), _json),
        "toxicity": _mostly(st.floats(min_value=-0.5, max_value=1.5), _json),
        "attributes": _mostly(
            st.dictionaries(_cased(_ATTRIBUTES), _mostly(st.integers(-2, 10**6), _scalars)), _json
        ),
    },
)


class Body(bytes):
    """A request body whose repr stays short in Hypothesis reports."""

    def __repr__(self) -> str:
        more = f"... ({len(self)} bytes)" if len(self) > 80 else ""
        return f"Body({bytes(self[:80])!r}{more})"


_body = st.one_of(
    st.builds(lambda v: json.dumps(v).encode(), _json | _proxy | _toxic | st.lists(_proxy)),
    st.binary(max_size=64),
    st.sampled_from(
        [
            b"",
            b"[" * 50_000,
            b'{"name": "big", "upstream": "a:1", "toxicity": 1' + b"0" * 5000 + b"}",
            b'{"type": "latency", "attributes": {"latency": 1e999}}',
            b"NaN",
            b"\xef\xbb\xbf{}",
        ]
    ),
).map(Body)
_segment = st.sampled_from(["p", "t", *_NAMES]) | st.text(max_size=12)
_proxy_segment = _mostly(st.just("p"), _segment)
_toxic_segment = _mostly(st.just("t"), _segment)
_junk_path = st.one_of(
    st.sampled_from(["/populate", "/reset", "/version", "/", "/proxies/", "/proxies"]),
    st.text(max_size=20).map(lambda s: "/" + s),
)
_any_path = st.one_of(
    st.just("/proxies"),
    st.builds("/proxies/{}".format, _segment),
    st.builds("/proxies/{}/toxics".format, _segment),
    st.builds("/proxies/{}/toxics/{}".format, _segment, _segment),
    _junk_path,
)
_methods = st.sampled_from(["GET", "POST", "PATCH", "DELETE", "PUT", "HEAD", "OPTIONS", "get"])
_update = st.sampled_from(["POST", "PATCH"])


def _json_body(shape: st.SearchStrategy[Any]) -> st.SearchStrategy[Body]:
    return st.builds(lambda v: Body(json.dumps(v).encode()), shape | _json)


#: (method, path, body): mostly well-routed requests with near-miss bodies, some pure junk.
_requests = st.one_of(
    st.tuples(st.just("POST"), st.just("/proxies"), _json_body(_proxy)),
    st.tuples(_update, st.builds("/proxies/{}".format, _segment), _json_body(_proxy)),
    st.tuples(
        st.just("POST"), st.builds("/proxies/{}/toxics".format, _segment), _json_body(_toxic)
    ),
    st.tuples(
        _update,
        st.builds("/proxies/{}/toxics/{}".format, _segment, _segment),
        _json_body(_toxic),
    ),
    st.tuples(st.just("POST"), st.just("/populate"), _json_body(st.lists(_proxy, max_size=4))),
    st.tuples(st.sampled_from(["GET", "DELETE"]), _any_path, _body),
    st.tuples(_methods, _any_path, _body),
)
_header = st.tuples(
    st.sampled_from(["User-Agent", "Content-Type", "Accept", "X-Junk", "Cookie"]),
    st.sampled_from(["Mozilla/5.0", "curl/8", "application/json", "text/plain", ""])
    | st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), max_size=30),
)


def _send(port: int, method: str, path: str, headers: list[tuple[str, str]], body: bytes) -> bytes:
    target = quote(path, safe="/%?=&")
    head = [f"{method} {target} HTTP/1.1", "Host: api", "Connection: close"]
    head += [f"{k}: {v}" for k, v in headers]
    body = body.replace(b"BUSY", str(port).encode())
    head.append(f"Content-Length: {len(body)}")
    wire = ("\r\n".join(head) + "\r\n\r\n").encode() + body
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(wire)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    return data


def _check(method: str, data: bytes) -> None:
    head, sep, rest = data.partition(b"\r\n\r\n")
    assert sep, f"no complete response: {data[:200]!r}"
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ")[1])
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    assert headers.get("x-toxiproxy-request-id"), headers
    length = int(headers.get("content-length", "0"))
    body = b"" if method == "HEAD" else rest[:length]
    event(f"status {status}")
    if status == 500:
        assert json.loads(body)["error"].startswith("listen tcp "), body
        return
    assert status < 500, (status, body)
    if method == "HEAD" or status == 204:
        assert body == b""
    elif status == 403:
        assert body == b"User agent not allowed\n"
    elif status == 405:
        assert body == b""
    elif status == 404 and body == b"404 page not found\n":
        pass
    elif status >= 400:
        payload = json.loads(body)
        assert isinstance(payload["error"], str)
        assert payload["error"]
        assert payload["status"] == status
    else:
        json.loads(body)


def _restore_fixtures(port: int) -> None:
    """Recreate proxy ``p`` and its toxic ``t`` if an earlier example removed them."""
    proxy = json.dumps({"name": "p", "upstream": "127.0.0.1:9"}).encode()
    toxic = json.dumps({"name": "t", "type": "latency"}).encode()
    _send(port, "POST", "/proxies", [], proxy)
    _send(port, "POST", "/proxies/p/toxics", [], toxic)


def _fuzz(port: int) -> None:
    @settings(
        max_examples=200,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(request=_requests, headers=st.lists(_header, max_size=3))
    def one_request(request: tuple[str, str, bytes], headers: list[tuple[str, str]]) -> None:
        method, path, body = request
        _restore_fixtures(port)
        _check(method, _send(port, method, path, headers, body))

    one_request()


async def test_junk_never_breaks_the_api() -> None:
    async with open_toxiproxy(seed=2) as (server, url):
        proxy = server.create_proxy("p", "127.0.0.1:0", "127.0.0.1:9")
        proxy.add_toxic("latency", name="t")
        port = port_of(url)
        await trio.to_thread.run_sync(_fuzz, port)
        reply = await call(port, "GET", "/version")
        assert reply.status == 200
        assert reply.json()["version"].startswith("2.12.0")
