"""Streaming frame scanner: validates the preamble, then yields whole, checksummed frames."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from chaos.errors import TraceError, TraceFormatError, TraceVersionError

from ._framing import (
    FORMAT_VERSION,
    FRAME_PREFIX,
    MAGIC,
    MAX_FRAME_BYTES,
    PREAMBLE,
    checksum_ok,
    decode_payload,
)


@dataclass(frozen=True)
class Frame:
    """One whole frame: its ordinal, its byte offset in the file and its payload map."""

    index: int
    offset: int
    payload: dict[str, Any]

    @property
    def type(self) -> str:
        """The frame type named by the payload's "t" key."""
        return str(self.payload["t"])


def read_preamble(stream: BinaryIO, size: int) -> int:
    """Check the magic and return the format version; bad input raises a TraceError."""
    if size == 0:
        raise TraceFormatError("trace is empty")
    data = stream.read(PREAMBLE.size)
    if len(data) < PREAMBLE.size:
        if MAGIC.startswith(data[: len(MAGIC)]):
            raise TraceFormatError(f"trace is cut off inside its preamble ({len(data)} bytes)")
        raise TraceFormatError("not a chaos trace (bad magic)")
    magic, version = PREAMBLE.unpack(data)
    if magic != MAGIC:
        raise TraceFormatError("not a chaos trace (bad magic)")
    if version != FORMAT_VERSION:
        raise TraceVersionError(
            f"trace format version {version} is not supported (this harness reads {FORMAT_VERSION})"
        )
    return int(version)


class FrameScanner:
    """Iterates the frames of an open trace; ``truncated`` is set when it ends mid-frame."""

    def __init__(self, stream: BinaryIO, size: int) -> None:
        self._stream = stream
        self._size = size
        self.version = read_preamble(stream, size)
        self.truncated = False
        self.frames_read = 0
        self.end_offset = PREAMBLE.size

    def __iter__(self) -> Iterator[Frame]:
        index, offset = 0, PREAMBLE.size
        while True:
            prefix = self._stream.read(FRAME_PREFIX.size)
            if not prefix:
                return
            if len(prefix) < FRAME_PREFIX.size:
                self.truncated = True
                return
            length, crc = FRAME_PREFIX.unpack(prefix)
            if length > MAX_FRAME_BYTES:
                raise TraceFormatError(
                    f"frame {index} at byte {offset} is corrupted "
                    f"(length {length} over the {MAX_FRAME_BYTES >> 20} MiB cap)"
                )
            start = offset + FRAME_PREFIX.size
            body = self._stream.read(length) if start + length <= self._size else b""
            if len(body) < length:
                self.truncated = True
                return
            if not checksum_ok(body, crc):
                raise TraceFormatError(
                    f"frame {index} at byte {offset} is corrupted (checksum mismatch)"
                )
            frame = Frame(index, offset, decode_payload(body, index, offset))
            index, offset = index + 1, start + length
            self.frames_read, self.end_offset = index, offset
            yield frame


def iter_frames(path: str | os.PathLike[str]) -> Iterator[Frame]:
    """Stream the whole frames of the trace at ``path``; a torn final frame ends the stream."""
    with open_trace_file(path) as stream:
        yield from FrameScanner(stream, os.fstat(stream.fileno()).st_size)


def open_trace_file(path: str | os.PathLike[str]) -> BinaryIO:
    """Open a trace for reading; a missing or unreadable file raises TraceError."""
    try:
        return Path(path).open("rb")
    except OSError as exc:
        raise TraceError(f"cannot read trace {os.fspath(path)}: {exc.strerror}") from None
