"""What the public names of replay.trace do (in place of a test that restates ``__all__``)."""

from __future__ import annotations

import struct
from pathlib import Path

from replay.trace import (
    EVENT_TYPES,
    FORMAT_VERSION,
    FRAME_TYPES,
    MAGIC,
    READ_VERSIONS,
    is_infrastructure,
    iter_frames,
    read_trace,
)
from tests.replay.trace.samples import frame_offsets, write_small_trace


def test_a_written_trace_starts_with_the_magic_and_the_current_version(tmp_path: Path) -> None:
    path = tmp_path / "t.trace"
    write_small_trace(path)
    data = path.read_bytes()
    assert data[:8] == MAGIC
    assert struct.unpack(">H", data[8:10]) == (FORMAT_VERSION,)
    assert FORMAT_VERSION in READ_VERSIONS
    assert read_trace(path).version == FORMAT_VERSION


def test_frames_stream_in_file_order_with_their_offsets(tmp_path: Path) -> None:
    path = tmp_path / "t.trace"
    write_small_trace(path, n_events=2)
    frames = list(iter_frames(path))
    assert [f.type for f in frames] == ["header", "schedule", "event", "event", "verdict", "end"]
    assert {f.type for f in frames} == set(FRAME_TYPES)
    assert [f.offset for f in frames] == frame_offsets(path.read_bytes())
    assert [f.index for f in frames] == list(range(6))
    assert {f.payload["type"] for f in frames if f.type == "event"} <= set(EVENT_TYPES)


def test_infrastructure_is_the_harness_side() -> None:
    for process in ("nemesis", "proxy", "harness", "service:postgres"):
        assert is_infrastructure(process), process
    for process in ("producer", "consumer", 0, 3):
        assert not is_infrastructure(process), process
