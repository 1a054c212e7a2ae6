"""What an invariant is, and running several without ever raising at the caller."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from invariants.history import History
from invariants.verdict import Verdict

CheckFn = Callable[[History, Mapping[str, Any]], Verdict]


@runtime_checkable
class Invariant(Protocol):
    """A named, pure check of a run: ``(history, final_state) -> Verdict``."""

    @property
    def name(self) -> str: ...

    def check(self, history: History, final_state: Mapping[str, Any]) -> Verdict: ...


@dataclass(frozen=True, slots=True)
class FunctionInvariant:
    """An ``Invariant`` made from a plain check function."""

    name: str
    fn: CheckFn
    description: str = ""

    def check(self, history: History, final_state: Mapping[str, Any]) -> Verdict:
        return self.fn(history, final_state)


def run_checkers(
    checkers: Iterable[Invariant], history: History, final_state: Mapping[str, Any]
) -> list[Verdict]:
    """One verdict per checker, in order; a checker that raises gives an ``unknown`` verdict."""
    verdicts: list[Verdict] = []
    for checker in checkers:
        name = str(getattr(checker, "name", repr(checker)))
        try:
            verdict = checker.check(history, final_state)
        except Exception as error:  # a checker error is a result, never the caller's crash
            verdict = Verdict.unknown(
                name,
                f"checker crashed: {type(error).__name__}: {error}",
                error_type=type(error).__name__,
            )
        if not isinstance(verdict, Verdict):
            verdict = Verdict.unknown(
                name, f"checker returned {type(verdict).__name__}, not a Verdict"
            )
        verdicts.append(verdict)
    return verdicts
