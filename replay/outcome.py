"""What a replay reports: per replay its verdicts, match and first divergence; fidelity k/N."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ground.errors import EXIT_HARNESS
from ground.errors import EXIT_HELD as EXIT_REPRODUCED
from ground.errors import EXIT_VIOLATED as EXIT_NOT_REPRODUCED
from invariants.verdict import verdict_word
from replay.divergence import Divergence

_ABSENT = object()


def _brief(verdicts: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    return [
        {**{k: v.get(k) for k in ("name", "valid", "explanation")},
         "verdict": verdict_word(v.get("valid"))}
        for v in verdicts
    ]  # fmt: skip


def verdict_map(verdicts: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Invariant name -> validity (True, False or "unknown")."""
    return {str(v.get("name")): v.get("valid") for v in verdicts}


def mismatched(recorded: Mapping[str, Any], replayed: Mapping[str, Any]) -> list[str]:
    """Invariants whose validity differs (or that only one side checked)."""
    names = sorted(recorded.keys() | replayed.keys())
    return [n for n in names if recorded.get(n, _ABSENT) != replayed.get(n, _ABSENT)]


@dataclass
class ReplayOutcome:
    """One replay: its trace, verdicts, whether they match the recording, where it diverged."""

    number: int
    trace: Path
    verdicts: list[dict[str, Any]] = field(default_factory=list)
    matched: bool = False
    mismatched: list[str] = field(default_factory=list)
    first_divergence: Divergence | None = None
    wall_s: float = 0.0
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "number": self.number,
            "trace": str(self.trace),
            "verdicts": _brief(self.verdicts),
            "matched": self.matched,
            "mismatched": self.mismatched,
            "first_divergence": (
                self.first_divergence.to_json() if self.first_divergence else None
            ),
            "wall_s": round(self.wall_s, 3),
            "error": self.error,
        }


@dataclass
class ReplayReport:
    """All replays of one trace against its recorded verdicts."""

    trace: Path
    scenario: str
    variant: str
    seed: int
    recorded: list[dict[str, Any]]
    partial: bool = False
    drift: list[str] = field(default_factory=list)
    recorded_wall_s: float | None = None
    replays: list[ReplayOutcome] = field(default_factory=list)

    @property
    def times(self) -> int:
        return len(self.replays)

    @property
    def matched(self) -> int:
        return sum(r.matched for r in self.replays)

    @property
    def fidelity(self) -> float:
        """k/N: the share of replays whose verdicts match the recording."""
        return self.matched / self.times if self.replays else 0.0

    @property
    def reproduced(self) -> bool:
        """Every replay reproduced the recorded verdicts."""
        return bool(self.replays) and self.matched == self.times

    @property
    def exit_code(self) -> int:
        if any(r.error is not None for r in self.replays):
            return EXIT_HARNESS
        return EXIT_REPRODUCED if self.reproduced else EXIT_NOT_REPRODUCED

    def to_json(self) -> dict[str, Any]:
        return {
            "trace": str(self.trace),
            "scenario": self.scenario,
            "variant": self.variant,
            "seed": self.seed,
            "partial": self.partial,
            "drift": self.drift,
            "recorded": _brief(self.recorded),
            "recorded_wall_s": self.recorded_wall_s,
            "reproduced": self.reproduced,
            "times": self.times,
            "matched": self.matched,
            "fidelity": self.fidelity,
            "replays": [r.to_json() for r in self.replays],
        }
