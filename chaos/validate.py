"""Validation of a scenario: golden holds on held-out seeds, each defect is caught reproducibly.

::

    golden   seeds S .. S+N-1 ──► every invariant held and settled, on every seed
    variant  no fault injected ──► every invariant held (a smoke test is not a variant)
             seeds S .. S+N-1 ──► first seed whose run violates the invariant it declares
             (``Scenario.catches``) ──► its trace shows the declared signals
             (``Scenario.signals``) ──► replay that trace K times ──► violated >= 95% of K?

The checks follow the principles the environment builder works by: a golden solution must
hold on seeds it was not tuned on; a defective variant must fail for the right reason (the
invariant it declares, not another) and reproducibly (the same violation on every replay).
The runs and replays are parameters (``RunVariantFn``, ``ReplayFn``), so the decisions are tested
without services; ``real_run`` and ``real_replay`` do the real thing.

Size (about 570 lines): one module because the six checks of one validation and the report
that names each outcome share the report's types and are read in order.
"""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Protocol

import trio

from chaos.run import Progress, RunOptions, no_fault_schedule, run_scenario
from chaos.scenario import Scenario, Signal
from ground.errors import EXIT_HARNESS, EXIT_HELD, EXIT_VIOLATED, ChaosError, ConfigError
from ground.rng import check_seed

DEFAULT_SEEDS, DEFAULT_FIRST_SEED, DEFAULT_REPLAYS = 20, 1000, 20
GOLDEN = "golden"
#: The share of replays that must violate the declared invariant again (19 of 20).
REPRODUCE_SHARE = 0.95

#: A variant's outcome. Failures: violated with no fault, not caught, wrong invariant, not
#: reproducible, diagnosis signals missing.
(
    CAUGHT, NOT_CAUGHT, WRONG_INVARIANT, NOT_REPRODUCIBLE, ERROR, FAILS_WITHOUT_FAULTS,
    SIGNALS_MISSING,
) = (
    "caught",
    "not caught",
    "caught by the wrong invariant",
    "not reproducible",
    "harness error",
    "fails with no fault injected",
    "diagnosis signals missing",
)  # fmt: skip
#: A variant whose check was cut off (the validation stopped during it).
UNFINISHED = "not finished"
FAILED = (NOT_CAUGHT, WRONG_INVARIANT, NOT_REPRODUCIBLE, FAILS_WITHOUT_FAULTS, SIGNALS_MISSING)


def required_replays(replays: int) -> int:
    """How many of ``replays`` must violate the declared invariant again: 95%, rounded up
    (19 of 20, 5 of 5, 2 of 2)."""
    return math.ceil(REPRODUCE_SHARE * replays - 1e-9)


@dataclass(frozen=True)
class Observed:
    """What validation reads from one run or replay: validity per invariant, settled, trace."""

    trace: Path
    verdicts: dict[str, Any] = field(default_factory=dict)
    settled: bool = True
    error: str | None = None
    #: The run's recorded events (history, logs, nemesis): where signals are looked for.
    events: list[dict[str, Any]] = field(default_factory=list, repr=False, compare=False)

    def held(self) -> bool:
        """Every invariant held and the system settled, with no harness error."""
        return (
            self.error is None
            and self.settled
            and bool(self.verdicts)
            and all(v is True for v in self.verdicts.values())
        )

    def violated(self) -> list[str]:
        return [name for name, valid in self.verdicts.items() if valid is False]

    def to_json(self) -> dict[str, Any]:
        return {
            "trace": str(self.trace),
            "verdicts": dict(self.verdicts),
            "settled": self.settled,
            "error": self.error,
        }


class RunVariantFn(Protocol):
    """(variant, seed, trace path; ``faults=False``: no fault injected) -> what the run
    observed."""

    def __call__(
        self, variant: str, seed: int, out: Path, *, faults: bool = True
    ) -> Awaitable[Observed]: ...


class ReplayFn(Protocol):
    """(trace path, times) -> what each replay observed."""

    def __call__(self, trace: Path, times: int) -> Awaitable[list[Observed]]: ...


@dataclass
class GoldenCheck:
    """The golden implementation on every held-out seed."""

    seeds: list[int]
    runs: dict[int, Observed] = field(default_factory=dict)
    failures: list[dict[str, Any]] = field(default_factory=list)
    errors: list[dict[str, Any]] = field(default_factory=list)

    @property
    def held(self) -> bool:
        return not self.failures and not self.errors and len(self.runs) == len(self.seeds)

    def to_json(self) -> dict[str, Any]:
        return {
            "seeds": self.seeds,
            "held": self.held,
            "failures": self.failures,
            "errors": self.errors,
            "runs": {str(seed): run.to_json() for seed, run in self.runs.items()},
        }


@dataclass
class VariantCheck:
    """One defective variant: the seed that caught it, its replays, its other violations."""

    variant: str
    invariant: str
    status: str = NOT_CAUGHT
    seed: int | None = None
    trace: Path | None = None
    attempts: list[dict[str, Any]] = field(default_factory=list)
    replays: list[Observed] = field(default_factory=list)
    other_violations: list[str] = field(default_factory=list)
    #: The run with no fault injected (it must hold).
    no_faults: Observed | None = None
    #: Each declared signal: {what, found} in the catching run's trace.
    signals: list[dict[str, Any]] = field(default_factory=list)
    #: How many replays must violate the declared invariant again.
    required: int = 0

    @property
    def caught(self) -> bool:
        """The declared invariant was violated on some seed (reproducible or not)."""
        return self.seed is not None

    @property
    def reproduced(self) -> int:
        return sum(self.invariant in r.violated() for r in self.replays)

    @property
    def fidelity(self) -> float:
        """Share of the replays that violated the declared invariant again."""
        return self.reproduced / len(self.replays) if self.replays else 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "invariant": self.invariant,
            "status": self.status,
            "valid": self.status == CAUGHT,
            "caught": self.caught,
            "seed": self.seed,
            "trace": None if self.trace is None else str(self.trace),
            "fidelity": self.fidelity,
            "reproduced": self.reproduced,
            "required": self.required,
            "replays": [r.to_json() for r in self.replays],
            "other_violations": self.other_violations,
            "attempts": self.attempts,
            "no_faults": None if self.no_faults is None else self.no_faults.to_json(),
            "signals": self.signals,
        }


@dataclass
class ValidationReport:
    """Everything ``chaos validate`` found; ``exit_code`` 0 valid, 1 invalid, 3 harness."""

    scenario: str
    golden: GoldenCheck
    variants: dict[str, VariantCheck] = field(default_factory=dict)
    replays: int = DEFAULT_REPLAYS
    #: The defective variants to check (all of them once validation has finished).
    expected: list[str] = field(default_factory=list)
    #: Why validation stopped before the end (a harness error, an interruption): what was
    #: measured until then is still here.
    error: str | None = None
    #: Each run or set of replays that ended in a harness error and was run again (a harness
    #: error says nothing of the variant): what failed, its message, where its trace went.
    rerun: list[dict[str, Any]] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        return (
            self.error is None
            and set(self.expected) <= set(self.variants)
            and all(v.status != UNFINISHED for v in self.variants.values())
        )

    @property
    def failed(self) -> bool:
        return bool(self.golden.failures) or any(v.status in FAILED for v in self.variants.values())

    @property
    def valid(self) -> bool:
        return (
            self.complete
            and self.golden.held
            and all(v.status == CAUGHT for v in self.variants.values())
        )

    @property
    def exit_code(self) -> int:
        if self.valid:
            return EXIT_HELD
        return EXIT_VIOLATED if self.failed else EXIT_HARNESS

    def to_json(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario,
            "golden": self.golden.to_json(),
            "variants": {name: check.to_json() for name, check in self.variants.items()},
            "replays": self.replays,
            "required": required_replays(self.replays),
            "valid": self.valid,
            "complete": self.complete,
            "error": self.error,
            "rerun": self.rerun,
        }


def declared_catches(scenario: Scenario) -> dict[str, str]:
    """Each defective variant -> its declared invariant; ConfigError when one is missing."""
    catches: Mapping[str, str] = scenario.catches
    for variant in catches:
        if variant == GOLDEN or variant not in scenario.variants:
            raise ConfigError(
                f"scenario {scenario.id}: catches names {variant!r}, which is not a defective "
                f"variant (variants: {', '.join(scenario.variants)})"
            )
    out: dict[str, str] = {}
    for variant in scenario.variants:
        if variant == GOLDEN:
            continue
        invariant = catches.get(variant)
        if not invariant:
            raise ConfigError(
                f"scenario {scenario.id}: variant {variant!r} declares no invariant that "
                f"catches it (set catches = {{{variant!r}: '<invariant>'}} on the scenario)"
            )
        if invariant not in scenario.invariants:
            raise ConfigError(
                f"scenario {scenario.id}: variant {variant!r} is to be caught by {invariant!r}, "
                f"which the scenario does not check (invariants: "
                f"{', '.join(scenario.invariants) or 'none'})"
            )
        out[variant] = invariant
    return out


def check_declarations(scenario: Scenario) -> dict[str, str]:
    """Everything a validation needs from a pack, checked before anything runs (ConfigError,
    one line): each defective variant's catching invariant, every invariant known, every
    variant's fault space readable, signals for every defective variant and only for them.
    Returns
    ``declared_catches``."""
    catches = declared_catches(scenario)
    scenario.checkers()
    for variant in scenario.variants:
        scenario.fault_space(variant)
    for variant in scenario.absent:
        if variant not in scenario.variants or variant == "golden":
            raise ConfigError(
                f"scenario {scenario.id}: absent names {variant!r}, which is not a variant "
                f"other than golden (variants: {', '.join(scenario.variants)})"
            )
    for variant in scenario.signals:
        if variant not in catches:
            raise ConfigError(
                f"scenario {scenario.id}: signals names {variant!r}, which is not a defective "
                f"variant (defective: {', '.join(catches) or 'none'})"
            )
    silent = [v for v in catches if not scenario.signals.get(v)]
    if silent:
        raise ConfigError(
            f"scenario {scenario.id}: variant {silent[0]!r} declares no diagnosis signals "
            "(Scenario.signals: what its README's diagnosis path names, checked in the "
            "catching trace)"
        )
    return catches


def trace_path(out_dir: Path, variant: str, seed: int) -> Path:
    return out_dir / f"{variant}-seed{seed}.trace"


def no_faults_path(out_dir: Path, variant: str) -> Path:
    return out_dir / f"{variant}-nofaults.trace"


async def check_golden(
    seeds: list[int],
    out_dir: Path,
    run: RunVariantFn,
    progress: Progress,
    check: GoldenCheck | None = None,
) -> GoldenCheck:
    """Run golden on every seed; a violation or an unsettled run is a failure. Results go
    into ``check`` (if given) as they come, so a validation cut off keeps them."""
    check = check or GoldenCheck(seeds)
    for seed in seeds:
        await _golden_seed(seed, out_dir, run, progress, check)
    return check


async def _golden_seed(
    seed: int, out_dir: Path, run: RunVariantFn, progress: Progress, check: GoldenCheck
) -> None:
    """One golden seed: run it, judge it into ``check``."""
    progress(f"golden seed {seed}")
    observed = await run(GOLDEN, seed, trace_path(out_dir, GOLDEN, seed))
    check.runs[seed] = observed
    where = {"seed": seed, "trace": str(observed.trace)}
    if observed.error is not None:
        check.errors.append({**where, "error": observed.error})
    elif observed.violated():
        check.failures.append(
            {**where, "reason": "violated", "invariants": observed.violated()}
        )
    elif not observed.settled:
        check.failures.append({**where, "reason": "did not settle"})
    elif not observed.verdicts or any(v is not True for v in observed.verdicts.values()):
        undecided = [n for n, v in observed.verdicts.items() if v is not True]
        check.errors.append({**where, "error": f"undecided: {', '.join(undecided) or 'none'}"})


def _in_seed_order(check: GoldenCheck) -> None:
    """Golden results measured side by side, put in the order the sequential path gives."""
    check.runs = {seed: check.runs[seed] for seed in sorted(check.runs)}
    check.failures.sort(key=lambda f: int(f["seed"]))
    check.errors.sort(key=lambda e: int(e["seed"]))


async def check_variant(
    variant: str,
    invariant: str,
    seeds: list[int],
    replays: int,
    out_dir: Path,
    run: RunVariantFn,
    replay: ReplayFn,
    progress: Progress,
    *,
    signals: tuple[Signal, ...] = (),
    check: VariantCheck | None = None,
) -> VariantCheck:
    """Run the variant with no fault (it must hold), find a seed whose run violates
    ``invariant``, look for ``signals`` in its trace, then replay it ``replays`` times."""
    check = check or VariantCheck(variant, invariant)
    check.status = UNFINISHED
    check.required = required_replays(replays)
    progress(f"{variant}: no fault injected")
    quiet = await run(variant, seeds[0], no_faults_path(out_dir, variant), faults=False)
    check.no_faults = quiet
    if quiet.error is not None:
        check.status = ERROR
        return check
    if not quiet.held():
        check.status = FAILS_WITHOUT_FAULTS
        check.other_violations = quiet.violated()
        return check
    others: dict[str, None] = {}
    errors = 0
    for seed in seeds:
        progress(f"{variant} seed {seed}")
        observed = await run(variant, seed, trace_path(out_dir, variant, seed))
        violated = observed.violated()
        check.attempts.append({"seed": seed, "violated": violated, **observed.to_json()})
        errors += observed.error is not None
        others.update(dict.fromkeys(n for n in violated if n != invariant))
        if invariant in violated:
            check.seed, check.trace = seed, observed.trace
            check.other_violations = [n for n in violated if n != invariant]
            check.signals = [
                {"what": s.what, "found": s.found_in(observed.events)} for s in signals
            ]
            break
    if check.trace is None:
        check.other_violations = list(others)
        check.status = WRONG_INVARIANT if others else ERROR if errors else NOT_CAUGHT
        return check
    progress(f"{variant}: replaying seed {check.seed} x{replays}")
    check.replays = await replay(check.trace, replays)
    if check.reproduced >= check.required:
        missing = [s for s in check.signals if not s["found"]]
        check.status = SIGNALS_MISSING if missing else CAUGHT
    elif all(r.error is not None for r in check.replays if invariant not in r.violated()):
        check.status = ERROR
    else:
        check.status = NOT_REPRODUCIBLE
    return check


async def validate(
    scenario: Scenario,
    *,
    seeds: int = DEFAULT_SEEDS,
    first_seed: int = DEFAULT_FIRST_SEED,
    replays: int = DEFAULT_REPLAYS,
    out_dir: Path,
    run: RunVariantFn,
    replay: ReplayFn,
    progress: Progress | None = None,
    report: ValidationReport | None = None,
    side_by_side: bool = False,
) -> ValidationReport:
    """Check golden on ``seeds`` held-out seeds and every defective variant. Every
    declaration is checked before the first run (``check_declarations``). Results go into
    ``report`` (if given) as they are measured: when validation is cut off (a harness
    error, Ctrl-C), the caller still has everything measured so far.

    ``side_by_side``: every golden seed and every variant's check go at once (``run`` and
    ``replay`` then bound how many runs go together: ``chaos validate --jobs``). Each
    variant's own steps keep their order (no fault, then seed after seed until one catches,
    then its replays), so the seeds, traces and verdicts are those of the sequential path;
    the report lists them in the same order."""
    if seeds < 1:
        raise ConfigError(f"seeds must be >= 1, got {seeds}")
    if replays < 1:
        raise ConfigError(f"replays must be >= 1, got {replays}")
    check_seed(first_seed, "first seed")
    check_seed(first_seed + seeds - 1, "last seed")
    catches = check_declarations(scenario)
    say = progress or (lambda _message: None)
    seed_list = list(range(first_seed, first_seed + seeds))
    report = report or ValidationReport(scenario.id, GoldenCheck(seed_list))
    report.scenario, report.golden.seeds, report.replays = scenario.id, seed_list, replays
    report.expected = list(catches)
    run, replay = again_on_harness_error(run, replay, say, report.rerun)
    if not side_by_side:
        await check_golden(seed_list, out_dir, run, say, report.golden)
        for variant, invariant in catches.items():
            check = report.variants[variant] = VariantCheck(variant, invariant)
            await check_variant(
                variant, invariant, seed_list, replays, out_dir, run, replay, say,
                signals=tuple(scenario.signals.get(variant, ())), check=check,
            )  # fmt: skip
        return report
    try:
        async with trio.open_nursery() as nursery:
            for seed in seed_list:
                nursery.start_soon(_golden_seed, seed, out_dir, run, say, report.golden)
            for variant, invariant in catches.items():
                check = report.variants[variant] = VariantCheck(variant, invariant)
                nursery.start_soon(
                    partial(
                        check_variant, variant, invariant, seed_list, replays, out_dir, run,
                        replay, say, signals=tuple(scenario.signals.get(variant, ())),
                        check=check,
                    )
                )  # fmt: skip
    finally:
        _in_seed_order(report.golden)
    return report


def again_on_harness_error(
    run: RunVariantFn, replay: ReplayFn, say: Progress, log: list[dict[str, Any]]
) -> tuple[RunVariantFn, ReplayFn]:
    """``run`` and ``replay`` that go once more after a harness error: a run that errs
    again, or a set of replays with an error again, stands (the check reports it). The
    erring trace is kept beside the new one (``NAME.harness-error.trace``) and ``log`` gets
    what failed, why, and where its trace went: a harness error says nothing about the
    variant, so it must neither fail nor pass a check, and a rare one (a machine hiccup)
    must not stop a validation that CI runs."""

    def keep(observed: Observed, started: float) -> str | None:
        trace = observed.trace
        aside = trace.with_name(f"{trace.stem}.harness-error{trace.suffix}")
        try:  # only a trace this run wrote, not an earlier validation's at the same path
            # (1 s of slack: a file's times come from the kernel's coarse clock)
            if trace.stat().st_mtime < started - 1.0:
                return None
            trace.replace(aside)
        except OSError:  # never written (the run failed before its trace opened)
            return None
        return str(aside)

    async def one_run(variant: str, seed: int, out: Path, *, faults: bool = True) -> Observed:
        started = time.time()
        observed = await run(variant, seed, out, faults=faults)
        if observed.error is None:
            return observed
        what = f"{variant} seed {seed}" + ("" if faults else " (no fault)")
        say(f"{what}: harness error ({observed.error}): running it again")
        log.append({"what": what, "error": observed.error, "trace": keep(observed, started)})
        return await run(variant, seed, out, faults=faults)

    async def replays(trace: Path, times: int) -> list[Observed]:
        started = time.time()
        observed = await replay(trace, times)
        failed = [r for r in observed if r.error is not None]
        if not failed:
            return observed
        say(f"{trace.name}: {len(failed)} of {times} replays hit a harness error "
            f"({failed[0].error}): replaying x{times} again")  # fmt: skip
        for r in failed:
            log.append(
                {"what": f"replay of {trace.name}", "error": r.error, "trace": keep(r, started)}
            )
        return await replay(trace, times)

    return one_run, replays


def _error_text(exc: BaseException) -> str | None:
    """The message of a harness error (a ChaosError, alone or grouped), else None."""
    if isinstance(exc, ConfigError):
        return None
    if isinstance(exc, ChaosError):
        return str(exc) or type(exc).__name__
    if isinstance(exc, BaseExceptionGroup):
        parts = [_error_text(e) for e in exc.exceptions]
        if parts and all(p is not None for p in parts):
            return "; ".join(p for p in parts if p is not None)
    return None


def real_run(scenario: Scenario, progress: Progress | None = None) -> RunVariantFn:
    """A ``RunVariantFn`` that runs ``scenario`` for real (``chaos.run.run_scenario``)."""

    async def run(variant: str, seed: int, out: Path, *, faults: bool = True) -> Observed:
        schedule = None if faults else no_fault_schedule(scenario, variant, seed)
        options = RunOptions(
            scenario, seed, variant=variant, out=out, progress=progress, schedule=schedule
        )
        try:
            result = await run_scenario(options)
        except BaseException as exc:
            message = _error_text(exc)
            if message is None:
                raise
            return Observed(out, error=message)
        verdicts = {v.name: v.valid for v in result.verdicts}
        return Observed(result.trace, verdicts, result.settled, events=result.history)

    return run


def real_replay(progress: Progress | None = None, scenario: Scenario | None = None) -> ReplayFn:
    """A ``ReplayFn`` that replays a trace for real (``chaos.replay.run_replays``), with
    ``scenario`` (the pack being validated) or else the pack the trace recorded."""
    from chaos.replay import prepare_replay, run_replays

    async def replay(trace: Path, times: int) -> list[Observed]:
        plan = prepare_replay(trace, scenario=scenario)
        report = await run_replays(plan, times, progress=progress)
        return [
            Observed(
                r.trace, {str(v.get("name")): v.get("valid") for v in r.verdicts}, True, r.error
            )
            for r in report.replays
        ]

    return replay


def bounded(run: RunVariantFn, replay: ReplayFn, jobs: int) -> tuple[RunVariantFn, ReplayFn]:
    """``run`` and ``replay`` sharing ``jobs`` places: at most ``jobs`` runs or replays at
    once (``validate(side_by_side=True)`` over runners that bound nothing themselves)."""
    limiter = trio.CapacityLimiter(jobs)

    async def one_run(variant: str, seed: int, out: Path, *, faults: bool = True) -> Observed:
        async with limiter:
            return await run(variant, seed, out, faults=faults)

    async def one_replay(trace: Path, times: int) -> list[Observed]:
        async with limiter:
            return await replay(trace, times)

    return one_run, one_replay


__all__ = [
    "CAUGHT",
    "ERROR",
    "FAILS_WITHOUT_FAULTS",
    "NOT_CAUGHT",
    "NOT_REPRODUCIBLE",
    "SIGNALS_MISSING",
    "UNFINISHED",
    "WRONG_INVARIANT",
    "GoldenCheck",
    "Observed",
    "ReplayFn",
    "RunVariantFn",
    "ValidationReport",
    "VariantCheck",
    "bounded",
    "check_declarations",
    "check_golden",
    "check_variant",
    "declared_catches",
    "real_replay",
    "real_run",
    "required_replays",
    "validate",
]
