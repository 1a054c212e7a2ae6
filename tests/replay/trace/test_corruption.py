"""The reader on damaged input: only TraceError subclasses, precise messages, readable prefixes."""

from __future__ import annotations

import tempfile
from pathlib import Path

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ground.errors import TraceError, TraceFormatError, TraceVersionError
from replay.trace import Trace, read_trace
from tests.replay.trace.samples import (
    frame_offsets,
    raw_body_frame,
    raw_frame,
    raw_frame_v1,
    raw_header,
    raw_preamble,
    write_small_trace,
)


def _read_bytes(data: bytes) -> Trace:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "t.trace"
        path.write_bytes(data)
        return read_trace(path)


def _read_or_error(data: bytes) -> Trace | TraceError:
    try:
        return _read_bytes(data)
    except TraceError as exc:
        return exc


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_random_bytes_never_crash_the_reader(data: bytes) -> None:
    _read_or_error(data)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_random_frames_after_a_valid_preamble_never_crash_the_reader(data: bytes) -> None:
    _read_or_error(raw_preamble() + raw_frame({"t": "header"}) + data)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=100))
def test_checksummed_garbage_payloads_are_format_errors(body: bytes) -> None:
    frame = raw_body_frame(body)
    result = _read_or_error(raw_preamble() + raw_frame({"t": "header"}) + frame)
    if isinstance(result, TraceError):
        assert isinstance(result, TraceFormatError)
        assert str(result).startswith("frame 1 at byte ")


def _bodies(trace: Trace) -> list[tuple[str, object]]:
    """The non-header frames of a trace written in schedule, events, verdicts, end order."""
    return [
        *([("schedule", trace.schedule)] if trace.schedule is not None else []),
        *[("event", e) for e in trace.events],
        *[("verdict", v) for v in trace.verdicts],
        *([("end", trace.end)] if trace.end is not None else []),
    ]


def test_truncation_at_every_offset_gives_a_prefix_or_an_error(tmp_path: Path) -> None:
    path = tmp_path / "full.trace"
    write_small_trace(path, n_events=3)
    data = path.read_bytes()
    full = read_trace(path)
    offsets = frame_offsets(data)
    assert len(offsets) == full.frames == 7
    all_frames = _bodies(full)
    for cut in range(len(data) + 1):
        result = _read_or_error(data[:cut])
        whole = sum(1 for end in [*offsets[1:], len(data)] if end <= cut)
        if whole == 0:
            assert isinstance(result, TraceFormatError), cut
            continue
        assert isinstance(result, Trace), (cut, result)
        assert result.frames == whole
        assert result.header == full.header
        assert result.truncated is (cut not in offsets and cut != len(data))
        assert result.partial is (cut != len(data))
        assert _bodies(result) == all_frames[: whole - 1]


def test_cut_inside_the_last_frame_keeps_every_earlier_frame(tmp_path: Path) -> None:
    path = tmp_path / "full.trace"
    write_small_trace(path, n_events=3)
    data = path.read_bytes()
    last = frame_offsets(data)[-1]
    for cut in (last + 1, last + 8, len(data) - 1):
        trace = _read_bytes(data[:cut])
        assert trace.partial
        assert trace.truncated
        assert trace.end is None
        assert trace.frames == 6
        assert len(trace.events) == 3
        assert len(trace.verdicts) == 1


def test_flipped_byte_in_a_middle_frame_names_the_frame(tmp_path: Path) -> None:
    path = tmp_path / "full.trace"
    write_small_trace(path, n_events=3)
    data = path.read_bytes()
    offsets = frame_offsets(data)
    index = 3
    start, end = offsets[index], offsets[index + 1]
    for pos in range(start, end):
        damaged = bytearray(data)
        damaged[pos] ^= 0x40
        with pytest.raises(TraceFormatError) as info:
            _read_bytes(bytes(damaged))
        why = "frame header checksum mismatch" if pos < start + 12 else "checksum mismatch"
        assert str(info.value) == f"frame 3 at byte {start} is corrupted ({why})", pos


def test_a_damaged_length_is_corruption_not_a_cut_off_end(tmp_path: Path) -> None:
    path = tmp_path / "full.trace"
    write_small_trace(path, n_events=3)
    data = path.read_bytes()
    start = frame_offsets(data)[3]
    for pos in range(start, start + 4):
        for bit in (0x01, 0x80):
            damaged = bytearray(data)
            damaged[pos] ^= bit
            with pytest.raises(TraceFormatError) as info:
                _read_bytes(bytes(damaged))
            message = f"frame 3 at byte {start} is corrupted (frame header checksum mismatch)"
            assert str(info.value) == message


def test_version_1_traces_are_still_read() -> None:
    data = raw_preamble(1) + raw_frame_v1({"t": "header", "seed": 7})
    data += raw_frame_v1({"t": "event", "process": 0, "type": "invoke", "f": "w", "time_ns": 1})
    data += raw_frame_v1({"t": "end", "outcome": "held", "exit_code": 0, "wall_time_s": 0.1})
    trace = _read_bytes(data)
    assert (trace.version, trace.header, trace.frames, trace.partial) == (1, {"seed": 7}, 3, False)
    assert trace.events == [{"process": 0, "type": "invoke", "f": "w", "time_ns": 1}]
    cut = _read_bytes(data[:-3])
    assert (cut.truncated, cut.frames) == (True, 2)


def test_empty_file() -> None:
    with pytest.raises(TraceFormatError, match=r"^trace is empty$"):
        _read_bytes(b"")


def test_bad_magic() -> None:
    with pytest.raises(TraceFormatError, match=r"^not a chaos trace \(bad magic\)$"):
        _read_bytes(b"PK\x03\x04" + bytes(40))


def test_other_format_version() -> None:
    with pytest.raises(TraceVersionError) as info:
        _read_bytes(raw_preamble(9) + raw_frame({"t": "header"}))
    assert str(info.value) == "trace format version 9 is not supported (this harness reads 1 and 2)"


def test_missing_file_is_a_trace_error(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match=r"^cannot read trace .*missing\.trace: "):
        read_trace(tmp_path / "missing.trace")


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ([1, 2], "frame 1 at byte 32 is not a map (got list)"),
        ({"x": 1}, "frame 1 at byte 32 has no frame type (missing 't' key)"),
        ({"t": 5}, "frame 1 at byte 32 has no frame type (missing 't' key)"),
        ({"t": "header"}, "frame 1 at byte 32 is a second 'header' frame"),
    ],
    ids=["list", "no-t", "t-not-str", "second-header"],
)
def test_malformed_frames(payload: object, message: str) -> None:
    data = raw_preamble() + raw_frame({"t": "header"}) + raw_frame(payload)
    assert len(raw_preamble() + raw_frame({"t": "header"})) == 32
    with pytest.raises(TraceFormatError) as info:
        _read_bytes(data)
    assert str(info.value) == message


def test_payload_with_trailing_bytes() -> None:
    frame = raw_body_frame(msgpack.packb({"t": "event"}) + b"\x00")
    with pytest.raises(TraceFormatError) as info:
        _read_bytes(raw_preamble() + raw_frame({"t": "header"}) + frame)
    assert str(info.value) == "frame 1 at byte 32 is not valid msgpack (trailing bytes)"


def test_first_frame_must_be_the_header() -> None:
    with pytest.raises(TraceFormatError, match=r"^frame 0 at byte 10 is a 'event' frame"):
        _read_bytes(raw_preamble() + raw_frame({"t": "event"}))


def test_frames_after_end_and_second_schedule_are_rejected() -> None:
    head = raw_preamble() + raw_frame({"t": "header"})
    with pytest.raises(TraceFormatError, match=r"^frame 2 .* after the 'end' frame$"):
        _read_bytes(head + raw_frame({"t": "end"}) + raw_frame({"t": "event"}))
    with pytest.raises(TraceFormatError, match=r"^frame 2 .* second 'schedule' frame$"):
        _read_bytes(head + raw_frame({"t": "schedule"}) + raw_frame({"t": "schedule"}))


def test_huge_length_prefix_is_refused_without_allocating() -> None:
    head = raw_preamble() + raw_frame({"t": "header"})
    with pytest.raises(TraceFormatError, match=r"^frame 1 at byte 32 is corrupted \(length"):
        _read_bytes(head + raw_header(0xFFFFFFFF, 0) + b"xx")
    # Under the cap but past the end of the file: a torn final frame, not a read of 60 MiB.
    trace = _read_bytes(head + raw_header(60 << 20, 0) + b"xx")
    assert trace.truncated
    assert trace.frames == 1


def test_unknown_frame_types_are_kept_for_forward_compatibility() -> None:
    data = raw_preamble() + raw_frame({"t": "header"}) + raw_frame({"t": "note", "text": "hi"})
    trace = _read_bytes(data)
    assert trace.other == [{"t": "note", "text": "hi"}]
    assert trace.frames == 2
