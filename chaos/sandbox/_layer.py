"""The task's libraries copied once per process: a read-only layer for root-isolated boxes.

A candidate's box (``_box``) at uid and user isolation holds its own copy of the task's
libraries (``run/site``). At root isolation the candidate sees only its mount tree, so the
copy is made once per process (a warm worker's first graded run of a task: psycopg's files,
about 0.1 CPU-second and 0.2 s per candidate instance before) and every later candidate's
launcher binds it read-only over the box's empty ``run/site`` (``/run/chaos/site`` inside):
the same files, root's, on a tmpfs of its own mounted read-only once filled (and bound
read-only), so that no candidate can write it and nothing of one run reaches the next
through it; being a file system of its own, the candidate's mount table shows it as ``/``
of a tmpfs, never a host folder.

The layers are a registered run of their own (``chaos-layers-*`` in the run parent, 0700:
no other uid reaches them on the host), unmounted and removed when the process exits, and by
the next harness command or ``chaos gc`` if the process is killed.
"""

from __future__ import annotations

import ctypes
import os
import threading
from pathlib import Path

from chaos.sandbox import _python
from chaos.sandbox._box import copy_libraries
from chaos.services import default_run_parent, registry
from ground._shared import ProcessShared
from ground.errors import ServiceError

_libc = ctypes.CDLL(None, use_errno=True)
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_REMOUNT = 1, 2, 4, 32


def _mount_tmpfs(path: Path, data: str, flags: int = 0) -> None:
    flags |= _MS_NOSUID | _MS_NODEV
    if _libc.mount(b"tmpfs", os.fsencode(path), b"tmpfs", flags, data.encode()) != 0:
        err = os.strerror(ctypes.get_errno())
        raise ServiceError(f"sandbox: cannot mount the libraries' tmpfs: {err}")


class _Layers:
    """This process's library layers, one per tuple of libraries."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.registration = registry.open_registration()
        self.parent = self.registration.make_dir(default_run_parent(), "chaos-layers-")
        self.made: dict[tuple[str, ...], Path] = {}
        self.lock = threading.Lock()

    def site(self, libraries: tuple[str, ...]) -> Path:
        with self.lock:
            path = self.made.get(libraries)
            if path is None or not path.is_dir():
                path = self.parent / f"site-{len(self.made)}"
                path.mkdir(mode=0o755)
                files = _python.library_files(libraries)
                size = sum(source.stat().st_size + 4096 for source, _ in files) + (1 << 20)
                _mount_tmpfs(path, f"size={size},mode=0755")
                copy_libraries(libraries, path)
                _mount_tmpfs(path, f"size={size},mode=0755", _MS_REMOUNT | _MS_RDONLY)
                self.made[libraries] = path
            return path

    def close(self) -> None:
        if os.getpid() == self.pid:  # never a forked child's exit
            self.registration.close()


_layers: ProcessShared[_Layers] = ProcessShared(_Layers)


def library_site(libraries: tuple[str, ...]) -> Path:
    """The process's read-only copy of ``libraries`` (made at first use)."""
    return _layers.get().site(tuple(libraries))


def close_layers() -> None:
    """Remove the layers now (the next use makes them again)."""
    _layers.close()


__all__ = ["close_layers", "library_site"]
