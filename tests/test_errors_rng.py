"""The ground floor: one exit code per outcome, one seed bound, and importing them loads
nothing else of the project."""

from __future__ import annotations

import subprocess
import sys

import msgpack
import pytest

from ground.errors import (
    EXIT_BAD_INPUT,
    EXIT_HANGUP,
    EXIT_HARNESS,
    EXIT_INTERRUPTED,
    EXIT_TERMINATED,
    ChaosError,
    ConfigError,
    ServiceError,
    TraceFormatError,
    exit_code_for,
)
from ground.rng import SEED_MAX, check_seed


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (ConfigError("bad flag"), EXIT_BAD_INPUT),
        (TraceFormatError("bad magic"), EXIT_BAD_INPUT),
        (ServiceError("postgres died"), EXIT_HARNESS),
        (ChaosError("anything else"), EXIT_HARNESS),
        (KeyboardInterrupt(), EXIT_INTERRUPTED),
        (RuntimeError("a bug"), EXIT_HARNESS),
        # a nursery's group: its first ChaosError decides, wherever it sits
        (ExceptionGroup("g", [RuntimeError("x"), ConfigError("late")]), EXIT_BAD_INPUT),
        (
            BaseExceptionGroup("g", [ExceptionGroup("inner", [TraceFormatError("t")])]),
            EXIT_BAD_INPUT,
        ),
        (ExceptionGroup("g", [ServiceError("a"), ConfigError("b")]), EXIT_HARNESS),
        (BaseExceptionGroup("g", [KeyboardInterrupt()]), EXIT_INTERRUPTED),
    ],
)
def test_exit_code_for(error: BaseException, code: int) -> None:
    assert exit_code_for(error) == code


def test_signal_exit_codes_follow_the_shell_convention() -> None:
    assert (EXIT_HANGUP, EXIT_INTERRUPTED, EXIT_TERMINATED) == (129, 130, 143)


@pytest.mark.parametrize("seed", [0, 7, SEED_MAX])
def test_seeds_in_range_round_trip_through_msgpack(seed: int) -> None:
    assert check_seed(seed) == seed
    assert msgpack.unpackb(msgpack.packb(seed)) == seed


@pytest.mark.parametrize(
    ("seed", "message"),
    [
        (-1, "--first-seed must be between 0 and 2**63-1, got -1"),
        (SEED_MAX + 1, f"--first-seed must be between 0 and 2**63-1, got {SEED_MAX + 1}"),
        ("7", "--first-seed must be an integer, got '7'"),
        (True, "--first-seed must be an integer, got True"),
    ],
)
def test_a_bad_seed_is_one_config_error_naming_what(seed: object, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        check_seed(seed, "--first-seed")
    assert str(caught.value) == message


def test_the_ground_floor_loads_nothing_else_of_the_project() -> None:
    code = (
        "import sys, ground.errors, ground.rng; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('ground', 'chaos', 'faults', 'replay', 'invariants', 'scenarios')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "['ground', 'ground.errors', 'ground.rng']"
