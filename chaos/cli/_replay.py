"""``chaos replay``: re-run a recorded trace N times; fidelity, verdict match, first divergence."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import trio
from rich.console import Console
from rich.markup import escape

from ground import _signals
from ground.errors import ConfigError
from invariants import verdict_word

MAX_TIMES = 1000


def _interrupted(exc: BaseException) -> bool:
    if isinstance(exc, BaseExceptionGroup):
        return all(_interrupted(e) for e in exc.exceptions)
    return isinstance(exc, KeyboardInterrupt | trio.Cancelled)


def _verdicts(verdicts: list[dict[str, Any]]) -> str:
    return ", ".join(f"{v.get('name')} {verdict_word(v.get('valid'))}" for v in verdicts) or "none"


def note_unfinished(trace: Path) -> None:
    """One stderr line when a run that has not finished left ``TRACE.partial`` beside it."""
    from replay.trace import partial_path

    partial = partial_path(trace)
    if partial.is_file():
        Console(stderr=True, highlight=False, soft_wrap=True).print(
            f"[yellow]chaos: note: {escape(str(partial))} holds the trace of a later run that "
            "has not finished (still running, or killed)[/]"
        )


def replay_command(
    trace: Path,
    times: int,
    as_json: bool,
    strict: bool,
    scenario: str | None = None,
    stress: str | None = None,
) -> int:
    """Replay ``trace`` ``times`` times; print the report (or one JSON object); the exit code.
    ``scenario``: the pack to replay with; ``stress``: replay beside that many busy loops
    ("auto": as the recorded load suggests)."""
    from chaos.replay import prepare_replay, run_replays
    from chaos.stress import describe, open_stress, parse_stress, suggested_stress
    from replay.outcome import ReplayReport

    if not 1 <= times <= MAX_TIMES:
        raise ConfigError(f"--times must be between 1 and {MAX_TIMES}, got {times}")
    if stress is not None and stress != "auto":
        parse_stress(stress, 1)  # a bad count: exit 2 before the trace is even read
    err = Console(stderr=True, highlight=False, soft_wrap=True)
    plan = prepare_replay(trace, strict=strict, scenario=scenario)
    recorded_load = plan.trace.header.get("load")
    loops = parse_stress(stress, suggested_stress(recorded_load))
    if loops is not None:
        err.print(
            f"chaos: replaying beside {loops} busy loop(s); recorded load: "
            f"{escape(describe(recorded_load))}"
        )
    note_unfinished(trace)
    for line in plan.drift:
        err.print(f"[yellow]chaos: warning: drift: {escape(line)}[/]")
    if plan.drift:
        err.print("[yellow]chaos: warning: the replay may not reproduce the recording[/]")
    if plan.partial:
        err.print(
            "[yellow]chaos: warning: the trace is partial (the recorded run was cut off): "
            f"{len(plan.trace.verdicts)} recorded verdict(s) to compare against[/]"
        )
    label = f"chaos replay {plan.scenario.id} --variant {plan.variant} --seed {plan.seed}"
    with err.status(f"{label}: starting") as status:

        def progress(message: str) -> None:
            status.update(f"{label}: {message}")

        async def replays() -> ReplayReport:
            if loops is None:
                return await run_replays(plan, times, progress=progress)
            async with open_stress(loops):
                return await run_replays(plan, times, progress=progress)

        try:
            report = _signals.run(replays)
        except BaseException as exc:
            if _interrupted(exc):
                raise KeyboardInterrupt from None
            raise
    if as_json:
        print(json.dumps(report.to_json(), sort_keys=True, default=str))
        return report.exit_code
    out = Console(highlight=False, soft_wrap=True)
    n_faults = len(plan.schedule.events)
    out.print(
        f"[bold]{escape(str(trace))}[/]: {plan.scenario.id} variant [bold]{plan.variant}[/] "
        f"seed {plan.seed}, {n_faults} fault(s) from the trace"
        + (" [yellow](partial trace)[/]" if report.partial else "")
    )
    out.print(f"recorded: {escape(_verdicts(report.recorded))}")
    for r in report.replays:
        if r.error is not None:
            head = f"[red]harness error[/]: {escape(r.error)}"
        elif not report.recorded:
            head = "[yellow]nothing to compare[/]: the recording has no verdicts"
        elif r.matched:
            head = "[green]reproduced[/] the recorded verdicts"
        else:
            head = f"[red]did not reproduce[/] ({escape(', '.join(r.mismatched))} differ)"
        out.print(f"replay {r.number}/{report.times}: {head}  ({r.wall_s:.1f}s)")
        if r.verdicts and not r.matched:  # what it reached instead
            out.print(f"  verdicts: {escape(_verdicts(r.verdicts))}")
        if r.first_divergence is None:
            what = "recorded prefix" if report.partial else "recording"
            out.print(f"  first divergence: none (the logical history matches the {what})")
        else:
            out.print(f"  first divergence: {escape(r.first_divergence.describe())}")
        out.print(f"  trace: {escape(str(r.trace))}")
    colour = "green" if report.reproduced else "red"
    out.print(
        f"replay fidelity: [{colour}]{report.matched}/{report.times}[/] "
        f"({report.fidelity:.0%}) of the replays reproduced the recorded verdicts"
    )
    return report.exit_code
