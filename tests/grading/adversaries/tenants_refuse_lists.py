"""Adversary (tenants): serves no list while the workload runs. The golden API sits behind a
front of its own that answers ``501 Not Implemented`` (final: the client does not retry it)
to every ``GET`` within a second of a ``POST``, so every list of the workload is refused and
only the recovery probes, after the workload, are served. A refused list is checked for
nothing: a program whose lists leak other tenants' notes while its database is flaky could
hide it so, as long as its lists are right once the faults heal. It scored 1.0.

Expected: every list of the workload must be served in the end (as every create must be
acknowledged): ``read_your_writes`` fails, reward 0.

pack: tenants
golden: yes
reward: 0
fails: read_your_writes
"""

import os
import socket
import threading
import time

from _probe import in_background, run_golden

PORT = int(os.environ["PORT"])
last_post = 0.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


INNER = free_port()
os.environ["PORT"] = str(INNER)  # the golden listens inside; the front takes the real port
REFUSED = (
    b"HTTP/1.1 501 Not Implemented\r\nContent-Type: application/json\r\n"
    b'Content-Length: 26\r\nConnection: close\r\n\r\n{"error": "not right now"}'
)


def relay(client: socket.socket) -> None:
    global last_post
    with client:
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = client.recv(65536)
            if not chunk:
                return
            head += chunk
        if head.startswith(b"POST"):
            last_post = time.monotonic()
        elif time.monotonic() - last_post < 1.0:
            client.sendall(REFUSED)
            return
        try:
            inner = socket.create_connection(("127.0.0.1", INNER), timeout=30)
        except OSError:
            return
        with inner:
            inner.sendall(head)
            client.settimeout(0.2)
            try:
                while chunk := client.recv(65536):
                    inner.sendall(chunk)
            except OSError:
                pass
            try:
                while chunk := inner.recv(65536):
                    client.sendall(chunk)
            except OSError:
                pass


def front() -> None:
    server = socket.create_server(("127.0.0.1", PORT))
    while True:
        conn, _ = server.accept()
        threading.Thread(target=relay, args=(conn,), daemon=True).start()


in_background(front)
run_golden()
