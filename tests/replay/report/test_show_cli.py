"""`chaos show`: bad windows and damaged traces are one line and exit 2, before anything is read."""

from __future__ import annotations

from pathlib import Path

import pytest

from chaos import cli
from replay.trace import partial_path
from tests.replay.report.samples import write_payments
from tests.replay.trace.samples import frame_offsets


def chaos(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    try:
        cli.main(list(args))
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize(
    ("window", "message"),
    [
        (["--since", "nan"], "--since must be a finite number of seconds >= 0, got nan"),
        (["--until", "inf"], "--until must be a finite number of seconds >= 0, got inf"),
        (["--since", "-inf"], "--since must be a finite number of seconds >= 0, got -inf"),
        (["--since", "-1"], "--since must be a finite number of seconds >= 0, got -1.0"),
        (
            ["--since", "3", "--until", "2"],
            "--since must be <= --until, got --since 3.0 --until 2.0",
        ),
    ],
)
def test_a_bad_window_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], window: list[str], message: str
) -> None:
    # the trace does not even exist: the window is checked before anything is read
    code, out, err = chaos(capsys, "show", str(tmp_path / "missing.trace"), *window)
    assert (code, out, err) == (2, "", f"chaos: error: {message}\n")


def test_a_window_shows_what_is_inside(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = write_payments(tmp_path / "t.trace")
    code, out, err = chaos(capsys, "show", str(trace), "--since", "0", "--until", "0.5")
    assert (code, err) == (0, "")
    assert "events (" in out
    assert " of " in out.split("events (")[1].split(")")[0]


def test_a_damaged_length_is_exit_2_naming_the_frame(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = bytearray(write_payments(tmp_path / "t.trace").read_bytes())
    start = frame_offsets(bytes(data))[5]
    data[start + 1] ^= 0x08  # the length now points far past the end of the file
    (tmp_path / "t.trace").write_bytes(bytes(data))
    code, out, err = chaos(capsys, "show", str(tmp_path / "t.trace"))
    assert (code, out) == (2, "")
    assert err == (
        f"chaos: error: frame 5 at byte {start} is corrupted (frame header checksum mismatch)\n"
    )


def test_a_killed_runs_partial_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "t.trace"
    write_payments(tmp_path / "killed.trace").rename(partial_path(trace))
    code, _, err = chaos(capsys, "show", str(trace))
    assert code == 2
    assert err == (
        f"chaos: error: cannot read trace {trace}: No such file or directory "
        f"(a run that did not finish left {partial_path(trace)}: read that)\n"
    )
    code, out, err = chaos(capsys, "show", str(partial_path(trace)))
    assert (code, err) == (0, "")
    assert "status    complete" in out
    partial_path(trace).rename(tmp_path / "killed.trace")
    write_payments(trace)  # a complete trace at the final name, then a later run was killed:
    (tmp_path / "killed.trace").rename(partial_path(trace))  # the trace is shown, with a note
    code, out, err = chaos(capsys, "show", str(trace))
    assert code == 0
    assert err == (
        f"chaos: note: {partial_path(trace)} holds the trace of a later run that has not "
        "finished (still running, or killed)\n"
    )
