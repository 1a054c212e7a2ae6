"""``chaos grade``: a candidate's reward on public or held-out seeds (table, JSON, JUnit)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from chaos.cli._exec import ExecFlags, open_executor, progress_bar
from chaos.grading import (
    KEY_ENV,
    Grade,
    GradeOptions,
    SeedGrade,
    check_jobs,
    choose_seeds,
    grade_dir,
    junit_xml,
    read_key,
    run_grade,
)
from chaos.sandbox.candidate import Limits, Program
from chaos.sandbox.graded import make_sandbox, task_of
from chaos.scenario import load_scenario
from chaos.sweep import parse_seeds
from ground import _signals
from ground._checks import check_limits
from ground._paths import check_in_path, check_out_dir, check_out_file, replace_file
from ground.errors import ConfigError


def grade_command(
    scenario: str,
    impl: Path,
    public: bool,
    heldout_key: Path | None,
    heldout: int | None,
    seeds_text: str | None,
    jobs: int | None,
    limit_texts: list[str],
    isolation: str | None,
    out_dir: Path | None,
    junit: Path | None,
    as_json: bool,
    sandbox_kind: str | None = None,
    flags: ExecFlags | None = None,
) -> int:
    """Grade; print a table (or one JSON object); return the exit code."""
    loaded = load_scenario(scenario)
    task = task_of(loaded)
    loaded.fault_space("golden")  # the space graded runs draw from, checked before any run
    program = Program.from_path(check_in_path(impl, "--impl"))
    key_path = heldout_key
    if key_path is None and not public and seeds_text is None and os.environ.get(KEY_ENV):
        key_path = Path(os.environ[KEY_ENV])
    if key_path is not None and (public or seeds_text is not None):
        raise ConfigError("--heldout-key goes with neither --public nor --seeds")
    key = read_key(key_path) if key_path is not None else None
    seeds = parse_seeds(seeds_text) if seeds_text is not None else None
    choice = choose_seeds(loaded, seeds=seeds, public=public, key=key, heldout=heldout)
    max_in_flight = check_jobs(jobs) if jobs is not None else None
    jobs = max_in_flight or max(1, (os.cpu_count() or 2) // 2)
    flags = flags or ExecFlags()
    flags.check()
    limits = Limits.parse(limit_texts, task.limits)
    check_limits(limits.to_dict())
    sandbox = make_sandbox(sandbox_kind, isolation, task.libraries)
    sandbox.check(program)
    if junit is not None:
        check_out_file(junit, "--junit", "JUnit", make_folders=False)
    check_out_dir(out_dir or Path("traces"), "--out-dir")
    err = Console(stderr=True, highlight=False)
    if choice.kind == "heldout" and sandbox.isolation == "user":
        err.print(
            "chaos: warning: not root: the candidate runs as your own user and can read "
            "what you can (the key's file included); grade held-out seeds as root"
        )

    with open_executor(flags, max_in_flight) as executor:
        folder = grade_dir(loaded, program, out_dir)  # once Ray (if asked for) is reachable
        with progress_bar(f"grade {loaded.id}", len(choice.seeds)) as bar:

            def progress(seed: SeedGrade) -> None:
                line = None if as_json else f"seed {seed.seed}: {_why(seed)}"
                bar.advance(seed.outcome, line)

            options = GradeOptions(
                loaded,
                program,
                choice,
                jobs=jobs,
                limits=limits,
                isolation=isolation,
                out_dir=folder,
                hidden=(key_path.resolve(),) if key_path is not None else (),
                sandbox=sandbox_kind,
                executor=executor,
                progress=progress,
            )
            result = _signals.run(run_grade, options)
    if junit is not None:
        replace_file(junit, junit_xml(result), "--junit")
    if as_json:
        print(json.dumps(result.model_dump(mode="json"), sort_keys=True))
    else:
        print_grade(result)
    return result.exit_code


def _why(seed: SeedGrade) -> str:
    if seed.outcome in ("error", "timeout"):
        return f"{seed.outcome} ({seed.error})"
    if seed.contained:
        first = seed.contained[0]
        return f"contained: {first['reason']} ({first['detail']})"
    failed = [name for name, ok in seed.verdicts.items() if ok is not True]
    if seed.unreadable:
        return f"VIOLATED: final state unreadable ({seed.unreadable})"
    return f"VIOLATED: {', '.join(failed)}" if failed else "held"


def print_grade(result: Grade) -> None:
    out = Console(soft_wrap=True)
    table = Table("seed", "outcome", "settle s", "cpu s", "trace")
    for seed in result.seeds:
        table.add_row(
            str(seed.seed),
            escape(_why(seed)),
            "" if seed.settle_s is None else f"{seed.settle_s:.2f}",
            "" if seed.cpu_s is None else f"{seed.cpu_s:.2f}",
            escape(seed.trace or ""),
        )
    out.print(table)
    held = sum(s.held for s in result.seeds)
    out.print(
        f"[bold]{escape(result.scenario)}[/] {escape(result.service)} "
        f"{result.candidate_sha256[:12]} ({result.seed_set} seeds, {result.isolation} "
        f"isolation): reward [bold]{result.reward:.4f}[/], {held} of {result.graded} seeds "
        f"held (primary {result.primary:.4f}), {result.errors} harness errors (each counted "
        f"0; {result.harness_errors} before the candidate started)"
    )
    for name, rate in result.invariants.items():
        out.print(f"  {escape(name)}: held on {rate:.0%} of the seeds")
    for reason, count in result.contained.items():
        out.print(f"  contained: {escape(reason)} on {count} seed(s)")
    second = result.secondary
    if second.settle_p95_s is not None:
        out.print(
            f"  settle p50 {second.settle_p50_s:.2f} s, p95 {second.settle_p95_s:.2f} s; "
            f"CPU {second.cpu_s or 0:.2f} s per run; efficiency {second.efficiency:.3f}"
        )
