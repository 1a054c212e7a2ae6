"""A lease worker: takes the lease, then runs the singleton job against the store while it holds it.

The reference worker (the golden one; the lease half is the variant's, ``variants.py``)::

    loop:
      acquire: every 200 ms, until the database grants the lease (a token)
      hold:    renew when TTL/4 has passed since the last successful renewal was sent;
               lost (renewal refused, or a write fenced) -> back to acquire
               unsure (the renewal's outcome unknown) for TTL/2 -> stop writing, keep renewing
               one job step, on a store connection of its own: work 200 ms (the next
               entry), GET /state, POST /write {token, seq: last seq + 1}

The lease check comes before the step's work, as in most real jobs: a worker paused during
the work writes when it wakes up, whatever became of its lease meanwhile. Only the fencing
token stops that write.

Environment (TASK.md): WORKER_ID, PG_DSN, STORE_URL, STORE_KEY, LEASE_NAME, LEASE_TTL_S;
VARIANT (the pack's own: which lease implementation runs).

The worker prints its own operations (acquire, renew, write) for diagnosis. They are not
evidence: the invariants read the store's and the lease auditor's operations only.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from collections.abc import Awaitable
from typing import Any, TypeVar
from urllib.parse import urlsplit

from scenarios.leases.lease import GoldenLease, NotSent, Unknown
from scenarios.leases.store import op
from scenarios.leases.variants import lease_for

READY_LINE = "worker ready"
ACQUIRE_EVERY_S = 0.2
WORK_S = 0.2
HTTP_TIMEOUT_S = 1.0
T = TypeVar("T")
#: A step's outcomes.
WROTE, FENCED, FAILED = "wrote", "fenced", "failed"


async def within(awaitable: Awaitable[T], timeout_s: float) -> T:
    """``awaitable``'s result, or TimeoutError after ``timeout_s`` of waiting.

    Unlike ``asyncio.wait_for``, a deadline that passed while the process was stopped
    (SIGSTOP: a pause) does not win the race against an answer that arrived meanwhile: the
    answer gets a few more turns of the loop before the timeout counts.
    """
    task = asyncio.ensure_future(awaitable)
    done, _ = await asyncio.wait({task}, timeout=timeout_s)
    for _ in range(5):
        if done:
            break
        await asyncio.sleep(0)  # let I/O that is ready feed the task
        done = {task} if task.done() else set()
    if not done:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        raise TimeoutError
    return task.result()


class StoreError(Exception):
    """The store could not be reached, or answered something unexpected."""


class Store:
    """A tiny HTTP/1.1 client of the store: one connection per job step."""

    def __init__(self, url: str, key: str) -> None:
        parts = urlsplit(url)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        self.key = key

    async def _request(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        method: str,
        path: str,
        body: Any = None,
    ) -> tuple[int, Any]:
        data = b"" if body is None else json.dumps(body).encode()
        head = (
            f"{method} {path} HTTP/1.1\r\nHost: {self.host}\r\n"
            f"Authorization: Bearer {self.key}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\n\r\n"
        )
        writer.write(head.encode() + data)
        await writer.drain()
        status_line = await reader.readline()
        try:
            status = int(status_line.split()[1])
        except (IndexError, ValueError):
            raise StoreError(f"bad status line {status_line[:60]!r}") from None
        length = 0
        while (line := await reader.readline()) not in (b"\r\n", b"\n", b""):
            name, _, value = line.decode("latin-1").partition(":")
            if name.strip().lower() == "content-length":
                length = int(value.strip())
        payload = await reader.readexactly(length)
        return status, json.loads(payload) if payload else None

    async def step(self, token: int | None, work_s: float) -> tuple[str, Any]:
        """One job step on one connection: work, read the last entry, append the next one
        under ``token``."""
        try:  # the store's link is a local proxy: connecting never hangs
            reader, writer = await asyncio.open_connection(self.host, self.port)
        except OSError as exc:
            raise StoreError(f"connect: {type(exc).__name__}") from None
        try:
            await asyncio.sleep(work_s)  # the job's work: the next entry
            status, state = await within(
                self._request(reader, writer, "GET", "/state"), HTTP_TIMEOUT_S
            )
            if status != 200:
                raise StoreError(f"GET /state: {status}")
            last = state.get("last") if isinstance(state, dict) else None
            seq = (int(last["seq"]) if last else 0) + 1
            value = {"token": token, "seq": seq}
            op("invoke", "write", value)
            try:
                status, body = await within(
                    self._request(reader, writer, "POST", "/write", value), HTTP_TIMEOUT_S
                )
            except (
                OSError,
                TimeoutError,
                asyncio.IncompleteReadError,
                StoreError,
                ValueError,
            ) as exc:
                op("info", "write", value, error=type(exc).__name__)
                return FAILED, None
            if status == 409 and isinstance(body, dict):
                op("fail", "write", value, error=f"fenced (highest {body.get('highest')})")
                return FENCED, body
            if status != 200:
                op("fail", "write", value, error=f"status {status}")
                return FAILED, body
            op("ok", "write", {**value, "n": body.get("n") if isinstance(body, dict) else None})
            return WROTE, body
        except (OSError, TimeoutError, asyncio.IncompleteReadError, ValueError) as exc:
            raise StoreError(f"{type(exc).__name__}") from None
        finally:
            writer.close()


class Worker:
    def __init__(self, lease: GoldenLease, store: Store, ttl_s: float) -> None:
        self.lease = lease
        self.store = store
        self.ttl_s = ttl_s
        self.renew_every_s = ttl_s / 4
        #: Without a successful renewal for this long, the worker stops writing.
        self.write_window_s = ttl_s / 2

    async def run(self) -> None:
        print(READY_LINE, flush=True)
        while True:
            token, renewed_at = await self.acquire()
            await self.hold(token, renewed_at)

    async def acquire(self) -> tuple[int, float]:
        while True:
            sent = time.monotonic()
            op("invoke", "acquire", None)
            try:
                token = await self.lease.acquire()
            except NotSent as exc:
                op("fail", "acquire", None, error=str(exc))
            except Unknown as exc:
                op("info", "acquire", None, error=str(exc))
            else:
                if token is not None:
                    op("ok", "acquire", token)
                    print(f"acquired the lease: token {token}", flush=True)
                    return token, sent
                op("fail", "acquire", None, error="held")
            await asyncio.sleep(ACQUIRE_EVERY_S)

    async def hold(self, token: int, renewed_at: float) -> None:
        while True:
            if time.monotonic() - renewed_at >= self.renew_every_s:
                sent = time.monotonic()
                op("invoke", "renew", token)
                try:
                    found = await self.lease.renew()
                except NotSent as exc:
                    op("fail", "renew", token, error=str(exc))
                except Unknown as exc:
                    op("info", "renew", token, error=str(exc))
                else:
                    if found is None:
                        op("fail", "renew", token, error="lost")
                        print(f"lost the lease (token {token}): renewal refused", flush=True)
                        return
                    op("ok", "renew", found)
                    if found != token:
                        print(f"renewed: the lease's token is {found} (was {token})", flush=True)
                    token, renewed_at = found, sent
            if time.monotonic() - renewed_at >= self.write_window_s:
                await asyncio.sleep(0.1)  # not sure the lease is still ours: no write
                continue
            try:
                outcome, body = await self.store.step(self.lease.fence(token), WORK_S)
            except StoreError as exc:
                print(f"store: {exc}", flush=True)
                await asyncio.sleep(0.1)
                continue
            if outcome == FENCED:
                print(
                    f"lost the lease (token {token}): the store has seen token "
                    f"{body.get('highest')}",
                    flush=True,
                )
                return


async def main() -> None:
    env = os.environ
    ttl = float(env["LEASE_TTL_S"])
    lease = lease_for(env.get("VARIANT", "golden"))(
        env["PG_DSN"], env["WORKER_ID"], env.get("LEASE_NAME", "job"), ttl
    )
    await Worker(lease, Store(env["STORE_URL"], env["STORE_KEY"]), ttl).run()


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        pass
