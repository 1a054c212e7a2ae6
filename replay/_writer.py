"""TraceWriter: appends checksummed frames to a trace file, flushing after each one."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, BinaryIO

from chaos.errors import ConfigError

from ._fields import FRAME_TYPES, as_mapping, check_end, check_event, check_verdict
from ._framing import encode_frame, encode_preamble


class TraceWriter:
    """Writes one run's trace: header at open, then schedule, events, verdicts and end.

    Every frame is written with a single write and flushed, so a killed run leaves a
    readable prefix. Leaving the ``with`` block closes the file without an end frame
    unless ``write_end`` was called: a trace without one reads as partial.

    >>> with TraceWriter("run.trace", build_header("demo", "sha256:...", "golden", 7)) as w:
    ...     w.write_event({"process": 0, "type": "invoke", "f": "write", "time_ns": 0})
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        header: Mapping[str, Any],
        *,
        overwrite: bool = False,
        fsync: bool = False,
    ) -> None:
        self.path = Path(path)
        self._fsync = fsync
        self._events = 0
        self._frames = 0
        self._schedule_written = False
        self._ended = False
        first = encode_preamble() + encode_frame({"t": "header", **as_mapping(header, "header")})
        self._file = self._create(overwrite)
        try:
            self._append(first)
        except BaseException:
            self._file.close()
            raise

    def _create(self, overwrite: bool) -> BinaryIO:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            return self.path.open("wb" if overwrite else "xb")
        except FileExistsError:
            raise ConfigError(f"trace file already exists: {self.path}") from None
        except OSError as exc:
            raise ConfigError(f"cannot create trace {self.path}: {exc.strerror}") from None

    @property
    def frames_written(self) -> int:
        """How many frames (header included) are on disk."""
        return self._frames

    @property
    def closed(self) -> bool:
        """Whether the file is closed."""
        return self._file.closed

    def _append(self, frame: bytes) -> None:
        self._file.write(frame)
        self._file.flush()
        if self._fsync:
            os.fsync(self._file.fileno())
        self._frames += 1

    def _check_open(self) -> None:
        if self._file.closed:
            raise ValueError("trace writer is closed")
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
        """Record the run's end: after this frame the trace is complete and takes no more."""
        self._check_open()
        check_end(outcome, exit_code, wall_time_s)
        body = as_mapping(extra or {}, "end extra")
        body.update(outcome=outcome, exit_code=exit_code, wall_time_s=float(wall_time_s))
        self._append(encode_frame({"t": "end", **body}))
        self._ended = True

    def close(self) -> None:
        """Flush, sync to disk and close; idempotent."""
        if self._file.closed:
            return
        try:
            self._file.flush()
            os.fsync(self._file.fileno())
        finally:
            self._file.close()

    def __enter__(self) -> TraceWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def open_trace_writer(
    path: str | os.PathLike[str],
    header: Mapping[str, Any],
    *,
    overwrite: bool = False,
    fsync: bool = False,
) -> TraceWriter:
    """Create the trace at ``path`` with ``header``; use as ``with open_trace_writer(...) as w``."""
    return TraceWriter(path, header, overwrite=overwrite, fsync=fsync)
