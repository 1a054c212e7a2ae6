"""A run-scoped temporary directory that is removed however the run ends."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

_SHM = Path("/dev/shm")
_MIN_SHM_FREE = 1 << 30


def default_run_parent() -> Path:
    """$CHAOS_RUN_DIR, else /dev/shm (memory-backed) when writable with >= 1 GiB free, else $TMPDIR.

    Creating files on the disk of small VMs can cost over a millisecond each, and a database
    cluster holds about a thousand of them, so throwaway service state goes to memory.
    """
    if env := os.environ.get("CHAOS_RUN_DIR"):
        return Path(env)
    try:
        if os.access(_SHM, os.W_OK | os.X_OK):
            st = os.statvfs(_SHM)
            if st.f_bavail * st.f_frsize >= _MIN_SHM_FREE:
                return _SHM
    except OSError:
        pass
    return Path(tempfile.gettempdir())


@contextmanager
def open_run_dir(prefix: str = "chaos-run-", parent: Path | None = None) -> Iterator[Path]:
    """Create a fresh temp dir for one run (under `parent`); remove everything in it on exit."""
    path = Path(tempfile.mkdtemp(prefix=prefix, dir=parent or default_run_parent()))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
