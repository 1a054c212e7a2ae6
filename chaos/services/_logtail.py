"""Line splitting of a child's output stream and a bounded in-memory tail of it."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

import trio

MAX_LINE_BYTES = 64 * 1024


class LogTail:
    """The last `limit` lines a service printed, for error messages."""

    def __init__(self, limit: int = 200) -> None:
        self._lines: deque[str] = deque(maxlen=limit)
        self._last_error = ""

    def add(self, line: str, stream: str = "stdout") -> None:
        self._lines.append(line)
        if stream == "stderr" and line.strip():
            self._last_error = line

    def lines(self) -> list[str]:
        return list(self._lines)

    def text(self) -> str:
        return "\n".join(self._lines)

    def last(self, prefer_stderr: bool = False) -> str:
        """The last line, for the end of an error message ("... not ready after 30s: LINE");
        never empty, so the message never ends at its colon. ``prefer_stderr``: the last
        line of stderr when there is one (a program that died says why there; its stdout,
        read by another pipe, may come after)."""
        if prefer_stderr and self._last_error:
            return self._last_error
        for line in reversed(self._lines):
            if line.strip():
                return line
        return "it printed nothing"


def _decode(raw: bytes | bytearray) -> str:
    return bytes(raw).decode("utf-8", errors="replace").rstrip("\r")


async def pump_lines(stream: trio.abc.ReceiveStream, emit: Callable[[str], None]) -> None:
    """Read `stream` to EOF, calling `emit` once per line (over-long lines are split)."""
    buf = bytearray()
    async with stream:
        while True:
            try:
                chunk = await stream.receive_some(65536)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                break
            if not chunk:
                break
            buf += chunk
            while (nl := buf.find(b"\n")) >= 0:
                emit(_decode(buf[:nl]))
                del buf[: nl + 1]
            if len(buf) >= MAX_LINE_BYTES:
                emit(_decode(buf))
                buf.clear()
    if buf:
        emit(_decode(buf))
