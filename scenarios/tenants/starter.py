"""A starting point for the tenants task: it runs, and does nothing useful.

It listens on PORT, says it is ready and answers every request with 501. It never shows a
tenant another tenant's notes (it shows none), so it holds tenant_isolation and
no_cross_tenant_writes, and fails read_your_writes: no create is ever acknowledged.
See TASK.md for what the service must do.
"""

from __future__ import annotations

import asyncio
import json
import os


async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
        for line in head.split(b"\r\n"):
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length" and int(value):
                await reader.readexactly(int(value))
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError):
        writer.close()
        return
    body = json.dumps({"error": "not implemented"}).encode()
    writer.write(
        b"HTTP/1.1 501 Not Implemented\r\nContent-Type: application/json\r\n"
        + f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
        + body
    )
    try:
        await writer.drain()
    except ConnectionError:
        pass
    writer.close()


async def main() -> None:
    # Also given: DATABASE_URL (the app role), OWNER_DATABASE_URL (the owner role, for the
    # migration), APP_ROLE (the app role's name, for grants). Unused here.
    server = await asyncio.start_server(handle, "127.0.0.1", int(os.environ["PORT"]))
    print("api ready (starter: every request gets 501)", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main())
