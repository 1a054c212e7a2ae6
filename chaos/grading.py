"""Grading a candidate: graded runs over many seeds, one reward that cannot be gamed.

``grade`` (``chaos grade``; ``chaos.grade`` for training loops) runs the candidate in place
of the task's service on each seed (a graded run, as ``chaos run --impl`` makes it, on a warm
worker through an ``Executor``; ``chaos.grade`` keeps its warm workers across calls:
``chaos.grade_pool``), then turns the per-run results into a ``Grade``:

- a seed **held** when every invariant held on the real stores and the sandbox contained
  nothing; ``primary`` is the fraction of seeds that held. Every seed asked for is in the
  denominator: a run that ends in a harness error is run once more (a fresh environment),
  and if it errs again it counts 0, as a failure would (the grade says so: ``errors``, the
  seed's ``error``). No outcome pays more than failing (tests/grading/test_engine.py
  proves it with Hypothesis); ``exit_code`` 3 is kept for a machine that is broken (a seed
  in error before its candidate started);
- ``reward = primary * (1 - (1 - efficiency) / (N + 1))`` for N graded seeds, where
  ``efficiency`` in [0, 1] is the mean, over the task's budgets, of min(1, budget / measure)
  over the seeds that held (settle time p95, CPU seconds, side effects). Correctness first:
  one more seed held always outweighs any efficiency (see docs/grading.md for the proof),
  and a candidate within its budgets on every seed gets exactly its ``primary``;
- seeds are the task's public seeds, or held-out seeds derived from a key
  (``heldout_seeds``): HMAC-SHA256(key, scenario id + index), never written anywhere the
  candidate can read.

The executor is the small interface a scheduler plugs into (``chaos.executor``): a list of
``RunSpec`` in, one ``RunOutcome`` (the worker's ``chaos run --json`` object, or its error)
per spec out. ``sweep_executor`` (the default) runs them in worker processes here;
``chaos.executor_ray.RayExecutor`` runs each as a Ray task.

Size (about 600 lines): one module because it is the grade's one contract, read top to bottom
as docs/grading.md tells it: the seeds and key, a seed's grade, the reward, running a grade and
its JUnit form all speak of the same ``Grade`` types and change together.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any, Literal

import trio
from pydantic import BaseModel, Field

from chaos import warm
from chaos.executor import (
    Executor,
    LocalExecutor,
    OnOutcome,
    RunOutcome,
    RunSpec,
    scenario_arg,
)
from chaos.grade_pool import shared_pool
from chaos.sandbox.candidate import CandidateSpec, Limits, Program
from chaos.sandbox.graded import make_sandbox, task_of
from chaos.scenario import Scenario, TaskSpec, load_scenario
from ground._paths import check_private, open_regular
from ground.errors import EXIT_HARNESS, EXIT_HELD, EXIT_VIOLATED, ConfigError
from ground.rng import SEED_MAX, check_seed

#: Where ``chaos grade`` finds the held-out key when ``--heldout-key`` is not given.
KEY_ENV = "CHAOS_HELDOUT_KEY_FILE"
MIN_KEY_BYTES = 16
MAX_HELDOUT = 1000

SeedSet = Literal["public", "heldout", "explicit"]
Outcome = Literal["held", "violated", "contained", "error", "timeout"]
#: The outcomes that are not the candidate's verdict: a harness error, a run over its time.
FAILED_RUNS = ("error", "timeout")


# -- seeds -------------------------------------------------------------------------------


def read_key(path: Path | str) -> bytes:
    """The held-out key in ``path`` (ConfigError: missing, unreadable, shorter than 16 bytes)."""
    path = Path(path)
    try:
        with open_regular(path, "bad key file") as stream:  # a folder, a FIFO: refused
            key = stream.read().strip()
    except OSError as exc:
        raise ConfigError(f"bad key file {path}: {exc.strerror or exc}") from None
    if len(key) < MIN_KEY_BYTES:
        raise ConfigError(
            f"bad key file {path}: {len(key)} bytes, a key needs at least {MIN_KEY_BYTES}"
        )
    check_private(path, "bad key file")  # others can read it: refused, as ssh does
    return key


def heldout_seeds(
    key: bytes, scenario_id: str, count: int, exclude: Sequence[int] = ()
) -> list[int]:
    """``count`` seeds derived from ``key``: HMAC-SHA256(key, "scenario id NUL index"), its
    first 8 bytes taken modulo 2**63 (the seed range); never one of ``exclude`` (the public
    seeds) nor twice the same."""
    if not 1 <= count <= MAX_HELDOUT:
        raise ConfigError(f"held-out seeds: want 1 to {MAX_HELDOUT}, got {count}")
    seeds: list[int] = []
    index = 0
    while len(seeds) < count:
        digest = hmac.new(key, f"{scenario_id}\0{index}".encode(), hashlib.sha256).digest()
        seed = int.from_bytes(digest[:8], "big") % (SEED_MAX + 1)
        if seed not in exclude and seed not in seeds:
            seeds.append(seed)
        index += 1
    return seeds


@dataclass(frozen=True)
class SeedChoice:
    seeds: tuple[int, ...]
    kind: SeedSet


def choose_seeds(
    scenario: Scenario,
    *,
    seeds: Sequence[int] | None = None,
    public: bool = False,
    key: bytes | None = None,
    heldout: int | None = None,
) -> SeedChoice:
    """Explicit seeds, the public ones, or held-out ones from the key (the default when a
    key is given). Without a key only public (or explicit) seeds exist."""
    task = task_of(scenario)
    if seeds is not None and public:
        raise ConfigError("--seeds and --public exclude each other")
    if seeds is not None:
        if not seeds:
            raise ConfigError("no seeds to grade on")
        return SeedChoice(tuple(check_seed(s) for s in seeds), "explicit")
    if public or key is None:
        if heldout is not None:
            raise ConfigError("--heldout needs a held-out key (--heldout-key or $" + KEY_ENV + ")")
        return SeedChoice(tuple(task.public_seeds), "public")
    count = task.heldout_seeds if heldout is None else heldout
    return SeedChoice(tuple(heldout_seeds(key, scenario.id, count, task.public_seeds)), "heldout")


# -- the executor: runs in, results out ----------------------------------------------------


async def sweep_executor(
    specs: Sequence[RunSpec], jobs: int, progress: OnOutcome | None = None
) -> list[RunOutcome]:
    """The default executor: worker processes on this machine (``chaos run --json``)."""
    return await LocalExecutor()(specs, jobs, progress)


# -- the grade ---------------------------------------------------------------------------


class SeedGrade(BaseModel):
    """One seed's graded run."""

    seed: int
    outcome: Outcome
    held: bool
    #: Invariant -> held (True), violated (False) or undecided (None).
    verdicts: dict[str, bool | None] = Field(default_factory=dict)
    explanations: dict[str, str] = Field(default_factory=dict)
    contained: list[dict[str, Any]] = Field(default_factory=list)
    trace: str | None = None
    settle_s: float | None = None
    side_effects: float | None = None
    cpu_s: float | None = None
    exits: list[dict[str, Any]] = Field(default_factory=list)
    not_ready: int = 0
    #: The final state could not be read or checked (the candidate wrote the stores).
    unreadable: str | None = None
    #: Why the run failed (outcome ``error`` or ``timeout``): it counts 0.
    error: str | None = None
    #: Whether the candidate had started when the run failed (None: the worker did not say).
    candidate_started: bool | None = None


class Secondary(BaseModel):
    """Measures over the seeds that held (None when none did); they only break ties."""

    settle_p50_s: float | None = None
    settle_p95_s: float | None = None
    side_effects: float | None = None
    cpu_s: float | None = None
    #: Mean over the task's budgets of min(1, budget / measure): 1 within every budget.
    efficiency: float = 0.0
    budgets: dict[str, float] = Field(default_factory=dict)


class Grade(BaseModel):
    """A candidate's grade on one scenario (``chaos grade --json``, ``chaos.grade``)."""

    scenario: str
    service: str
    seed_set: SeedSet
    reward: float
    primary: float
    #: Invariant -> fraction of graded seeds where it held.
    invariants: dict[str, float]
    seeds: list[SeedGrade]
    secondary: Secondary
    #: Containment reason -> number of seeds the sandbox had to stop for it.
    contained: dict[str, int]
    candidate_sha256: str
    scenario_hash: str
    harness_version: str
    isolation: str
    limits: dict[str, float]
    #: Seeds graded: every seed asked for (the reward's denominator).
    graded: int
    #: Seeds whose run failed (a harness error twice, or a timeout): each counted 0.
    errors: int
    #: Of those, the ones where the candidate had not been shown to start: the machine is
    #: broken (``exit_code`` 3).
    harness_errors: int
    exit_code: int
    jobs: int
    wall_s: float
    runs_per_minute: float
    out_dir: str

    def rank_key(self) -> tuple[float, float]:
        """Order candidates: reward, then primary (equal rewards, equal correctness)."""
        return (self.reward, self.primary)


def _percentile(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile (None for no values)."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def seed_grade(outcome: RunOutcome, invariants: Sequence[str], sha256: str) -> SeedGrade:
    """One worker's outcome as a graded seed (an error if the worker ran another program
    than the one hashed when the grade began)."""
    data = outcome.result
    candidate = (data or {}).get("candidate") or {}
    error = outcome.error or f"exit code {outcome.exit_code}"
    started = (data or {}).get("candidate_started")
    if data is not None and candidate.get("sha256") != sha256:
        data, error = None, "the candidate's program changed during the grade"
    if outcome.exit_code not in (EXIT_HELD, EXIT_VIOLATED) or data is None:
        return SeedGrade(
            seed=outcome.seed,
            outcome="timeout" if outcome.timed_out else "error",
            held=False,
            error=error,
            candidate_started=started if isinstance(started, bool) else None,
            trace=None if outcome.trace is None else str(outcome.trace),
        )
    measures = candidate.get("measures") or {}
    # a verdict's ``valid`` is true, false or "unknown" (a checker that could not decide,
    # on odd evidence a candidate may have caused): undecided, never held
    verdicts = {
        v["name"]: v.get("valid") if isinstance(v.get("valid"), bool) else None
        for v in data.get("verdicts", [])
    }
    contained = list(candidate.get("contained") or [])
    held = (
        bool(data.get("held"))
        and not contained
        and all(verdicts.get(name) is True for name in invariants)
    )
    return SeedGrade(
        seed=outcome.seed,
        outcome="held" if held else ("contained" if contained else "violated"),
        held=held,
        verdicts={name: verdicts.get(name) for name in invariants},
        explanations={v["name"]: v.get("explanation", "") for v in data.get("verdicts", [])},
        contained=contained,
        trace=data.get("trace"),
        settle_s=measures.get("settle_s"),
        side_effects=measures.get("side_effects"),
        cpu_s=measures.get("cpu_s"),
        exits=list(candidate.get("exits") or []),
        not_ready=int(candidate.get("not_ready") or 0),
        unreadable=data.get("unreadable"),
    )


def secondary(seeds: Sequence[SeedGrade], task: TaskSpec) -> Secondary:
    held = [s for s in seeds if s.held]
    settle = [s.settle_s for s in held if s.settle_s is not None]
    values = {
        "settle_p95_s": _percentile(settle, 0.95),
        "cpu_s": _mean([s.cpu_s for s in held if s.cpu_s is not None]),
        "side_effects": _mean([s.side_effects for s in held if s.side_effects is not None]),
    }
    scores = []
    budgets = dict(task.budgets.items())
    for name, budget in budgets.items():
        value = values.get(name)
        if value is not None:
            scores.append(1.0 if value <= budget else budget / value)
    efficiency = (sum(scores) / len(scores) if scores else 1.0) if held else 0.0
    return Secondary(
        settle_p50_s=_percentile(settle, 0.5),
        settle_p95_s=values["settle_p95_s"],
        side_effects=values["side_effects"],
        cpu_s=values["cpu_s"],
        efficiency=round(efficiency, 6),
        budgets=budgets,
    )


def reward_of(primary: float, efficiency: float, graded: int) -> float:
    """Lexicographic in one number: primary first; efficiency only within a primary step."""
    if graded == 0:
        return 0.0
    return primary * (1.0 - (1.0 - efficiency) / (graded + 1))


def harness_version() -> str:
    try:
        return metadata.version("chaos-harness")
    except metadata.PackageNotFoundError:
        return "unknown"


def summarize(
    scenario: Scenario,
    program: Program,
    choice: SeedChoice,
    outcomes: Sequence[RunOutcome],
    *,
    isolation: str,
    limits: Limits,
    jobs: int,
    wall_s: float,
    out_dir: Path,
) -> Grade:
    """The grade of a candidate from its runs' outcomes (in seed order)."""
    task = task_of(scenario)
    by_seed = {o.seed: o for o in outcomes}
    seeds = [
        seed_grade(by_seed[s], scenario.invariants, program.sha256)
        if s in by_seed
        else SeedGrade(seed=s, outcome="error", held=False, error="the run never reported")
        for s in choice.seeds
    ]
    # Every seed asked for counts: one that failed to run counts as one that failed.
    n = len(seeds)
    primary = sum(s.held for s in seeds) / n if n else 0.0
    second = secondary(seeds, task)
    failed = [s for s in seeds if s.outcome in FAILED_RUNS]
    broken = [s for s in failed if s.candidate_started is not True]
    contained = Counter(c["reason"] for s in seeds for c in s.contained[:1])
    if broken:
        code = EXIT_HARNESS
    elif all(s.held for s in seeds):
        code = EXIT_HELD
    else:
        code = EXIT_VIOLATED
    return Grade(
        scenario=scenario.id,
        service=task.service,
        seed_set=choice.kind,
        reward=round(reward_of(primary, second.efficiency, n), 6),
        primary=round(primary, 6),
        invariants={
            name: round(sum(s.verdicts.get(name) is True for s in seeds) / n, 6) if n else 0.0
            for name in scenario.invariants
        },
        seeds=seeds,
        secondary=second,
        contained=dict(sorted(contained.items())),
        candidate_sha256=program.sha256,
        scenario_hash=scenario.content_hash(),
        harness_version=harness_version(),
        isolation=isolation,
        limits=limits.to_dict(),
        graded=n,
        errors=len(failed),
        harness_errors=len(broken),
        exit_code=code,
        jobs=jobs,
        wall_s=round(wall_s, 3),
        runs_per_minute=round(60 * len(seeds) / wall_s, 3) if wall_s > 0 else 0.0,
        out_dir=str(out_dir),
    )


# -- running a grade -------------------------------------------------------------------------


@dataclass
class GradeOptions:
    """What to grade, on which seeds, how (``chaos grade``'s flags)."""

    scenario: Scenario
    program: Program
    choice: SeedChoice
    jobs: int = 1
    limits: Limits | None = None
    isolation: str | None = None
    out_dir: Path | None = None
    #: ``process`` (default) or ``docker`` (``--sandbox``).
    sandbox: str | None = None
    #: Paths the candidate must not see (the key file, say), on top of the sandbox's own.
    hidden: tuple[Path, ...] = ()
    executor: Executor | None = None
    progress: Callable[[SeedGrade], None] | None = None
    #: How many times a seed whose run failed (a harness error: exit 3) is run again, each
    #: time in a fresh environment (a new worker, new servers), before it counts 0.
    retries: int = 1


def check_jobs(jobs: int) -> int:
    if not 1 <= jobs <= 64:
        raise ConfigError(f"--jobs must be between 1 and 64, got {jobs}")
    return jobs


def grade_dir(scenario: Scenario, program: Program, parent: Path | None = None) -> Path:
    """A fresh trace folder for one grade (0700: the candidate's traces are not its to read)."""
    parent = parent or Path("traces")
    try:
        parent.mkdir(parents=True, exist_ok=True)
        return Path(
            tempfile.mkdtemp(prefix=f"grade-{scenario.id}-{program.sha256[:12]}-", dir=parent)
        )
    except OSError as exc:
        raise ConfigError(f"cannot write traces under {parent}: {exc.strerror or exc}") from None


async def run_grade(options: GradeOptions) -> Grade:
    """Grade: every seed a graded run through the executor; a run in error is run again
    (``retries``), then counts 0."""
    scenario = options.scenario
    task = task_of(scenario)
    limits = options.limits or task.limits
    sandbox = make_sandbox(options.sandbox, options.isolation, task.libraries)
    sandbox.check(options.program)
    check_jobs(options.jobs)
    out_dir = options.out_dir or grade_dir(scenario, options.program)
    candidate = CandidateSpec(
        options.program, limits, options.isolation, options.sandbox,
        (*options.hidden, out_dir.resolve()),
    )  # fmt: skip
    execute = options.executor or sweep_executor
    started = time.monotonic()
    todo = list(options.choice.seeds)
    outcomes: dict[int, RunOutcome] = {}
    sha = options.program.sha256

    def progress(outcome: RunOutcome) -> None:
        if options.progress is not None:
            options.progress(seed_grade(outcome, scenario.invariants, sha))

    for _attempt in range(1 + options.retries):
        specs = [RunSpec(scenario_arg(scenario), s, (), out_dir, candidate=candidate) for s in todo]
        for outcome in await execute(specs, options.jobs, progress):
            outcomes[outcome.seed] = outcome
        # A harness error is run again; a held or violated run never, nor one that timed
        # out (it would only hang again).
        todo = [
            s
            for s in todo
            if outcomes[s].exit_code not in (EXIT_HELD, EXIT_VIOLATED) and not outcomes[s].timed_out
        ]
        if not todo:
            break
    return summarize(
        scenario,
        options.program,
        options.choice,
        list(outcomes.values()),
        isolation=sandbox.isolation,
        limits=limits,
        jobs=options.jobs,
        wall_s=time.monotonic() - started,
        out_dir=out_dir,
    )


def grade(
    scenario: str | Scenario,
    impl: str | Path,
    *,
    seeds: Sequence[int] | None = None,
    public: bool = False,
    heldout_key: str | Path | bytes | None = None,
    heldout: int | None = None,
    jobs: int = 1,
    limits: Limits | dict[str, float] | None = None,
    isolation: str | None = None,
    out_dir: str | Path | None = None,
    executor: Executor | None = None,
    sandbox: str | None = None,
) -> Grade:
    """Grade ``impl`` as ``scenario``'s task service (the Python API of ``chaos grade``).

    Seeds: ``seeds`` as given, else the public ones (``public=True``, or no key), else
    ``heldout`` (default: the task's count) seeds derived from ``heldout_key`` (a key file's
    path, or the key's bytes). Without ``executor``, the runs go to this process's kept warm
    workers (``chaos.grade_pool.shared_pool()``: started at the first grade, stopped at exit),
    shared by grades called at once from several threads. Each call writes its traces to a
    fresh folder (``out_dir``'s parent, default ``traces/``), so many processes may grade at
    once. Bad input raises
    ``ConfigError`` before anything starts."""
    loaded = scenario if isinstance(scenario, Scenario) else load_scenario(scenario)
    task = task_of(loaded)
    program = Program.from_path(impl)
    key_path: Path | None = None
    key: bytes | None = None
    if isinstance(heldout_key, bytes):
        key = heldout_key
        if len(heldout_key.strip()) < MIN_KEY_BYTES:
            raise ConfigError(f"a held-out key needs at least {MIN_KEY_BYTES} bytes")
    elif heldout_key is not None:
        key_path = Path(heldout_key)
        key = read_key(key_path)
    choice = choose_seeds(loaded, seeds=seeds, public=public, key=key, heldout=heldout)
    if isinstance(limits, dict):
        limits = Limits.from_dict(limits, task.limits)
    options = GradeOptions(
        loaded,
        program,
        choice,
        jobs=check_jobs(jobs),
        limits=limits,
        isolation=isolation,
        out_dir=grade_dir(loaded, program, Path(out_dir)) if out_dir else None,
        hidden=(key_path,) if key_path else (),
        executor=executor or (shared_pool() if warm.enabled() else None),
        sandbox=sandbox,
    )
    return trio.run(run_grade, options)


# -- JUnit -----------------------------------------------------------------------------------


def junit_xml(result: Grade) -> str:
    """One test case per seed and invariant (and one per seed for the sandbox)."""
    suite = ET.Element(
        "testsuite",
        name=f"chaos grade {result.scenario}",
        tests="0",
        failures="0",
        errors="0",
    )
    tests = failures = errors = 0
    for seed in result.seeds:
        classname = f"{result.scenario}.seed{seed.seed}"
        names = [*result.invariants, "sandbox"]
        for name in names:
            case = ET.SubElement(suite, "testcase", classname=classname, name=name)
            tests += 1
            if seed.outcome in FAILED_RUNS:
                ET.SubElement(case, "error", message=seed.error or "harness error")
                errors += 1
            elif name == "sandbox":
                if seed.contained:
                    first = seed.contained[0]
                    message = f"contained ({first['reason']}): {first['detail']}"
                    ET.SubElement(case, "failure", message=message)
                    failures += 1
            elif seed.verdicts.get(name) is not True:
                message = seed.explanations.get(name) or seed.unreadable or "not checked"
                ET.SubElement(case, "failure", message=message)
                failures += 1
            if seed.trace:
                ET.SubElement(case, "system-out").text = f"trace: {seed.trace}"
    suite.set("tests", str(tests))
    suite.set("failures", str(failures))
    suite.set("errors", str(errors))
    root = ET.Element("testsuites")
    root.append(suite)
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


__all__ = [
    "KEY_ENV",
    "Grade",
    "GradeOptions",
    "SeedGrade",
    "choose_seeds",
    "grade",
    "heldout_seeds",
    "junit_xml",
    "read_key",
    "reward_of",
    "run_grade",
    "summarize",
    "sweep_executor",
]
