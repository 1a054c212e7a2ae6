"""``chaos validate``: golden on held-out seeds, every defective variant caught reproducibly."""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from chaos import _signals
from chaos._checks import check_out_dir
from chaos._cli_out import status_line, verdict_mark
from chaos.errors import ConfigError
from chaos.rng import check_seed
from chaos.scenario import load_scenario
from chaos.stress import cpu_count, open_stress, parse_stress
from chaos.validate import (
    CAUGHT,
    Observed,
    RunFn,
    ValidationReport,
    declared_catches,
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

    async def stressed(variant: str, seed: int, out: Path) -> Observed:
        if variant != "golden":
            return await run(variant, seed, out)
        async with open_stress(loops):
            return await run(variant, seed, out)

    return stressed


def validate_command(
    scenario: str,
    seeds: int,
    first_seed: int,
    replays: int,
    out_dir: Path | None,
    as_json: bool,
    stress: str | None = None,
) -> int:
    """Validate ``scenario``; print the tables (or one JSON object); return the exit code.
    ``stress``: the golden's held-out seeds run beside that many busy loops ("auto": 2/CPU)."""
    check_input(seeds, first_seed, replays)
    loops = parse_stress(stress, 2 * cpu_count())
    loaded = load_scenario(scenario)
    declared_catches(loaded)  # a variant without a declared invariant: exit 2, nothing run
    folder = check_out_dir(out_dir or default_out_dir(loaded.id), "--out-dir")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot create {folder}: {exc.strerror or exc}") from None
    with status_line(f"chaos validate {loaded.id}") as say:
        step = {"name": "starting"}

        def phase(name: str) -> None:  # a run's phase, within the current step
            say(f"{step['name']}: {name}")

        def progress(message: str) -> None:
            step["name"] = message
            say(message)

        report = _signals.run(
            partial(
                validate,
                loaded,
                seeds=seeds,
                first_seed=first_seed,
                replays=replays,
                out_dir=folder,
                run=_golden_under_stress(real_run(loaded, phase), loops),
                replay=real_replay(phase),
                progress=progress,
            )
        )
    if as_json:
        print(json.dumps(report.to_json(), sort_keys=True, default=str))
    else:
        print_report(report)
    return report.exit_code


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
    for column in ("variant", "declared", "result", "seed", "fidelity", "also violated", "trace"):
        table.add_column(column, overflow="fold")
    for name, check in report.variants.items():
        colour = "green" if check.status == CAUGHT else "red"
        tried = ", ".join(str(a["seed"]) for a in check.attempts)
        fidelity = f"{check.reproduced}/{len(check.replays)}" if check.replays else "-"
        table.add_row(
            escape(name),
            escape(check.invariant),
            f"[{colour}]{check.status}[/]",
            str(check.seed) if check.seed is not None else f"none of {tried or '-'}",
            fidelity,
            escape(", ".join(check.other_violations) or "-"),
            escape(str(check.trace or "-")),
        )
    out.print(table)
    if report.valid:
        out.print(f"[green]{report.scenario} validates[/]")
    else:
        kind = "INVALID" if report.failed else "incomplete (harness error)"
        out.print(f"[red]{report.scenario} {kind}[/]")
