"""The public surface of replay.trace and replay.timeline is what we meant to export."""

from __future__ import annotations

import replay.timeline
import replay.trace


def test_trace_surface() -> None:
    assert sorted(replay.trace.__all__) == sorted(
        [
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
    )
    for name in replay.trace.__all__:
        assert hasattr(replay.trace, name), name


def test_timeline_surface() -> None:
    assert sorted(replay.timeline.__all__) == ["FaultSpan", "fault_spans", "render_timeline"]


def test_format_constants() -> None:
    assert replay.trace.MAGIC == b"CHAOSTR\x00"
    assert replay.trace.FORMAT_VERSION == 1
    assert replay.trace.FRAME_TYPES == ("header", "schedule", "event", "verdict", "end")
    assert replay.trace.EVENT_TYPES == ("invoke", "ok", "fail", "info")
