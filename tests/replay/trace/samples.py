"""Shared by the trace tests: a small trace and raw frames encoded straight from the spec."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path
from typing import Any

import msgpack

from replay.trace import TraceWriter

SMALL_HEADER = {"scenario_id": "demo", "scenario_hash": "h", "variant": "golden", "seed": 7}


def raw_preamble(version: int = 2) -> bytes:
    """The preamble as docs/trace-format.md describes it, built independently of the writer."""
    return b"CHAOSTR\x00" + struct.pack(">H", version)


def raw_header(length: int, crc: int) -> bytes:
    """A version 2 frame header: u32 length, u32 payload CRC32, u32 CRC32 of those 8 bytes."""
    checked = struct.pack(">II", length, crc)
    return checked + struct.pack(">I", zlib.crc32(checked))


def raw_body_frame(body: bytes, *, crc: int | None = None) -> bytes:
    """A version 2 frame around any payload bytes."""
    return raw_header(len(body), zlib.crc32(body) if crc is None else crc) + body


def raw_frame(payload: Any, *, crc: int | None = None) -> bytes:
    """A version 2 frame per the spec around a msgpack-encoded payload."""
    return raw_body_frame(msgpack.packb(payload, use_bin_type=True), crc=crc)


def raw_frame_v1(payload: Any) -> bytes:
    """A version 1 frame: u32 length, u32 CRC32, msgpack payload (no header checksum)."""
    body: bytes = msgpack.packb(payload, use_bin_type=True)
    return struct.pack(">II", len(body), zlib.crc32(body)) + body


def small_events(n: int) -> list[dict[str, Any]]:
    """``n`` client events with distinct values."""
    return [
        {"process": i % 3, "type": "invoke", "f": "write", "time_ns": i * 1000, "value": i}
        for i in range(n)
    ]


def write_small_trace(path: Path, n_events: int = 4) -> None:
    """A complete small trace: header, schedule, ``n_events`` events, one verdict, end."""
    with TraceWriter(path, SMALL_HEADER) as w:
        w.write_schedule({"faults": [{"kind": "partition", "target": "a-b"}]})
        for event in small_events(n_events):
            w.write_event(event)
        w.write_verdict({"name": "ok", "valid": True, "explanation": "held"})
        w.write_end("pass", 0, 0.5)


def frame_offsets(data: bytes) -> list[int]:
    """Byte offsets of every frame in a well-formed trace, walking the spec's layout."""
    offsets, pos = [], 10
    while pos < len(data):
        offsets.append(pos)
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        pos += 12 + length
    assert pos == len(data)
    return offsets
