"""Embedded nats-server: JetStream on, a real client can use it, teardown leaves nothing."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import trio
from svc_helpers import assert_reaped, pids_mentioning

from chaos.errors import ConfigError
from chaos.services import external_nats, open_nats, open_run_dir, read_nats_info

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
            assert nats.url == f"nats://127.0.0.1:{nats.port}"
            info = await read_nats_info(nats.host, nats.port)
            assert info["jetstream"] is True
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
