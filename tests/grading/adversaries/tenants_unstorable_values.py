"""Adversary (tenants): answers with values a trace cannot hold. Every response the harness's
client records carries strings with lone surrogates (JSON's ``"\\ud800"``: valid JSON, a
Python string, no UTF-8): the trace writer refused the event, and the run ended in a
harness error ("the machine is broken", exit 3), one the candidate could cause at will to
have a seed it would fail rerun or set aside.

Expected: the values are recorded as their escapes: the notes it acknowledged are stored
nowhere, so the seed is violated (no error), reward 0.

pack: tenants
reward: 0
fails: no_cross_tenant_writes
"""

import json
import os
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ODD = "\ud800"


class Handler(BaseHTTPRequestHandler):
    def _reply(self, status: int, body: object) -> None:
        data = json.dumps(body).encode()  # ensure_ascii: the surrogate as "\ud800"
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        note = json.loads(self.rfile.read(length) or b"{}").get("body", "")
        key = self.headers.get("Idempotency-Key", "")
        self._reply(201, {"id": f"{ODD}{key}", "body": note})

    def do_GET(self) -> None:
        self._reply(200, {"items": [{"id": ODD, "body": f"{ODD} note"}]})

    def log_message(self, *args: object) -> None:
        pass


server = ThreadingHTTPServer(("127.0.0.1", int(os.environ["PORT"])), Handler)
print("api ready", flush=True)
server.serve_forever()
