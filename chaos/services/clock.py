"""Wall-clock skew for service processes via libfaketime, changeable while they run.

A `SkewFile` is a libfaketime timestamp file holding a relative offset ("+3600.000000");
a process started with `SkewFile.env()` (LD_PRELOAD of the `libfaketime` wheel's library,
FAKETIME_NO_CACHE=1) re-reads it on every clock call, so `set_offset` takes effect at once.
Monotonic clocks are left alone (DONT_FAKE_MONOTONIC=1): sleeps and timeouts keep working.
Statically linked binaries (Go programs such as nats-server) ignore LD_PRELOAD.
"""

from __future__ import annotations

import ctypes
import math
import os
import struct
from importlib import metadata
from pathlib import Path

from ground.errors import ConfigError, ServiceError

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


def faketime_shared_paths(tag: str) -> tuple[Path, Path]:
    """The semaphore and shared memory files of the pair named after ``tag``."""
    return _SHM_DIR / f"sem.faketime_sem_{tag}", _SHM_DIR / f"faketime_shm_{tag}"


def create_faketime_shared(tag: str, owner: tuple[int, int] | None = None) -> str:
    """Create a libfaketime semaphore + shared memory pair named after ``tag`` and return the
    ``FAKETIME_SHARED`` value that makes processes use it instead of making their own.

    libfaketime otherwise creates ``sem.faketime_sem_<pid>`` and ``faketime_shm_<pid>`` per
    process and removes them only when the process exits normally; with one pair per run,
    named after the run, the harness knows (and removes) every file, however a process ends.
    The shared memory starts as libfaketime's own would (no ticks, start times unset).
    ``owner`` (uid, gid): the user whose processes use it (both files are mode 0600).
    """
    sem_name, shm_name = f"/faketime_sem_{tag}", f"/faketime_shm_{tag}"
    libc = ctypes.CDLL(None, use_errno=True)
    libc.sem_open.restype = ctypes.c_void_p
    libc.sem_open.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_uint, ctypes.c_uint]
    sem = libc.sem_open(sem_name.encode(), os.O_CREAT | os.O_EXCL, 0o600, 1)
    if sem is None or sem == ctypes.c_void_p(-1).value:
        why = os.strerror(ctypes.get_errno())
        raise ServiceError(f"cannot create the libfaketime semaphore {sem_name}: {why}")
    libc.sem_close.argtypes = [ctypes.c_void_p]
    libc.sem_close(sem)
    # struct ft_shared_s: ticks, file_idx, then the start times (real, monotonic, raw, boot)
    # as {tv_sec, tv_nsec}, tv_nsec -1 meaning "not taken yet".
    state = struct.pack("=QQ" + "qq" * 4, 0, 0, *(0, -1) * 4)
    try:
        fd = os.open(_SHM_DIR / shm_name.lstrip("/"), os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, state)
        finally:
            os.close(fd)
        if owner is not None:
            for path in faketime_shared_paths(tag):
                os.chown(path, *owner)
    except OSError as exc:
        remove_faketime_shared(tag)
        raise ServiceError(
            f"cannot create the libfaketime shared memory {shm_name}: {exc.strerror or exc}"
        ) from None
    return f"{sem_name} {shm_name}"


def remove_faketime_shared(tag: str) -> None:
    """Remove the pair ``create_faketime_shared(tag)`` made (what is left of it)."""
    for path in faketime_shared_paths(tag):
        path.unlink(missing_ok=True)


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
