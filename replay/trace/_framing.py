"""The byte layout of a trace: preamble, frame header and the msgpack payload codec.

::

    file     = preamble frame*
    preamble = MAGIC (8 bytes) | format version (u16 big-endian)
    frame    = length (u32 BE) | CRC32 of payload (u32 BE) | CRC32 of the 8 bytes before (u32 BE)
               | payload (msgpack map with "t")

The third word (format version 2) checks the length itself, so a damaged length is told apart
from a file cut off mid-frame: a whole, checked frame header whose payload runs past the end
of the file can only be a cut-off end. Version 1 frames have no such word and are still read.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Mapping
from typing import Any

import msgpack

from ground.errors import ConfigError, TraceFormatError

MAGIC = b"CHAOSTR\x00"
FORMAT_VERSION = 2
#: Every version this reader reads (1: frames without the header checksum).
READ_VERSIONS = (1, 2)
PREAMBLE = struct.Struct(">8sH")
FRAME_HEADER = struct.Struct(">III")
FRAME_HEADER_V1 = struct.Struct(">II")
MAX_FRAME_BYTES = 64 * 1024 * 1024


def encode_preamble(version: int = FORMAT_VERSION) -> bytes:
    """The 10 bytes every trace starts with."""
    return PREAMBLE.pack(MAGIC, version)


def frame_header(body: bytes) -> bytes:
    """The 12-byte header of a frame whose payload is ``body``."""
    checked = FRAME_HEADER_V1.pack(len(body), zlib.crc32(body))
    return checked + struct.pack(">I", zlib.crc32(checked))


def encode_frame(payload: Mapping[str, Any]) -> bytes:
    """One whole frame (header + payload) for a payload map that names its type in "t"."""
    try:
        body: bytes = msgpack.packb(dict(payload), use_bin_type=True)
    except (TypeError, ValueError, OverflowError) as exc:
        raise ConfigError(
            f"{payload.get('t')!s} frame is not msgpack-serializable: {exc}"
        ) from None
    if len(body) > MAX_FRAME_BYTES:
        raise ConfigError(
            f"{payload.get('t')!s} frame is {len(body)} bytes, over the "
            f"{MAX_FRAME_BYTES >> 20} MiB frame cap"
        )
    return frame_header(body) + body


def header_size(version: int) -> int:
    """Bytes of a frame header in format ``version``."""
    return FRAME_HEADER_V1.size if version == 1 else FRAME_HEADER.size


def decode_header(data: bytes, version: int) -> tuple[int, int] | None:
    """(payload length, payload CRC) of a whole frame header; None when its checksum fails."""
    if version == 1:
        length, crc = FRAME_HEADER_V1.unpack(data)
        return int(length), int(crc)
    length, crc, check = FRAME_HEADER.unpack(data)
    if zlib.crc32(data[: FRAME_HEADER_V1.size]) != check:
        return None
    return int(length), int(crc)


def checksum_ok(body: bytes, crc: int) -> bool:
    """Whether ``body`` matches the CRC32 stored in its frame header."""
    return zlib.crc32(body) == crc


def decode_payload(body: bytes, index: int, offset: int) -> dict[str, Any]:
    """The payload map of frame ``index``; a malformed payload raises TraceFormatError."""
    where = f"frame {index} at byte {offset}"
    try:
        obj = msgpack.unpackb(body, raw=False, strict_map_key=False, use_list=True)
    except msgpack.ExtraData:
        raise TraceFormatError(f"{where} is not valid msgpack (trailing bytes)") from None
    except Exception as exc:  # msgpack raises many types for bad bytes; all mean "malformed"
        raise TraceFormatError(f"{where} is not valid msgpack ({type(exc).__name__})") from None
    if not isinstance(obj, dict):
        raise TraceFormatError(f"{where} is not a map (got {type(obj).__name__})")
    frame_type = obj.get("t")
    if not isinstance(frame_type, str) or not frame_type:
        raise TraceFormatError(f"{where} has no frame type (missing 't' key)")
    return obj
