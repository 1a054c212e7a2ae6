"""A run-scoped temporary directory that is removed however the run ends.

Opening one registers the run (``chaos.services.registry``): first, stale registrations of
dead runs are reaped; then the run's own registration is created and locked, the dir is
written down before it is made, and every child started inside carries the run's marker.
On exit whatever of the run is still alive is killed, and the dir, the run's shm files and
the registration are removed.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from chaos.services import registry
from ground.errors import ServiceError

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
    """Create a fresh dir for one run (under `parent`), registered; remove it on exit along
    with anything of the run still alive."""
    registry.collect_quietly()
    try:
        registration = registry.open_registration()
    except OSError as exc:
        where = exc.filename or registry.registry_dir()
        raise ServiceError(
            f"cannot register the run in {where}: {exc.strerror or exc} (set CHAOS_REGISTRY_DIR)"
        ) from None
    try:
        try:
            path = registration.make_dir(Path(parent or default_run_parent()), prefix)
        except OSError as exc:
            raise ServiceError(f"cannot create the run dir: {exc.strerror or exc}: "
                               f"{exc.filename}") from None  # fmt: skip
        with registry.registered(registration):
            yield path
    finally:
        registration.close()
