"""The pytest plugin: a test reads like the invariant it checks (DESIGN.md's example)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from chaos.errors import ConfigError
from chaos.run import RunResult
from chaos.scenario import load_scenario
from chaos.testing import ChaosEnv
from faults.model import FaultSchedule
from invariants import Verdict

pytest_plugins = ["pytester"]


@pytest.mark.slow
@pytest.mark.chaos(scenario="payments", seed=7)
def test_no_duplicate_side_effects(env: ChaosEnv) -> None:
    env.inject_fault("redeliver_message", count=3)
    env.run_until_settled(timeout=30)
    assert env.side_effect_count("charge_customer") == 1
    assert env.final_state_is_consistent()
    # The fault really happened: one message came back three times.
    dropped = [e for e in env.history if e["f"] == "frame_dropped"]
    assert len(dropped) == 3
    assert env.trace.exists()


@pytest.mark.slow
@pytest.mark.chaos(scenario="payments", variant="no-idempotency", seed=7)
def test_the_defective_variant_charges_twice(chaos_env: ChaosEnv) -> None:
    chaos_env.inject_fault("redeliver", count=1)
    chaos_env.run_until_settled()
    assert chaos_env.side_effect_count("charge_customer") == 2
    counts = chaos_env.side_effects("charge_customer")
    assert sorted(counts.values()).count(2) == 1
    assert not chaos_env.holds("exactly_once")
    assert chaos_env.final_state_is_consistent()


def _env(tmp_path: Path, variant: str = "golden") -> ChaosEnv:
    return ChaosEnv(load_scenario("payments"), variant=variant, out_dir=tmp_path)


def test_a_fault_is_built_with_sensible_defaults(tmp_path: Path) -> None:
    env = _env(tmp_path)
    redeliver = env.inject_fault("redeliver_message", count=2)
    assert str(redeliver.target) == "subject:orders"
    assert redeliver.trigger.type == "on_message"
    partition = env.inject_fault("partition", "consumer-postgres", duration_s=0.5)
    assert partition.trigger.type == "at_time"
    assert partition.id == "f1"


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda e: e.inject_fault("teleport"), "unknown fault kind 'teleport'"),
        (lambda e: e.inject_fault("latency", latency_ms=5), "latency needs a target"),
        (lambda e: e.inject_fault("redeliver", count=0), "count"),
        (lambda e: e.side_effect_count("charge_customer"), "call run_until_settled first"),
    ],
)
def test_bad_use_is_a_config_error(tmp_path: Path, call: object, message: str) -> None:
    env = _env(tmp_path)
    with pytest.raises(ConfigError, match=message):
        call(env)  # type: ignore[operator]


def test_unknown_variant_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="has no variant 'nope'"):
        _env(tmp_path, variant="nope")


PLUGIN_TEST = """
def test_it(env):
    assert env.scenario.id == "payments"
    assert env.variant == "golden"
"""


def _pytest_in(folder: Path, ini: str) -> subprocess.CompletedProcess[str]:
    (folder / "pytest.ini").write_text(f"[pytest]\n{ini}\n")
    (folder / "test_it.py").write_text(PLUGIN_TEST)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_it.py"],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_scenario_comes_from_the_ini_option_when_the_marker_names_none(
    tmp_path: Path,
) -> None:
    done = _pytest_in(tmp_path, "chaos_scenario = payments")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed" in done.stdout


def test_without_a_scenario_the_fixture_is_one_usage_line(tmp_path: Path) -> None:
    done = _pytest_in(tmp_path, "")
    assert done.returncode == 1
    lines = [line for line in done.stdout.splitlines() if "chaos: no scenario" in line]
    assert lines[0] == (
        "chaos: no scenario for test_it.py::test_it: mark the test "
        "@pytest.mark.chaos(scenario=...) or set the ini option chaos_scenario"
    )
    assert "Traceback" not in done.stdout
    assert "pytest_plugin.py" not in done.stdout


def test_final_state_is_consistent_asks_the_scenarios_consistency_invariants(
    tmp_path: Path,
) -> None:
    env = _env(tmp_path, variant="no-idempotency")
    verdicts = [
        Verdict.violated("exactly_once", "charged twice."),
        Verdict.holds("no_lost_messages", "all there."),
        Verdict.holds("consistent_final_state", "balanced."),
    ]
    schedule = FaultSchedule(seed=0, space_hash="h")
    env._result = RunResult("payments", "no-idempotency", 0, schedule, verdicts, tmp_path, True)
    assert env.final_state_is_consistent()  # payments: consistency = consistent_final_state
    verdicts[2] = Verdict.violated("consistent_final_state", "unbalanced.")
    assert not env.final_state_is_consistent()


FAILING_CHAOS_TEST = """
import pytest


@pytest.mark.chaos(scenario={pack!r}, variant="no-dedupe", seed=3)
def test_every_add_counts_once(env):
    env.inject_fault("partition", "client-server", direction="downstream",
                     trigger={{"type": "at_time", "offset_s": 0.3}}, duration_s=0.8)
    env.run_until_settled()
    assert env.holds("counted_once")
"""


@pytest.mark.slow
def test_a_failing_chaos_test_names_its_trace_seed_and_replay_command(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    from tests.doc_pack import write_doc_pack

    pack = write_doc_pack(tmp_path / "tally")
    pytester.makepyfile(FAILING_CHAOS_TEST.format(pack=str(pack)))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*chaos: reproduce this run*",
            "trace:    */tally-no-dedupe-seed3.trace",
            "scenario: * variant: no-dedupe  seed: 3",
            "replay:   chaos replay */tally-no-dedupe-seed3.trace",
        ]
    )
    command = next(line for line in result.outlines if line.startswith("replay:   chaos replay"))
    trace = command.removeprefix("replay:   chaos replay ").strip()
    assert Path(trace).is_file()
    # The command it prints reproduces the failure: the same violation comes back.
    replayed = subprocess.run(
        [sys.executable, "-m", "chaos", "replay", trace],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )  # fmt: skip
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    assert "counted_once VIOLATED" in replayed.stdout


def test_a_passing_or_unstarted_env_adds_nothing(tmp_path: Path) -> None:
    env = _env(tmp_path)
    assert env.reproduction() is None  # never ran: nothing to replay
