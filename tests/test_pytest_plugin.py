"""The pytest plugin: a test reads like the invariant it checks (DESIGN.md's example)."""

from __future__ import annotations

from pathlib import Path

import pytest

from chaos.errors import ConfigError
from chaos.scenario import load_scenario
from chaos.testing import ChaosEnv


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
