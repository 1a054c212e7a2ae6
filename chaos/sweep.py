"""Seed sweeps: many runs of one scenario, side by side, each in its own worker process.

Every run is already isolated (its own ports, database cluster, stream and temp dir), so a
sweep only has to keep ``jobs`` workers busy: each worker is ``chaos run SCENARIO --seed N
--json`` as a child process, and its JSON verdict is the result. Where the workers run is
the executor's business (``chaos.executor``: here, or one Ray task per run). Cancelling the
sweep (Ctrl-C) interrupts every worker the way Ctrl-C interrupts a run, and waits for each
to remove what it started.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chaos.executor import Executor, LocalExecutor, RunOutcome, RunSpec
from ground.errors import EXIT_HARNESS, EXIT_HELD, EXIT_VIOLATED, ConfigError
from ground.rng import check_seed

MAX_SEEDS = 100_000


def parse_seeds(text: str) -> list[int]:
    """``"0-19"``, ``"3,5,8"`` or ``"7"`` (mixable: ``"0-4,10"``) -> sorted unique seeds."""
    seeds: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        low, sep, high = part.partition("-")
        try:
            first, last = (int(low), int(high)) if sep else (int(part), int(part))
        except ValueError:
            raise ConfigError(
                f"bad seeds {text!r}: use N, A-B or a comma-separated list of them"
            ) from None
        if first < 0 or last < first:
            raise ConfigError(f"bad seed range {part!r}: want 0 <= A <= B")
        check_seed(last)
        if last - first + 1 + len(seeds) > MAX_SEEDS:
            raise ConfigError(f"too many seeds in {text!r} (at most {MAX_SEEDS})")
        seeds.update(range(first, last + 1))
    return sorted(seeds)


#: One seed's outcome (``chaos.executor.RunOutcome``; ``.verdict`` is its JSON object).
SeedResult = RunOutcome


@dataclass
class SweepReport:
    scenario: str
    variant: str
    results: list[SeedResult] = field(default_factory=list)
    wall_s: float = 0.0
    #: Where the runs ran (``kind``: local or ray, and the executor's settings).
    executor: dict[str, Any] = field(default_factory=lambda: {"kind": "local"})

    @property
    def counts(self) -> Counter[str]:
        return Counter(r.outcome for r in self.results)

    @property
    def exit_code(self) -> int:
        counts = self.counts
        if counts["violated"]:
            return EXIT_VIOLATED
        return EXIT_HARNESS if counts["error"] or counts["timeout"] else EXIT_HELD

    def to_json(self) -> dict[str, Any]:
        by_invariant = Counter(name for r in self.results for name in r.violated())
        return {
            "scenario": self.scenario,
            "variant": self.variant,
            "executor": self.executor,
            "runs": len(self.results),
            "held": self.counts["held"],
            "violated": self.counts["violated"],
            "errors": self.counts["error"],
            "timeouts": self.counts["timeout"],
            "retried": sum(r.attempts - 1 for r in self.results),
            "lost_workers": sum(len(r.lost) for r in self.results),
            "violations_by_invariant": dict(sorted(by_invariant.items())),
            "wall_s": round(self.wall_s, 2),
            "runs_per_minute": round(60 * len(self.results) / self.wall_s, 2)
            if self.wall_s
            else 0.0,
            "seeds": [
                {
                    "seed": r.seed,
                    "outcome": r.outcome,
                    "violated": r.violated(),
                    "trace": str(r.trace) if r.trace else (r.verdict or {}).get("trace"),
                    "partial": r.partial,
                    "error": r.error or None,
                    "wall_s": round(r.wall_s, 2),
                    "timings": (r.verdict or {}).get("timings", {}),
                    "attempts": r.attempts,
                    "lost": r.lost,
                    "worker": r.worker or None,
                }
                for r in self.results
            ],
        }


async def sweep(
    scenario: str,
    variant: str,
    seeds: list[int],
    *,
    jobs: int,
    out_dir: Path,
    extra: list[str] | None = None,
    progress: Callable[[SeedResult], None] | None = None,
    executor: Executor | None = None,
) -> SweepReport:
    """Run every seed through ``executor`` (default: worker processes here), ``jobs`` at a
    time, traces into ``out_dir`` (which must exist); results in seed order."""
    if jobs < 1:
        raise ConfigError(f"jobs must be >= 1, got {jobs}")
    execute = executor or LocalExecutor()
    report = SweepReport(scenario, variant)
    specs = [RunSpec(scenario, seed, tuple(extra or ()), out_dir, variant) for seed in seeds]
    started = time.monotonic()
    outcomes = await execute(specs, jobs, progress)
    report.wall_s = time.monotonic() - started
    by_seed = {o.seed: o for o in outcomes}
    report.results = [by_seed[s] for s in seeds]
    describe = getattr(execute, "describe", None)
    report.executor = describe() if callable(describe) else {"kind": type(execute).__name__}
    return report
