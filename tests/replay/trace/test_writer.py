"""TraceWriter: validation, lifecycle, and a killed writer leaving a readable prefix."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pydantic
import pytest

from ground.errors import ConfigError
from replay.trace import (
    MAX_FRAME_BYTES,
    TraceWriter,
    open_trace_writer,
    partial_path,
    read_trace,
)
from tests.replay.trace.samples import SMALL_HEADER, write_small_trace

GOOD_EVENT = {"process": "nemesis", "type": "info", "f": "partition", "time_ns": 1}


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"type": "done"}, "event type must be one of invoke, ok, fail, info, got 'done'"),
        ({"process": None}, "event process must be a str or int, got None"),
        ({"process": True}, "event process must be a str or int, got True"),
        ({"f": 3}, "event f must be a str, got 3"),
        ({"time_ns": 1.5}, "event time_ns must be an int, got 1.5"),
        ({"index": "7"}, "event index must be an int, got '7'"),
        ({"t": "x"}, "event must not use the reserved key 't'"),
        ({"value": object()}, "event frame is not msgpack-serializable: "),
        ({"value": 2**64}, "event frame is not msgpack-serializable: "),
    ],
)
def test_bad_events_are_config_errors(
    tmp_path: Path, changes: dict[str, Any], message: str
) -> None:
    with TraceWriter(tmp_path / "t.chtrace", SMALL_HEADER) as w:
        with pytest.raises(ConfigError) as info:
            w.write_event({**GOOD_EVENT, **changes})
        assert str(info.value).startswith(message)
        assert w.frames_written == 1
    assert read_trace(tmp_path / "t.chtrace").events == []


def test_bad_verdicts_end_and_schedule(tmp_path: Path) -> None:
    with TraceWriter(tmp_path / "t.chtrace", SMALL_HEADER) as w:
        with pytest.raises(ConfigError, match="verdict valid must be True, False or 'unknown'"):
            w.write_verdict({"name": "x", "valid": "yes"})
        with pytest.raises(ConfigError, match="verdict name must be a str"):
            w.write_verdict({"valid": True})
        with pytest.raises(ConfigError, match="end exit_code must be an int"):
            w.write_end("pass", "0", 1.0)  # type: ignore[arg-type]
        with pytest.raises(ConfigError, match="end wall_time_s must be >= 0, got -1"):
            w.write_end("pass", 0, -1)
        with pytest.raises(ConfigError, match="schedule must be a mapping, got list"):
            w.write_schedule([1, 2])


def test_lifecycle_misuse(tmp_path: Path) -> None:
    path = tmp_path / "t.chtrace"
    with open_trace_writer(path, SMALL_HEADER) as w:
        w.write_schedule({"faults": []})
        with pytest.raises(ValueError, match="already has a schedule frame"):
            w.write_schedule({"faults": []})
        w.write_end("pass", 0, 0.1)
        with pytest.raises(ValueError, match="already has its end frame"):
            w.write_event(GOOD_EVENT)
    assert w.closed
    w.close()  # idempotent
    with pytest.raises(ValueError, match="trace writer is closed"):
        w.write_verdict({"name": "x", "valid": True})
    trace = read_trace(path)
    assert not trace.partial
    assert trace.frames == 3


def test_existing_trace_is_replaced_only_when_asked(tmp_path: Path) -> None:
    path = tmp_path / "t.chtrace"
    with TraceWriter(path, {**SMALL_HEADER, "seed": 1}):
        pass
    before = path.read_bytes()
    with pytest.raises(ConfigError, match=r"^trace file already exists: "):
        TraceWriter(path, SMALL_HEADER)
    assert path.read_bytes() == before
    assert not partial_path(path).exists()
    with TraceWriter(path, SMALL_HEADER, overwrite=True):
        pass
    assert read_trace(path).header == SMALL_HEADER


def test_a_file_that_is_not_a_trace_is_never_replaced(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_bytes(b"precious")
    with pytest.raises(ConfigError, match=r"exists and is not a chaos trace; refusing to replace"):
        TraceWriter(path, SMALL_HEADER, overwrite=True)
    assert path.read_bytes() == b"precious"
    assert not partial_path(path).exists()


def test_bad_header_creates_no_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="header must not use the reserved key 't'"):
        TraceWriter(tmp_path / "t.chtrace", {"t": 1})
    assert list(tmp_path.iterdir()) == []


def test_the_trace_is_written_aside_and_placed_by_close(tmp_path: Path) -> None:
    path = tmp_path / "t.chtrace"
    with TraceWriter(path, SMALL_HEADER) as w:
        w.write_event(GOOD_EVENT)
        assert w.partial_path == tmp_path / "t.chtrace.partial"
        assert not path.exists()
        assert len(read_trace(w.partial_path).events) == 1  # readable while it is written
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.chtrace"]
    assert len(read_trace(path).events) == 1


def test_a_refused_run_leaves_no_trace_and_keeps_the_old_one(tmp_path: Path) -> None:
    path = tmp_path / "t.chtrace"
    write_small_trace(path)
    good = path.read_bytes()
    w = TraceWriter(path, SMALL_HEADER, overwrite=True)
    w.write_end("bad input", 2, 0.0)
    w.close()
    assert path.read_bytes() == good
    assert not partial_path(path).exists()


def test_a_config_error_leaving_the_with_block_discards_the_trace(tmp_path: Path) -> None:
    path = tmp_path / "new" / "t.chtrace"
    with pytest.raises(ConfigError, match="bad nats url"), TraceWriter(path, SMALL_HEADER):
        raise ConfigError("bad nats url")
    assert list(tmp_path.iterdir()) == []  # the folder it created is gone too


def test_a_grouped_config_error_discards_too(tmp_path: Path) -> None:
    path = tmp_path / "t.chtrace"
    with pytest.raises(ExceptionGroup), TraceWriter(path, SMALL_HEADER):
        raise ExceptionGroup("nursery", [ConfigError("bad dsn"), ConfigError("bad url")])
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(ExceptionGroup), TraceWriter(path, SMALL_HEADER):
        raise ExceptionGroup("nursery", [ConfigError("bad dsn"), RuntimeError("crash")])
    assert read_trace(path).partial  # a crash among them: the trace is kept


def test_discard_keeps_what_was_at_the_path(tmp_path: Path) -> None:
    path = tmp_path / "t.chtrace"
    write_small_trace(path)
    good = path.read_bytes()
    with TraceWriter(path, SMALL_HEADER, overwrite=True) as w:
        w.write_event(GOOD_EVENT)
        w.discard()
        with pytest.raises(ValueError, match="trace writer is closed"):
            w.write_event(GOOD_EVENT)
    assert path.read_bytes() == good
    assert not partial_path(path).exists()


def test_parent_directories_are_created(tmp_path: Path) -> None:
    path = tmp_path / "traces" / "seed-7" / "run.chtrace"
    with TraceWriter(path, SMALL_HEADER):
        pass
    assert read_trace(path).frames == 1


class Verdict(pydantic.BaseModel):
    name: str
    valid: bool | str
    explanation: str


def test_pydantic_models_are_dumped(tmp_path: Path) -> None:
    path = tmp_path / "t.chtrace"
    with TraceWriter(path, SMALL_HEADER) as w:
        w.write_verdict(Verdict(name="exactly_once", valid="unknown", explanation="crashed"))
    assert read_trace(path).verdicts == [
        {"name": "exactly_once", "valid": "unknown", "explanation": "crashed"}
    ]


def test_extension_frames(tmp_path: Path) -> None:
    path = tmp_path / "t.chtrace"
    with TraceWriter(path, SMALL_HEADER) as w:
        w.write_frame("note", {"text": "settled"})
        with pytest.raises(ConfigError, match="extension frame type must be a new name"):
            w.write_frame("event", GOOD_EVENT)
    assert read_trace(path).other == [{"t": "note", "text": "settled"}]


def test_oversized_frame_is_refused(tmp_path: Path) -> None:
    with TraceWriter(tmp_path / "t.chtrace", SMALL_HEADER) as w:
        with pytest.raises(ConfigError, match=r"event frame is \d+ bytes, over the 64 MiB"):
            w.write_event({**GOOD_EVENT, "value": bytes(MAX_FRAME_BYTES)})


def test_exception_in_the_with_block_leaves_a_partial_trace(tmp_path: Path) -> None:
    path = tmp_path / "t.chtrace"

    def crashing_run() -> None:
        with TraceWriter(path, SMALL_HEADER) as w:
            w.write_event(GOOD_EVENT)
            raise RuntimeError("run crashed")

    with pytest.raises(RuntimeError, match="run crashed"):
        crashing_run()
    trace = read_trace(path)
    assert trace.partial
    assert not trace.truncated
    assert len(trace.events) == 1


def test_killed_writer_leaves_every_flushed_frame_in_its_partial(tmp_path: Path) -> None:
    path = tmp_path / "killed.chtrace"
    script = textwrap.dedent(
        f"""
        import sys, time
        from replay.trace import TraceWriter
        w = TraceWriter({str(path)!r}, {{"scenario_id": "k"}})
        for i in range(25):
            w.write_event({{"process": 0, "type": "invoke", "f": "w", "time_ns": i}})
        print("written", flush=True)
        time.sleep(60)
        """
    )
    with subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, text=True
    ) as child:
        try:
            assert child.stdout is not None
            assert child.stdout.readline().strip() == "written"
        finally:
            child.kill()
            child.wait()
    assert not path.exists()
    trace = read_trace(partial_path(path))
    assert trace.partial
    assert [e["time_ns"] for e in trace.events] == list(range(25))
    # the next writer of that path takes the dead writer's claim over
    with TraceWriter(path, SMALL_HEADER):
        pass
    assert read_trace(path).header == SMALL_HEADER
    assert not partial_path(path).exists()
