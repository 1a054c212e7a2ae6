"""The shared resource: a small HTTP store that checks fencing tokens. The harness runs it.

The singleton job's output lives here: a log of entries, each written by the worker that
holds the lease. The store is trusted evidence: it identifies each writer by its secret key
(never by what the request claims) and prints every decision as a history operation of its
own process, ``invoke`` then ``ok`` (accepted) or ``fail`` (rejected), under one lock, so the
history holds the writes in the order the store accepted them. A worker cannot write
evidence: its own output is not the store's.

::

    GET  /state  -> 200 {"last": {"n", "writer", "token", "seq", "at"} or null, "highest": h}
    POST /write  Authorization: Bearer KEY, {"token": int or null, "seq": int}
                 -> 200 {"n": n}                 accepted, the n-th entry
                 -> 409 {"error": "fenced", ...} token below the highest accepted: rejected
                 -> 400 / 401                    malformed (a token or seq outside 64-bit
                                                 integers too) / unknown key (no entry, no op)
                 -> 413                          a body over MAX_BODY (never read)
                 -> 429                          over WRITES_PER_S writes a second, sustained,
                                                 from one key (no entry, no op)
    GET  /log    -> 200 [entry, ...]            every accepted entry, in order
    GET  /stats  -> 200 {"decisions": n}        writes decided (accepted + rejected)

The fencing check: a write carrying a token lower than the highest token the store has
accepted is rejected; a write carrying none is accepted unchecked (as a store without
conditional writes would): fencing only protects the writers that use it.

Usage: python -m scenarios.leases.store PORT   (writer keys: STORE_KEYS, {"key": "worker-1"})
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from typing import Any

from ground.jsonhttp import JsonHandler, serve

#: The process of the store's operations in the history is the service's name ("store").
READY_LINE = "store listening"
#: The largest request body the store reads (a write is a few dozen bytes).
MAX_BODY = 64 * 1024
#: Writes a second one key may sustain (a burst of WRITE_BURST): the job writes about five;
#: a worker that writes without pause would make the history (every decision is an op pair)
#: as long as its CPU allows, in the harness's memory.
WRITES_PER_S, WRITE_BURST = 20.0, 50.0
#: A token or seq is a PostgreSQL bigint (the lease's token is one): nothing past it.
INT64 = 2**63


def op(type_: str, f: str, value: Any, error: str | None = None) -> None:
    """Print one history operation (``@op {json}``) on stdout, flushed."""
    record: dict[str, Any] = {"type": type_, "f": f, "value": value}
    if error is not None:
        record["error"] = error
    sys.stdout.write("@op " + json.dumps(record, sort_keys=True) + "\n")
    sys.stdout.flush()


class Store:
    """The entries and the highest fencing token accepted so far."""

    def __init__(self, keys: dict[str, str]) -> None:
        self._keys = keys
        self._lock = threading.Lock()
        self.entries: list[dict[str, Any]] = []
        self.highest: int | None = None
        self.decisions = 0
        self._buckets: dict[str, tuple[float, float]] = {}

    def writer(self, key: str) -> str | None:
        return self._keys.get(key)

    def allow(self, writer: str) -> bool:
        """Whether ``writer`` may write now (a token bucket per key)."""
        now = time.monotonic()
        with self._lock:
            level, since = self._buckets.get(writer, (WRITE_BURST, now))
            level = min(WRITE_BURST, level + (now - since) * WRITES_PER_S)
            if level < 1.0:
                self._buckets[writer] = (level, now)
                return False
            self._buckets[writer] = (level - 1.0, now)
            return True

    def write(self, writer: str, token: int | None, seq: int) -> tuple[int, dict[str, Any]]:
        """Decide one write: (HTTP status, body). Prints the decision as an op pair."""
        with self._lock:
            value: dict[str, Any] = {"writer": writer, "token": token, "seq": seq}
            op("invoke", "write", value)
            self.decisions += 1
            now = time.time()
            if token is not None and self.highest is not None and token < self.highest:
                op(
                    "fail",
                    "write",
                    {**value, "at": now, "highest": self.highest},
                    error=f"fenced: token {token} < {self.highest}",
                )
                return 409, {"error": "fenced", "token": token, "highest": self.highest}
            if token is not None:
                self.highest = token
            entry = {**value, "at": now, "n": len(self.entries) + 1}
            self.entries.append(entry)
            op("ok", "write", entry)
            return 200, {"n": entry["n"]}

    def state(self) -> dict[str, Any]:
        with self._lock:
            return {"last": self.entries[-1] if self.entries else None, "highest": self.highest}


def _int64(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and -INT64 <= value < INT64


def _int_or_none(value: Any) -> bool:
    return value is None or _int64(value)


def make_handler(store: Store) -> type[JsonHandler]:
    class Handler(JsonHandler):
        def do_GET(self) -> None:
            if self.path == "/state":
                self.reply(200, store.state())
            elif self.path == "/log":
                with store._lock:
                    self.reply(200, list(store.entries))
            elif self.path == "/stats":
                self.reply(200, {"decisions": store.decisions})
            else:
                self.not_found()

        def do_POST(self) -> None:
            raw = self.read_body(MAX_BODY)  # a worker is the client: never read it unbounded
            if raw is None:
                return
            if self.path != "/write":
                self.not_found()
                return
            auth = self.headers.get("Authorization") or ""
            writer = store.writer(auth.removeprefix("Bearer ").strip())
            if writer is None:
                self.reply(401, {"error": "unknown writer key"})
                return
            try:
                body = json.loads(raw)
                token, seq = body.get("token"), body["seq"]
            except (ValueError, KeyError, TypeError, AttributeError):
                self.reply(400, {"error": 'body must be {"token": int or null, "seq": int}'})
                return
            if not _int_or_none(token) or not _int64(seq):
                self.reply(400, {"error": "token must be an integer or null, seq an integer"})
                return
            if not store.allow(writer):
                self.reply(429, {"error": f"over {WRITES_PER_S:g} writes a second"})
                return
            self.reply(*store.write(writer, token, seq))

    return Handler


def main() -> None:
    port = int(sys.argv[1])
    store = Store(json.loads(os.environ["STORE_KEYS"]))
    serve(make_handler(store), port, lambda port: print(f"{READY_LINE} on {port}", flush=True))


if __name__ == "__main__":
    main()
