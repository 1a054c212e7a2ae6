"""The protocol-aware toxics against a real nats-server with JetStream, via nats-py."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import nats
import pytest
import trio

from chaos.services import free_port, open_nats, open_process_service, open_run_dir
from chaos.services.nats import NatsService, nats_server_binary
from faults.proxy import Proxy, open_proxy_server

pytestmark = pytest.mark.slow


@pytest.fixture
async def nats_proxy(tmp_path: Path) -> AsyncIterator[tuple[Proxy, list[dict[str, Any]], str]]:
    """A proxy in front of an embedded server, its events, and the harness's login through
    it (the embedded server requires one)."""
    events: list[dict[str, Any]] = []
    with open_run_dir(parent=tmp_path) as root:
        async with open_nats(root) as server, open_proxy_server(seed=1) as proxies:
            proxies.add_observer(events.append)
            proxy = proxies.create_proxy("nats", "127.0.0.1:0", f"127.0.0.1:{server.port}")
            yield proxy, events, server.admin_url(proxy.listen)


def _url(proxy: Proxy) -> str:
    return f"nats://{proxy.listen}"


async def _redelivery(url: str) -> list[int]:
    nc = await nats.connect(url, ping_interval=1, max_reconnect_attempts=0)
    try:
        js = nc.jetstream()
        await js.add_stream(name="ORDERS", subjects=["orders.>"])
        for i in range(3):
            await js.publish("orders.new", b"order-%d" % i)
        sub = await js.pull_subscribe(
            "orders.new", "charger", config=nats.js.api.ConsumerConfig(ack_wait=1.0)
        )
        deliveries = []
        for msg in await sub.fetch(3, timeout=5):
            deliveries.append(msg.metadata.num_delivered)
            await msg.ack()
        await nc.flush()
        for msg in await sub.fetch(3, timeout=5):
            deliveries.append(msg.metadata.num_delivered)
            await msg.ack()
        await nc.flush()
        return deliveries
    finally:
        await nc.close()


async def test_dropped_ack_makes_jetstream_redeliver_once(
    nats_proxy: tuple[Proxy, list[dict[str, Any]], str],
) -> None:
    proxy, events, url = nats_proxy
    proxy.add_toxic("nats_drop_ack", stream="upstream", attributes={"count": 1})
    proxy.add_toxic("nats_observe", stream="downstream")
    deliveries = await trio.to_thread.run_sync(asyncio.run, _redelivery(url))
    assert deliveries == [1, 1, 1, 2]
    dropped = [e for e in events if e["event"] == "frame_dropped"]
    assert len(dropped) == 1
    assert dropped[0]["subject"].startswith("$JS.ACK.ORDERS.charger.")
    observed = [e["delivery"] for e in events if e["event"] == "nats_delivery"]
    assert observed == [1, 1, 1, 2]


async def _publish_twice_counted(url: str, msg_id: str | None) -> int:
    nc = await nats.connect(url, max_reconnect_attempts=0)
    try:
        js = nc.jetstream()
        await js.add_stream(name="PAY", subjects=["pay.>"])
        headers = {"Nats-Msg-Id": msg_id} if msg_id else None
        await js.publish("pay.charge", b"charge", headers=headers)
        await nc.flush()
        await asyncio.sleep(0.2)
        info = await js.stream_info("PAY")
        await js.delete_stream("PAY")
        return int(info.state.messages)
    finally:
        await nc.close()


@pytest.mark.parametrize(("msg_id", "stored"), [(None, 2), ("order-1", 1)])
async def test_duplicated_publish_is_deduplicated_only_with_a_msg_id(
    nats_proxy: tuple[Proxy, list[dict[str, Any]], str], msg_id: str | None, stored: int
) -> None:
    proxy, events, url = nats_proxy
    proxy.add_toxic(
        "nats_duplicate_publish", stream="upstream", attributes={"count": 1, "subject": "pay."}
    )
    count = await trio.to_thread.run_sync(asyncio.run, _publish_twice_counted(url, msg_id))
    assert count == stored
    assert [e["subject"] for e in events if e["event"] == "frame_duplicated"] == ["pay.charge"]


# -- both JetStream ack-subject layouts ---------------------------------------------------
#
# nats-server (2.15 here) sends the old 9-token reply subject even with a JetStream domain:
# `$JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<tm>.<pending>`. The newer layout
# (`$JS.ACK.<domain>.<account-hash>.<stream>...<pending>.<token>`, ADR-15) is what the NATS
# clients accept too. To put that layout on the wire against a real server, the server
# below has a domain and maps 12-token ack subjects onto its own 9-token ones; the client
# acks each delivery with the newer layout of its reply subject.

DOMAIN = "HUB"
_V2_TO_V1 = (
    "$JS.ACK.{{wildcard(3)}}.{{wildcard(4)}}.{{wildcard(5)}}.{{wildcard(6)}}"
    ".{{wildcard(7)}}.{{wildcard(8)}}.{{wildcard(9)}}"
)


@asynccontextmanager
async def _open_nats_with_domain(root: Path) -> AsyncIterator[NatsService]:
    port, monitor = free_port(), free_port()
    config = root / "nats-domain.conf"
    config.write_text(
        f"listen: {json.dumps(f'127.0.0.1:{port}')}\n"
        f"http: {json.dumps(f'127.0.0.1:{monitor}')}\n"
        f"jetstream {{ store_dir: {json.dumps(str(root / 'js'))}, domain: {DOMAIN} }}\n"
        f"mappings {{ {json.dumps('$JS.ACK' + '.*' * 10)}: {json.dumps(_V2_TO_V1)} }}\n"
    )
    service = NatsService(f"nats://127.0.0.1:{port}", "127.0.0.1", port, monitor)
    argv = [str(nats_server_binary()), "--config", str(config)]
    async with open_process_service("nats-domain", argv, ready=service.healthy) as process:
        service.process = process
        yield service


def _newer_layout(reply: str) -> str:
    """The 12-token form of a 9-token ack subject."""
    tokens = reply.split(".")
    assert len(tokens) == 9, reply
    return ".".join([*tokens[:2], DOMAIN, "ACCOUNTHASH", *tokens[2:], "r4nd0m"])


async def _deliveries(url: str, layout: str) -> list[int]:
    """Deliveries of one message, acking each with ``layout``, until none comes for
    longer than ``ack_wait``."""
    nc = await nats.connect(url, max_reconnect_attempts=0)
    try:
        js = nc.jetstream()
        await js.add_stream(name="ORDERS", subjects=["orders.>"])
        await js.publish("orders.new", b"order-1")
        sub = await js.pull_subscribe(
            "orders.new", "charger", config=nats.js.api.ConsumerConfig(ack_wait=1.0)
        )
        deliveries: list[int] = []
        while len(deliveries) < 4:
            try:
                (msg,) = await sub.fetch(1, timeout=2.0)
            except nats.errors.TimeoutError:
                break
            deliveries.append(msg.metadata.num_delivered)
            if layout == "old":
                await msg.ack()
            else:
                await nc.publish(_newer_layout(msg.reply), b"")
            await nc.flush()
        return deliveries
    finally:
        await nc.close()


@pytest.mark.parametrize(
    ("layout", "stream", "deliveries"),
    [
        ("old", "ORDERS", [1, 2]),
        ("new", "ORDERS", [1, 2]),
        ("new", "OTHER", [1]),
    ],
    ids=["old-layout", "new-layout", "new-layout-other-stream"],
)
async def test_drop_ack_of_a_stream_works_on_both_ack_layouts(
    tmp_path: Path, layout: str, stream: str, deliveries: list[int]
) -> None:
    """One dropped ack of the stream: one redelivery, whose ack then gets through (no
    third delivery, which also shows the server took the newer layout's ack)."""
    events: list[dict[str, Any]] = []
    async with _open_nats_with_domain(tmp_path) as server, open_proxy_server() as proxies:
        proxies.add_observer(events.append)
        proxy = proxies.create_proxy("nats", "127.0.0.1:0", f"127.0.0.1:{server.port}")
        proxy.add_toxic(
            "nats_drop_ack", stream="upstream", attributes={"count": 1, "stream": stream}
        )
        got = await trio.to_thread.run_sync(asyncio.run, _deliveries(_url(proxy), layout))
    assert got == deliveries
    dropped = [e for e in events if e["event"] == "frame_dropped"]
    assert len(dropped) == len(deliveries) - 1
    for event in dropped:
        assert event["stream_sequence"] == 1
        assert len(event["subject"].split(".")) == (9 if layout == "old" else 12)
