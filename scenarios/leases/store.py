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
                 -> 400 / 401                    malformed / unknown key (no entry, no op)
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
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

#: The process of the store's operations in the history is the service's name ("store").
READY_LINE = "store listening"


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

    def writer(self, key: str) -> str | None:
        return self._keys.get(key)

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


def _int_or_none(value: Any) -> bool:
    return value is None or (isinstance(value, int) and not isinstance(value, bool))


def make_handler(store: Store) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _reply(self, status: int, body: Any) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path == "/state":
                self._reply(200, store.state())
            elif self.path == "/log":
                with store._lock:
                    self._reply(200, list(store.entries))
            elif self.path == "/stats":
                self._reply(200, {"decisions": store.decisions})
            else:
                self._reply(404, {"error": "not found"})

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length)
            if self.path != "/write":
                self._reply(404, {"error": "not found"})
                return
            auth = self.headers.get("Authorization") or ""
            writer = store.writer(auth.removeprefix("Bearer ").strip())
            if writer is None:
                self._reply(401, {"error": "unknown writer key"})
                return
            try:
                body = json.loads(raw)
                token, seq = body.get("token"), body["seq"]
            except (ValueError, KeyError, TypeError, AttributeError):
                self._reply(400, {"error": 'body must be {"token": int or null, "seq": int}'})
                return
            if not _int_or_none(token) or not isinstance(seq, int) or isinstance(seq, bool):
                self._reply(400, {"error": "token must be an integer or null, seq an integer"})
                return
            self._reply(*store.write(writer, token, seq))

    return Handler


def main() -> None:
    port = int(sys.argv[1])
    store = Store(json.loads(os.environ["STORE_KEYS"]))
    server = ThreadingHTTPServer(("127.0.0.1", port), make_handler(store))
    server.daemon_threads = True
    print(f"{READY_LINE} on {port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
