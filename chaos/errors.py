"""The exception tree of chaos-harness.

::

    ChaosError
      ConfigError            bad scenario file, CLI input or fault parameters   -> exit 2
      TraceError             a trace file cannot be read                         -> exit 2
        TraceFormatError       bad magic, bad checksum, malformed frame
        TraceVersionError      a format version this harness does not read
      ReplayDiverged         a replay's history left the recording
      ServiceError           a service failed to start or died (with its log tail) -> exit 3

Messages are short and specific; the CLI prints them on one line, never a traceback.
"""

from __future__ import annotations

from typing import Any


class ChaosError(Exception):
    """Root of every error the harness raises on purpose."""


class ConfigError(ChaosError):
    """Bad input from a user: scenario file, CLI flag, fault parameters."""


class TraceError(ChaosError):
    """A trace file cannot be read."""


class TraceFormatError(TraceError):
    """Bad magic, bad checksum or a malformed frame."""


class TraceVersionError(TraceError):
    """A trace format version this harness does not read."""


class ReplayDiverged(ChaosError):
    """A replay's history diverged from the recording."""

    def __init__(self, message: str, first_divergence: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.first_divergence = first_divergence

    @classmethod
    def from_mismatch(cls, index: int, expected: Any, actual: Any) -> ReplayDiverged:
        return cls(
            f"replay diverged at event {index}: expected {expected!r}, got {actual!r}",
            {"index": index, "expected": expected, "actual": actual},
        )


class ServiceError(ChaosError):
    """A service failed to start or died unexpectedly."""

    def __init__(self, message: str, log_tail: str = "") -> None:
        super().__init__(message)
        self.log_tail = log_tail
