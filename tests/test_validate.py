"""The decisions of ``chaos validate``, with fake runs and replays standing in for the runner."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import pytest

from chaos.errors import ConfigError
from chaos.scenario import Scenario
from chaos.validate import (
    CAUGHT,
    ERROR,
    NOT_CAUGHT,
    NOT_REPRODUCIBLE,
    WRONG_INVARIANT,
    Observed,
    ValidationReport,
    declared_catches,
    validate,
)
from faults.space import FaultSpace

INVARIANTS = ("exactly_once", "no_lost_messages")
HELD = {"exactly_once": True, "no_lost_messages": True}
DUPLICATED = {"exactly_once": False, "no_lost_messages": True}
LOST = {"exactly_once": True, "no_lost_messages": False}


class Toy(Scenario):
    """A scenario that is never run: only its declarations matter here."""

    id = "toy"
    variants: ClassVar[dict[str, str]] = {"golden": "right", "broken": "one fault"}
    invariants = INVARIANTS
    catches: ClassVar[dict[str, str]] = {"broken": "exactly_once"}

    def fault_space(self, variant: str) -> FaultSpace:
        raise NotImplementedError

    async def setup(self, ctx: Any) -> None:
        raise NotImplementedError

    async def workload(self, ctx: Any) -> None:
        raise NotImplementedError

    async def settled(self, ctx: Any) -> bool:
        raise NotImplementedError

    async def final_state(self, ctx: Any) -> dict[str, Any]:
        raise NotImplementedError


class Fake:
    """Runs and replays that return scripted verdicts; records what was asked."""

    def __init__(
        self,
        runs: Mapping[tuple[str, int], Mapping[str, Any] | str],
        replays: list[Mapping[str, Any] | str] | None = None,
        *,
        unsettled: frozenset[int] = frozenset(),
    ) -> None:
        self.scripted = runs
        self.scripted_replays = replays or []
        self.unsettled = unsettled
        self.ran: list[tuple[str, int, Path]] = []
        self.replayed: list[tuple[Path, int]] = []

    @staticmethod
    def _observed(trace: Path, what: Mapping[str, Any] | str, settled: bool = True) -> Observed:
        if isinstance(what, str):
            return Observed(trace, error=what)
        return Observed(trace, dict(what), settled)

    async def run(self, variant: str, seed: int, out: Path) -> Observed:
        self.ran.append((variant, seed, out))
        what = self.scripted.get((variant, seed), HELD)
        return self._observed(out, what, seed not in self.unsettled)

    async def replay(self, trace: Path, times: int) -> list[Observed]:
        self.replayed.append((trace, times))
        script = self.scripted_replays or [DUPLICATED] * times
        return [self._observed(trace.with_suffix(f".r{n}"), w) for n, w in enumerate(script)]


async def check(
    fake: Fake,
    tmp_path: Path,
    scenario: Scenario | None = None,
    *,
    seeds: int = 3,
    replays: int = 2,
) -> ValidationReport:
    return await validate(
        scenario or Toy(),
        seeds=seeds,
        first_seed=1000,
        replays=replays,
        out_dir=tmp_path,
        run=fake.run,
        replay=fake.replay,
    )


async def test_all_good(tmp_path: Path) -> None:
    fake = Fake({("broken", 1001): DUPLICATED})
    report = await check(fake, tmp_path)
    assert report.golden.held
    assert [(v, s) for v, s, _ in fake.ran] == [
        ("golden", 1000),
        ("golden", 1001),
        ("golden", 1002),
        ("broken", 1000),
        ("broken", 1001),  # stops at the first seed that catches it
    ]
    broken = report.variants["broken"]
    assert (broken.status, broken.seed, broken.fidelity) == (CAUGHT, 1001, 1.0)
    assert broken.trace == tmp_path / "broken-seed1001.trace"
    assert fake.replayed == [(tmp_path / "broken-seed1001.trace", 2)]
    assert report.valid
    assert report.exit_code == 0
    data = report.to_json()
    assert data["valid"] is True
    assert data["golden"]["seeds"] == [1000, 1001, 1002]
    assert data["golden"]["failures"] == []
    assert data["variants"]["broken"]["invariant"] == "exactly_once"
    assert data["variants"]["broken"]["caught"] is True
    assert data["variants"]["broken"]["trace"] == str(tmp_path / "broken-seed1001.trace")
    assert data["variants"]["broken"]["other_violations"] == []


async def test_golden_violated_on_one_seed_fails(tmp_path: Path) -> None:
    fake = Fake({("golden", 1002): LOST, ("broken", 1000): DUPLICATED})
    report = await check(fake, tmp_path)
    assert not report.golden.held
    assert report.golden.failures == [
        {
            "seed": 1002,
            "trace": str(tmp_path / "golden-seed1002.trace"),
            "reason": "violated",
            "invariants": ["no_lost_messages"],
        }
    ]
    assert report.variants["broken"].status == CAUGHT  # the variants are still checked
    assert (report.valid, report.exit_code) == (False, 1)


async def test_golden_that_does_not_settle_fails(tmp_path: Path) -> None:
    fake = Fake({("broken", 1000): DUPLICATED}, unsettled=frozenset({1001}))
    report = await check(fake, tmp_path)
    assert [f["reason"] for f in report.golden.failures] == ["did not settle"]
    assert report.exit_code == 1


async def test_variant_not_caught(tmp_path: Path) -> None:
    fake = Fake({})
    report = await check(fake, tmp_path)
    broken = report.variants["broken"]
    assert (broken.status, broken.caught, broken.seed) == (NOT_CAUGHT, False, None)
    assert [a["seed"] for a in broken.attempts] == [1000, 1001, 1002]  # bounded by --seeds
    assert fake.replayed == []
    assert report.exit_code == 1


async def test_variant_caught_by_the_wrong_invariant(tmp_path: Path) -> None:
    fake = Fake({("broken", 1000): LOST, ("broken", 1002): LOST})
    report = await check(fake, tmp_path)
    broken = report.variants["broken"]
    assert broken.status == WRONG_INVARIANT
    assert broken.other_violations == ["no_lost_messages"]
    assert not broken.caught
    assert fake.replayed == []
    assert report.exit_code == 1


async def test_other_violations_beside_the_declared_one_are_reported(tmp_path: Path) -> None:
    both = {"exactly_once": False, "no_lost_messages": False}
    fake = Fake({("broken", 1000): both}, [both, both])
    report = await check(fake, tmp_path)
    broken = report.variants["broken"]
    assert (broken.status, broken.other_violations) == (CAUGHT, ["no_lost_messages"])
    assert report.exit_code == 0


async def test_violation_that_does_not_come_back_is_not_reproducible(tmp_path: Path) -> None:
    fake = Fake({("broken", 1000): DUPLICATED}, [DUPLICATED, HELD])
    report = await check(fake, tmp_path)
    broken = report.variants["broken"]
    assert (broken.status, broken.reproduced, broken.fidelity) == (NOT_REPRODUCIBLE, 1, 0.5)
    assert report.to_json()["variants"]["broken"]["fidelity"] == 0.5
    assert report.exit_code == 1


async def test_replay_that_errors_is_a_harness_error(tmp_path: Path) -> None:
    fake = Fake({("broken", 1000): DUPLICATED}, [DUPLICATED, "postgres died"])
    report = await check(fake, tmp_path)
    assert report.variants["broken"].status == ERROR
    assert (report.valid, report.exit_code) == (False, 3)


async def test_golden_harness_error_is_exit_3_and_a_failure_wins(tmp_path: Path) -> None:
    fake = Fake({("golden", 1000): "nats did not start", ("broken", 1000): DUPLICATED})
    report = await check(fake, tmp_path)
    assert report.golden.errors[0]["error"] == "nats did not start"
    assert report.golden.failures == []
    assert report.exit_code == 3
    fake = Fake({("golden", 1000): "nats did not start"})  # and broken is never caught
    assert (await check(fake, tmp_path)).exit_code == 1


class Undeclared(Toy):
    catches: ClassVar[dict[str, str]] = {}


class Unchecked(Toy):
    catches: ClassVar[dict[str, str]] = {"broken": "linearizable"}


class NoSuchVariant(Toy):
    catches: ClassVar[dict[str, str]] = {"broken": "exactly_once", "gone": "exactly_once"}


@pytest.mark.parametrize(
    ("scenario", "message"),
    [
        (Undeclared(), "variant 'broken' declares no invariant that catches it"),
        (Unchecked(), "'linearizable', which the scenario does not check"),
        (NoSuchVariant(), "catches names 'gone', which is not a defective variant"),
    ],
    ids=["undeclared", "unchecked", "unknown-variant"],
)
async def test_bad_declarations_are_config_errors_before_any_run(
    scenario: Scenario, message: str, tmp_path: Path
) -> None:
    fake = Fake({})
    with pytest.raises(ConfigError, match=message):
        await check(fake, tmp_path, scenario)
    assert fake.ran == []


@pytest.mark.parametrize(
    ("seeds", "replays", "message"),
    [(0, 2, "seeds must be >= 1"), (3, 0, "replays must be >= 1")],
)
async def test_bad_numbers_are_config_errors(
    seeds: int, replays: int, message: str, tmp_path: Path
) -> None:
    fake = Fake({})
    with pytest.raises(ConfigError, match=message):
        await check(fake, tmp_path, seeds=seeds, replays=replays)
    assert fake.ran == []


def test_payments_declares_the_invariant_that_catches_each_variant() -> None:
    from chaos.scenario import load_scenario

    assert declared_catches(load_scenario("payments")) == {
        "no-idempotency": "exactly_once",
        "ack-before-commit": "no_lost_messages",
        "gateway-retry-no-key": "exactly_once",
        "wall-clock-dedupe": "exactly_once",
    }
