"""A pack's small JSON-over-HTTP service on the standard library (payments' gateway, leases'
store): the handler base every such service needs, so each keeps only its routes.

::

    class Handler(JsonHandler):
        def do_GET(self) -> None:
            self.reply(200, {"ok": True}) if self.path == "/health" else self.not_found()

        def do_POST(self) -> None:
            raw = self.read_body(64 * 1024)   # None: refused (413), the body never read
            if raw is not None:
                ...

    serve(Handler, port, on_listening=lambda port: print(f"ready on {port}", flush=True))

HTTP/1.1 with keep-alive, JSON answers with their length, no log line per request (a
service's output lines go to the trace), and any method a service does not define refused
(405) with the connection closed. On the ground floor: it imports nothing of the project, so
a service process that imports it loads nothing of the harness (docs/scenarios.md).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class JsonHandler(BaseHTTPRequestHandler):
    """A request handler that answers JSON; subclass it with ``do_GET``/``do_POST``."""

    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def reply(self, status: int, body: Any) -> None:
        """Answer ``status`` with ``body`` as JSON."""
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def not_found(self) -> None:
        self.reply(404, {"error": "not found"})

    def read_body(self, max_bytes: int) -> bytes | None:
        """The request's body; None, with 413 answered and the connection to be closed, when
        its Content-Length is missing a number or over ``max_bytes`` (a client of the
        service may be the program under test: its body is never read unbounded)."""
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if not 0 <= length <= max_bytes:
            self.close_connection = True
            self.reply(413, {"error": f"a request body is 0 to {max_bytes} bytes"})
            return None
        return self.rfile.read(length)

    def refuse(self) -> None:
        """405 for a method the service does not take; the connection is closed."""
        self.close_connection = True
        self.reply(405, {"error": "method not allowed"})

    do_PUT = do_DELETE = do_PATCH = refuse


def serve(
    handler: type[BaseHTTPRequestHandler],
    port: int,
    on_listening: Callable[[int], None] | None = None,
    host: str = "127.0.0.1",
) -> None:
    """Serve ``handler`` on ``host:port`` (port 0: the kernel's pick, no race for a free
    port) until the process ends, one thread per connection; ``on_listening(port)`` first,
    with the port bound (print the ready line there)."""
    server = ThreadingHTTPServer((host, port), handler)
    server.daemon_threads = True
    if on_listening is not None:
        on_listening(server.server_address[1])
    server.serve_forever()


__all__ = ["JsonHandler", "serve"]
