"""read_trace: assemble the frames of a trace file into a Trace, enforcing frame order."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from ground.errors import TraceFormatError

from ._scan import Frame, FrameScanner, open_trace_file


@dataclass
class Trace:
    """A run trace as read from disk; payload dicts carry no "t" key."""

    header: dict[str, Any]
    schedule: dict[str, Any] | None = None
    events: list[dict[str, Any]] = field(default_factory=list)
    verdicts: list[dict[str, Any]] = field(default_factory=list)
    end: dict[str, Any] | None = None
    other: list[dict[str, Any]] = field(default_factory=list)
    frames: int = 0
    truncated: bool = False
    version: int = 0

    @property
    def partial(self) -> bool:
        """True for a killed run: the file ends mid-frame or has no end frame."""
        return self.truncated or self.end is None


def _body(frame: Frame) -> dict[str, Any]:
    return {k: v for k, v in frame.payload.items() if k != "t"}


def _misplaced(frame: Frame, why: str) -> TraceFormatError:
    return TraceFormatError(f"frame {frame.index} at byte {frame.offset} {why}")


def _add(trace: Trace, frame: Frame) -> None:
    """Place one non-header frame into ``trace``, rejecting frames out of order."""
    kind = frame.type
    if trace.end is not None:
        raise _misplaced(frame, f"is a {kind!r} frame after the 'end' frame")
    if kind == "event":
        trace.events.append(_body(frame))
    elif kind == "verdict":
        trace.verdicts.append(_body(frame))
    elif kind == "schedule":
        if trace.schedule is not None:
            raise _misplaced(frame, "is a second 'schedule' frame")
        trace.schedule = _body(frame)
    elif kind == "end":
        trace.end = _body(frame)
    elif kind == "header":
        raise _misplaced(frame, "is a second 'header' frame")
    else:
        trace.other.append(frame.payload)


def read_trace(path: str | os.PathLike[str]) -> Trace:
    """Read a whole trace; a trace cut mid-frame reads up to its last whole frame (partial)."""
    with open_trace_file(path) as stream:
        scanner = FrameScanner(stream, os.fstat(stream.fileno()).st_size)
        frames = iter(scanner)
        first = next(frames, None)
        if first is None:
            raise TraceFormatError("trace has no header frame (cut off before its first frame)")
        if first.type != "header":
            raise _misplaced(first, f"is a {first.type!r} frame, expected 'header'")
        trace = Trace(header=_body(first), version=scanner.version)
        for frame in frames:
            _add(trace, frame)
        trace.frames = scanner.frames_read
        trace.truncated = scanner.truncated
    return trace
