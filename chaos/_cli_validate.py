"""``chaos validate``: golden on held-out seeds, every defective variant caught reproducibly.

Every pack's input is checked before the first run (``check_input``, ``check_declarations``);
results are kept as they are measured, so a validation cut off by a harness error or a
signal still prints its partial report (tables or JSON) before the one-line error.
"""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from chaos import _signals
from chaos._checks import check_out_dir
from chaos._cli_exec import ExecFlags, open_executor
from chaos._cli_out import status_line, verdict_mark
from chaos.errors import EXIT_HARNESS, EXIT_HELD, EXIT_VIOLATED, ConfigError
from chaos.executor import Executor, executor_replay, executor_run
from chaos.rng import check_seed
from chaos.scenario import Scenario, builtin_scenarios, load_scenario
from chaos.stress import cpu_count, open_stress, parse_stress
from chaos.validate import (
    CAUGHT,
    GoldenCheck,
    Observed,
    RunFn,
    ValidationReport,
    check_declarations,
    real_replay,
    real_run,
    validate,
)

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


def _golden_under_stress(run: RunFn, loops: int | None) -> RunFn:
    """``run``, with the golden's runs beside ``loops`` busy loops (``--stress``)."""
    if loops is None:
        return run

    async def stressed(variant: str, seed: int, out: Path, *, faults: bool = True) -> Observed:
        if variant != "golden":
            return await run(variant, seed, out, faults=faults)
        async with open_stress(loops):
            return await run(variant, seed, out, faults=faults)

    return stressed


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
) -> int:
    """Validate ``scenario`` (or every built-in pack); print the tables (or one JSON object);
    return the exit code. All input is checked before the first run. ``stress``: the
    golden's held-out seeds run beside that many busy loops ("auto": 2 per CPU)."""
    check_input(seeds, first_seed, replays)
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
                    loops,
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
) -> None:
    with status_line(f"chaos validate {loaded.id}") as say:
        step = {"name": "starting"}

        def phase(name: str) -> None:  # a run's phase, within the current step
            say(f"{step['name']}: {name}")

        def progress(message: str) -> None:
            step["name"] = message
            say(message)

        # Runs in this process, or (--ray, --run-timeout) each through the executor.
        run = executor_run(executor, loaded.source) if through_executor else None
        replay = executor_replay(executor, loaded.source) if through_executor else None
        _signals.run(
            partial(
                validate,
                loaded,
                seeds=seeds,
                first_seed=first_seed,
                replays=replays,
                out_dir=folder,
                run=_golden_under_stress(run or real_run(loaded, phase), loops),
                replay=replay or real_replay(phase, loaded),
                progress=progress,
                report=report,
            )
        )


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

    table = Table(title=f"{report.scenario}: defective variants", title_justify="left")
    columns = ("variant", "declared", "result", "no fault", "seed", "fidelity", "signals",
               "also violated", "trace")  # fmt: skip
    for column in columns:
        table.add_column(column, overflow="fold")
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
        table.add_row(
            escape(name),
            escape(check.invariant),
            f"[{colour}]{check.status}[/]",
            no_fault,
            str(check.seed) if check.seed is not None else f"none of {tried or '-'}",
            fidelity,
            signals,
            escape(", ".join(check.other_violations) or "-"),
            escape(str(check.trace or "-")),
        )
    out.print(table)
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
