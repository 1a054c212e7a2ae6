"""build_header pins identity and versions; version_drift reports what changed."""

from __future__ import annotations

import platform
from importlib import metadata

import pytest

from ground.errors import ConfigError
from replay.trace import FORMAT_VERSION, build_header, installed_versions, version_drift


def test_header_pins_identity_and_versions() -> None:
    header = build_header("payments", "sha256:ab", "dup-charge", 7, extra={"backend": "embedded"})
    assert header["format_version"] == FORMAT_VERSION
    assert (header["scenario_id"], header["scenario_hash"]) == ("payments", "sha256:ab")
    assert (header["variant"], header["seed"]) == ("dup-charge", 7)
    assert header["harness_version"] == metadata.version("chaos-harness")
    assert header["python_version"] == platform.python_version()
    assert header["versions"]["trio"] == metadata.version("trio")
    assert header["versions"]["msgpack"] == metadata.version("msgpack")
    assert header["backend"] == "embedded"
    assert header["created"].endswith("+00:00")


def test_missing_distributions_are_left_out() -> None:
    versions = installed_versions()
    assert "hypothesis" in versions
    assert all(isinstance(v, str) and v for v in versions.values())


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("", "h", "golden", 1), "scenario_id must be a non-empty str, got ''"),
        (("s", "h", "", 1), "variant must be a non-empty str, got ''"),
        (("s", 5, "golden", 1), "scenario_hash must be a str, got 5"),
        (("s", "h", "golden", "7"), "seed must be an int, got '7'"),
        (("s", "h", "golden", True), "seed must be an int, got True"),
    ],
)
def test_bad_header_input(args: tuple[object, ...], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        build_header(*args)  # type: ignore[arg-type]
    assert str(info.value) == message


def test_extra_cannot_override_standard_keys() -> None:
    with pytest.raises(ConfigError, match="must not override the standard key 'seed'"):
        build_header("s", "h", "golden", 1, extra={"seed": 2})


def test_version_drift() -> None:
    header = build_header("s", "h", "golden", 1)
    assert version_drift(header) == []
    old = {
        **header,
        "python_version": "3.10.0",
        "versions": {**header["versions"], "trio": "0.1.0", "gone-package": "1.0"},
    }
    assert sorted(version_drift(old)) == sorted(
        [
            f"python: recorded 3.10.0, installed {platform.python_version()}",
            f"trio: recorded 0.1.0, installed {metadata.version('trio')}",
            "gone-package: recorded 1.0, not installed",
        ]
    )
