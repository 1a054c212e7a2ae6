"""Streaming frame scanner: validates the preamble, then yields whole, checksummed frames."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from ground._paths import open_regular
from ground.errors import ConfigError, TraceError, TraceFormatError, TraceVersionError

from ._claim import partial_path
from ._framing import (
    MAGIC,
    MAX_FRAME_BYTES,
    PREAMBLE,
    READ_VERSIONS,
    checksum_ok,
    decode_header,
    decode_payload,
    header_size,
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
    if version not in READ_VERSIONS:
        readable = " and ".join(str(v) for v in READ_VERSIONS)
        raise TraceVersionError(
            f"trace format version {version} is not supported (this harness reads {readable})"
        )
    return int(version)


class FrameScanner:
    """Iterates the frames of an open trace; ``truncated`` is set when it ends mid-frame.

    A frame whose checked header is whole but whose payload runs past the end of the file is
    a cut-off end (``truncated``); a header or payload that fails its checksum is corruption
    (TraceFormatError naming the frame). Version 1 frames carry no header checksum: there a
    damaged length that points past the end also reads as a cut-off end.
    """

    def __init__(self, stream: BinaryIO, size: int) -> None:
        self._stream = stream
        self._size = size
        self.version = read_preamble(stream, size)
        self.truncated = False
        self.frames_read = 0
        self.end_offset = PREAMBLE.size

    def __iter__(self) -> Iterator[Frame]:
        index, offset = 0, PREAMBLE.size
        size = header_size(self.version)
        while True:
            head = self._stream.read(size)
            if not head:
                return
            if len(head) < size:
                self.truncated = True
                return
            decoded = decode_header(head, self.version)
            if decoded is None:
                raise _corrupt(index, offset, "frame header checksum mismatch")
            length, crc = decoded
            if length > MAX_FRAME_BYTES:
                raise _corrupt(
                    index, offset, f"length {length} over the {MAX_FRAME_BYTES >> 20} MiB cap"
                )
            start = offset + size
            body = self._stream.read(length) if start + length <= self._size else b""
            if len(body) < length:
                self.truncated = True
                return
            if not checksum_ok(body, crc):
                raise _corrupt(index, offset, "checksum mismatch")
            frame = Frame(index, offset, decode_payload(body, index, offset))
            index, offset = index + 1, start + length
            self.frames_read, self.end_offset = index, offset
            yield frame


def _corrupt(index: int, offset: int, why: str) -> TraceFormatError:
    return TraceFormatError(f"frame {index} at byte {offset} is corrupted ({why})")


def iter_frames(path: str | os.PathLike[str]) -> Iterator[Frame]:
    """Stream the whole frames of the trace at ``path``; a torn final frame ends the stream."""
    with open_trace_file(path) as stream:
        yield from FrameScanner(stream, os.fstat(stream.fileno()).st_size)


def open_trace_file(path: str | os.PathLike[str]) -> BinaryIO:
    """Open a trace for reading; a missing or unreadable file raises TraceError, and so does
    what is not a regular file (a FIFO is never waited on, a device never read).

    A missing trace whose ``.partial`` exists is named in the message: that is where a run
    that has not finished (still running, or killed) keeps its trace.
    """
    try:
        return open_regular(Path(path), "trace", "trace")
    except ConfigError as exc:  # a folder, a FIFO, a device: "... not a trace file"
        raise TraceError(str(exc)) from None
    except OSError as exc:
        message = f"cannot read trace {os.fspath(path)}: {exc.strerror}"
        partial = partial_path(path)
        if isinstance(exc, FileNotFoundError) and partial.is_file():
            message += f" (a run that did not finish left {partial}: read that)"
        raise TraceError(message) from None
