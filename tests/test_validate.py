"""The decisions of ``chaos validate``, with fake runs and replays standing in for the runner."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import pytest

from chaos.scenario import Scenario, Signal
from chaos.validate import (
    CAUGHT,
    ERROR,
    FAILS_WITHOUT_FAULTS,
    NOT_CAUGHT,
    NOT_REPRODUCIBLE,
    SIGNALS_MISSING,
    WRONG_INVARIANT,
    GoldenCheck,
    Observed,
    ValidationReport,
    declared_catches,
    required_replays,
    validate,
)
from faults.space import FaultSpace
from ground.errors import ConfigError
from invariants import Verdict, register

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
    signals: ClassVar[dict[str, tuple[Signal, ...]]] = {
        "broken": (Signal("the service was crashed", process="nemesis", f="crash"),)
    }

    def fault_space(self, variant: str) -> FaultSpace:
        self.check_variant(variant)
        return FaultSpace.from_dict(
            {"horizon_s": 1.0, "services": ["s"],
             "templates": [{"kind": "crash", "triggers": [{"type": "at_time", "offset_s": 0.5}]}]}
        )  # fmt: skip

    async def setup(self, ctx: Any) -> None:
        raise NotImplementedError

    async def workload(self, ctx: Any) -> None:
        raise NotImplementedError

    async def settled(self, ctx: Any) -> bool:
        raise NotImplementedError

    async def final_state(self, ctx: Any) -> dict[str, Any]:
        raise NotImplementedError


for _name in INVARIANTS:
    register(_name, pack="toy")(lambda history, state: Verdict.holds("toy", "never run"))


#: What a run's trace shows unless a test scripts its events: Toy's declared signal.
CRASHED = {"process": "nemesis", "type": "info", "f": "crash", "value": {"phase": "apply"}}


class Fake:
    """Runs and replays that return scripted verdicts; records what was asked."""

    def __init__(
        self,
        runs: Mapping[tuple[str, int | None], Mapping[str, Any] | str],
        replays: list[Mapping[str, Any] | str] | None = None,
        *,
        unsettled: frozenset[int] = frozenset(),
        events: Mapping[tuple[str, int], list[dict[str, Any]]] | None = None,
    ) -> None:
        self.events = events or {}
        self.scripted = runs
        self.scripted_replays = replays or []
        self.unsettled = unsettled
        self.ran: list[tuple[str, int, Path]] = []
        self.quiet: list[tuple[str, Path]] = []
        self.replayed: list[tuple[Path, int]] = []

    @staticmethod
    def _observed(trace: Path, what: Mapping[str, Any] | str, settled: bool = True) -> Observed:
        if isinstance(what, str):
            return Observed(trace, error=what)
        return Observed(trace, dict(what), settled)

    async def run(self, variant: str, seed: int, out: Path, *, faults: bool = True) -> Observed:
        if not faults:  # scripted as (variant, None); holds unless told otherwise
            self.quiet.append((variant, out))
            return self._observed(out, self.scripted.get((variant, None), HELD))
        self.ran.append((variant, seed, out))
        what = self.scripted.get((variant, seed), HELD)
        observed = self._observed(out, what, seed not in self.unsettled)
        observed.events.extend(self.events.get((variant, seed), [CRASHED]))
        return observed

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


def _write(path: Path, data: bytes) -> None:
    path.write_bytes(data)


def _read(path: Path) -> bytes:
    return path.read_bytes()


class Flaky(Fake):
    """A Fake whose first run of ``first_error`` (variant, seed) and first set of replays
    end in a harness error, each after writing its trace; every later one as scripted."""

    def __init__(self, *args: Any, first_error: tuple[str, int | None], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.first_error: tuple[str, int | None] | None = first_error
        self.replay_errs = True

    async def run(self, variant: str, seed: int, out: Path, *, faults: bool = True) -> Observed:
        if self.first_error == (variant, seed if faults else None):
            self.first_error = None
            _write(out, b"the erring run's trace")
            self.ran.append((variant, seed, out))
            return Observed(out, error="postgres did not answer")
        return await super().run(variant, seed, out, faults=faults)

    async def replay(self, trace: Path, times: int) -> list[Observed]:
        if self.replay_errs:
            self.replay_errs = False
            self.replayed.append((trace, times))
            bad = trace.with_suffix(".r1")
            _write(bad, b"the erring replay's trace")
            return [
                Observed(trace.with_suffix(".r0"), dict(DUPLICATED)),
                Observed(bad, error="lost worker"),
            ]
        return await super().replay(trace, times)


@pytest.mark.parametrize("where", [("golden", 1001), ("broken", None), ("broken", 1000)])
async def test_a_harness_error_is_run_again_once_and_kept_aside(
    where: tuple[str, int | None], tmp_path: Path
) -> None:
    fake = Flaky({("broken", 1000): DUPLICATED}, first_error=where)
    report = await check(fake, tmp_path)
    assert report.valid
    assert report.exit_code == 0
    assert report.variants["broken"].status == CAUGHT
    assert report.variants["broken"].fidelity == 1.0
    assert [r["error"] for r in report.rerun] == ["postgres did not answer", "lost worker"]
    for again in report.rerun:  # each erring trace kept beside the run that replaced it
        assert Path(again["trace"]).name.endswith(".harness-error" + Path(again["trace"]).suffix)
        assert _read(Path(again["trace"])).startswith(b"the erring")
    assert len(fake.replayed) == 2  # the whole set again: fidelity is over one set
    assert report.to_json()["rerun"] == report.rerun


async def test_an_earlier_validations_trace_is_not_taken_for_the_erring_one(
    tmp_path: Path,
) -> None:
    old = tmp_path / "broken-nofaults.trace"  # the quiet run's path, from a validation before
    _write(old, b"an earlier validation's trace")
    os.utime(old, (1_000_000_000, 1_000_000_000))
    fake = Fake({("broken", None): "postgres did not answer", ("broken", 1000): DUPLICATED})
    report = await check(fake, tmp_path)
    assert [r["trace"] for r in report.rerun] == [None]
    assert _read(old) == b"an earlier validation's trace"


async def test_a_harness_error_that_comes_again_stands(tmp_path: Path) -> None:
    fake = Fake({("broken", 1000): DUPLICATED}, [DUPLICATED, "postgres died"])
    report = await check(fake, tmp_path)
    assert len(fake.replayed) == 2
    assert report.variants["broken"].status == ERROR
    assert [r["error"] for r in report.rerun] == ["postgres died"]
    assert report.rerun[0]["trace"] is None  # the fake wrote no trace: nothing to keep


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


class Silent(Toy):
    signals: ClassVar[dict[str, tuple[Signal, ...]]] = {}


@pytest.mark.parametrize(
    ("scenario", "message"),
    [
        (Undeclared(), "variant 'broken' declares no invariant that catches it"),
        (Unchecked(), "'linearizable', which the scenario does not check"),
        (NoSuchVariant(), "catches names 'gone', which is not a defective variant"),
        (Silent(), "variant 'broken' declares no diagnosis signals"),
    ],
    ids=["undeclared", "unchecked", "unknown-variant", "no-signals"],
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


async def test_a_variant_that_fails_with_no_fault_is_not_a_variant(tmp_path: Path) -> None:
    fake = Fake({("broken", None): DUPLICATED, ("broken", 1000): DUPLICATED})
    report = await check(fake, tmp_path)
    broken = report.variants["broken"]
    assert broken.status == FAILS_WITHOUT_FAULTS
    assert fake.quiet == [("broken", tmp_path / "broken-nofaults.trace")]
    assert [v for v, _, _ in fake.ran] == ["golden"] * 3  # no seed of the variant ran
    assert report.to_json()["variants"]["broken"]["no_faults"]["verdicts"] == DUPLICATED
    assert report.exit_code == 1


async def test_every_variant_runs_once_with_no_fault(tmp_path: Path) -> None:
    fake = Fake({("broken", 1000): DUPLICATED})
    report = await check(fake, tmp_path)
    assert fake.quiet == [("broken", tmp_path / "broken-nofaults.trace")]
    assert report.variants["broken"].no_faults is not None
    assert report.variants["broken"].status == CAUGHT


@pytest.mark.parametrize(("back", "status"), [(19, CAUGHT), (18, NOT_REPRODUCIBLE)])
async def test_nineteen_of_twenty_replays_reproduce(back: int, status: str, tmp_path: Path) -> None:
    fake = Fake({("broken", 1000): DUPLICATED}, [DUPLICATED] * back + [HELD] * (20 - back))
    report = await check(fake, tmp_path, replays=20)
    broken = report.variants["broken"]
    assert (broken.status, broken.reproduced, broken.required) == (status, back, 19)


@pytest.mark.parametrize(("replays", "needed"), [(1, 1), (2, 2), (5, 5), (20, 19), (40, 38)])
def test_required_replays_is_95_percent_rounded_up(replays: int, needed: int) -> None:
    assert required_replays(replays) == needed


class Signalled(Toy):
    signals: ClassVar[dict[str, tuple[Signal, ...]]] = {
        "broken": (
            Signal("a message came twice", process="consumer", f="charge", type="ok"),
            Signal("the gateway logged a duplicate", process="gateway", match="dup(licate)?"),
        )
    }


CHARGED = {"process": "consumer", "type": "ok", "f": "charge", "value": "o-1"}
DUP_LOG = {"process": "gateway", "type": "info", "f": "log", "value": "charge o-1 duplicate"}


async def test_declared_signals_show_in_the_catching_trace(tmp_path: Path) -> None:
    fake = Fake({("broken", 1000): DUPLICATED}, events={("broken", 1000): [CHARGED, DUP_LOG]})
    report = await check(fake, tmp_path, Signalled())
    broken = report.variants["broken"]
    assert broken.status == CAUGHT
    assert [s["found"] for s in broken.signals] == [True, True]


async def test_a_declared_signal_missing_from_the_trace_fails(tmp_path: Path) -> None:
    fake = Fake({("broken", 1000): DUPLICATED}, events={("broken", 1000): [CHARGED]})
    report = await check(fake, tmp_path, Signalled())
    broken = report.variants["broken"]
    assert broken.status == SIGNALS_MISSING
    assert report.to_json()["variants"]["broken"]["signals"] == [
        {"what": "a message came twice", "found": True},
        {"what": "the gateway logged a duplicate", "found": False},
    ]
    assert report.exit_code == 1


class SignalsForGolden(Toy):
    signals: ClassVar[dict[str, tuple[Signal, ...]]] = {"golden": (Signal("x"),)}


class BadSpace(Toy):
    def fault_space(self, variant: str) -> FaultSpace:
        raise ConfigError(f"faults.toml: no table [{variant}]")


class UnknownInvariant(Toy):
    invariants = ("exactly_once", "no_lost_messages", "nobody_registered_this")


@pytest.mark.parametrize(
    ("scenario", "message"),
    [
        (SignalsForGolden(), "signals names 'golden', which is not a defective variant"),
        (BadSpace(), r"no table \[golden\]"),
        (UnknownInvariant(), "unknown invariant 'nobody_registered_this'"),
    ],
    ids=["signals-for-golden", "bad-fault-space", "unknown-invariant"],
)
async def test_every_declaration_is_checked_before_any_run(
    scenario: Scenario, message: str, tmp_path: Path
) -> None:
    fake = Fake({})
    with pytest.raises(ConfigError, match=message):
        await check(fake, tmp_path, scenario)
    assert fake.ran == []
    assert fake.quiet == []


async def test_a_validation_cut_off_keeps_what_it_measured(tmp_path: Path) -> None:
    fake = Fake({("broken", 1001): DUPLICATED})

    async def replay(trace: Path, times: int) -> list[Observed]:
        raise ConfigError("cannot replay: the pack is gone")

    report = ValidationReport("toy", GoldenCheck([]))
    with pytest.raises(ConfigError):
        await validate(Toy(), seeds=3, first_seed=1000, replays=2, out_dir=tmp_path,
                       run=fake.run, replay=replay, report=report)  # fmt: skip
    assert sorted(report.golden.runs) == [1000, 1001, 1002]
    assert report.variants["broken"].seed == 1001
    assert not report.complete
    assert not report.valid
    trace = report.to_json()["variants"]["broken"]["trace"]
    assert trace == str(tmp_path / "broken-seed1001.trace")
