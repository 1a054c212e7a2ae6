"""Seed sweeps: many runs of one scenario, side by side, each in its own worker process.

Every run is already isolated (its own ports, database cluster, stream and temp dir), so a
sweep only has to keep ``jobs`` workers busy: each worker is ``chaos run SCENARIO --seed N
--json`` as a child process, and its JSON verdict is the result. Cancelling the sweep
(Ctrl-C) interrupts every worker the way Ctrl-C interrupts a run, and waits for each to
remove what it started.
"""

from __future__ import annotations

import json
import signal
import sys
import time
from collections import Counter
from collections.abc import Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio

from chaos import _signals, warm
from chaos.errors import EXIT_HARNESS, EXIT_HELD, EXIT_VIOLATED, ConfigError
from chaos.rng import check_seed
from chaos.services._spawn import PIPE, Child, spawn

#: How long an interrupted worker may take to clean up before it is killed.
_STOP_GRACE_S = 60.0
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


@dataclass
class SeedResult:
    seed: int
    exit_code: int
    verdict: dict[str, Any] | None = None
    error: str = ""
    wall_s: float = 0.0

    @property
    def outcome(self) -> str:
        return {EXIT_HELD: "held", EXIT_VIOLATED: "violated"}.get(self.exit_code, "error")

    def violated(self) -> list[str]:
        verdicts = (self.verdict or {}).get("verdicts", [])
        return [v["name"] for v in verdicts if v.get("valid") is False]


@dataclass
class SweepReport:
    scenario: str
    variant: str
    results: list[SeedResult] = field(default_factory=list)
    wall_s: float = 0.0

    @property
    def counts(self) -> Counter[str]:
        return Counter(r.outcome for r in self.results)

    @property
    def exit_code(self) -> int:
        counts = self.counts
        if counts["violated"]:
            return EXIT_VIOLATED
        return EXIT_HARNESS if counts["error"] else EXIT_HELD

    def to_json(self) -> dict[str, Any]:
        by_invariant = Counter(name for r in self.results for name in r.violated())
        return {
            "scenario": self.scenario,
            "variant": self.variant,
            "runs": len(self.results),
            "held": self.counts["held"],
            "violated": self.counts["violated"],
            "errors": self.counts["error"],
            "violations_by_invariant": dict(sorted(by_invariant.items())),
            "runs_per_minute": round(60 * len(self.results) / self.wall_s, 2)
            if self.wall_s
            else 0.0,
            "seeds": [
                {
                    "seed": r.seed,
                    "outcome": r.outcome,
                    "violated": r.violated(),
                    "trace": (r.verdict or {}).get("trace"),
                    "error": r.error or None,
                    "wall_s": round(r.wall_s, 2),
                }
                for r in self.results
            ],
        }


async def _interrupt(process: Child) -> None:
    """Cancel a worker as Ctrl-C would, then wait for its cleanup (kill if it hangs); a
    second Ctrl-C of the sweep is passed on (the worker then stops its services at once)."""
    process.send_signal(signal.SIGINT)
    forwarded = False
    with trio.move_on_after(_STOP_GRACE_S):
        while True:
            with trio.move_on_after(0.1):
                await process.wait()
                return
            if _signals.hurrying() and not forwarded:
                process.send_signal(signal.SIGINT)
                forwarded = True
    process.kill()
    await process.wait()


async def _read_all(stream: trio.abc.ReceiveStream | None, into: bytearray) -> None:
    if stream is None:
        return
    async with stream:
        while chunk := await stream.receive_some(65536):
            into += chunk


async def run_seed(
    scenario: str, variant: str, seed: int, out_dir: Path, extra: list[str]
) -> SeedResult:
    """One ``chaos run`` in a worker process."""
    trace = out_dir / f"{variant}-seed{seed}.trace"
    argv = [
        sys.executable, "-m", "chaos", "run", scenario, "--seed", str(seed),
        "--variant", variant, "--out", str(trace), "--json", *extra,
    ]  # fmt: skip
    started = time.monotonic()
    # Its own session: a terminal's Ctrl-C reaches the sweep only, which then interrupts each
    # worker exactly once. SIGTERM if the sweep dies: the worker cleans up and exits.
    process = spawn(argv, stdout=PIPE, stderr=PIPE, start_new_session=True,
                    pdeathsig=signal.SIGTERM)  # fmt: skip
    stdout, stderr = bytearray(), bytearray()
    # The pipes are read to the end even while the sweep is cancelled (shielded), so an
    # interrupted worker can still print; at most a second after it exits.
    readers = [trio.CancelScope(shield=True), trio.CancelScope(shield=True)]

    async def read(
        scope: trio.CancelScope, stream: trio.abc.ReceiveStream | None, into: bytearray
    ) -> None:
        with scope:
            await _read_all(stream, into)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(read, readers[0], process.stdout, stdout)
        nursery.start_soon(read, readers[1], process.stderr, stderr)
        try:
            returncode = await process.wait()
        except BaseException:
            with trio.CancelScope(shield=True):
                await _interrupt(process)
            raise
        finally:
            for scope in readers:
                scope.deadline = trio.current_time() + 1.0
    result = SeedResult(seed, returncode, wall_s=time.monotonic() - started)
    if returncode in (EXIT_HELD, EXIT_VIOLATED):
        try:
            result.verdict = json.loads(bytes(stdout))
        except ValueError:
            result.exit_code, result.error = EXIT_HARNESS, "the run printed no JSON verdict"
    else:
        lines = stderr.decode(errors="replace").strip().splitlines()
        result.error = lines[-1] if lines else f"exit code {returncode}"
    return result


async def run_seed_warm(
    pool: warm.WarmPool, scenario: str, variant: str, seed: int, out_dir: Path
) -> SeedResult:
    """One run on a warm worker of ``pool`` (chaos.warm): the same result as ``run_seed``."""
    trace = out_dir / f"{variant}-seed{seed}.trace"
    started = time.monotonic()
    request = {"scenario": scenario, "variant": variant, "seed": seed, "out": str(trace)}
    try:
        answer = await pool.run(request)
    except warm.WorkerGone as exc:
        return SeedResult(seed, EXIT_HARNESS, error=str(exc), wall_s=time.monotonic() - started)
    result = SeedResult(seed, int(answer["exit_code"]), wall_s=time.monotonic() - started)
    if result.exit_code in (EXIT_HELD, EXIT_VIOLATED):
        result.verdict = answer["verdict"]
    else:
        result.error = str(answer.get("error") or f"exit code {result.exit_code}")
    return result


async def sweep(
    scenario: str,
    variant: str,
    seeds: list[int],
    *,
    jobs: int,
    out_dir: Path,
    extra: list[str] | None = None,
    progress: Callable[[SeedResult], None] | None = None,
    use_warm: bool | None = None,
) -> SweepReport:
    """Run every seed, ``jobs`` at a time, traces into ``out_dir`` (which must exist);
    results in seed order. Runs go to ``jobs`` warm workers (chaos.warm) unless ``use_warm``
    is False, ``CHAOS_WARM=0`` or ``extra`` run arguments are given: then each seed is a cold
    ``chaos run``."""
    if jobs < 1:
        raise ConfigError(f"jobs must be >= 1, got {jobs}")
    if use_warm is None:
        use_warm = warm.enabled()
    use_warm = use_warm and not extra
    report = SweepReport(scenario, variant)
    limiter = trio.CapacityLimiter(jobs)
    results: dict[int, SeedResult] = {}
    started = time.monotonic()

    async def one(seed: int, pool: warm.WarmPool | None) -> None:
        async with limiter:
            if pool is not None:
                result = await run_seed_warm(pool, scenario, variant, seed, out_dir)
            else:
                result = await run_seed(scenario, variant, seed, out_dir, extra or [])
        results[seed] = result
        if progress is not None:
            progress(result)

    async with AsyncExitStack() as stack:
        pool = await stack.enter_async_context(warm.open_warm_pool(jobs)) if use_warm else None
        async with trio.open_nursery() as nursery:
            for seed in seeds:
                nursery.start_soon(one, seed, pool)
    report.wall_s = time.monotonic() - started
    report.results = [results[s] for s in seeds]
    return report
