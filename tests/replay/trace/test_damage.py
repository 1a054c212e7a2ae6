"""Property: a changed byte is detected or changes nothing; a cut-off end reads as partial."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from ground.errors import TraceError, TraceFormatError
from replay.trace import Frame, TraceWriter, iter_frames, read_trace
from tests.replay.trace.samples import SMALL_HEADER, frame_offsets, write_small_trace

texts = st.text(max_size=12)
values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**40), 2**40) | texts | st.binary(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
    max_leaves=6,
)
events = st.fixed_dictionaries(
    {
        "process": st.sampled_from(["nemesis", "proxy", "producer"]) | st.integers(0, 3),
        "type": st.sampled_from(["invoke", "ok", "fail", "info"]),
        "f": texts,
        "time_ns": st.integers(0, 2**62),
        "value": values,
    }
)
verdicts = st.fixed_dictionaries(
    {"name": texts, "valid": st.sampled_from([True, False, "unknown"]), "evidence": values}
)


@st.composite
def traces(draw: st.DrawFn) -> bytes:
    """The bytes of a trace with a schedule, events, verdicts and (maybe) an end frame."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "t.trace"
        with TraceWriter(path, SMALL_HEADER) as writer:
            if draw(st.booleans()):
                writer.write_schedule({"events": draw(st.lists(values, max_size=2))})
            for event in draw(st.lists(events, max_size=6)):
                writer.write_event(event)
            for verdict in draw(st.lists(verdicts, max_size=2)):
                writer.write_verdict(verdict)
            if draw(st.booleans()):
                writer.write_end("held", 0, 1.5)
        return path.read_bytes()


def frames_of(data: bytes) -> tuple[list[Frame], Any] | TraceError:
    """Every decoded frame and the Trace, or the TraceError reading ``data`` raised."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "t.trace"
        path.write_bytes(data)
        try:
            return list(iter_frames(path)), read_trace(path)
        except TraceError as exc:
            return exc


@settings(max_examples=150, deadline=None)
@given(traces(), st.data())
def test_any_changed_byte_is_detected_or_changes_nothing(data: bytes, pick: st.DataObject) -> None:
    original = frames_of(data)
    assert not isinstance(original, TraceError)
    pos = pick.draw(st.integers(0, len(data) - 1), label="position")
    new = pick.draw(st.integers(0, 255).filter(lambda b: b != data[pos]), label="new byte")
    damaged = frames_of(data[:pos] + bytes([new]) + data[pos + 1 :])
    if isinstance(damaged, TraceError):
        return  # detected: the CLI prints it on one line and exits 2
    frames, trace = damaged
    assert frames == original[0]
    assert trace.partial is original[1].partial
    assert not trace.truncated


@settings(max_examples=100, deadline=None)
@given(traces(), st.data())
def test_a_cut_off_end_reads_as_partial(data: bytes, pick: st.DataObject) -> None:
    whole = frames_of(data)
    assert not isinstance(whole, TraceError)
    frames = whole[0]
    cut = pick.draw(st.integers(0, len(data) - 1), label="cut")
    result = frames_of(data[:cut])
    header_end = frames[1].offset if len(frames) > 1 else len(data)
    if cut < header_end:
        assert isinstance(result, TraceFormatError)
        return
    assert not isinstance(result, TraceError), result
    kept, trace = result
    assert trace.partial
    assert kept == frames[: len(kept)]
    assert trace.truncated is (cut not in [f.offset for f in frames])


def test_every_single_byte_change_of_a_small_trace_is_detected(tmp_path: Path) -> None:
    path = tmp_path / "t.trace"
    write_small_trace(path, n_events=2)
    data = path.read_bytes()
    offsets = [*frame_offsets(data), len(data)]
    for pos in range(len(data)):
        for flip in (0x01, 0x10, 0xFF):
            result = frames_of(data[:pos] + bytes([data[pos] ^ flip]) + data[pos + 1 :])
            assert isinstance(result, TraceError), (pos, flip)
            if pos >= offsets[0]:  # past the preamble: the message names the damaged frame
                index = max(n for n, start in enumerate(offsets) if start <= pos)
                assert str(result).startswith(f"frame {index} at byte {offsets[index]} "), pos
