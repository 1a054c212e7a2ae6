"""``chaos sweep``: run a scenario over many seeds, a few at a time, and summarise."""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path

from rich.console import Console
from rich.table import Table

from chaos.cli._exec import ExecFlags, open_executor, progress_bar
from chaos.scenario import load_scenario
from chaos.sweep import SeedResult, SweepReport, parse_seeds, sweep
from chaos.warm import default_jobs
from ground import _signals
from ground._paths import check_out_dir
from ground.errors import ConfigError


def sweep_command(
    scenario: str,
    seeds_text: str,
    variant: str,
    jobs: int | None,
    out_dir: Path | None,
    as_json: bool,
    flags: ExecFlags | None = None,
) -> int:
    """Sweep; print a table (or one JSON object); return the exit code."""
    loaded = load_scenario(scenario)  # bad scenario or variant: exit 2 before any worker
    loaded.check_variant(variant)
    loaded.fault_space(variant)  # readable, naming nothing the variant lacks: exit 2 first
    scenario = loaded.source  # workers load the same pack, whatever directory they run in
    seeds = parse_seeds(seeds_text)
    if jobs is not None and not 1 <= jobs <= 64:
        raise ConfigError(f"--jobs must be between 1 and 64, got {jobs}")
    flags = flags or ExecFlags()
    flags.check()
    folder = check_out_dir(out_dir or Path("traces") / f"sweep-{loaded.id}-{variant}", "--out-dir")
    with open_executor(flags, max_in_flight=jobs) as executor:  # Ray reached: exit 2 if not
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"cannot use --out-dir {folder}: {exc.strerror or exc}") from None
        # --jobs not given: measured default here (docs/sweep.md); Ray: its CPUs decide
        workers = jobs if jobs is not None else default_jobs()
        with progress_bar(f"sweep {loaded.id} {variant}", len(seeds)) as bar:

            def progress(result: SeedResult) -> None:
                detail = ", ".join(result.violated()) or result.error
                word = "VIOLATED" if result.outcome == "violated" else result.outcome
                line = f"seed {result.seed}: {word}" + (f" ({detail})" if detail else "")
                if result.lost:
                    line += f" [retried after: {'; '.join(result.lost)}]"
                bar.advance(result.outcome, None if as_json else line)

            run = partial(sweep, scenario, variant, seeds, jobs=workers, out_dir=folder,
                          progress=progress, executor=executor)  # fmt: skip
            report = _signals.run(run)
    report.scenario = loaded.id
    if as_json:
        print(json.dumps(report.to_json(), sort_keys=True))
    else:
        print_report(report)
    return report.exit_code


def print_report(report: SweepReport) -> None:
    out = Console(soft_wrap=True)
    summary = report.to_json()
    table = Table("seed", "outcome", "violated", "trace")
    for row in summary["seeds"]:
        table.add_row(
            str(row["seed"]),
            "VIOLATED" if row["outcome"] == "violated" else row["outcome"],
            ", ".join(row["violated"]) or (row["error"] or ""),
            str(row["trace"] or ""),
        )
    out.print(table)
    out.print(
        f"{report.scenario} {report.variant}: {summary['runs']} runs, {summary['held']} held, "
        f"{summary['violated']} VIOLATED, {summary['errors']} errors, "
        f"{summary['timeouts']} timeouts, {summary['retried']} retried after a lost worker; "
        f"{summary['runs_per_minute']} runs per minute"
    )
    for name, count in summary["violations_by_invariant"].items():
        out.print(f"  {name} violated on {count} seed(s)")
