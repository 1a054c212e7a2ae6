"""Adversary (tenants): the golden API, behind a front of its own that counts the client's
requests; once every note of the workload is stored and the settle phase's first round of
lists was answered (six lists since the last note), the owner role (which owns
``app.items``) takes ``ACCESS EXCLUSIVE`` on it in a transaction it never ends (again
whenever a fault resets its connection): every read of the table waits for ever, the
harness's final read included. A harness that waited would hang until something killed the
run (a harness error, once left out of the reward). Taking the lock at the end, not at the
first note, keeps the API answering the workload (a lock from the start leaves every request
hanging until the run's wall clock contains it: 0 too, after five minutes).

Expected: the harness's read gives up after the reader's lock timeout: the seed fails as
unreadable (never an error, never a hang), reward 0.

pack: tenants
golden: yes
reward: 0
unreadable: app.items: a lock on it was held past
"""

import os
import socket
import threading
import time

import psycopg
from _probe import in_background, run_golden, say

OWNER = os.environ["OWNER_DATABASE_URL"]
PORT = int(os.environ["PORT"])
NOTES = 15  # the workload's creates: 5 rounds of one per tenant (scenario.py, plan)
lists_since_last_note = 0
started = threading.Event()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


INNER = free_port()
os.environ["PORT"] = str(INNER)  # the golden listens inside; the front takes the real port


def relay(client: socket.socket) -> None:
    global lists_since_last_note
    with client:
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = client.recv(65536)
            if not chunk:
                return
            head += chunk
        if head.startswith(b"GET"):
            lists_since_last_note += 1
        else:
            lists_since_last_note = 0
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


def stored(watch: list[psycopg.Connection]) -> int:
    """The notes in ``app.items``, on one kept connection (a connection per look would
    keep the run from ever being quiet: the harness records each one its link opens)."""
    if not watch or watch[0].closed:
        watch[:] = [psycopg.connect(OWNER, connect_timeout=5, autocommit=True)]
    row = watch[0].execute("SELECT count(*) FROM app.items").fetchone()
    return int(row[0]) if row else 0


def lock() -> None:
    watch: list[psycopg.Connection] = []
    while True:
        time.sleep(0.1)
        try:
            if stored(watch) >= NOTES and lists_since_last_note >= 6:
                break
        except Exception:
            watch.clear()
            time.sleep(0.5)
    while True:  # the link's faults reset connections: take the lock again each time
        try:
            conn = psycopg.connect(OWNER, connect_timeout=5)
            conn.execute("LOCK TABLE app.items IN ACCESS EXCLUSIVE MODE")
            say("adversary: app.items locked")
            while True:
                time.sleep(0.5)
                conn.execute("SELECT 1")
        except Exception as exc:
            say(f"adversary: lost the lock ({type(exc).__name__}), again")
            time.sleep(0.1)


in_background(front)
in_background(lock)
run_golden()
