"""The outcome of one invariant check."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from ground.errors import ConfigError

Validity = bool | Literal["unknown"]

#: The one vocabulary every command, report and document uses for a verdict.
HELD, VIOLATED, UNKNOWN = "held", "VIOLATED", "unknown"


def verdict_word(valid: object) -> str:
    """``held`` (True), ``VIOLATED`` (False) or ``unknown`` (anything else): the word every
    command, report and JSON ``verdict`` field uses."""
    if valid is True:
        return HELD
    return VIOLATED if valid is False else UNKNOWN


@dataclass(frozen=True, slots=True)
class Verdict:
    """Whether an invariant held (True), was violated (False) or could not be decided."""

    name: str
    valid: Validity
    explanation: str
    evidence: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.valid not in (True, False, "unknown") or not isinstance(self.valid, bool | str):
            raise ConfigError(f"verdict valid must be True, False or 'unknown', got {self.valid!r}")

    @classmethod
    def holds(cls, name: str, explanation: str, **evidence: Any) -> Verdict:
        return cls(name, True, explanation, evidence)

    @classmethod
    def violated(cls, name: str, explanation: str, **evidence: Any) -> Verdict:
        return cls(name, False, explanation, evidence)

    @classmethod
    def unknown(cls, name: str, explanation: str, **evidence: Any) -> Verdict:
        return cls(name, "unknown", explanation, evidence)

    @property
    def word(self) -> str:
        """``held``, ``VIOLATED`` or ``unknown``."""
        return verdict_word(self.valid)

    def to_dict(self, *, evidence: bool = True) -> dict[str, Any]:
        """Plain data for traces and JSON output (``evidence=False``: the short form the
        commands print, which also carries the word, ``verdict``: held, VIOLATED or
        unknown; the trace keeps the evidence)."""
        data: dict[str, Any] = {
            "name": self.name,
            "valid": self.valid,
            "explanation": self.explanation,
        }
        if evidence:
            data["evidence"] = self.evidence
        else:
            data["verdict"] = self.word
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Verdict:
        """Read ``to_dict`` output back; ConfigError if a field is missing or mistyped."""
        try:
            name, valid, explanation = data["name"], data["valid"], data["explanation"]
        except KeyError as missing:
            raise ConfigError(f"verdict is missing {missing}") from None
        evidence = data.get("evidence", {})
        if not isinstance(name, str) or not isinstance(explanation, str):
            raise ConfigError("verdict name and explanation must be strings")
        if not isinstance(evidence, dict):
            raise ConfigError(f"verdict evidence must be a map, got {type(evidence).__name__}")
        return cls(name, valid, explanation, evidence)
