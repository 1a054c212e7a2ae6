"""``chaos run`` and ``chaos show``: one reproducible run, and a trace as a timeline."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from chaos.cli._out import status_line, verdict_table
from chaos.run import RunOptions, RunResult, default_trace_path, no_fault_schedule, run_scenario
from chaos.scenario import Scenario, load_scenario
from chaos.schedule_file import load_schedule
from ground import _signals
from ground._checks import check_limits
from ground._paths import check_in_file, check_in_path, check_out_file
from ground.errors import ConfigError
from ground.rng import check_seed


def check_external(postgres_dsn: str | None, nats_url: str | None) -> None:
    """A malformed --postgres-dsn or --nats-url is refused before anything starts."""
    if postgres_dsn is not None:
        from chaos.services.postgres import external_postgres

        external_postgres(postgres_dsn)
    if nats_url is not None:
        from chaos.services.nats import external_nats

        external_nats(nats_url)


_NOT_GRADED: tuple[Path | None, list[str], str | None, list[Path], str | None] = (
    None, [], None, [], None,
)  # fmt: skip


def run_command(
    scenario: str,
    seed: int | None,
    variant: str,
    out: Path | None,
    as_json: bool,
    postgres_dsn: str | None,
    nats_url: str | None,
    graded: tuple[Path | None, list[str], str | None, list[Path], str | None] = _NOT_GRADED,
    no_faults: bool = False,
    schedule_file: Path | None = None,
) -> int:
    """Run once (``no_faults``: with an empty schedule; ``schedule_file``: exactly the schedule
    in that file, under its seed); print the verdicts (or one JSON object); return the exit
    code."""
    impl, limits, isolation, hide, sandbox = graded
    if schedule_file is not None:
        for flag, given in (("--no-faults", no_faults), ("--impl", impl is not None)):
            if given:
                raise ConfigError(f"--schedule does not go with {flag}")
    if impl is not None and no_faults:
        raise ConfigError("--no-faults does not go with --impl (a graded run draws its faults)")
    if seed is not None:
        check_seed(seed)
    if schedule_file is not None:
        check_in_file(schedule_file, "--schedule", "schedule")  # a FIFO is never waited on
    if impl is not None:
        check_in_path(impl, "--impl")
    check_external(postgres_dsn, nats_url)
    loaded = load_scenario(scenario)
    loaded.check_variant(variant)
    loaded.check_externals(postgres_dsn)
    loaded.fault_space(variant)  # readable, naming nothing the variant lacks: exit 2 first
    schedule = None
    if schedule_file is not None:
        schedule = load_schedule(schedule_file, loaded, variant)
        if seed is not None and seed != schedule.seed:
            raise ConfigError(
                f"--seed {seed} differs from the seed {schedule.seed} of --schedule "
                f"{schedule_file} (the run seed is the schedule's; leave --seed out)"
            )
        seed = schedule.seed
    seed = 0 if seed is None else seed
    if no_faults:
        schedule = no_fault_schedule(loaded, variant, seed)
    if impl is not None:
        out = out or default_trace_path(loaded.id, "candidate", seed)
        check_out_file(out, "--out", "trace")
        return _graded_run(loaded, seed, out, as_json, postgres_dsn, nats_url, graded)
    if limits or isolation or hide or sandbox:
        raise ConfigError(
            "--limit, --isolation, --sandbox and --hide go with --impl (a graded run)"
        )
    check_out_file(out or default_trace_path(loaded.id, variant, seed), "--out", "trace")
    with status_line(f"chaos run {loaded.id} --variant {variant} --seed {seed}") as progress:
        options = RunOptions(
            loaded,
            seed,
            variant=variant,
            out=out,
            postgres_dsn=postgres_dsn,
            nats_url=nats_url,
            progress=progress,
            schedule=schedule,
        )
        result = _signals.run(run_scenario, options)
    if as_json:
        print(json.dumps(result.to_json(), sort_keys=True))
    else:
        print_result(result)
    return result.exit_code


def _graded_run(
    scenario: Scenario,
    seed: int,
    out: Path | None,
    as_json: bool,
    postgres_dsn: str | None,
    nats_url: str | None,
    graded: tuple[Path | None, list[str], str | None, list[Path], str | None],
) -> int:
    """``chaos run --impl``: one run with a candidate (what each chaos grade worker does)."""
    from chaos.sandbox.candidate import Limits
    from chaos.sandbox.graded import make_candidate, run_graded, task_of

    impl, limit_texts, isolation, hide, sandbox = graded
    assert impl is not None
    task = task_of(scenario)
    limits = Limits.parse(limit_texts, task.limits)
    check_limits(limits.to_dict())
    candidate = make_candidate(
        scenario, impl, limits=limits, isolation=isolation, hidden=tuple(hide),
        sandbox_kind=sandbox,
    )  # fmt: skip
    title = f"chaos run {scenario.id} --seed {seed} --impl {impl}"
    with status_line(title) as progress:
        options = RunOptions(
            scenario,
            seed,
            out=out or default_trace_path(scenario.id, "candidate", seed),
            postgres_dsn=postgres_dsn,
            nats_url=nats_url,
            progress=progress,
            candidate=candidate,
        )
        run = _signals.run(run_graded, options)
    if as_json:
        print(json.dumps(run.to_json(), sort_keys=True))
    else:
        if run.result is not None:
            print_result(run.result)
        report = candidate.report
        out_ = Console(soft_wrap=True)
        for c in report.contained:
            out_.print(f"[red]contained[/]: {escape(c['reason'])}: {escape(c['detail'])}")
        if run.unreadable:
            out_.print(f"[red]final state unreadable[/]: {escape(run.unreadable)}")
        if run.error:
            when = "after" if run.candidate_started else "before"
            out_.print(f"[red]harness error[/] ({when} the candidate started): {escape(run.error)}")
        out_.print(
            f"candidate {report.sha256[:12]} ({report.isolation}): "
            f"{'held' if run.held else 'failed'}; CPU {report.cpu_s:.2f} s; trace {run.trace}"
        )
    return run.exit_code


def print_result(result: RunResult) -> None:
    out = Console(soft_wrap=True)
    schedule = result.schedule.events
    faults = ", ".join(f"{e.id} {e.kind.value} {e.target}" for e in schedule) or "none"
    out.print(
        f"[bold]{escape(result.scenario)}[/] variant [bold]{escape(result.variant)}[/] seed "
        f"{result.seed}: {len(schedule)} fault(s): {escape(faults)}"
    )
    out.print(verdict_table(result.verdicts))
    if result.stuck:
        out.print("[yellow]the system could not settle (the scenario said so: chaos show TRACE, "
                  "its settle line): checked as it stood[/]")  # fmt: skip
    elif not result.settled:
        out.print("[yellow]the system did not settle within the scenario's timeout[/]")
    held = "all invariants held" if result.held else "invariants violated"
    out.print(f"{held}; trace: {result.trace}")


def _check_window(since: float | None, until: float | None) -> None:
    """--since/--until: finite seconds >= 0, since <= until; checked before reading anything."""
    for flag, value in (("--since", since), ("--until", until)):
        if value is not None and not (math.isfinite(value) and value >= 0):
            raise ConfigError(f"{flag} must be a finite number of seconds >= 0, got {value}")
    if since is not None and until is not None and since > until:
        raise ConfigError(f"--since must be <= --until, got --since {since} --until {until}")


def show_command(
    trace: Path, faults_only: bool, ops_only: bool, since: float | None, until: float | None
) -> None:
    """Print ``trace`` as a text timeline (``chaos show``); bad options exit 2 before reading."""
    from chaos.cli._replay import note_unfinished
    from replay.report import render_timeline
    from replay.trace import read_trace

    if faults_only and ops_only:
        raise ConfigError("--faults-only and --ops-only exclude each other")
    _check_window(since, until)
    text = render_timeline(
        read_trace(trace),
        faults_only=faults_only,
        ops_only=ops_only,
        since_s=since,
        until_s=until,
    )
    note_unfinished(trace)
    sys.stdout.write(text if text.endswith("\n") else text + "\n")
