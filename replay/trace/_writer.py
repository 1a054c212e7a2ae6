"""TraceWriter: appends checksummed frames to a claimed trace, flushing after each one."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

from ground.errors import ConfigError, WriteError

from ._claim import TraceClaim, claim_trace
from ._fields import (
    BAD_INPUT_EXIT_CODE,
    FRAME_TYPES,
    as_mapping,
    check_end,
    check_event,
    check_verdict,
)
from ._framing import encode_frame, encode_preamble


class TraceWriter:
    """Writes one run's trace: header at open, then schedule, events, verdicts and end.

    The trace is written to ``PATH.partial`` (claimed: no other live writer can use the
    path) and renamed to ``PATH`` by ``close``. Every frame is written and flushed on its
    own, so a killed run leaves a readable ``PATH.partial``. ``close`` places the trace
    with or without an end frame (without one it reads as partial), except when the run's
    input was refused: an end frame with exit code 2, a ConfigError (alone or grouped)
    leaving the ``with`` block, or ``discard()``. Then the trace is removed and whatever was
    at ``PATH`` stays. A write that fails (a full disk) is ``WriteError`` (exit 3) naming the
    ``PATH.partial`` that keeps what was written; every later write raises it again.

    >>> with TraceWriter("run.trace", build_header("demo", "sha256:...", "golden", 7)) as w:
    ...     w.write_event({"process": 0, "type": "invoke", "f": "write", "time_ns": 0})
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | TraceClaim,
        header: Mapping[str, Any],
        *,
        overwrite: bool = False,
        fsync: bool = False,
    ) -> None:
        first = encode_preamble() + encode_frame({"t": "header", **as_mapping(header, "header")})
        self._claim = path if isinstance(path, TraceClaim) else claim_trace(path, replace=overwrite)
        self.path: Path = self._claim.path
        self._file = self._claim.file
        self._fsync = fsync
        self._events = 0
        self._frames = 0
        self._schedule_written = False
        self._ended = False
        self._keep = True
        self._failed: str | None = None  # why the file cannot be written (a full disk)
        try:
            self._append(first)
        except WriteError as exc:
            self._claim.discard()
            raise WriteError(f"{str(exc).partition(';')[0]} (nothing was kept)") from None
        except BaseException:
            self._claim.discard()
            raise

    @property
    def partial_path(self) -> Path:
        """Where the trace is while it is written (and after a kill)."""
        return self._claim.partial

    @property
    def frames_written(self) -> int:
        """How many frames (header included) are on disk."""
        return self._frames

    @property
    def closed(self) -> bool:
        """Whether the trace was placed or discarded."""
        return not self._claim.active

    def _append(self, frame: bytes) -> None:
        try:
            self._file.write(frame)
            self._file.flush()
            if self._fsync:
                os.fsync(self._file.fileno())
        except OSError as exc:  # a full disk: every later write fails the same way
            self._failed = (
                f"cannot write trace {self.path}: {exc.strerror or exc}; what was written "
                f"before is kept in {self.partial_path}"
            )
            raise WriteError(self._failed) from None
        self._frames += 1

    def _check_open(self) -> None:
        if self.closed:
            raise ValueError("trace writer is closed")
        if self._failed is not None:
            raise WriteError(self._failed)
        if self._ended:
            raise ValueError("trace already has its end frame")

    def write_schedule(self, schedule: object) -> None:
        """Record the fault schedule (a mapping or pydantic model); at most once per trace."""
        self._check_open()
        if self._schedule_written:
            raise ValueError("trace already has a schedule frame")
        self._append(encode_frame({"t": "schedule", **as_mapping(schedule, "schedule")}))
        self._schedule_written = True

    def write_event(self, event: object) -> dict[str, Any]:
        """Record one history operation; fills index, value and error; returns what was stored."""
        self._check_open()
        body = as_mapping(event, "event")
        body.setdefault("index", self._events)
        body.setdefault("value", None)
        body.setdefault("error", None)
        check_event(body)
        self._append(encode_frame({"t": "event", **body}))
        self._events += 1
        return body

    def write_verdict(self, verdict: object) -> None:
        """Record one invariant verdict (name, valid, explanation, evidence)."""
        self._check_open()
        body = as_mapping(verdict, "verdict")
        check_verdict(body)
        self._append(encode_frame({"t": "verdict", **body}))

    def write_frame(self, frame_type: str, body: object) -> None:
        """Record an extension frame of a non-standard type (readers keep it in ``other``)."""
        self._check_open()
        if not isinstance(frame_type, str) or not frame_type or frame_type in FRAME_TYPES:
            raise ConfigError(f"extension frame type must be a new name, got {frame_type!r}")
        self._append(encode_frame({"t": frame_type, **as_mapping(body, "frame body")}))

    def write_end(
        self,
        outcome: str,
        exit_code: int,
        wall_time_s: float,
        extra: Mapping[str, Any] | None = None,
    ) -> None:
        """Record the run's end: after this frame the trace is complete and takes no more.

        Exit code 2 (the run's input was refused) marks the trace to be discarded by
        ``close``: a refused run leaves no trace and keeps the one already at the path.
        """
        self._check_open()
        check_end(outcome, exit_code, wall_time_s)
        body = as_mapping(extra or {}, "end extra")
        body.update(outcome=outcome, exit_code=exit_code, wall_time_s=float(wall_time_s))
        self._append(encode_frame({"t": "end", **body}))
        self._ended = True
        if exit_code == BAD_INPUT_EXIT_CODE:
            self._keep = False

    def discard(self) -> None:
        """Remove the trace written so far and release the path; idempotent."""
        self._claim.discard()

    def close(self) -> None:
        """Sync and rename the trace into place (or remove it, see the class); idempotent.
        A trace that could not be written to the end stays at ``PATH.partial``."""
        if self.closed:
            return
        if self._failed is not None:
            self._claim.abandon()
        elif self._keep:
            self._claim.place()
        else:
            self._claim.discard()

    def __enter__(self) -> TraceWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc is not None and is_bad_input(exc):
            self.discard()
        self.close()


def is_bad_input(exc: BaseException) -> bool:
    """A ConfigError, alone or the only kind in an exception group (a nursery's)."""
    if isinstance(exc, BaseExceptionGroup):
        return all(is_bad_input(e) for e in exc.exceptions)
    return isinstance(exc, ConfigError)


def open_trace_writer(
    path: str | os.PathLike[str] | TraceClaim,
    header: Mapping[str, Any],
    *,
    overwrite: bool = False,
    fsync: bool = False,
) -> TraceWriter:
    """Claim ``path`` and write ``header``; use as ``with open_trace_writer(...) as w``."""
    return TraceWriter(path, header, overwrite=overwrite, fsync=fsync)
