"""Frame types and the light validation of event, verdict and end bodies."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ground.errors import EXIT_BAD_INPUT, ConfigError
from invariants.history import is_client

FRAME_TYPES = ("header", "schedule", "event", "verdict", "end")
EVENT_TYPES = ("invoke", "ok", "fail", "info")
VERDICT_VALUES: tuple[object, ...] = (True, False, "unknown")
#: The end frame's exit code of a run whose input was refused (the CLI's exit 2).
BAD_INPUT_EXIT_CODE = EXIT_BAD_INPUT


def as_mapping(obj: object, what: str) -> dict[str, Any]:
    """A plain dict from a Mapping or a pydantic model; anything else raises ConfigError."""
    dump = getattr(obj, "model_dump", None)
    if callable(dump):
        obj = dump(mode="json")
    if not isinstance(obj, Mapping):
        raise ConfigError(f"{what} must be a mapping, got {type(obj).__name__}")
    body = dict(obj)
    if "t" in body:
        raise ConfigError(f"{what} must not use the reserved key 't'")
    return body


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_event(event: dict[str, Any]) -> None:
    """Raise ConfigError unless ``event`` has the standard history-operation fields."""
    kind = event.get("type")
    if kind not in EVENT_TYPES:
        raise ConfigError(f"event type must be one of invoke, ok, fail, info, got {kind!r}")
    process = event.get("process")
    if not isinstance(process, str | int) or isinstance(process, bool):
        raise ConfigError(f"event process must be a str or int, got {process!r}")
    if not isinstance(event.get("f"), str):
        raise ConfigError(f"event f must be a str, got {event.get('f')!r}")
    if not _is_int(event.get("time_ns")):
        raise ConfigError(f"event time_ns must be an int, got {event.get('time_ns')!r}")
    if "index" in event and not _is_int(event["index"]):
        raise ConfigError(f"event index must be an int, got {event['index']!r}")


def check_verdict(verdict: dict[str, Any]) -> None:
    """Raise ConfigError unless ``verdict`` has a str name and valid True/False/"unknown"."""
    if not isinstance(verdict.get("name"), str):
        raise ConfigError(f"verdict name must be a str, got {verdict.get('name')!r}")
    valid = verdict.get("valid")
    if not any(valid is v or (isinstance(v, str) and valid == v) for v in VERDICT_VALUES):
        raise ConfigError(f"verdict valid must be True, False or 'unknown', got {valid!r}")


def check_end(outcome: object, exit_code: object, wall_time_s: object) -> None:
    """Raise ConfigError unless the end-of-run fields have the right types."""
    if not isinstance(outcome, str) or not outcome:
        raise ConfigError(f"end outcome must be a non-empty str, got {outcome!r}")
    if not _is_int(exit_code):
        raise ConfigError(f"end exit_code must be an int, got {exit_code!r}")
    if not isinstance(wall_time_s, int | float) or isinstance(wall_time_s, bool):
        raise ConfigError(f"end wall_time_s must be a number, got {wall_time_s!r}")
    if wall_time_s < 0:
        raise ConfigError(f"end wall_time_s must be >= 0, got {wall_time_s}")


def is_infrastructure(process: object) -> bool:
    """Whether ``process`` is the harness side (nemesis, proxy, services), not a client."""
    return not is_client(process)
