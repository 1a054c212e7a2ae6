"""``chaos validate``: golden on held-out seeds, every defective variant caught reproducibly.

Every pack's input is checked before the first run (``check_input``, ``check_declarations``);
results are kept as they are measured, so a validation cut off by a harness error or a
signal still prints its partial report (tables or JSON) before the one-line error.
"""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path
from typing import Any

import trio
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from chaos.cli._exec import ExecFlags, open_executor
from chaos.cli._out import status_line, verdict_mark
from chaos.executor import (
    BatchFn,
    Executor,
    LocalExecutor,
    RunSpec,
    executor_replay,
    executor_run,
)
from chaos.replay import prepare_replay, replay_path
from chaos.run import no_fault_schedule
from chaos.scenario import Scenario, builtin_scenarios, load_scenario
from chaos.stress import cpu_count, open_stress, parse_stress
from chaos.validate import (
    CAUGHT,
    GoldenCheck,
    Observed,
    ReplayFn,
    RunVariantFn,
    ValidationReport,
    VariantCheck,
    bounded,
    check_declarations,
    real_replay,
    real_run,
    validate,
)
from ground import _signals
from ground._paths import check_out_dir
from ground.errors import EXIT_HARNESS, EXIT_HELD, EXIT_VIOLATED, ConfigError
from ground.rng import check_seed
from replay.trace import read_trace

MAX_SEEDS, MAX_REPLAYS = 1000, 100


def default_out_dir(scenario: str) -> Path:
    return Path("traces") / f"validate-{scenario}"


def check_input(seeds: int, first_seed: int, replays: int) -> None:
    """Bad numbers are ConfigErrors (exit 2) before anything runs."""
    if not 1 <= seeds <= MAX_SEEDS:
        raise ConfigError(f"--seeds must be between 1 and {MAX_SEEDS}, got {seeds}")
    if not 1 <= replays <= MAX_REPLAYS:
        raise ConfigError(f"--replays must be between 1 and {MAX_REPLAYS}, got {replays}")
    check_seed(first_seed, "--first-seed")
    check_seed(first_seed + seeds - 1, "the last held-out seed (--first-seed + --seeds - 1)")


def _golden_under_stress(run: RunVariantFn, loops: int | None) -> RunVariantFn:
    """``run``, with the golden's runs beside ``loops`` busy loops (``--stress``)."""
    if loops is None:
        return run

    async def stressed(variant: str, seed: int, out: Path, *, faults: bool = True) -> Observed:
        if variant != "golden":
            return await run(variant, seed, out, faults=faults)
        async with open_stress(loops):
            return await run(variant, seed, out, faults=faults)

    return stressed


def session_runners(
    scenario: Scenario, run_batch: BatchFn, jobs: int, say: Any = None
) -> tuple[RunVariantFn, ReplayFn]:
    """A ``RunVariantFn`` and a ``ReplayFn`` on an executor session (``LocalExecutor.session``:
    warm workers kept for the whole validation), ``jobs`` runs at a time in all. A run is
    the seed's own draw (or the no-fault schedule, as ``chaos run --no-faults``); replay
    ``n`` of a trace is a run of its recorded seed, variant and schedule written to
    ``replay_path(trace, n)``, as ``chaos replay`` would (its replays side by side)."""
    limiter = trio.CapacityLimiter(jobs)
    source = scenario.source

    async def one(spec: RunSpec) -> tuple[Path, dict[str, Any] | None, str | None]:
        async with limiter:
            [outcome] = await run_batch([spec], None)
        trace = outcome.trace or spec.trace
        if say is not None:  # a line per finished run (a pipe hears of each)
            say(f"{spec.variant}: {trace.name} done ({outcome.outcome})")
        if outcome.exit_code not in (EXIT_HELD, EXIT_VIOLATED) or outcome.result is None:
            return trace, None, outcome.error or f"exit code {outcome.exit_code}"
        return trace, outcome.result, None

    async def run(variant: str, seed: int, out: Path, *, faults: bool = True) -> Observed:
        schedule = None if faults else no_fault_schedule(scenario, variant, seed).to_dict()
        spec = RunSpec(source, seed, (), out.parent, variant, out.name, schedule)
        trace, result, error = await one(spec)
        if result is None:
            return Observed(trace, error=error)
        verdicts = {v["name"]: v.get("valid") for v in result.get("verdicts", [])}
        events = await trio.to_thread.run_sync(lambda: read_trace(trace).events)
        return Observed(trace, verdicts, bool(result.get("settled", True)), events=events)

    async def replay(trace: Path, times: int) -> list[Observed]:
        plan = prepare_replay(trace, scenario=scenario)
        schedule = plan.schedule.to_dict()
        outs: list[Observed | None] = [None] * times

        async def number(n: int) -> None:
            out = replay_path(trace, n)
            spec = RunSpec(source, plan.seed, (), out.parent, plan.variant, out.name, schedule)
            path, result, error = await one(spec)
            verdicts = {} if result is None else {
                str(v.get("name")): v.get("valid") for v in result.get("verdicts", [])
            }  # fmt: skip
            outs[n - 1] = Observed(path, verdicts, True, error)

        async with trio.open_nursery() as nursery:
            for n in range(1, times + 1):
                nursery.start_soon(number, n)
        return [o for o in outs if o is not None]

    return run, replay


def default_jobs() -> int:
    """``chaos validate``'s default ``--jobs``: one run per CPU (at most 64). Each run's
    timing is what a catching trace and its replays record, so validate stays nearer the
    CPUs than a sweep (4 per CPU)."""
    return max(1, min(64, cpu_count()))


def _packs(scenario: str | None, all_packs: bool) -> list[Scenario]:
    if all_packs and scenario is not None:
        raise ConfigError("give a scenario or --all, not both")
    if not all_packs and scenario is None:
        raise ConfigError("give a scenario (a built-in id or a folder), or --all")
    return [load_scenario(s) for s in (builtin_scenarios() if all_packs else [scenario or ""])]


def validate_command(
    scenario: str | None,
    seeds: int,
    first_seed: int,
    replays: int,
    out_dir: Path | None,
    as_json: bool,
    all_packs: bool = False,
    flags: ExecFlags | None = None,
    stress: str | None = None,
    jobs: int | None = None,
) -> int:
    """Validate ``scenario`` (or every built-in pack); print the tables (or one JSON object);
    return the exit code. All input is checked before the first run. ``stress``: the
    golden's held-out seeds run beside that many busy loops ("auto": 2 per CPU). ``jobs``:
    runs side by side (default ``default_jobs()``; 1: one at a time in this process)."""
    check_input(seeds, first_seed, replays)
    if jobs is not None and not 1 <= jobs <= 64:
        raise ConfigError(f"--jobs must be between 1 and 64, got {jobs}")
    if jobs is not None and jobs > 1 and stress is not None:
        raise ConfigError("--stress measures the golden beside busy loops: it goes with --jobs 1")
    jobs = jobs if jobs is not None else 1 if stress is not None else default_jobs()
    loops = parse_stress(stress, 2 * cpu_count())
    flags = flags or ExecFlags()
    flags.check()
    if loops is not None and flags.ray is not None:
        raise ConfigError("--stress loads this machine: it goes with local runs, not --ray")
    packs = _packs(scenario, all_packs)
    folders: list[Path] = []
    for loaded in packs:
        check_declarations(loaded)  # nothing runs until every pack's declarations are good
        default = default_out_dir(loaded.id)
        base = out_dir / loaded.id if (out_dir is not None and all_packs) else out_dir
        folders.append(check_out_dir(base or default, "--out-dir"))
    reports: list[ValidationReport] = []
    with open_executor(flags) as executor:  # Ray reached (exit 2 if not) before any folder
        for folder in folders:
            try:
                folder.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise ConfigError(f"cannot create {folder}: {exc.strerror or exc}") from None
        try:
            for loaded, folder in zip(packs, folders, strict=True):
                report = ValidationReport(loaded.id, GoldenCheck([]))
                reports.append(report)
                _validate_one(
                    loaded, report, seeds, first_seed, replays, folder, executor, flags.custom,
                    loops, jobs,
                )  # fmt: skip
        except BaseException as exc:
            if reports:  # print what was measured, then fail as the error says
                reports[-1].error = " ".join(str(exc).split()) or type(exc).__name__
                _print(reports, as_json, all_packs)
            raise
    _print(reports, as_json, all_packs)
    return overall_exit_code(reports)


def overall_exit_code(reports: list[ValidationReport]) -> int:
    """1 if any check failed, else 3 if any validation is incomplete, else 0."""
    codes = {r.exit_code for r in reports}
    if EXIT_VIOLATED in codes:
        return EXIT_VIOLATED
    return EXIT_HARNESS if EXIT_HARNESS in codes else EXIT_HELD


def _print(reports: list[ValidationReport], as_json: bool, all_packs: bool) -> None:
    if as_json:
        if all_packs:
            data = {
                "packs": {r.scenario: r.to_json() for r in reports},
                "valid": all(r.valid for r in reports),
            }
        else:
            data = reports[0].to_json()
        print(json.dumps(data, sort_keys=True, default=str), flush=True)
        return
    for report in reports:
        print_report(report)


def _validate_one(
    loaded: Scenario,
    report: ValidationReport,
    seeds: int,
    first_seed: int,
    replays: int,
    folder: Path,
    executor: Executor,
    through_executor: bool,
    loops: int | None = None,
    jobs: int = 1,
) -> None:
    with status_line(f"chaos validate {loaded.id}", long=True) as say:
        step = {"name": "starting"}

        def phase(name: str) -> None:  # a run's phase, within the current step
            say(f"{step['name']}: {name}")

        def progress(message: str) -> None:
            step["name"] = message
            say(message)

        checks = partial(
            validate,
            loaded,
            seeds=seeds,
            first_seed=first_seed,
            replays=replays,
            out_dir=folder,
            progress=progress,
            report=report,
            side_by_side=jobs > 1,
        )
        if jobs > 1 and not through_executor and isinstance(executor, LocalExecutor):
            # Side by side on one executor session: warm workers kept for the whole pack.
            _signals.run(partial(_on_session, loaded, executor, jobs, checks, loops, progress))
            return
        # Runs in this process, or (--ray, --run-timeout) each through the executor.
        run = executor_run(executor, loaded.source) if through_executor else None
        replay = executor_replay(executor, loaded.source) if through_executor else None
        run, replay = run or real_run(loaded, phase), replay or real_replay(phase, loaded)
        if jobs > 1:
            run, replay = bounded(run, replay, jobs)
        _signals.run(partial(checks, run=_golden_under_stress(run, loops), replay=replay))


async def _on_session(
    loaded: Scenario,
    executor: LocalExecutor,
    jobs: int,
    checks: Any,
    loops: int | None,
    say: Any = None,
) -> ValidationReport:
    probe = RunSpec(loaded.source, 0, (), Path("."))
    async with executor.session(jobs, warm_pool=executor.warm_for([probe])) as run_batch:
        run, replay = session_runners(loaded, run_batch, jobs, say)
        report: ValidationReport = await checks(
            run=_golden_under_stress(run, loops), replay=replay
        )
        return report


def _errors(check: VariantCheck) -> list[str]:
    """The distinct harness errors a variant's check met (no-fault run, seeds, replays)."""
    found = [check.no_faults.error] if check.no_faults is not None else []
    found += [a.get("error") for a in check.attempts]
    found += [r.error for r in check.replays]
    return list(dict.fromkeys(e for e in found if e))


def print_report(report: ValidationReport, out: Console | None = None) -> None:
    """The golden table, the variants table and the one-line conclusion."""
    out = out or Console(highlight=False, soft_wrap=True)
    golden = report.golden
    table = Table(title=f"{report.scenario}: golden on held-out seeds", title_justify="left")
    for column in ("seed", "verdicts", "settled", "trace"):
        table.add_column(column, overflow="fold")
    for seed, run in golden.runs.items():
        verdicts = (
            f"[red]harness error[/]: {escape(run.error)}"
            if run.error
            else ", ".join(f"{n} {verdict_mark(v)}" for n, v in run.verdicts.items())
        )
        settled = "yes" if run.settled else "[red]no[/]"
        table.add_row(str(seed), verdicts, settled, escape(str(run.trace)))
    out.print(table)
    held = "[green]held on every seed[/]" if golden.held else "[red]did NOT hold[/]"
    out.print(f"golden {held} ({len(golden.runs)}/{len(golden.seeds)} seeds run)")

    # One block per variant, not a table: nine columns of prose wrap unreadably at 80.
    out.print(f"{escape(report.scenario)}: defective variants")
    for name, check in report.variants.items():
        colour = "green" if check.status == CAUGHT else "red"
        tried = ", ".join(str(a["seed"]) for a in check.attempts)
        fidelity = (
            f"{check.reproduced}/{len(check.replays)} (need {check.required})"
            if check.replays
            else "-"
        )
        quiet = check.no_faults
        no_fault = (
            "-"
            if quiet is None
            else "held"
            if quiet.held()
            else f"[red]{'harness error' if quiet.error else 'VIOLATED'}[/]"
        )
        signals = "; ".join(
            f"{escape(s['what'])} {'[green]seen[/]' if s['found'] else '[red]MISSING[/]'}"
            for s in check.signals
        ) or ("none declared" if check.seed is not None else "-")
        caught_at = str(check.seed) if check.seed is not None else f"none of {tried or '-'}"
        also = escape(", ".join(check.other_violations) or "-")
        out.print(f"  {escape(name)}: [{colour}]{check.status}[/] (declared: "
                  f"{escape(check.invariant)})")  # fmt: skip
        out.print(f"    no fault: {no_fault}; seed: {caught_at}; fidelity: {fidelity}; "
                  f"also violated: {also}")  # fmt: skip
        out.print(f"    signals: {signals}")
        out.print(f"    trace: {escape(str(check.trace or '-'))}")
        for error in _errors(check):
            out.print(f"    [red]harness error[/]: {escape(error)}")
    for again in report.rerun:
        kept = f" (its trace: {again['trace']})" if again.get("trace") else ""
        out.print(f"[yellow]run again after a harness error[/]: {escape(str(again['what']))}: "
                  f"{escape(str(again['error']))}{escape(kept)}")  # fmt: skip
    if report.error is not None:
        out.print(f"[red]validation stopped early: {escape(report.error)}[/]")
    missing = [v for v in report.expected if v not in report.variants]
    if missing:
        out.print(f"[yellow]not checked: {escape(', '.join(missing))}[/]")
    if report.valid:
        out.print(f"[green]{report.scenario} validates[/]")
    else:
        kind = "FAILED validation" if report.failed else "incomplete (harness error)"
        out.print(f"[red]{report.scenario} {kind}[/]")
