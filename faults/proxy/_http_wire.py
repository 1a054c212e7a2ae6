"""One HTTP/1.1 server connection on h11: read requests, write responses, keep-alive.

::

    bytes --> h11 --> Request + Data... + EndOfMessage --> HttpRequest --> handler
    bytes <-- h11 <-- Response + Data + EndOfMessage  <-- HttpResponse <--'

A request is read whole (Content-Length or chunked) under a size cap and a deadline before
the handler sees it, so handlers are plain functions. Pipelined requests are answered in
order. A malformed request, an oversized body or a too slow client gets a 4xx with a JSON
error body and the connection is closed; nothing a client sends can reach the other
connections.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus

import h11
import trio

_RECEIVE_SIZE = 65536
#: How long a closing connection waits for the client to read our last answer.
_LINGER_S = 1.0


@dataclass(frozen=True, slots=True)
class HttpLimits:
    """Per-connection limits: body and header sizes, and how long a client may take."""

    max_body: int = 1 << 20
    max_header: int = 16 << 10
    request_timeout: float = 30.0
    idle_timeout: float = 300.0


@dataclass(frozen=True, slots=True)
class HttpRequest:
    """A complete request: method and target as sent, lower-cased header names, the body."""

    method: str
    target: str
    headers: tuple[tuple[str, str], ...]
    body: bytes

    def header(self, name: str) -> str | None:
        """The first value of header ``name`` (lower case), or None."""
        for key, value in self.headers:
            if key == name:
                return value
        return None


@dataclass(frozen=True, slots=True)
class HttpResponse:
    """A status, a body and its content type; ``close`` ends the connection after it."""

    status: int
    body: bytes = b""
    content_type: str | None = None
    close: bool = False


def json_response(status: int, payload: object, *, close: bool = False) -> HttpResponse:
    """A JSON response, compact and ASCII-only (lone surrogates stay escaped)."""
    body = json.dumps(payload, separators=(",", ":")).encode()
    return HttpResponse(status, body, "application/json", close)


def error_response(status: int, message: str, *, close: bool = False) -> HttpResponse:
    """The Toxiproxy error body ``{"error": ..., "status": ...}``."""
    return json_response(status, {"error": message, "status": status}, close=close)


Handler = Callable[[HttpRequest], HttpResponse]


class _Reject(Exception):
    """The request cannot be read: answer ``response`` and close."""

    def __init__(self, response: HttpResponse) -> None:
        super().__init__(response.status)
        self.response = response


async def serve_connection(
    stream: trio.SocketStream, handler: Handler, limits: HttpLimits, new_id: Callable[[], str]
) -> None:
    """Answer requests on ``stream`` until the client closes, errs or times out."""
    conn = h11.Connection(h11.SERVER, max_incomplete_event_size=limits.max_header)
    try:
        while True:
            try:
                request = await _read_request(stream, conn, limits)
            except _Reject as reject:
                await _send(stream, conn, reject.response, new_id(), head=False)
                break
            if request is None:
                break
            response = handler(request)
            await _send(stream, conn, response, new_id(), head=request.method == "HEAD")
            if response.close or conn.our_state is not h11.DONE:
                break
            if conn.their_state is not h11.DONE:
                break
            conn.start_next_cycle()
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass
    await _close(stream)


async def _read_request(
    stream: trio.SocketStream, conn: h11.Connection, limits: HttpLimits
) -> HttpRequest | None:
    """The next request, or None when the client closed or stayed idle too long."""
    started = bool(conn.trailing_data[0])
    head: h11.Request | None = None
    body = bytearray()
    with trio.CancelScope() as scope:
        timeout = limits.request_timeout if started else limits.idle_timeout
        scope.deadline = trio.current_time() + timeout
        while True:
            try:
                event = conn.next_event()
            except h11.RemoteProtocolError as exc:
                status = exc.error_status_hint
                raise _Reject(error_response(status, f"bad request: {exc}", close=True)) from None
            if event is h11.NEED_DATA:
                data = await stream.receive_some(_RECEIVE_SIZE)
                if data and not started:
                    started = True
                    scope.deadline = trio.current_time() + limits.request_timeout
                conn.receive_data(data)
            elif isinstance(event, h11.Request):
                head = event
                _check_length(event, limits.max_body)
                if conn.they_are_waiting_for_100_continue:
                    await stream.send_all(_informational(conn))
            elif isinstance(event, h11.Data):
                body += event.data
                if len(body) > limits.max_body:
                    raise _Reject(_too_large(limits.max_body))
            elif isinstance(event, h11.EndOfMessage) and head is not None:
                return _request(head, bytes(body))
            else:  # ConnectionClosed (or PAUSED, which cannot happen at a cycle start)
                return None
    if started:
        raise _Reject(error_response(408, "request timeout", close=True))
    return None


def _check_length(request: h11.Request, max_body: int) -> None:
    for name, value in request.headers:
        if name == b"content-length" and int(value) > max_body:
            raise _Reject(_too_large(max_body))


def _too_large(max_body: int) -> HttpResponse:
    return error_response(413, f"bad request body: larger than {max_body} bytes", close=True)


def _informational(conn: h11.Connection) -> bytes:
    return conn.send(h11.InformationalResponse(status_code=100, headers=[])) or b""


def _request(head: h11.Request, body: bytes) -> HttpRequest:
    headers = tuple((k.decode("latin-1"), v.decode("latin-1")) for k, v in head.headers)
    return HttpRequest(head.method.decode("latin-1"), head.target.decode("latin-1"), headers, body)


async def _send(
    stream: trio.SocketStream,
    conn: h11.Connection,
    response: HttpResponse,
    request_id: str,
    *,
    head: bool,
) -> None:
    if conn.our_state not in (h11.IDLE, h11.SEND_RESPONSE):
        return
    headers = [("X-Toxiproxy-Request-Id", request_id)]
    if response.content_type is not None:
        headers.append(("Content-Type", response.content_type))
    if response.status != 204:
        headers.append(("Content-Length", str(len(response.body))))
    if response.close:
        headers.append(("Connection", "close"))
    reason = _reason(response.status)
    out = conn.send(h11.Response(status_code=response.status, headers=headers, reason=reason))
    if response.body and not head and response.status != 204:
        out = (out or b"") + (conn.send(h11.Data(data=response.body)) or b"")
    out = (out or b"") + (conn.send(h11.EndOfMessage()) or b"")
    await stream.send_all(out)


def _reason(status: int) -> bytes:
    try:
        return HTTPStatus(status).phrase.encode()
    except ValueError:
        return b""


async def _close(stream: trio.SocketStream) -> None:
    """Send EOF, let the client read what we sent (drain briefly), then close."""
    with trio.move_on_after(_LINGER_S):
        try:
            await stream.send_eof()
            while await stream.receive_some(_RECEIVE_SIZE):
                pass
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
    await trio.aclose_forcefully(stream)
