"""`chaos replay` on traces it must refuse, and the checks it makes before running anything."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from chaos import cli
from chaos.replay import prepare_replay, replay_path
from chaos.scenario import load_scenario
from faults.schedule import generate
from ground.errors import ConfigError, TraceFormatError
from replay.trace import TraceWriter, build_header, claim_trace, read_trace
from tests.replay.trace.samples import raw_frame, raw_preamble


def payments_header(**changes: Any) -> dict[str, Any]:
    scenario = load_scenario("payments")
    header = build_header("payments", scenario.content_hash(), "golden", 7)
    header.update(changes)
    return header


def payments_schedule(seed: int = 7) -> dict[str, Any]:
    return generate(load_scenario("payments").fault_space("golden"), seed).to_dict()


def write_trace(
    path: Path,
    header: dict[str, Any] | None = None,
    schedule: dict[str, Any] | None = None,
    *,
    complete: bool = True,
) -> Path:
    """A replayable payments trace (no run behind it): header, schedule, events, verdicts."""
    with TraceWriter(path, header or payments_header()) as writer:
        writer.write_schedule(schedule or payments_schedule())
        for n in range(3):
            writer.write_event({"process": "producer", "type": "invoke", "f": "publish",
                                "time_ns": n, "value": f"o-{n}"})  # fmt: skip
        if complete:
            writer.write_verdict({"name": "exactly_once", "valid": True, "explanation": "ok"})
            writer.write_end("held", 0, 1.0)
    return path


def chaos_exit(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as info:
        cli.main(["replay", *args])
    out, err = capsys.readouterr()
    assert isinstance(info.value.code, int)
    return info.value.code, out, err


def assert_one_line_error(err: str, *fragments: str) -> None:
    lines = [line for line in err.splitlines() if line.startswith("chaos: error:")]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    for fragment in fragments:
        assert fragment in lines[0]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "trace is empty"),
        (b"this is not a trace at all\n", "not a chaos trace"),
        (raw_preamble() + raw_frame({"t": "header"})[:7], "no header frame"),
        (raw_preamble(9) + raw_frame({"t": "header"}), "format version 9"),
        (raw_preamble() + raw_frame({"t": "header", "scenario_id": "payments"}), "no schedule"),
    ],
    ids=["empty", "garbage", "truncated", "other-version", "header-only"],
)
def test_bad_traces_are_one_line_errors_with_exit_2(
    content: bytes, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "bad.trace"
    trace.write_bytes(content)
    code, out, err = chaos_exit(capsys, str(trace))
    assert code == 2
    assert out == ""
    assert_one_line_error(err, message)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.trace"]  # nothing replayed


def test_a_corrupted_frame_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = write_trace(tmp_path / "t.trace")
    data = bytearray(trace.read_bytes())
    data[-20] ^= 0xFF  # inside the end frame: its checksum no longer matches
    trace.write_bytes(bytes(data))
    code, _, err = chaos_exit(capsys, str(trace))
    assert code == 2
    assert_one_line_error(err, "checksum")


def test_a_missing_file_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = chaos_exit(capsys, str(tmp_path / "nope.trace"))
    assert code == 2
    assert_one_line_error(err, "cannot read trace", "nope.trace")


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"scenario_id": "no_such_scenario"}, "is not a built-in"),
        ({"variant": "teleporting"}, "no variant 'teleporting'"),
        ({"seed": "seven"}, "no valid seed"),
    ],
)
def test_a_header_naming_what_is_not_here_is_an_error(
    changes: dict[str, Any], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = write_trace(tmp_path / "t.trace", payments_header(**changes))
    code, _, err = chaos_exit(capsys, str(trace))
    assert code == 2
    assert_one_line_error(err, message)


def test_an_invalid_schedule_is_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    schedule = {**payments_schedule(), "events": [{"id": "f0", "kind": "meteor"}]}
    trace = write_trace(tmp_path / "t.trace", schedule=schedule)
    code, _, err = chaos_exit(capsys, str(trace))
    assert code == 2
    assert_one_line_error(err, "invalid fault schedule")


def test_times_must_be_positive(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = write_trace(tmp_path / "t.trace")
    code, _, err = chaos_exit(capsys, str(trace), "--times", "0")
    assert code == 2
    assert_one_line_error(err, "--times")


def test_strict_refuses_a_changed_scenario_before_running(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = write_trace(tmp_path / "t.trace", payments_header(scenario_hash="0" * 64))
    code, out, err = chaos_exit(capsys, str(trace), "--strict")
    assert code == 2
    assert out == ""
    assert_one_line_error(err, "--strict", "scenario payments changed", "000000000000")
    assert not replay_path(trace, 1).exists()


def test_drift_is_listed_without_strict(tmp_path: Path) -> None:
    header = payments_header(scenario_hash="0" * 64)
    header["versions"] = {**header["versions"], "trio": "0.0.1"}
    plan = prepare_replay(write_trace(tmp_path / "t.trace", header))
    assert len(plan.drift) == 2
    assert plan.drift[0].startswith("scenario payments changed since the trace was recorded")
    assert plan.drift[1].startswith("trio: recorded 0.0.1, installed ")
    with pytest.raises(ConfigError, match="--strict"):
        prepare_replay(tmp_path / "t.trace", strict=True)


def test_no_drift_for_a_trace_of_this_environment(tmp_path: Path) -> None:
    plan = prepare_replay(write_trace(tmp_path / "t.trace"))
    assert plan.drift == []
    assert not plan.partial
    assert (plan.seed, plan.variant, plan.scenario.id) == (7, "golden", "payments")


def test_the_schedule_comes_from_the_trace_not_the_seed(tmp_path: Path) -> None:
    other = payments_schedule(seed=123)
    assert other != payments_schedule(seed=7)
    plan = prepare_replay(write_trace(tmp_path / "t.trace", schedule=other))
    assert plan.seed == 7
    assert plan.schedule.to_dict() == other


def test_a_partial_trace_with_its_schedule_can_be_replayed(tmp_path: Path) -> None:
    trace = write_trace(tmp_path / "t.trace", complete=False)
    data = trace.read_bytes()
    trace.write_bytes(data[:-5])  # killed mid-frame: the last event is cut off
    plan = prepare_replay(trace)
    assert plan.partial
    assert read_trace(trace).truncated
    assert len(plan.trace.events) == 2
    assert plan.schedule.to_dict() == payments_schedule()


def test_a_trace_cut_before_its_schedule_cannot_be_replayed(tmp_path: Path) -> None:
    trace = write_trace(tmp_path / "t.trace")
    data = trace.read_bytes()
    header_end = 10 + 12 + int.from_bytes(data[10:14], "big")
    trace.write_bytes(data[: header_end + 12])
    with pytest.raises(TraceFormatError, match="no schedule frame"):
        prepare_replay(trace)


def test_every_replay_path_is_checked_before_the_first_replay(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = write_trace(tmp_path / "t.trace")
    replay_path(trace, 3).write_text("<html>not a trace</html>")
    code, out, err = chaos_exit(capsys, str(trace), "--times", "3")
    assert (code, out) == (2, "")
    assert_one_line_error(err, f"{replay_path(trace, 3)} exists and is not a chaos trace")
    assert not replay_path(trace, 1).exists()
    replay_path(trace, 3).unlink()
    with claim_trace(replay_path(trace, 2)):  # another replay of this trace is writing it
        code, out, err = chaos_exit(capsys, str(trace), "--times", "2")
    assert (code, out) == (2, "")
    assert_one_line_error(err, f"trace {replay_path(trace, 2)} is being written by another run")
    assert not replay_path(trace, 1).exists()


def test_replays_are_written_beside_the_original() -> None:
    original = Path("traces/payments-golden-seed7.trace")
    assert replay_path(original, 1) == Path("traces/payments-golden-seed7.replay-1.trace")
    assert replay_path(Path("/x/run.bin"), 12) == Path("/x/run.bin.replay-12.trace")


def test_a_folder_pack_that_is_gone_names_the_path_looked_for(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    gone = tmp_path / "packs" / "tally"
    header = payments_header(scenario_id="tally", scenario_path=str(gone), scenario_builtin=False)
    trace = write_trace(tmp_path / "t.trace", header)
    code, out, err = chaos_exit(capsys, str(trace))
    assert code == 2
    assert out == ""
    assert_one_line_error(err, f"was loaded from {gone}", str(gone / "scenario.py"), "--scenario")


@pytest.mark.parametrize(
    ("scenario", "message"),
    [("nosuch_pack_dir", "--scenario nosuch_pack_dir: unknown scenario"),
     ("leases", "--scenario leases is scenario 'leases', the trace recorded 'payments'")],
    ids=["missing", "other-id"],
)  # fmt: skip
def test_scenario_override_is_checked(
    scenario: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = write_trace(tmp_path / "t.trace")
    code, _, err = chaos_exit(capsys, str(trace), "--scenario", scenario)
    assert code == 2
    assert_one_line_error(err, message)
