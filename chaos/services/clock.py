"""Wall-clock skew for service processes via libfaketime, changeable while they run.

A `SkewFile` is a libfaketime timestamp file holding a relative offset ("+3600.000000");
a process started with `SkewFile.env()` (LD_PRELOAD of the `libfaketime` wheel's library,
FAKETIME_NO_CACHE=1) re-reads it on every clock call, so `set_offset` takes effect at once.
Monotonic clocks are left alone (DONT_FAKE_MONOTONIC=1): sleeps and timeouts keep working.
Statically linked binaries (Go programs such as nats-server) ignore LD_PRELOAD.
"""

from __future__ import annotations

import math
import os
from importlib import metadata
from pathlib import Path

from chaos.errors import ConfigError, ServiceError

_LIB_NAME = "libfaketime.so.1"
_SHM_DIR = Path("/dev/shm")


def libfaketime_library() -> Path:
    """The path of the libfaketime shared library shipped in the `libfaketime` wheel."""
    try:
        dist = metadata.distribution("libfaketime")
    except metadata.PackageNotFoundError as exc:
        raise ServiceError("the libfaketime package is not installed") from exc
    for file in dist.files or ():
        if file.name == _LIB_NAME:
            return Path(str(dist.locate_file(file))).resolve()
    raise ServiceError(f"{_LIB_NAME} not found in the libfaketime package")


def format_offset(seconds: float) -> str:
    """libfaketime's relative-offset syntax for `seconds`, e.g. "+2.500000" or "-3.000000"."""
    if not math.isfinite(seconds):
        raise ConfigError(f"clock offset must be a finite number of seconds, got {seconds}")
    return f"{seconds:+.6f}"


class SkewFile:
    """A libfaketime timestamp file whose offset the harness can change at any time."""

    def __init__(self, path: Path, offset: float = 0.0) -> None:
        self.path = Path(path)
        self._offset = 0.0
        self.set_offset(offset)

    @property
    def offset(self) -> float:
        """The current offset in seconds added to the process's wall clock."""
        return self._offset

    def set_offset(self, seconds: float) -> None:
        """Rewrite the file atomically so processes see wall clock + `seconds` from now on."""
        text = format_offset(seconds)
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(text + "\n")
        tmp.chmod(0o644)
        os.replace(tmp, self.path)
        self._offset = seconds

    def env(self) -> dict[str, str]:
        """Environment variables that make a dynamically linked child follow this file."""
        preload = str(libfaketime_library())
        inherited = os.environ.get("LD_PRELOAD")
        return {
            "LD_PRELOAD": f"{preload}:{inherited}" if inherited else preload,
            "FAKETIME_TIMESTAMP_FILE": str(self.path),
            "FAKETIME_NO_CACHE": "1",
            "DONT_FAKE_MONOTONIC": "1",
            "FAKETIME_FORCE_MONOTONIC_FIX": "0",
        }


def release_faketime_state(pid: int) -> None:
    """Remove the semaphore and shared memory libfaketime made for process `pid`.

    libfaketime creates them when a process loads it and unlinks them in a destructor that
    a killed process never runs.
    """
    for name in (f"faketime_shm_{pid}", f"sem.faketime_sem_{pid}"):
        try:
            (_SHM_DIR / name).unlink()
        except FileNotFoundError:
            pass
