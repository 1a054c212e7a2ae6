"""What a root-mode candidate sees: the mount plan its launcher builds on a fresh tmpfs root.

Visible, read-only: the system trees (``/usr``, ``/etc`` and the ``/bin``, ``/lib*``
symlinks or folders) and the base interpreter's prefix (``_python``: never a virtualenv).
Every folder installed packages load from that those trees hold (``site-packages``,
``dist-packages``, of any Python there; the harness's environment and the user site where
a visible tree holds them) is covered by an empty tmpfs, and so are the paths the harness
names as hidden (the project, the pack, the run's folder, the key, the traces) where a
visible tree holds them. From its box (``_box``, a tmpfs of its own): ``/sandbox`` and
``/tmp`` (writable), ``/candidate`` (its program) and ``/run/chaos`` (the interpreter's
links, its clock file, libfaketime), read-only, and on ``/run/chaos/site`` the process's
read-only copy of the task's libraries (``_layer``). Also: a minimal
``/dev``, a private ``/dev/shm`` and a ``/proc`` of its own pid namespace that shows only its
own uid's processes (``hidepid``: not its init, whose command line the launcher's is).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from chaos.sandbox import _python
from chaos.sandbox._box import INSIDE, Box

SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")
DEVICES = ("null", "zero", "full", "random", "urandom")


def _real(path: str | Path) -> Path:
    return Path(path).resolve()


def _inside(path: Path, roots: list[Path]) -> bool:
    return any(path == r or path.is_relative_to(r) for r in roots)


def _covers(visible: list[Path], hidden: tuple[Path, ...]) -> list[Path]:
    """What must be out of sight inside the visible trees, outermost first: package
    folders, the harness's virtualenv and the hidden paths (none that would hide a whole
    visible tree, none inside another)."""
    wanted = _python.package_folders(visible)
    environment = _python.environment()
    if environment is not None:
        wanted.append(environment)
    wanted += [_real(p) for p in hidden]
    covers: list[Path] = []
    for path in sorted(set(wanted)):
        if not _inside(path, visible) or any(_inside(v, [path]) for v in visible):
            continue  # out of sight already (or it would hide a whole system tree)
        if not _inside(path, covers) and path.exists():
            covers.append(path)
    return covers


def mount_plan(
    *, root_dir: Path, box: Box, hidden: tuple[Path, ...], site: Path | None = None
) -> dict[str, Any]:
    """The launcher's ``root`` config: a tmpfs at ``root_dir`` and the ops that fill it;
    ``site``, a read-only copy of the task's libraries (``_layer``), bound on the box's
    empty ``run/site``."""
    ops: list[dict[str, Any]] = []
    visible: list[Path] = []
    for name in SYSTEM:
        path = Path(name)
        if path.is_symlink():
            ops.append({"op": "symlink", "path": name, "target": str(path.readlink())})
        elif path.is_dir():
            ops.append({"op": "bind", "path": name, "source": name})
            visible.append(_real(name))
    # the box before the interpreter: an interpreter under /tmp (a conda environment, say)
    # is then bound inside the candidate's /tmp rather than hidden by it
    ops.append({"op": "bind", "path": INSIDE.scratch, "source": str(box.scratch), "rw": True})
    ops.append({"op": "bind", "path": INSIDE.tmp, "source": str(box.tmp), "rw": True})
    ops.append({"op": "bind", "path": INSIDE.program, "source": str(box.program)})
    ops.append({"op": "bind", "path": INSIDE.run, "source": str(box.run)})
    if site is not None:
        ops.append({"op": "bind", "path": INSIDE.site, "source": str(site)})
    for prefix in _python.interpreter_prefixes():
        if not _inside(prefix, visible):
            ops.append({"op": "bind", "path": str(prefix), "source": str(prefix)})
            visible.append(prefix)
    for path in _covers(visible, hidden):
        if path.is_dir():
            ops.append({"op": "tmpfs", "path": str(path), "data": "mode=0755,size=4k", "ro": True})
        else:
            ops.append({"op": "bind", "path": str(path), "source": "/dev/null", "dev": True})
    ops.append({"op": "tmpfs", "path": "/dev", "data": "mode=0755,size=64k"})
    for dev in DEVICES:
        ops.append({"op": "bind", "path": f"/dev/{dev}", "source": f"/dev/{dev}", "dev": True,
                    "rw": True})  # fmt: skip
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"),
                         ("stdout", "/proc/self/fd/1"), ("stderr", "/proc/self/fd/2")):  # fmt: skip
        ops.append({"op": "symlink", "path": f"/dev/{name}", "target": target})
    ops.append({"op": "tmpfs", "path": "/dev/shm", "data": "mode=1777,size=64m"})
    # its own uid's processes only: not its init (root), whose command line is the launcher's
    ops.append({"op": "proc", "path": "/proc", "data": "hidepid=2"})
    return {"dir": str(root_dir), "ops": ops}
