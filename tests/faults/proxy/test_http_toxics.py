"""The /proxies/{p}/toxics endpoints of the HTTP API, over real TCP."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from faults.proxy.http import open_toxiproxy
from tests.faults.proxy.http_helpers import call, port_of


@pytest.fixture
async def port() -> AsyncIterator[int]:
    async with open_toxiproxy(seed=5) as (_server, url):
        port = port_of(url)
        created = await call(port, "POST", "/proxies", {"name": "p", "upstream": "127.0.0.1:9"})
        assert created.status == 201
        yield port


async def _add(port: int, body: Any) -> Any:
    reply = await call(port, "POST", "/proxies/p/toxics", body)
    assert reply.status == 200, reply.body
    return reply.json()


async def test_create_answers_200_with_defaults(port: int) -> None:
    toxic = await _add(port, {"type": "latency"})
    assert toxic == {
        "attributes": {"latency": 0, "jitter": 0},
        "name": "latency_downstream",
        "type": "latency",
        "stream": "downstream",
        "toxicity": 1.0,
    }


async def test_stream_is_case_insensitive_and_names_the_default(port: int) -> None:
    toxic = await _add(port, {"type": "bandwidth", "Stream": "UpStream", "attributes": None})
    assert (toxic["stream"], toxic["name"]) == ("upstream", "bandwidth_upstream")
    assert toxic["attributes"] == {"rate": 0}


async def test_every_attribute_listed_unknown_dropped_keys_case_insensitive(port: int) -> None:
    body = {"TYPE": "slicer", "attributes": {"AVERAGE_size": 10, "bogus": 3}, "toxicity": 0.5}
    toxic = await _add(port, body)
    assert toxic["attributes"] == {"average_size": 10, "size_variation": 0, "delay": 0}
    assert toxic["toxicity"] == 0.5


async def test_list_is_upstream_then_downstream_in_insertion_order(port: int) -> None:
    assert (await call(port, "GET", "/proxies/p/toxics")).json() == []
    await _add(port, {"type": "latency", "name": "d1"})
    await _add(port, {"type": "latency", "name": "u1", "stream": "upstream"})
    await _add(port, {"type": "noop", "name": "d2"})
    await _add(port, {"type": "timeout", "name": "u2", "stream": "upstream"})
    listed = (await call(port, "GET", "/proxies/p/toxics")).json()
    assert [t["name"] for t in listed] == ["u1", "u2", "d1", "d2"]
    proxy = (await call(port, "GET", "/proxies/p")).json()
    assert [t["name"] for t in proxy["toxics"]] == ["u1", "u2", "d1", "d2"]


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        (
            {"type": "latency", "stream": "sideways"},
            400,
            "stream was invalid, can be either upstream or downstream",
        ),
        (
            {"type": "latency", "stream": ""},
            400,
            "stream was invalid, can be either upstream or downstream",
        ),
        ({"type": "nope"}, 400, "invalid toxic type"),
        ({}, 400, "invalid toxic type"),
        ({"type": 3}, 400, "bad request body: type must be a string, got number"),
        ({"type": "latency", "toxicity": "1"}, 400, "bad request body: toxicity must be a number"),
        ({"type": "latency", "toxicity": 1.5}, 400, "bad request body: toxicity must be between"),
        ({"type": "latency", "toxicity": -0.1}, 400, "bad request body: toxicity must be between"),
        ({"type": "latency", "attributes": []}, 400, "bad request body: attributes must be"),
        ({"type": "latency", "attributes": {"latency": "5"}}, 400, "bad request body: attribute"),
        ({"type": "latency", "attributes": {"latency": 1.5}}, 400, "bad request body: attribute"),
        ({"type": "latency", "attributes": {"latency": 5.0}}, 400, "bad request body: attribute"),
        ({"type": "latency", "attributes": {"latency": True}}, 400, "bad request body: attribute"),
        ({"type": "latency", "attributes": {"jitter": -1}}, 400, "jitter must be >= 0"),
        ({"type": "bandwidth", "attributes": {"rate": -1}}, 400, "rate must be >= 0"),
        ({"type": "slicer", "attributes": {"average_size": 0}}, 400, "average_size must be > 0"),
        (
            {"type": "slicer", "attributes": {"average_size": 5, "size_variation": 6}},
            400,
            "size_variation must be <= average_size",
        ),
    ],
)
async def test_create_rejects(port: int, body: dict[str, Any], status: int, message: str) -> None:
    reply = await call(port, "POST", "/proxies/p/toxics", body)
    assert reply.status == status
    assert reply.error.startswith(message), reply.error
    assert (await call(port, "GET", "/proxies/p/toxics")).json() == []


async def test_create_conflicts_and_missing_proxy(port: int) -> None:
    await _add(port, {"type": "latency", "name": "same"})
    clash = await call(
        port, "POST", "/proxies/p/toxics", {"type": "noop", "name": "same", "stream": "upstream"}
    )
    assert (clash.status, clash.error) == (409, "toxic already exists")
    missing = await call(port, "POST", "/proxies/none/toxics", raw=b"junk")
    assert (missing.status, missing.error) == (404, "proxy not found")
    empty = await call(port, "POST", "/proxies/p/toxics", raw=b"")
    assert (empty.status, empty.error) == (400, "bad request body: EOF")


async def test_get_toxic(port: int) -> None:
    made = await _add(port, {"type": "limit_data", "attributes": {"bytes": 7}})
    got = await call(port, "GET", "/proxies/p/toxics/limit_data_downstream")
    assert (got.status, got.json()) == (200, made)
    assert (await call(port, "GET", "/proxies/p/toxics/x")).error == "toxic not found"
    assert (await call(port, "GET", "/proxies/x/toxics/x")).error == "proxy not found"


@pytest.mark.parametrize("method", ["POST", "PATCH"])
async def test_update_merges_attributes_and_keeps_toxicity(port: int, method: str) -> None:
    await _add(
        port,
        {
            "type": "latency",
            "name": "l",
            "toxicity": 0.25,
            "attributes": {"latency": 100, "jitter": 10},
        },
    )
    path = "/proxies/p/toxics/l"
    body = {"attributes": {"JITTER": 20}, "name": "renamed", "stream": "upstream"}
    merged = await call(port, method, path, body)
    assert merged.status == 200
    assert merged.json() == {
        "attributes": {"latency": 100, "jitter": 20},
        "name": "l",
        "type": "latency",
        "stream": "downstream",
        "toxicity": 0.25,
    }
    retuned = (await call(port, method, path, {"toxicity": 1})).json()
    assert (retuned["toxicity"], retuned["attributes"]["jitter"]) == (1.0, 20)
    nulls = (await call(port, method, path, {"attributes": None, "toxicity": None})).json()
    assert nulls == retuned


async def test_update_errors(port: int) -> None:
    await _add(port, {"type": "slicer", "name": "s", "attributes": {"average_size": 4}})
    assert (await call(port, "POST", "/proxies/x/toxics/s", raw=b"{")).status == 404
    assert (await call(port, "POST", "/proxies/p/toxics/x", raw=b"{")).error == "toxic not found"
    bad = await call(port, "POST", "/proxies/p/toxics/s", {"attributes": {"size_variation": 5}})
    assert (bad.status, bad.error) == (400, "size_variation must be <= average_size (4), got 5")
    unchanged = (await call(port, "GET", "/proxies/p/toxics/s")).json()
    assert unchanged["attributes"]["size_variation"] == 0


async def test_delete_toxic(port: int) -> None:
    await _add(port, {"type": "noop"})
    deleted = await call(port, "DELETE", "/proxies/p/toxics/noop_downstream")
    assert (deleted.status, deleted.body) == (204, b"")
    again = await call(port, "DELETE", "/proxies/p/toxics/noop_downstream")
    assert (again.status, again.error) == (404, "toxic not found")
    gone = await call(port, "DELETE", "/proxies/x/toxics/noop_downstream")
    assert (gone.status, gone.error) == (404, "proxy not found")
