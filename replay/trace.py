"""The run trace: a versioned, framed, checksummed msgpack file appended as a run goes.

::

    TraceWriter ──► MAGIC | version | [len|crc|header] [len|crc|schedule] [len|crc|event]...
                                      [len|crc|verdict]... [len|crc|end]
    read_trace  ──► Trace(header, schedule, events, verdicts, end, partial)

See docs/trace-format.md for the byte layout and every field.
"""

from __future__ import annotations

from ._fields import EVENT_TYPES, FRAME_TYPES, is_infrastructure
from ._framing import FORMAT_VERSION, MAGIC, MAX_FRAME_BYTES
from ._header import build_header, installed_versions, version_drift
from ._reader import Trace, read_trace
from ._scan import Frame, iter_frames
from ._writer import TraceWriter, open_trace_writer

__all__ = [
    "EVENT_TYPES",
    "FORMAT_VERSION",
    "FRAME_TYPES",
    "MAGIC",
    "MAX_FRAME_BYTES",
    "Frame",
    "Trace",
    "TraceWriter",
    "build_header",
    "installed_versions",
    "is_infrastructure",
    "iter_frames",
    "open_trace_writer",
    "read_trace",
    "version_drift",
]
