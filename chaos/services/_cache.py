"""The harness's cache directory and an exclusive, cancellable file lock inside it."""

from __future__ import annotations

import errno
import fcntl
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import trio


def cache_root() -> Path:
    """$CHAOS_CACHE_DIR, else /var/cache/chaos-harness for root, else ~/.cache/chaos-harness."""
    if env := os.environ.get("CHAOS_CACHE_DIR"):
        return Path(env)
    if os.geteuid() == 0:
        return Path("/var/cache/chaos-harness")
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "chaos-harness"


@asynccontextmanager
async def file_lock(path: Path, poll: float = 0.05) -> AsyncIterator[None]:
    """Hold an exclusive flock on `path` (created if missing); waiting is cancellable."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES):
                    raise
            await trio.sleep(poll)
        yield
    finally:
        os.close(fd)
