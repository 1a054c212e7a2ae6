"""claim_trace: one live writer per path, refused before writing; a dead writer's is taken over."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ground.errors import ConfigError, TraceError
from replay.trace import (
    TraceWriter,
    claim_trace,
    is_trace_file,
    partial_path,
    read_trace,
)
from tests.replay.trace.samples import SMALL_HEADER, write_small_trace


def test_a_second_writer_of_a_live_path_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "t.trace"
    with TraceWriter(path, SMALL_HEADER) as first:
        first.write_event({"process": 0, "type": "invoke", "f": "w", "time_ns": 1})
        with pytest.raises(ConfigError) as info:
            TraceWriter(path, SMALL_HEADER, overwrite=True)
        message = str(info.value)
        assert message.startswith(f"trace {path} is being written by another run")
        if Path("/proc/locks").exists():
            assert f"(pid {os.getpid()})" in message
        assert len(read_trace(first.partial_path).events) == 1  # the first one is untouched
    assert len(read_trace(path).events) == 1


def _hold(path: Path) -> subprocess.Popen[str]:
    """A child process that claims ``path`` and waits, until it is killed."""
    script = textwrap.dedent(
        f"""
        import time
        from replay.trace import TraceWriter
        w = TraceWriter({str(path)!r}, {{"scenario_id": "holder"}}, overwrite=True)
        print("claimed", flush=True)
        time.sleep(60)
        """
    )
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "claimed"
    return child


def test_a_claim_held_by_another_process_is_refused_until_it_dies(tmp_path: Path) -> None:
    path = tmp_path / "t.trace"
    write_small_trace(path)
    good = path.read_bytes()
    child = _hold(path)
    try:
        with pytest.raises(ConfigError, match=r"is being written by another run"):
            claim_trace(path)
        assert path.read_bytes() == good  # the refused claim touched nothing
    finally:
        child.kill()
        child.wait()
        assert child.stdout is not None
        child.stdout.close()
    assert read_trace(partial_path(path)).header == {"scenario_id": "holder"}  # killed: partial
    with TraceWriter(path, SMALL_HEADER, overwrite=True):  # the dead holder's claim is taken over
        pass
    assert read_trace(path).header == SMALL_HEADER
    assert not partial_path(path).exists()


@pytest.mark.parametrize(
    ("where", "message"),
    [
        ("folder", "is a directory, not a trace file path"),
        ("not-a-trace", "exists and is not a chaos trace; refusing to replace it"),
        ("special", r"exists and is not a regular file \(a character device\); refusing to "),
        ("partial-suffix", "ends in .partial, the suffix of traces being written"),
        ("under-a-file", "cannot create trace .*/afile/x.trace: .*/afile is not a folder"),
    ],
)
def test_bad_destinations_are_refused_before_writing(
    tmp_path: Path, where: str, message: str
) -> None:
    (tmp_path / "folder").mkdir()
    (tmp_path / "not-a-trace").write_text("<html>")
    (tmp_path / "afile").write_text("x")
    path = {
        "folder": tmp_path / "folder",
        "not-a-trace": tmp_path / "not-a-trace",
        "special": Path("/dev/null"),
        "partial-suffix": tmp_path / "x.trace.partial",
        "under-a-file": tmp_path / "afile" / "x.trace",
    }[where]
    before = sorted(p.name for p in tmp_path.iterdir())
    with pytest.raises(ConfigError, match=message):
        claim_trace(path)
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    assert (tmp_path / "not-a-trace").read_text() == "<html>"


def test_an_empty_file_may_be_replaced(tmp_path: Path) -> None:
    path = tmp_path / "made-by-mktemp"
    path.write_bytes(b"")
    with TraceWriter(path, SMALL_HEADER, overwrite=True):
        pass
    assert read_trace(path).frames == 1


def test_a_discarded_claim_removes_the_folders_it_made(tmp_path: Path) -> None:
    (tmp_path / "kept").mkdir()
    with claim_trace(tmp_path / "kept" / "a" / "b" / "t.trace") as claim:
        assert claim.partial.exists()
    assert [p.name for p in tmp_path.iterdir()] == ["kept"]
    assert list((tmp_path / "kept").iterdir()) == []


def test_place_without_replace_never_clobbers_a_newcomer(tmp_path: Path) -> None:
    path = tmp_path / "t.trace"
    claim = claim_trace(path, replace=False)
    claim.file.write(b"whatever the writer wrote")
    write_small_trace(tmp_path / "other.trace")
    (tmp_path / "other.trace").rename(path)  # someone else placed a trace meanwhile
    good = path.read_bytes()
    with pytest.raises(ConfigError, match=r"already exists: .* \(this trace is left at .*partial"):
        claim.place()
    assert path.read_bytes() == good
    assert claim.partial.read_bytes() == b"whatever the writer wrote"
    assert not claim.active


def test_place_copy_puts_a_finished_trace_in_place(tmp_path: Path) -> None:
    source = tmp_path / "search-tmp" / "run-3.trace"
    write_small_trace(source)
    out = tmp_path / "search.trace"
    claim = claim_trace(out)  # claimed before the search runs anything
    assert claim.place_copy(source) == out
    assert out.read_bytes() == source.read_bytes()
    assert not claim.partial.exists()
    (tmp_path / "page.html").write_text("<html>")
    with claim_trace(out) as again, pytest.raises(ConfigError, match="is not a chaos trace"):
        again.place_copy(tmp_path / "page.html")
    assert out.read_bytes() == source.read_bytes()


def test_a_writer_writes_into_a_claim_taken_earlier(tmp_path: Path) -> None:
    path = tmp_path / "t.trace"
    claim = claim_trace(path)  # e.g. at the start of a command, before its checks and runs
    with pytest.raises(ConfigError, match="being written by another run"):
        claim_trace(path)
    with TraceWriter(claim, SMALL_HEADER) as writer:
        assert writer.path == path
        writer.write_end("held", 0, 0.5)
    assert not claim.active
    assert read_trace(path).end == {"outcome": "held", "exit_code": 0, "wall_time_s": 0.5}


def test_a_placed_claim_cannot_be_used_again(tmp_path: Path) -> None:
    claim = claim_trace(tmp_path / "t.trace")
    claim.place()
    with pytest.raises(ValueError, match="already placed or discarded"):
        claim.place()
    claim.discard()  # idempotent
    assert (tmp_path / "t.trace").exists()


def test_is_trace_file(tmp_path: Path) -> None:
    write_small_trace(tmp_path / "t.trace")
    (tmp_path / "r.html").write_text("<html>")
    assert is_trace_file(tmp_path / "t.trace")
    assert not is_trace_file(tmp_path / "r.html")
    assert not is_trace_file(tmp_path / "missing.trace")
    with claim_trace(tmp_path / "new.trace") as claim:
        assert is_trace_file(claim.partial)  # empty still, but being written


def test_reading_a_missing_trace_names_its_partial(tmp_path: Path) -> None:
    path = tmp_path / "t.trace"
    with pytest.raises(TraceError, match=r"No such file or directory$"):
        read_trace(path)
    write_small_trace(tmp_path / "killed.trace")
    (tmp_path / "killed.trace").rename(partial_path(path))
    with pytest.raises(TraceError) as info:
        read_trace(path)
    assert str(info.value) == (
        f"cannot read trace {path}: No such file or directory "
        f"(a run that did not finish left {partial_path(path)}: read that)"
    )
