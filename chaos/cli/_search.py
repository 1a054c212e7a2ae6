"""``chaos search``: find a fault schedule that breaks an invariant, shrink it, save its trace."""

from __future__ import annotations

import json
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from chaos.cli._out import status_line, verdict_table
from chaos.scenario import load_scenario
from chaos.search import (
    WITNESS_REPLAYS,
    SearchResult,
    check_budget,
    check_jobs,
    check_space,
    default_jobs,
    required_witness,
)
from chaos.search_scenario import (
    default_search_trace,
    resume_schedule,
    search_scenario,
    search_space,
)
from ground._paths import check_out_file
from ground.rng import check_seed


def search_command(
    scenario: str,
    variant: str,
    invariant: str | None,
    max_examples: int,
    max_shrinks: int,
    seed: int,
    out: Path | None,
    as_json: bool,
    space: str = "variant",
    resume: Path | None = None,
    jobs: int | None = None,
    replays: int = WITNESS_REPLAYS,
) -> int:
    """Search; print the result (or one JSON object); return 1 found, 0 not found."""
    check_seed(seed)
    check_budget(max_examples, max_shrinks)
    jobs = default_jobs() if jobs is None else jobs
    check_jobs(jobs)
    check_space(space)
    loaded = load_scenario(scenario)
    loaded.check_variant(variant)
    if resume is not None:  # read and checked here, before the status line starts
        start = resume_schedule(loaded, variant, resume, search_space(loaded, variant, space))
        seed = start.seed
    check_out_file(out or default_search_trace(loaded.id, variant), "--out", "trace")
    title = (
        f"chaos search {loaded.id} --variant {variant} --space {space} --seed {seed} --jobs {jobs}"
    )
    with status_line(title, long=True) as progress:
        result = search_scenario(
            loaded,
            variant,
            seed=seed,
            invariant=invariant,
            max_examples=max_examples,
            max_shrinks=max_shrinks,
            out=out,
            progress=progress,
            space=space,
            resume=resume,
            jobs=jobs,
            replays=replays,
        )
    if as_json:
        print(json.dumps(result.to_json(loaded.id, variant), sort_keys=True, default=str))
    else:
        print_search(result, loaded.id, variant, invariant, space, jobs)
    return result.exit_code


def print_search(
    result: SearchResult,
    scenario: str,
    variant: str,
    invariant: str | None,
    space: str = "variant",
    jobs: int | None = None,
) -> None:
    out = Console(highlight=False, soft_wrap=True)
    target = f"invariant {invariant}" if invariant else "any invariant"
    head = f"[bold]{scenario}[/] variant [bold]{variant}[/]: {result.tried} schedule(s) tried"
    if not result.found or result.schedule is None:
        out.print(f"{head}; no violation of {target} found within the budget")
        return
    events = result.schedule.events
    out.print(
        f"{head} ({result.shrink_runs} while shrinking); [red]violation found[/] "
        f"({target}); minimal schedule: {len(events)} fault(s)"
    )
    for event in events:
        params = ", ".join(f"{k}={v}" for k, v in event.params.model_dump().items())
        when = event.trigger.model_dump()
        trigger = f"{when.pop('type')}(" + ", ".join(f"{k}={v}" for k, v in when.items()) + ")"
        lasting = "" if event.duration_s is None else f" for {event.duration_s}s"
        out.print(
            f"  {event.id} {event.kind.value} {escape(str(event.target))}"
            f" ({escape(params) or 'defaults'}), trigger {escape(trigger)}{lasting}"
        )
    out.print(verdict_table(result.verdicts))
    if result.fidelity is not None:
        again, replays = result.fidelity
        need = required_witness(replays)
        if result.racy:
            out.print(
                f"[yellow]racy witness[/]: its schedule violated again in {again} of {replays} "
                f"replays ({100 * again // replays}%), below the {need} needed; no schedule of "
                "the shrink path did better (a narrow timing window: aim the space's trigger "
                "at the protocol event, not at a time)"
            )
        else:
            out.print(f"witness fidelity: {again}/{replays} replays violated again (need {need})")
    out.print(f"trace: {escape(str(result.trace))}  (reproduce: chaos replay {result.trace})")
    if not result.shrink_complete:
        out.print(
            f"[yellow]shrinking stopped at its budget[/] ({result.shrink_runs} run"
            f"{'' if result.shrink_runs == 1 else 's'}): the "
            "schedule may not be minimal; continue with "
            + escape(
                f"chaos search {scenario} --variant {variant} --space {space} "
                + (f"--jobs {jobs} " if jobs is not None else "")
                + f"--resume {result.trace}"
            )
        )
