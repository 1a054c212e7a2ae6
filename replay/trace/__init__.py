"""The run trace: a versioned, framed, checksummed msgpack file appended as a run goes.

::

    claim_trace(PATH) ──► PATH.partial, locked: one live writer per path
    TraceWriter ──► MAGIC | version | [len|crc|hcrc|header] [len|crc|hcrc|schedule]
                    [len|crc|hcrc|event]... [len|crc|hcrc|verdict]... [len|crc|hcrc|end]
        close() ──► PATH.partial renamed to PATH (a killed run leaves PATH.partial)
    read_trace  ──► Trace(header, schedule, events, verdicts, end, partial)

This is the model layer: it imports nothing of the harness but ``ground.errors`` and the
history's process names. ``replay.trace.text`` renders trace values as text. See
docs/trace-format.md for the byte layout, every field and what each kind of exit leaves.
"""

from __future__ import annotations

from ._claim import (
    PARTIAL_SUFFIX,
    TraceClaim,
    check_trace_path,
    claim_trace,
    is_trace_file,
    partial_path,
)
from ._fields import EVENT_TYPES, FRAME_TYPES, is_infrastructure
from ._framing import FORMAT_VERSION, MAGIC, MAX_FRAME_BYTES, READ_VERSIONS
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
    "PARTIAL_SUFFIX",
    "READ_VERSIONS",
    "Frame",
    "Trace",
    "TraceClaim",
    "TraceWriter",
    "build_header",
    "check_trace_path",
    "claim_trace",
    "installed_versions",
    "is_infrastructure",
    "is_trace_file",
    "iter_frames",
    "open_trace_writer",
    "partial_path",
    "read_trace",
    "version_drift",
]
