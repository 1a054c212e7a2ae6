"""The exception tree of chaos-harness.

::

    ChaosError
      ConfigError            bad scenario file, CLI input or fault parameters   -> exit 2
      ProxyAPIError          carries an HTTP status and a Toxiproxy error message
        ProxyNotFound          404 "proxy not found"
        ProxyExists            409 "proxy already exists"
        ToxicNotFound          404 "toxic not found"
        ToxicExists            409 "toxic already exists"
        InvalidToxic           400 "invalid toxic type" (or a bad attribute)
        BadRequest             400 "bad request body: ..." / "missing required field: ..."
        BindError              500 "listen tcp ...: bind: address already in use"
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


class ProxyAPIError(ChaosError):
    """An error with a Toxiproxy HTTP status and message."""

    status: int = 400

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        if status is not None:
            self.status = status

    def to_json(self) -> dict[str, Any]:
        return {"error": self.message, "status": self.status}


class ProxyNotFound(ProxyAPIError):
    status = 404

    def __init__(self, message: str = "proxy not found") -> None:
        super().__init__(message)


class ProxyExists(ProxyAPIError):
    status = 409

    def __init__(self, message: str = "proxy already exists") -> None:
        super().__init__(message)


class ToxicNotFound(ProxyAPIError):
    status = 404

    def __init__(self, message: str = "toxic not found") -> None:
        super().__init__(message)


class ToxicExists(ProxyAPIError):
    status = 409

    def __init__(self, message: str = "toxic already exists") -> None:
        super().__init__(message)


class InvalidToxic(ProxyAPIError):
    status = 400

    def __init__(self, message: str = "invalid toxic type") -> None:
        super().__init__(message)


class BadRequest(ProxyAPIError):
    status = 400


class BindError(ProxyAPIError):
    status = 500


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
