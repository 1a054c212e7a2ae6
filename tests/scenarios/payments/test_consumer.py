"""The golden consumer's client-side defences: a silent database link (real PostgreSQL
through the real proxy) costs a deadline and a reset, and a garbled gateway reply (the wire
shapes faults leave, served over real TCP) a retry, never the process."""

from __future__ import annotations

import asyncio
import http.client
import os
import re
import shutil
import signal
import tempfile
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trio

from chaos.scenario import load_scenario
from chaos.services import default_run_parent, open_postgres, open_run_dir
from faults.proxy import open_proxy_server
from scenarios.payments.charger import GATEWAY_ERRORS, DatabaseStuck, GoldenCharger

pytestmark = pytest.mark.slow


@pytest.fixture
def run_root(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    root = Path(tempfile.mkdtemp(prefix="chaos-test-runs-", dir=default_run_parent()))
    root.chmod(0o755)  # PostgreSQL runs as its own user
    monkeypatch.setenv("CHAOS_RUN_DIR", str(root))
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.mark.parametrize("silence", ["downstream", "upstream"])
async def test_a_silent_database_link_is_reset_at_the_deadline_not_waited_on(
    run_root: Path, silence: str
) -> None:
    with open_run_dir() as run:
        async with open_postgres(run) as pg, open_proxy_server() as server:
            proxy = server.create_proxy("pg", "127.0.0.1:0", f"{pg.host}:{pg.port}")
            dsn = f"postgresql://{pg.user}@{proxy.listen}/{pg.database}"
            charger = GoldenCharger(dsn, "http://127.0.0.1:1")
            charger.db_deadline_s = 1.0
            outcome: dict[str, Any] = {}

            def silent() -> None:
                # timeout 0: no byte passes and the connection stays open, as a link whose
                # replies (or requests) vanish while both ends look healthy.
                proxy.add_toxic("timeout", name="silent", stream=silence, attributes={})

            async def consumer_side() -> None:
                outcome["before"] = await charger.db_step(charger.already_charged("o-001"))
                trio.from_thread.run_sync(silent)
                try:
                    await charger.db_step(charger.already_charged("o-001"))
                except DatabaseStuck as exc:
                    outcome["stuck"] = str(exc)
                outcome["reset"] = charger.db is None
                trio.from_thread.run_sync(proxy.remove_toxic, "silent")
                outcome["after"] = await charger.db_step(charger.already_charged("o-001"))
                await charger.reset_db()

            with trio.fail_after(60):  # a guard against a hang, not a timing assertion
                await trio.to_thread.run_sync(asyncio.run, consumer_side())
    assert outcome["before"] is False
    assert "no answer within 1s" in outcome["stuck"]
    assert outcome["reset"] is True
    assert outcome["after"] is False


async def _gateway_reply_is(reply: bytes) -> BaseException | None:
    """What ``charge_gateway`` raises when the gateway's link delivers ``reply`` (the wire
    shape a fault leaves) and closes."""

    async def handler(stream: trio.SocketStream) -> None:
        # Read the whole request first (the client may write headers and body separately):
        # closing with unread bytes makes the kernel answer with a reset, and the client
        # would see that instead of ``reply``.
        request = b""
        while b"\r\n\r\n" not in request:
            request += await stream.receive_some(65536)
        head, _, body = request.partition(b"\r\n\r\n")
        length = re.search(rb"(?i)content-length:\s*(\d+)", head)
        while length and len(body) < int(length.group(1)):
            body += await stream.receive_some(65536)
        await stream.send_all(reply)
        await stream.aclose()

    async with trio.open_nursery() as nursery:
        (listener,) = await nursery.start(partial(trio.serve_tcp, handler, 0, host="127.0.0.1"))
        port = listener.socket.getsockname()[1]
        charger = GoldenCharger("postgresql://unused", f"http://127.0.0.1:{port}")
        order = {"order_id": "o-001", "account": "acct-1", "amount_cents": 100}
        errors: list[BaseException] = []

        async def call() -> None:
            try:
                await charger.charge_gateway(order)
            except Exception as exc:
                errors.append(exc)

        await trio.to_thread.run_sync(asyncio.run, call())
        nursery.cancel_scope.cancel()
    return errors[0] if errors else None


BODY = b'{"charge_id": "ch-1", "order_id": "o-001", "replayed": true}'


@pytest.mark.parametrize(
    ("reply", "cause"),
    [
        (BODY, http.client.BadStatusLine),  # seeds 10754, 10831: the body where the status was
        (b"", http.client.RemoteDisconnected),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 200\r\n\r\n" + BODY, http.client.IncompleteRead),
    ],
    ids=["body-first", "no-reply", "cut-body"],
)
async def test_a_garbled_gateway_reply_is_retried_not_fatal(
    reply: bytes, cause: type[BaseException]
) -> None:
    error = await _gateway_reply_is(reply)
    assert type(error).__name__ == "Retry"
    assert isinstance(error.__cause__, cause)
    assert isinstance(error.__cause__, GATEWAY_ERRORS)


async def test_a_consumer_that_dies_on_its_own_is_restarted_and_the_run_holds(
    tmp_path: Path, run_root: Path
) -> None:
    # Seeds 10754/10831's consumer died (exit 1) and nothing restarted it: every later
    # order was lost. Here a kill from outside the harness stands in for any such death.
    from chaos.run import RunOptions, run_scenario
    from faults.model import FaultSchedule
    from scenarios.payments.scenario import Payments

    class DyingConsumer(Payments):
        async def workload(self, ctx: Any) -> None:
            pid = ctx.service("consumer").pid
            os.kill(pid, signal.SIGKILL)  # not the harness's doing: the consumer "died"
            await super().workload(ctx)

    scenario = DyingConsumer()
    scenario.path = load_scenario("payments").path
    quiet = FaultSchedule(seed=0, space_hash="none", events=())
    result = await run_scenario(RunOptions(scenario, 3, out=tmp_path / "t.trace", schedule=quiet))
    consumer = [e for e in result.history if e["process"] == "service:consumer"]
    restarts = [e["value"] for e in consumer if e["f"] == "restart"]
    assert restarts == [{"code": -signal.SIGKILL, "attempt": 1, "backoff_s": 0.1}]
    assert [e["value"].get("supervised") for e in consumer if e["f"] == "start"] == [None, True]
    assert result.held
