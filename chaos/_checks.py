"""Input checks shared by every command: the same bounds wherever a concept appears.

Each raises ``ConfigError`` (exit 2, one line) and touches nothing: no folder is created and
no file is written, so a command can check all of its options before anything starts.

- seeds: ``chaos.rng.check_seed`` (0 to 2**63-1), re-exported here
- durations: finite and > 0 (or >= 0 where zero means "at once"); nan and inf refused
- ports: 1-65535 (0 only where it means "any free port")
- output paths: a file path whose folder exists or can be created, writable, not a folder
"""

from __future__ import annotations

import errno
import math
import os
import tempfile
from pathlib import Path

from chaos.errors import ConfigError
from chaos.rng import SEED_MAX, check_seed

__all__ = [
    "SEED_MAX",
    "check_duration",
    "check_finite",
    "check_out_dir",
    "check_out_file",
    "check_port",
    "check_seed",
]

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


def _first_existing(path: Path) -> Path:
    for candidate in (path, *path.parents):
        if os.path.lexists(candidate):
            return candidate
    return Path(".")  # pragma: no cover - "/" always exists


def _probe_dir(folder: Path) -> str | None:
    """Why a file cannot be created in the existing ``folder`` (None: it can). Creates and
    removes a uniquely named empty file: the only test root's permissions and special
    filesystems (/proc, read-only mounts) cannot fool."""
    try:
        fd, name = tempfile.mkstemp(prefix=".chaos-probe-", dir=folder)
    except OSError as exc:
        return exc.strerror or str(exc)
    os.close(fd)
    try:
        os.unlink(name)
    except OSError:
        pass
    return None


def check_out_file(path: Path, what: str, kind: str = "file") -> Path:
    """An output file the command will write (``what``: the option, ``kind``: "trace"...):
    refused unless it can be written."""
    if path.is_dir():
        raise ConfigError(f"{what} {path} is a folder, not a {kind} file path")
    if path.name in ("", ".", ".."):
        raise ConfigError(f"{what} {path} is not a {kind} file path")
    existing = _first_existing(path.parent if str(path.parent) else Path("."))
    if not existing.is_dir():
        raise ConfigError(f"cannot write {kind} {path}: {existing} is not a folder")
    if path.exists() and not path.is_file():
        raise ConfigError(f"cannot write {kind} {path}: it is not a regular file")
    if path.exists() and not os.access(path, os.W_OK):
        raise ConfigError(f"cannot write {kind} {path}: {os.strerror(errno.EACCES)}")
    if (why := _probe_dir(existing)) is not None:
        raise ConfigError(f"cannot write {kind} {path}: cannot create files in {existing} ({why})")
    return path


def check_out_dir(path: Path, what: str) -> Path:
    """An output folder the command will create (if missing) and write into."""
    if path.exists() and not path.is_dir():
        raise ConfigError(f"{what} {path} is a file, not a folder")
    existing = _first_existing(path)
    if not existing.is_dir():
        raise ConfigError(f"cannot use {what} {path}: {existing} is not a folder")
    if (why := _probe_dir(existing)) is not None:
        raise ConfigError(f"cannot use {what} {path}: cannot create files in {existing} ({why})")
    return path
