"""Embedded nats-server: JetStream on, a real client can use it, teardown leaves nothing."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import trio
from svc_helpers import assert_reaped, pids_mentioning

from chaos.services import (
    external_nats,
    jetstream_consumer,
    jetstream_publisher,
    open_nats,
    open_run_dir,
    read_nats_info,
)
from ground.errors import ConfigError

# Runs in a child process: nats-py is asyncio, and the harness process stays trio-only.
CLIENT = """
import asyncio, json, sys
import nats

async def main(url):
    nc = await nats.connect(url)
    js = nc.jetstream()
    await js.add_stream(name="ORDERS", subjects=["orders.>"])
    for _ in range(2):
        await js.publish("orders.1", b"charge", headers={"Nats-Msg-Id": "order-1"})
    await js.publish("orders.2", b"charge")
    info = await js.stream_info("ORDERS")
    await nc.close()
    print(json.dumps({"messages": info.state.messages}))

asyncio.run(main(sys.argv[1]))
"""


def _run_client(url: str) -> dict[str, int]:
    done = subprocess.run(
        [sys.executable, "-c", CLIENT, url], capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, int] = json.loads(done.stdout)
    return result


@pytest.mark.slow
async def test_nats_runs_jetstream_for_a_real_client() -> None:
    with open_run_dir() as run:
        async with open_nats(run) as nats:
            assert nats.url.startswith("nats://harness:")
            assert nats.url.endswith(f"@127.0.0.1:{nats.port}")
            info = await read_nats_info(nats.host, nats.port)
            assert info["jetstream"] is True
            assert info["auth_required"] is True
            assert info["port"] == nats.port
            result = await trio.to_thread.run_sync(_run_client, nats.url)
            assert result == {"messages": 2}  # Nats-Msg-Id de-duplicated the repeat
            assert nats.process is not None
            assert nats.store_dir is not None
            pid, store = nats.process.pid or 0, nats.store_dir
            assert store.is_dir()
        assert_reaped(pid)
        assert not store.exists()
        assert list(run.iterdir()) == []


@pytest.mark.slow
async def test_nats_kill_and_restart_keeps_streams() -> None:
    with open_run_dir() as run:
        async with open_nats(run) as nats:
            assert nats.process is not None
            await trio.to_thread.run_sync(_run_client, nats.url)
            await nats.process.kill()
            assert not await nats.healthy()
            await nats.process.restart()
            assert (await read_nats_info(nats.host, nats.port))["jetstream"] is True
            # add_stream is idempotent; the repeat id is still de-duplicated after restart
            assert await trio.to_thread.run_sync(_run_client, nats.url) == {"messages": 3}


@pytest.mark.slow
async def test_nats_cancelled_mid_startup_leaves_nothing() -> None:
    with open_run_dir() as run:
        with trio.move_on_after(0.02):
            async with open_nats(run):
                await trio.sleep_forever()
        assert pids_mentioning(str(run)) == []
        assert list(run.iterdir()) == []


def test_external_nats_parses_urls() -> None:
    ext = external_nats("nats://broker.internal:4333")
    assert (ext.host, ext.port, ext.process) == ("broker.internal", 4333, None)
    assert external_nats("nats://localhost").port == 4222


@pytest.mark.parametrize(
    "url", ["http://localhost:4222", "nats://", "nats://h:notaport", "nats://h:0", "nats://h:65536"]
)
def test_bad_nats_url_is_a_config_error(url: str) -> None:
    with pytest.raises(ConfigError, match="bad nats url"):
        external_nats(url)


# What each user may do: the consumer's and the producer's attempts, each "ok" or the
# server's refusal (a permissions violation, or no answer from the API it may not reach).
USERS = """
import asyncio, json, sys
import nats
from nats.js.api import AckPolicy, ConsumerConfig

async def attempt(what, coro, out):
    try:
        await asyncio.wait_for(coro, 2)
        out[what] = "ok"
    except Exception as exc:
        out[what] = "refused"

async def main(admin, consumer, producer, anonymous):
    out = {}
    nc = await nats.connect(admin)
    await nc.jetstream().add_stream(name="ORDERS", subjects=["orders.new"], duplicate_window=120)
    try:
        await nats.connect(anonymous, max_reconnect_attempts=0, allow_reconnect=False)
        out["anonymous"] = "ok"
    except Exception:
        out["anonymous"] = "refused"
    p = await nats.connect(producer, inbox_prefix="_INBOX_PRODUCER")
    pjs = p.jetstream(timeout=2)
    await attempt("producer add_stream (same)", pjs.add_stream(
        name="ORDERS", subjects=["orders.new"], duplicate_window=120), out)
    await attempt("producer publish", pjs.publish("orders.new", b"{}"), out)
    await attempt("producer delete stream", pjs.delete_stream("ORDERS"), out)
    c = await nats.connect(consumer)
    cjs = c.jetstream(timeout=2)
    await attempt("consumer add_stream (same)", cjs.add_stream(
        name="ORDERS", subjects=["orders.new"], duplicate_window=120), out)
    config = ConsumerConfig(ack_wait=2, ack_policy=AckPolicy.EXPLICIT, max_deliver=-1)
    sub = await cjs.pull_subscribe("orders.new", "charger", config=config)
    msgs = await sub.fetch(1, timeout=2)
    await msgs[0].ack_sync()
    out["consumer fetch and ack"] = "ok"
    await attempt("consumer add_stream (changed)", cjs.add_stream(
        name="ORDERS", subjects=["orders.>"], duplicate_window=1), out)
    await attempt("consumer update stream", cjs.update_stream(
        name="ORDERS", subjects=["orders.new"], max_msgs=1), out)
    await attempt("consumer purge stream", cjs.purge_stream("ORDERS"), out)
    await attempt("consumer delete stream", cjs.delete_stream("ORDERS"), out)
    await attempt("consumer delete message", cjs.delete_msg("ORDERS", 1), out)
    await attempt("consumer publish order", cjs.publish("orders.new", b"{}"), out)
    await attempt("consumer other stream", cjs.add_stream(name="X", subjects=["x.>"]), out)
    await attempt("consumer other consumer", cjs.add_consumer("ORDERS", durable_name="spy"), out)
    errors = []
    async def cb(exc):
        errors.append(str(exc))
    spy = await nats.connect(consumer, error_cb=cb)
    await spy.subscribe("_INBOX_PRODUCER.>")
    await spy.publish("_INBOX_PRODUCER.x", b'{"stream": "ORDERS", "seq": 99}')
    await spy.flush()
    await asyncio.sleep(0.3)
    out["consumer reads producer inbox"] = (
        "refused" if any("subscription" in e for e in errors) else "ok")
    out["consumer answers producer inbox"] = (
        "refused" if any("publish" in e for e in errors) else "ok")
    info = await nc.jetstream().stream_info("ORDERS")
    out["messages"] = info.state.messages
    print(json.dumps(out))

asyncio.run(main(*sys.argv[1:]))
"""


@pytest.mark.slow
async def test_each_user_gets_only_its_subjects_and_the_stream_is_the_harnesss() -> None:
    with open_run_dir() as run:
        async with open_nats(run) as nats:
            users = await nats.add_users(
                {
                    "consumer": jetstream_consumer("ORDERS", "charger"),
                    "producer": jetstream_publisher("ORDERS", "orders.new", "_INBOX_PRODUCER"),
                }
            )
            with pytest.raises(ConfigError, match="already exists"):
                await nats.add_users({"consumer": jetstream_consumer("ORDERS", "charger")})
            address = f"{nats.host}:{nats.port}"
            argv = [sys.executable, "-c", USERS, nats.url, users["consumer"].url(address),
                    users["producer"].url(address), f"nats://{address}"]  # fmt: skip
            done = await trio.to_thread.run_sync(
                lambda: subprocess.run(argv, capture_output=True, text=True, timeout=120)
            )
            assert done.returncode == 0, done.stderr
            found = json.loads(done.stdout)
            assert found == {
                "anonymous": "refused",
                "producer add_stream (same)": "ok",
                "producer publish": "ok",
                "producer delete stream": "refused",
                "consumer add_stream (same)": "ok",
                "consumer fetch and ack": "ok",
                "consumer add_stream (changed)": "refused",
                "consumer update stream": "refused",
                "consumer purge stream": "refused",
                "consumer delete stream": "refused",
                "consumer delete message": "refused",
                "consumer publish order": "refused",
                "consumer other stream": "refused",
                "consumer other consumer": "refused",
                "consumer reads producer inbox": "refused",
                "consumer answers producer inbox": "refused",
                "messages": 1,
            }
            await nats.remove_users(["consumer"])
            assert sorted(nats.auth.users if nats.auth else ()) == ["producer"]


def test_users_of_an_external_server_are_its_own_and_unenforced() -> None:
    ext = external_nats("nats://me:secret@broker:4222")
    users = trio.run(ext.add_users, {"consumer": jetstream_consumer("S", "d")})
    assert users["consumer"].enforced is False
    assert users["consumer"].url("127.0.0.1:9") == "nats://me:secret@127.0.0.1:9"
    assert ext.admin_url("127.0.0.1:9") == "nats://me:secret@127.0.0.1:9"
