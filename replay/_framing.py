"""The byte layout of a trace: preamble, frame prefix and the msgpack payload codec.

::

    file    = preamble frame*
    preamble = MAGIC (8 bytes) | format version (u16 big-endian)
    frame    = length (u32 BE) | CRC32 of payload (u32 BE) | payload (msgpack map with "t")
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Mapping
from typing import Any

import msgpack

from chaos.errors import ConfigError, TraceFormatError

MAGIC = b"CHAOSTR\x00"
FORMAT_VERSION = 1
PREAMBLE = struct.Struct(">8sH")
FRAME_PREFIX = struct.Struct(">II")
MAX_FRAME_BYTES = 64 * 1024 * 1024


def encode_preamble(version: int = FORMAT_VERSION) -> bytes:
    """The 10 bytes every trace starts with."""
    return PREAMBLE.pack(MAGIC, version)


def encode_frame(payload: Mapping[str, Any]) -> bytes:
    """One whole frame (prefix + payload) for a payload map that names its type in "t"."""
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
    return FRAME_PREFIX.pack(len(body), zlib.crc32(body)) + body


def checksum_ok(body: bytes, crc: int) -> bool:
    """Whether ``body`` matches the CRC32 stored in its frame prefix."""
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
