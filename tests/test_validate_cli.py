"""``chaos validate`` on the command line: bad input exits 2 before anything runs; a real run."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from chaos import cli
from chaos.cli._validate import print_report
from chaos.validate import (
    ERROR,
    NOT_REPRODUCIBLE,
    GoldenCheck,
    Observed,
    ValidationReport,
    VariantCheck,
)

UNDECLARED = """
from scenarios.payments.scenario import Payments


class Undeclared(Payments):
    catches = {}


SCENARIO = Undeclared()
"""


def chaos_exit(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as info:
        cli.main(["validate", *args])
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
    ("args", "fragments"),
    [
        (["nosuch"], ["unknown scenario 'nosuch'"]),
        (["payments", "--seeds", "0"], ["--seeds must be between 1 and", "got 0"]),
        (["payments", "--replays", "0"], ["--replays must be between 1 and", "got 0"]),
        (["payments", "--first-seed", "-1"], ["--first-seed must be between 0"]),
        (["payments", "--seeds", "many"], ["--seeds", "integer"]),
    ],
    ids=["unknown-scenario", "zero-seeds", "zero-replays", "negative-seed", "not-a-number"],
)
def test_bad_input_exits_2_with_one_line(
    args: list[str], fragments: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = chaos_exit(capsys, *args, "--out-dir", str(tmp_path / "traces"))
    assert code == 2
    assert out == ""
    assert_one_line_error(err, *fragments)
    assert not (tmp_path / "traces").exists()  # nothing ran, nothing was written


def test_variant_without_declared_invariant_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "undeclared"
    folder.mkdir()
    (folder / "scenario.py").write_text(UNDECLARED)
    code, _, err = chaos_exit(capsys, str(folder), "--out-dir", str(tmp_path / "traces"))
    assert code == 2
    assert_one_line_error(err, "variant 'no-idempotency' declares no invariant that catches it")
    assert not (tmp_path / "traces").exists()


def test_out_dir_that_is_a_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    file = tmp_path / "taken"
    file.write_text("")
    code, _, err = chaos_exit(capsys, "payments", "--out-dir", str(file))
    assert code == 2
    assert_one_line_error(err, "is a file, not a folder")


ARGS = ("validate", "payments", "--seeds", "2", "--replays", "1", "--json")


@pytest.mark.slow
def test_payments_validates_end_to_end(tmp_path: Path) -> None:
    out_dir = tmp_path / "traces"
    done = subprocess.run(
        [sys.executable, "-m", "chaos", *ARGS, "--out-dir", str(out_dir)],
        capture_output=True,
        text=True,
        timeout=900,  # every variant: its catching run and 3 replays; the golden seeds
        env=os.environ.copy(),
    )
    assert done.returncode == 0, done.stderr + done.stdout
    report = json.loads(done.stdout)
    assert report["scenario"] == "payments"
    assert report["valid"] is True
    assert report["golden"] == {
        **report["golden"],
        "seeds": [1000, 1001],
        "held": True,
        "failures": [],
    }
    variant = report["variants"]["no-idempotency"]
    assert variant["invariant"] == "exactly_once"
    assert variant["caught"] is True
    assert variant["fidelity"] == 1.0
    assert variant["seed"] in (1000, 1001)
    trace = Path(variant["trace"])
    assert trace.parent == out_dir
    assert trace.is_file()
    assert (out_dir / "golden-seed1000.trace").is_file()
    assert (out_dir / "golden-seed1001.trace").is_file()
    for name in ("ack-before-commit", "gateway-retry-no-key", "wall-clock-dedupe"):
        assert report["variants"][name]["caught"] is True, name
    assert trace.with_name(trace.name.removesuffix(".trace") + ".replay-1.trace").is_file()


def test_tables_name_every_seed_variant_result_and_trace(tmp_path: Path) -> None:
    golden = GoldenCheck([1000, 1001])
    golden.runs[1000] = Observed(tmp_path / "golden-seed1000.trace", {"exactly_once": True})
    golden.runs[1001] = Observed(tmp_path / "golden-seed1001.trace", {"exactly_once": False})
    golden.failures.append({"seed": 1001, "reason": "violated"})
    variant = VariantCheck("no-idempotency", "exactly_once", NOT_REPRODUCIBLE, 1000)
    variant.trace = tmp_path / "no-idempotency-seed1000.trace"
    variant.attempts.append({"seed": 1000})
    variant.replays = [
        Observed(tmp_path / "r1.trace", {"exactly_once": False}),
        Observed(tmp_path / "r2.trace", {"exactly_once": True}),
    ]
    variant.other_violations = ["no_lost_messages"]
    report = ValidationReport("payments", golden, {"no-idempotency": variant})
    console = Console(file=io.StringIO(), width=240, highlight=False)
    print_report(report, console)
    assert isinstance(console.file, io.StringIO)
    text = " ".join(console.file.getvalue().split())
    for fragment in (
        "1000", "1001", "VIOLATED", "did NOT hold", "no-idempotency", "not reproducible",
        "1/2", "no_lost_messages", "payments FAILED validation",
    ):  # fmt: skip
        assert fragment in text
    assert report.exit_code == 1


def test_a_harness_error_and_a_run_again_are_printed_with_their_message(tmp_path: Path) -> None:
    golden = GoldenCheck([1000])
    golden.runs[1000] = Observed(tmp_path / "golden-seed1000.trace", {"exactly_once": True})
    variant = VariantCheck("wall-clock-expiry", "exclusive_leases", ERROR, 1000)
    variant.trace = tmp_path / "wall-clock-expiry-seed1000.trace"
    variant.replays = [
        Observed(tmp_path / "r1.trace", {"exclusive_leases": False}),
        Observed(tmp_path / "r2.trace", error="worker-2 not ready after 30s: port in use"),
    ]
    report = ValidationReport("leases", golden, {"wall-clock-expiry": variant})
    report.rerun.append(
        {"what": "replay of x.trace", "error": "lost worker", "trace": "x.harness-error.trace"}
    )
    console = Console(file=io.StringIO(), width=240, highlight=False)
    print_report(report, console)
    assert isinstance(console.file, io.StringIO)
    text = " ".join(console.file.getvalue().split())
    for fragment in (
        "harness error: worker-2 not ready after 30s: port in use",
        "run again after a harness error: replay of x.trace: lost worker "
        "(its trace: x.harness-error.trace)",
        "leases incomplete (harness error)",
    ):
        assert fragment in text
    assert report.exit_code == 3


@pytest.mark.parametrize(
    ("args", "fragment"),
    [([], "give a scenario"), (["payments", "--all"], "not both")],
    ids=["neither", "both"],
)
def test_a_scenario_or_all(
    args: list[str], fragment: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = chaos_exit(capsys, *args)
    assert code == 2
    assert out == ""
    assert_one_line_error(err, fragment)


def _scripted(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int, bool]]:
    """Runs that hold for golden and violate exactly_once for a defect; replays that fail
    late, as a replay that cannot find the pack did."""
    from chaos.cli import _validate as _cli_validate
    from ground.errors import ConfigError

    ran: list[tuple[str, int, bool]] = []

    def fake_run(scenario: object, progress: object = None) -> object:
        async def run(variant: str, seed: int, out: Path, *, faults: bool = True) -> Observed:
            ran.append((variant, seed, faults))
            broken = variant != "golden" and faults
            return Observed(out, {"exactly_once": not broken, "no_lost_messages": True})

        return run

    def fake_replay(progress: object = None, scenario: object = None) -> object:
        async def replay(trace: Path, times: int) -> list[Observed]:
            raise ConfigError(f"cannot replay {trace}: the pack is gone")

        return replay

    monkeypatch.setattr(_cli_validate, "real_run", fake_run)
    monkeypatch.setattr(_cli_validate, "real_replay", fake_replay)
    return ran


def test_a_late_failure_still_prints_what_was_measured(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    ran = _scripted(monkeypatch)
    code, out, err = chaos_exit(
        capsys, "payments", "--seeds", "2", "--replays", "1", "--out-dir", str(tmp_path), "--json",
        "--jobs", "1",  # the scripted runs replace the in-process ones
    )  # fmt: skip
    assert code == 2
    assert_one_line_error(err, "the pack is gone")
    report = json.loads(out)
    assert report["complete"] is False
    assert report["valid"] is False
    assert "the pack is gone" in report["error"]
    assert sorted(report["golden"]["runs"]) == ["1000", "1001"]
    variant = report["variants"]["no-idempotency"]
    assert variant["seed"] == 1000
    assert variant["no_faults"]["verdicts"]["exactly_once"] is True
    assert ("no-idempotency", 1000, False) in ran


def test_a_late_failure_prints_the_partial_tables(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _scripted(monkeypatch)
    code, out, _err = chaos_exit(
        capsys, "payments", "--seeds", "2", "--replays", "1", "--out-dir", str(tmp_path),
        "--jobs", "1",
    )  # fmt: skip
    assert code == 2
    text = " ".join(out.split())
    for fragment in ("1000", "1001", "no-idempotency", "validation stopped early",
                     "the pack is gone", "payments incomplete"):  # fmt: skip
        assert fragment in text


def test_all_validates_every_builtin_pack_in_one_json_object(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from chaos.cli import _validate as _cli_validate
    from chaos.scenario import builtin_scenarios, load_scenario

    ran: list[tuple[str, str, bool]] = []

    def fake_run(scenario: Any, progress: object = None) -> object:
        async def run(variant: str, seed: int, out: Path, *, faults: bool = True) -> Observed:
            ran.append((scenario.id, variant, faults))
            caught = scenario.catches.get(variant) if faults else None
            return Observed(out, {name: name != caught for name in scenario.invariants})

        return run

    def fake_replay(progress: object = None, scenario: Any = None) -> object:
        async def replay(trace: Path, times: int) -> list[Observed]:
            variant = trace.name.split("-seed")[0]
            caught = scenario.catches[variant]
            return [Observed(trace, {caught: False})] * times

        return replay

    monkeypatch.setattr(_cli_validate, "real_run", fake_run)
    monkeypatch.setattr(_cli_validate, "real_replay", fake_replay)
    code, out, _err = chaos_exit(
        capsys, "--all", "--seeds", "2", "--replays", "2", "--out-dir", str(tmp_path), "--json",
        "--jobs", "1",
    )  # fmt: skip
    data = json.loads(out)
    packs = builtin_scenarios()
    assert sorted(data["packs"]) == packs
    for name in packs:
        scenario = load_scenario(name)
        report = data["packs"][name]
        assert report["golden"]["held"] is True
        assert sorted(report["variants"]) == sorted(scenario.catches)
        for variant, check in report["variants"].items():
            assert (name, variant, False) in ran  # each ran once with no fault
            assert check["caught"] is True
            # No fake event carries a declared signal: a pack that declares some fails.
            expected = "diagnosis signals missing" if scenario.signals.get(variant) else "caught"
            assert check["status"] == expected
        assert (tmp_path / name).is_dir()  # --all: DIR/SCENARIO
    any_signals = any(load_scenario(n).signals for n in packs)
    assert code == (1 if any_signals else 0)
    assert data["valid"] is (not any_signals)
