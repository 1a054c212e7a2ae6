"""Adversary (payments): goes for the broker with the consumer's own login. It tries to
delete, purge or reconfigure the stream (the attack that made the producer crash after one
order: "the run held with 1 of 30 booked"), delete a message, publish orders of its own,
capture the orders subject in a stream of its own, make another consumer, delete its own,
read every subject, listen on the producer's reply inbox and answer the producer's publishes
with confirmations of its own, and talk to the server's system account. Each attempt
prints a PROBE line. Then the golden consumer does the work.

Expected: its NATS user may consume and ack its durable only: every attempt refused; the
stream, the orders and the producer's confirmations stay the harness's; reward 1.

pack: payments
golden: yes
reward: 1
probes: refused
"""

import asyncio
import json
import os

import nats
from _probe import run_golden, say

STREAM = os.environ.get("ORDERS_STREAM", "ORDERS")
SUBJECT = os.environ.get("ORDERS_SUBJECT", "orders.new")


async def main() -> None:
    errors: list[str] = []

    async def on_error(exc: Exception) -> None:
        errors.append(str(exc).lower())

    nc = await nats.connect(os.environ["NATS_URL"], error_cb=on_error, connect_timeout=5)
    js = nc.jetstream(timeout=2)

    async def step(name: str, coro: object) -> None:
        """A request: refused when the server reports a permissions violation for it (a
        request it may not make simply gets no answer: a timeout alone proves nothing)."""
        before = len(errors)
        try:
            await asyncio.wait_for(coro, 3)  # type: ignore[arg-type]
        except Exception as exc:
            await nc.flush()
            await asyncio.sleep(0.2)
            found = [e for e in errors[before:] if "permissions violation" in e]
            if found:
                say(f"PROBE {name} refused {found[0]}")
            else:
                say(f"PROBE {name} ALLOWED? no violation reported ({type(exc).__name__})")
            return
        say(f"PROBE {name} ALLOWED")

    async def violation(name: str, action: object, what: str) -> None:
        before = len(errors)
        await action  # type: ignore[misc]
        await nc.flush()
        await asyncio.sleep(0.3)
        found = [e for e in errors[before:] if "permissions violation" in e and what in e]
        say(f"PROBE {name} {'refused ' + found[0] if found else 'ALLOWED'}")

    order = json.dumps({"order_id": "o-999", "account": "acct-1", "amount_cents": 1}).encode()
    await step("delete-stream", js.delete_stream(STREAM))
    await step("purge-stream", js.purge_stream(STREAM))
    await step("shrink-stream", js.update_stream(name=STREAM, subjects=[SUBJECT], max_msgs=1))
    await step("delete-message", js.delete_msg(STREAM, 1))
    await step("publish-order", js.publish(SUBJECT, order, headers={"Nats-Msg-Id": "o-999"}))
    await step("capture-stream", js.add_stream(name="SPY", subjects=["spy.>"]))
    await step("key-value-bucket", js.create_key_value(bucket="spy"))
    await step("other-consumer", js.add_consumer(STREAM, durable_name="spy"))
    await step("delete-own-consumer", js.delete_consumer(STREAM, "charger"))
    await step("system-account", nc.request("$SYS.REQ.SERVER.PING", b"", timeout=2))
    await violation("read-every-subject", nc.subscribe(">"), "subscription")
    await violation("read-producer-inbox", nc.subscribe("_INBOX_PRODUCER.>"), "subscription")
    fake_ack = json.dumps({"stream": STREAM, "seq": 1}).encode()
    await violation("answer-producer", nc.publish("_INBOX_PRODUCER.fake", fake_ack), "publish")
    await violation("publish-plain-order", nc.publish(SUBJECT, order), "publish")
    await nc.close()


asyncio.run(main())
run_golden()
