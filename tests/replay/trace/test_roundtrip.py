"""Round trip: whatever the writer records, the reader gives back equal."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from replay.trace import TraceWriter, build_header, iter_frames, read_trace

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False)
    | st.text()
    | st.binary()
)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.text() | st.integers(-(2**31), 2**31), inner, max_size=4)
    ),
    max_leaves=12,
)
extra_fields = st.dictionaries(
    st.text().filter(lambda k: k not in ("t", "type", "process", "f", "time_ns", "index")),
    values,
    max_size=3,
)
events = st.builds(
    lambda process, kind, f, t, value, error, extra: {
        **extra,
        "process": process,
        "type": kind,
        "f": f,
        "time_ns": t,
        "value": value,
        "error": error,
    },
    st.sampled_from(["nemesis", "proxy", "service:pg"]) | st.integers(0, 10),
    st.sampled_from(["invoke", "ok", "fail", "info"]),
    st.text(max_size=10),
    st.integers(min_value=0, max_value=2**62),
    values,
    values,
    extra_fields,
)
verdicts = st.builds(
    lambda name, valid, extra: {**extra, "name": name, "valid": valid},
    st.text(max_size=10),
    st.sampled_from([True, False, "unknown"]),
    extra_fields,
)
frame_plans = st.lists(
    st.one_of(events.map(lambda e: ("event", e)), verdicts.map(lambda v: ("verdict", v))),
    max_size=8,
)


@settings(max_examples=60, deadline=None)
@given(
    header_extra=extra_fields.filter(lambda d: not d.keys() & {"scenario_id", "seed"}),
    schedule=st.none() | st.dictionaries(st.text().filter(lambda k: k != "t"), values),
    plan=frame_plans,
    # exit code 2 (bad input) is left out: such a trace is discarded (test_writer.py)
    end=st.none()
    | st.tuples(
        st.text(min_size=1), st.integers(-5, 5).filter(lambda c: c != 2), st.floats(0, 1e6)
    ),
)
def test_frames_written_read_back_equal(
    header_extra: dict[str, Any],
    schedule: dict[str, Any] | None,
    plan: list[tuple[str, dict[str, Any]]],
    end: tuple[str, int, float] | None,
) -> None:
    header = {**header_extra, "scenario_id": "s", "seed": 1}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "t.trace"
        written: list[dict[str, Any]] = []
        verdicts_written: list[dict[str, Any]] = []
        with TraceWriter(path, header) as w:
            if schedule is not None:
                w.write_schedule(schedule)
            for kind, body in plan:
                if kind == "event":
                    written.append(w.write_event(body))
                else:
                    w.write_verdict(body)
                    verdicts_written.append(body)
            if end is not None:
                w.write_end(*end)
            frames_written = w.frames_written
        trace = read_trace(path)
        streamed = [f.payload for f in iter_frames(path)]

    assert trace.header == header
    assert trace.schedule == schedule
    assert trace.events == written
    assert [e["index"] for e in trace.events] == list(range(len(written)))
    assert trace.verdicts == verdicts_written
    assert trace.frames == frames_written == len(streamed)
    assert trace.partial is (end is None)
    assert not trace.truncated
    if end is not None:
        assert trace.end == {"outcome": end[0], "exit_code": end[1], "wall_time_s": end[2]}
    assert streamed[0] == {"t": "header", **header}


def test_built_header_round_trips_and_event_fields_are_filled(tmp_path: Path) -> None:
    header = build_header("demo", "sha256:00", "golden", 7, extra={"argv": ["chaos", "run"]})
    path = tmp_path / "run.trace"
    with TraceWriter(path, header) as w:
        stored = w.write_event({"process": "proxy", "type": "info", "f": "draw", "time_ns": 5})
    assert stored == {
        "process": "proxy",
        "type": "info",
        "f": "draw",
        "time_ns": 5,
        "index": 0,
        "value": None,
        "error": None,
    }
    trace = read_trace(path)
    assert trace.header == header
    assert trace.events == [stored]
    assert trace.partial
    assert trace.end is None
    assert not trace.truncated
