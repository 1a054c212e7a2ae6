"""Input checks shared by every command: the same bounds wherever a concept appears.

Each raises ``ConfigError`` (exit 2, one line) and touches nothing: no folder is created and
no file is written, so a command can check all of its options before anything starts.

- seeds: ``ground.rng.check_seed`` (0 to 2**63-1), re-exported here
- durations: finite and > 0 (or >= 0 where zero means "at once"); nan and inf refused
- ports: 1-65535 (0 only where it means "any free port")
- candidate limits (``--limit NAME=VALUE``): at most ``LIMIT_MAXIMA`` (docs/grading.md)

Paths (what a command reads and writes) are checked in ``ground._paths``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from ground.errors import ConfigError
from ground.rng import SEED_MAX, check_seed

__all__ = [
    "LIMIT_MAXIMA",
    "SEED_MAX",
    "check_duration",
    "check_finite",
    "check_limits",
    "check_port",
    "check_seed",
]

#: The largest value of each candidate limit (docs/grading.md, "Limits"): past these a limit
#: limits nothing on one machine, and the kernel's rlimits would overflow (memory_mb=10**15).
LIMIT_MAXIMA: Mapping[str, float] = {
    "memory_mb": 1024 * 1024,  # 1 TiB
    "cpu_s": 24 * 3600.0,  # a day
    "processes": 65536,
    "file_size_mb": 1024 * 1024,  # 1 TiB
    "open_files": 1024 * 1024,  # the kernel's default nr_open
    "wall_s": 24 * 3600.0,
    "ready_s": 3600.0,
    "term_s": 600.0,
}


def check_finite(value: float, what: str) -> float:
    if not math.isfinite(value):
        raise ConfigError(f"{what} must be a finite number, got {value}")
    return value


def check_duration(value: float, what: str, *, zero_ok: bool = False) -> float:
    """A number of seconds: finite, > 0 (>= 0 with ``zero_ok``)."""
    check_finite(value, what)
    if value < 0 or (value == 0 and not zero_ok):
        bound = ">= 0" if zero_ok else "> 0"
        raise ConfigError(f"{what} must be {bound} seconds, got {value}")
    return value


def check_port(port: int, what: str = "port", *, any_ok: bool = False) -> int:
    """A TCP port: 1-65535 (0 too with ``any_ok``: "any free port")."""
    low = 0 if any_ok else 1
    if not low <= port <= 65535:
        raise ConfigError(f"{what} must be between {low} and 65535, got {port}")
    return port


def check_limits(limits: Mapping[str, float]) -> None:
    """Each candidate limit at most its ``LIMIT_MAXIMA`` (the lower bound, > 0, is
    ``chaos.sandbox.Limits``'s own)."""
    for name, value in limits.items():
        top = LIMIT_MAXIMA.get(name)
        if top is not None and value > top:
            raise ConfigError(f"--limit {name} must be at most {_plain(top)}, got {_plain(value)}")


def _plain(number: float) -> str:
    """``1048576``, ``86400``, ``0.5``: a whole number without a fraction or an exponent."""
    return str(int(number)) if float(number).is_integer() else str(number)
