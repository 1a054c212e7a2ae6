"""The unit that flows through a toxic chain: one socket read, or the end of the stream."""

from __future__ import annotations

from dataclasses import dataclass

#: A chunk is one read of at most this many bytes.
CHUNK_SIZE = 32 * 1024


@dataclass(slots=True)
class Chunk:
    """Bytes read from one side of a connection, stamped with ``trio.current_time()``.

    An empty ``data`` marks the end of the stream (EOF): it travels through the chain like
    data, so a toxic that holds data also holds the EOF behind it.
    """

    data: bytes
    stamp: float

    @property
    def eof(self) -> bool:
        return not self.data
