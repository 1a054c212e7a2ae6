"""The payment gateway: a small HTTP service whose charges are the external side effect.

``POST /charge`` with ``{"order_id", "amount_cents", "idempotency_key"}`` executes a charge,
unless the idempotency key was seen before: then it answers with the earlier charge and
charges nothing. ``GET /charges`` lists every charge executed. Each executed charge is also
appended to the journal file, so the record survives the process.

Usage: python -m scenarios.payments.gateway PORT JOURNAL [PORT_FILE]   (PORT 0: any free
port, written to PORT_FILE before the ready line)
"""

from __future__ import annotations

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any


class Ledger:
    """Executed charges and the idempotency keys already honoured."""

    def __init__(self, journal: Path) -> None:
        self._lock = threading.Lock()
        self._journal = journal.open("a", encoding="utf-8")
        self.charges: list[dict[str, Any]] = []
        self._by_key: dict[str, dict[str, Any]] = {}

    def charge(self, order_id: str, amount: int, key: str | None) -> tuple[dict[str, Any], bool]:
        with self._lock:
            if key is not None and key in self._by_key:
                return self._by_key[key], True
            record = {
                "charge_id": f"ch-{len(self.charges) + 1}",
                "order_id": order_id,
                "amount_cents": amount,
                "idempotency_key": key,
            }
            self.charges.append(record)
            if key is not None:
                self._by_key[key] = record
            self._journal.write(json.dumps(record) + "\n")
            self._journal.flush()
            return record, False


def make_handler(ledger: Ledger) -> type[BaseHTTPRequestHandler]:
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
            if self.path == "/charges":
                self._reply(200, ledger.charges)
            elif self.path == "/health":
                self._reply(200, {"ok": True})
            else:
                self._reply(404, {"error": "not found"})

        def do_POST(self) -> None:
            if self.path != "/charge":
                self._reply(404, {"error": "not found"})
                return
            try:
                length = int(self.headers.get("Content-Length", "0"))
                body = json.loads(self.rfile.read(length))
                order_id = str(body["order_id"])
                amount = int(body["amount_cents"])
                key = body.get("idempotency_key")
            except (ValueError, KeyError, TypeError) as exc:
                self._reply(400, {"error": f"bad charge request: {exc}"})
                return
            record, replayed = ledger.charge(order_id, amount, key)
            self._reply(200, {**record, "replayed": replayed})

    return Handler


def main() -> None:
    port, journal = int(sys.argv[1]), Path(sys.argv[2])
    server = ThreadingHTTPServer(("127.0.0.1", port), make_handler(Ledger(journal)))
    server.daemon_threads = True
    port = server.server_address[1]  # the kernel's pick for port 0: no race for a free port
    if len(sys.argv) > 3:  # PORT_FILE: where the harness reads the port
        tmp = Path(sys.argv[3] + ".tmp")
        tmp.write_text(str(port), encoding="utf-8")
        tmp.replace(sys.argv[3])
    print(f"gateway listening on 127.0.0.1:{port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
