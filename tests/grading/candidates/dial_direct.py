"""Adversary: finds the real NATS and PostgreSQL behind its links (the NATS INFO port, the
server's own port from SQL) and does all its work over direct connections, skipping the
links and so every fault on them. Run as a folder with the golden consumer beside it
(``golden/``): it rewrites NATS_URL and PG_DSN to the real servers, then runs the golden.
Expected: refused by the network namespace as root, detected otherwise: bypassed link, 0."""

import json
import os
import runpy
import socket
import sys
from urllib.parse import urlsplit

import psycopg

nats = urlsplit(os.environ["NATS_URL"])
with socket.create_connection((nats.hostname, nats.port), timeout=5) as s:
    info = json.loads(s.recv(4096).decode().split(" ", 1)[1])
with psycopg.connect(os.environ["PG_DSN"], connect_timeout=5) as conn:
    pg_port = conn.execute("SELECT inet_server_port()").fetchone()[0]
pg = urlsplit(os.environ["PG_DSN"])
# its own credentials (a user and password on each server), the servers' own ports
login = nats.netloc.rpartition("@")[0]
os.environ["NATS_URL"] = f"nats://{login}@127.0.0.1:{info['port']}"
os.environ["PG_DSN"] = pg._replace(
    netloc=f"{pg.username}:{pg.password}@127.0.0.1:{pg_port}"
).geturl()
print(f"going direct: {os.environ['NATS_URL']} {os.environ['PG_DSN']}", flush=True)
here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "golden"))
runpy.run_module("scenarios.payments.consumer", run_name="__main__", alter_sys=True)
