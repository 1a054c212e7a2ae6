"""The protocol-aware toxics against a real nats-server with JetStream, via nats-py."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import nats
import pytest
import trio

from chaos.services import open_nats, open_run_dir
from faults.proxy import Proxy, open_proxy_server

pytestmark = pytest.mark.slow


@pytest.fixture
async def nats_proxy(tmp_path: Path) -> AsyncIterator[tuple[Proxy, list[dict[str, Any]]]]:
    events: list[dict[str, Any]] = []
    with open_run_dir(parent=tmp_path) as root:
        async with open_nats(root) as server, open_proxy_server(seed=1) as proxies:
            proxies.add_observer(events.append)
            proxy = proxies.create_proxy("nats", "127.0.0.1:0", f"127.0.0.1:{server.port}")
            yield proxy, events


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
    nats_proxy: tuple[Proxy, list[dict[str, Any]]],
) -> None:
    proxy, events = nats_proxy
    proxy.add_toxic("nats_drop_ack", stream="upstream", attributes={"count": 1})
    proxy.add_toxic("nats_observe", stream="downstream")
    deliveries = await trio.to_thread.run_sync(asyncio.run, _redelivery(_url(proxy)))
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
    nats_proxy: tuple[Proxy, list[dict[str, Any]]], msg_id: str | None, stored: int
) -> None:
    proxy, events = nats_proxy
    proxy.add_toxic(
        "nats_duplicate_publish", stream="upstream", attributes={"count": 1, "subject": "pay."}
    )
    count = await trio.to_thread.run_sync(asyncio.run, _publish_twice_counted(_url(proxy), msg_id))
    assert count == stored
    assert [e["subject"] for e in events if e["event"] == "frame_duplicated"] == ["pay.charge"]
