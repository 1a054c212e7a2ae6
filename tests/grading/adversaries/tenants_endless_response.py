"""Adversary (tenants): answers every request with ``200`` and a body that never ends (a
JSON list that goes on for ever), hoping the harness's client reads until it runs out of
memory, or hangs: either was once a harness error, left out of the reward.

Expected: the harness's client reads at most 1 MiB of a response: each request fails, the
creates are never acknowledged: read_your_writes fails, reward 0, no error.

pack: tenants
reward: 0
fails: read_your_writes
"""

import os
import socket
import threading

CHUNK = b'{"id": "it-0", "body": "x"}, ' * 2000


def serve(conn: socket.socket) -> None:
    with conn:
        try:
            conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n")
            conn.sendall(b'{"items": [')
            while True:
                conn.sendall(CHUNK)
        except OSError:
            return


server = socket.create_server(("127.0.0.1", int(os.environ["PORT"])))
print("api ready", flush=True)
while True:
    client, _ = server.accept()
    threading.Thread(target=serve, args=(client,), daemon=True).start()
