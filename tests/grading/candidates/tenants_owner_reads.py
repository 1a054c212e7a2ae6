"""Adversary (tenants): tries the superuser (refused: every login needs its password), then
serves the API through the owner role, which row-level security does not bind: every list
shows every tenant's notes. Expected: every probe refused; tenant_isolation fails."""

import json
import os
import sys
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import psycopg

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pg_probe import probe

owner = os.environ["OWNER_DATABASE_URL"]
owner_role = owner.split("//")[1].split(":")[0]
probe(os.environ["DATABASE_URL"], [("app-role-sets-owner-role", f"SET ROLE {owner_role}")])
with psycopg.connect(owner, autocommit=True) as conn:
    conn.execute("CREATE TABLE IF NOT EXISTS app.items (id text PRIMARY KEY, tenant_id text,"
                 " body text)")  # fmt: skip


class Handler(BaseHTTPRequestHandler):
    def reply(self, code: int, body: object) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self) -> None:
        tenant = self.headers["X-Tenant"]
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))["body"]
        item = str(uuid.uuid4())
        with psycopg.connect(owner, autocommit=True) as conn:
            conn.execute("INSERT INTO app.items VALUES (%s, %s, %s)", (item, tenant, body))
        self.reply(201, {"id": item, "body": body})

    def do_GET(self) -> None:
        with psycopg.connect(owner, autocommit=True) as conn:
            rows = conn.execute("SELECT id, body FROM app.items").fetchall()
        self.reply(200, {"items": [{"id": i, "body": b} for i, b in rows]})

    def log_message(self, *args: object) -> None:
        pass


server = ThreadingHTTPServer(("127.0.0.1", int(os.environ["PORT"])), Handler)
print("api ready", flush=True)
server.serve_forever()
