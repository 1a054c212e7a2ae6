"""A fault schedule on disk (``chaos run --schedule FILE``): read, checked against a scenario.

The file holds the one JSON shape every command uses, ``{seed, space_hash, events}``
(``chaos run --json``'s ``schedule``, the trace's schedule frame; docs/faults.md). It is read
with ``FaultSchedule.from_dict`` and each event's target (and its trigger's link or subject)
must be a name the scenario's fault spaces declare: the golden table's or the run variant's.
Every problem is one ``ConfigError`` line, raised before any service starts.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from chaos.scenario import Scenario
from faults.kinds import TargetKind
from faults.model import FaultEvent, FaultSchedule
from faults.triggers import AfterBytes, OnConnection, OnMessage
from ground.errors import ConfigError


def read_schedule_file(path: Path) -> FaultSchedule:
    """The schedule in ``path`` (ConfigError naming the file if it is missing or bad)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"--schedule {path}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"--schedule {path}: not UTF-8 text") from None
    try:
        raw: Any = json.loads(text)
    except ValueError as exc:
        raise ConfigError(f"--schedule {path}: not JSON: {exc}") from None
    if not isinstance(raw, dict):
        raise ConfigError(
            f"--schedule {path}: must be a JSON object {{seed, space_hash, events}}, "
            f"got {type(raw).__name__}"
        )
    if "events" not in raw:  # the model's default (none) would be a silent fault-free run
        raise ConfigError(
            f"--schedule {path}: events is required (an empty list runs no fault, as "
            "--no-faults does)"
        )
    try:
        return FaultSchedule.from_dict(raw)
    except ConfigError as exc:
        raise ConfigError(f"--schedule {path}: {exc}") from None


def _names(event: FaultEvent) -> list[tuple[TargetKind, str]]:
    """The names an event refers to: its target, and its trigger's link or subject."""
    names = [(event.target.kind, event.target.name)]
    trigger = event.trigger
    if isinstance(trigger, OnMessage):
        names.append((TargetKind.SUBJECT, trigger.subject))
    elif isinstance(trigger, OnConnection | AfterBytes):
        names.append((TargetKind.LINK, trigger.link))
    return names


def check_schedule_targets(scenario: Scenario, variant: str, schedule: FaultSchedule) -> None:
    """Every name the schedule's events use must be declared by the golden space or the
    variant's (a search draws from either); ConfigError naming the first that is not."""
    spaces = [scenario.fault_space(v) for v in dict.fromkeys(("golden", variant))]
    lacks = set(scenario.absent.get(variant, ()))
    for event in schedule.events:
        for kind, name in _names(event):
            if name in lacks:
                raise ConfigError(
                    f"schedule event {event.id}: variant {variant!r} of scenario "
                    f"{scenario.id} has no {kind.value} {name!r} (Scenario.absent)"
                )
            if not any(name in space.declared(kind) for space in spaces):
                declared = sorted({n for space in spaces for n in space.declared(kind)})
                raise ConfigError(
                    f"schedule event {event.id}: scenario {scenario.id} has no {kind.value} "
                    f"{name!r} (it has: {', '.join(declared) or 'none'})"
                )


def load_schedule(path: Path, scenario: Scenario, variant: str) -> FaultSchedule:
    """``read_schedule_file`` then ``check_schedule_targets``, the message naming ``path``."""
    schedule = read_schedule_file(path)
    try:
        check_schedule_targets(scenario, variant, schedule)
    except ConfigError as exc:
        raise ConfigError(f"--schedule {path}: {exc}") from None
    return schedule


__all__ = ["check_schedule_targets", "load_schedule", "read_schedule_file"]
