"""The harness's own HTTP client: the workload's requests and their recorded responses.

It runs inside the harness (never in the service under test), so what it records is
evidence a candidate cannot forge: one history operation per logical request (``invoke``,
then ``ok``, ``fail`` or ``info``), whatever retries it took. A request is retried (same
idempotency key) after a connection error, a timeout or a 5xx other than 501; a 4xx and 501
Not Implemented are final (``fail``);
a 2xx whose body breaks the contract in TASK.md is ``info`` (not evidence of anything).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import trio

from chaos.recorder import Recorder

#: Per attempt: how long a request may take; the waits between attempts.
ATTEMPT_TIMEOUT_S = 15.0
#: The most the client reads of one response (the workload's lists are a few KiB): a
#: service that answers without end is cut off, never buffered in the harness.
MAX_RESPONSE_BYTES = 1024 * 1024
BACKOFF_S = (0.5, 1.0, 2.0, 2.0)


@dataclass(frozen=True)
class Step:
    """One request of the workload: ``create`` (POST /items) or ``list`` (GET /items)."""

    f: str
    tenant: str
    key: str | None = None
    body: str | None = None

    def invoke_value(self) -> dict[str, Any]:
        if self.f == "create":
            return {"tenant": self.tenant, "key": self.key, "body": self.body}
        return {"tenant": self.tenant}


class BadResponse(Exception):
    """A 2xx response that does not follow the contract."""


async def http(
    address: str,
    method: str,
    path: str,
    headers: dict[str, str],
    body: bytes = b"",
    timeout_s: float = ATTEMPT_TIMEOUT_S,
) -> tuple[int, bytes]:
    """One HTTP/1.1 request on its own connection (``Connection: close``): status, body.
    Raises OSError / trio.BrokenResourceError on a broken connection, trio.TooSlowError
    after ``timeout_s``, ValueError on a response that is not HTTP or is longer than
    ``MAX_RESPONSE_BYTES``."""
    host, _, port = address.rpartition(":")
    lines = [f"{method} {path} HTTP/1.1", f"Host: {address}", "Connection: close"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    lines.append(f"Content-Length: {len(body)}")
    request = ("\r\n".join(lines) + "\r\n\r\n").encode() + body
    with trio.fail_after(timeout_s):
        stream = await trio.open_tcp_stream(host, int(port))
        async with stream:
            await stream.send_all(request)
            data = bytearray()
            while chunk := await stream.receive_some(65536):
                data += chunk
                if len(data) > MAX_RESPONSE_BYTES:
                    raise ValueError(f"a response over {MAX_RESPONSE_BYTES} bytes")
    head, sep, rest = bytes(data).partition(b"\r\n\r\n")
    status_line = head.split(b"\r\n", 1)[0].split(b" ")
    if not sep or len(status_line) < 2 or not status_line[0].startswith(b"HTTP/1."):
        raise ValueError(f"not an HTTP response ({len(data)} bytes)")
    length = None
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    return int(status_line[1]), rest if length is None else rest[:length]


def _row(row: Any, where: str) -> dict[str, str]:
    if not isinstance(row, dict) or not isinstance(row.get("id"), str):
        raise BadResponse(f"{where} is not an object with a string id")
    if not isinstance(row.get("body"), str):
        raise BadResponse(f"{where} has no string body")
    return {"id": row["id"], "body": row["body"]}


def parse(step: Step, payload: bytes) -> dict[str, Any]:
    """The rows of a 2xx response, as the contract says: ``{"item": row}`` for a create,
    ``{"items": [row, ...]}`` for a list."""
    try:
        document = json.loads(payload)
    except ValueError:
        raise BadResponse("the body is not JSON") from None
    if step.f == "create":
        return {"item": _row(document, "the response")}
    if not isinstance(document, dict) or not isinstance(document.get("items"), list):
        raise BadResponse('the response has no "items" list')
    return {"items": [_row(r, f"items[{i}]") for i, r in enumerate(document["items"])]}


class Client:
    """Performs steps through the API's link and records them as ``process`` operations."""

    def __init__(
        self,
        address: str,
        recorder: Recorder,
        process: str = "client",
        backoff_s: tuple[float, ...] = BACKOFF_S,
        timeout_s: float = ATTEMPT_TIMEOUT_S,
    ) -> None:
        self.address = address
        self.recorder = recorder
        self.process = process
        self.backoff_s = backoff_s
        self.timeout_s = timeout_s

    async def perform(self, step: Step) -> dict[str, Any] | None:
        """Run ``step`` to its end; the ``ok`` value (None if it did not succeed)."""
        self.recorder.record(self.process, "invoke", step.f, step.invoke_value())
        headers = {"X-Tenant": step.tenant}
        body = b""
        method = "GET"
        if step.f == "create":
            method = "POST"
            headers["Idempotency-Key"] = str(step.key)
            headers["Content-Type"] = "application/json"
            body = json.dumps({"body": step.body}).encode()
        attempts: list[str] = []
        outcome, error = "info", "no attempt"
        for delay in (*self.backoff_s, None):
            try:
                status, payload = await http(
                    self.address, method, "/items", headers, body, self.timeout_s
                )
            except trio.TooSlowError:
                attempts.append("timeout")
            except (OSError, trio.BrokenResourceError, ValueError) as exc:
                cause = exc.__cause__ if isinstance(exc, trio.BrokenResourceError) else exc
                attempts.append(f"{type(cause or exc).__name__}")
            else:
                attempts.append(str(status))
                if 200 <= status < 300:
                    try:
                        rows = parse(step, payload)
                    except BadResponse as exc:
                        outcome, error = "info", f"malformed response: {exc}"
                        break
                    value = {
                        **step.invoke_value(),
                        "status": status,
                        **rows,
                        "attempts": attempts,
                    }
                    self.recorder.record(self.process, "ok", step.f, value)
                    return value
                if 400 <= status < 500 or status == 501:  # 501: never there, retried or not
                    text = payload[:200].decode(errors="replace")
                    outcome, error = "fail", f"HTTP {status}: {text}"
                    break
            error = f"no answer after {len(attempts)} attempt(s): {', '.join(attempts)}"
            if delay is None:
                break
            await trio.sleep(delay)
        self.recorder.record(
            self.process,
            outcome,
            step.f,
            {**step.invoke_value(), "attempts": attempts},
            error=error,
        )
        return None
