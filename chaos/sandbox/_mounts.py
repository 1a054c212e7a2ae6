"""What a root-mode candidate sees: the mount plan its launcher builds on a fresh tmpfs root.

Visible, read-only: the system trees (``/usr``, ``/etc`` and the ``/bin``, ``/lib*``
symlinks or folders), the Python interpreter's prefix, and the task's client libraries (each
distribution's own folders, dependencies included). Every ``site-packages`` folder inside a
visible tree is replaced by an empty one first, so the harness, the packs and everything
else installed there stay out of sight; so are the paths the harness names as hidden (the
project, packs, traces, the held-out key) where a visible tree holds them. Writable: its
scratch directory (``/sandbox``, also ``/tmp``) and a private ``/dev/shm``. Also: a minimal
``/dev``, a ``/proc`` of its own pid namespace, its program (``/candidate``, read-only) and
its clock-skew file (``/run/chaos``).
"""

from __future__ import annotations

import site
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from chaos.errors import ConfigError

SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")
DEVICES = ("null", "zero", "full", "random", "urandom")
#: Where things are inside the sandbox.
SCRATCH = "/sandbox"
PROGRAM = "/candidate"
RUN = "/run/chaos"


def _real(path: str | Path) -> Path:
    return Path(path).resolve()


def python_prefixes() -> list[Path]:
    """The interpreter's installation folders (a virtualenv's too)."""
    found = [_real(sys.base_prefix), _real(sys.prefix), _real(sys.executable).parent.parent]
    return list(dict.fromkeys(found))


def site_dirs() -> list[Path]:
    """Every folder Python loads installed packages from."""
    dirs = [*site.getsitepackages(), site.getusersitepackages()]
    dirs += [p for p in sys.path if p.endswith(("site-packages", "dist-packages"))]
    return list(dict.fromkeys(_real(d) for d in dirs if d))


def distributions(libraries: tuple[str, ...]) -> list[metadata.Distribution]:
    """The named distributions and everything they require (markers and extras honoured)."""
    seen: dict[str, metadata.Distribution] = {}
    done: set[tuple[str, frozenset[str]]] = set()
    todo = list(libraries)
    while todo:
        spec = todo.pop()
        try:
            req = Requirement(spec)
        except InvalidRequirement:
            raise ConfigError(f"task library {spec!r} is not a requirement") from None
        key = (canonicalize_name(req.name), frozenset(req.extras))
        if key in done:
            continue
        done.add(key)
        try:
            dist = metadata.distribution(req.name)
        except metadata.PackageNotFoundError:
            raise ConfigError(
                f"task library {req.name!r} is not installed beside the harness"
            ) from None
        seen[key[0]] = dist
        for line in dist.requires or []:
            dep = Requirement(line)
            extras = req.extras or {""}
            if dep.marker is None or any(dep.marker.evaluate({"extra": e}) for e in extras):
                todo.append(f"{dep.name}{_extras(dep)}")
    return list(seen.values())


def _extras(req: Requirement) -> str:
    return f"[{','.join(sorted(req.extras))}]" if req.extras else ""


def library_entries(libraries: tuple[str, ...]) -> list[Path]:
    """The top-level files and folders of the libraries' distributions (with dist-info)."""
    entries: dict[Path, None] = {}
    for dist in distributions(libraries):
        base = _real(str(dist.locate_file("")))
        for file in dist.files or []:
            parts = Path(str(file)).parts
            if not parts or parts[0] == ".." or parts[0].endswith(".pth"):
                continue
            # a top-level module's bytecode: that file, not the shared __pycache__ folder
            entry = base / Path(*parts[:2]) if parts[0] == "__pycache__" else base / parts[0]
            if entry.exists():
                entries[entry] = None
    return list(entries)


def _inside(path: Path, roots: list[Path]) -> bool:
    return any(path == r or path.is_relative_to(r) for r in roots)


def mount_plan(
    *,
    root_dir: Path,
    scratch: Path,
    program: Path,
    clock_dir: Path,
    faketime_library: Path | None,
    libraries: tuple[str, ...],
    hidden: tuple[Path, ...],
) -> dict[str, Any]:
    """The launcher's ``root`` config: a tmpfs at ``root_dir`` and the ops that fill it."""
    ops: list[dict[str, Any]] = []
    visible: list[Path] = []
    for name in SYSTEM:
        path = Path(name)
        if path.is_symlink():
            ops.append({"op": "symlink", "path": name, "target": str(path.readlink())})
        elif path.is_dir():
            ops.append({"op": "bind", "path": name, "source": name})
            visible.append(_real(name))
    for prefix in python_prefixes():
        if not _inside(prefix, visible):
            ops.append({"op": "bind", "path": str(prefix), "source": str(prefix)})
            visible.append(prefix)
    for folder in site_dirs():
        if folder.is_dir() and _inside(folder, visible):
            ops.append({"op": "tmpfs", "path": str(folder), "data": "mode=0755,size=1m"})
    for path in sorted({_real(p) for p in hidden}):
        if not _inside(path, visible) or any(_inside(v, [path]) for v in visible):
            continue  # out of sight already (or it would hide a whole system tree)
        if path.is_dir():
            ops.append({"op": "tmpfs", "path": str(path), "data": "mode=0755,size=1m"})
        elif path.exists():
            ops.append({"op": "bind", "path": str(path), "source": "/dev/null", "dev": True})
    for entry in library_entries(libraries):
        ops.append({"op": "bind", "path": str(entry), "source": str(entry)})
    ops.append({"op": "tmpfs", "path": "/dev", "data": "mode=0755,size=64k"})
    for dev in DEVICES:
        ops.append({"op": "bind", "path": f"/dev/{dev}", "source": f"/dev/{dev}", "dev": True,
                    "rw": True})  # fmt: skip
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"),
                         ("stdout", "/proc/self/fd/1"), ("stderr", "/proc/self/fd/2")):  # fmt: skip
        ops.append({"op": "symlink", "path": f"/dev/{name}", "target": target})
    ops.append({"op": "tmpfs", "path": "/dev/shm", "data": "mode=1777,size=64m"})
    ops.append({"op": "proc", "path": "/proc"})
    ops.append({"op": "bind", "path": SCRATCH, "source": str(scratch), "rw": True})
    ops.append({"op": "bind", "path": "/tmp", "source": str(scratch / "tmp"), "rw": True})
    ops.append({"op": "bind", "path": PROGRAM, "source": str(program)})
    ops.append({"op": "bind", "path": f"{RUN}/clock", "source": str(clock_dir)})
    if faketime_library is not None:
        ops.append({"op": "bind", "path": f"{RUN}/{faketime_library.name}",
                    "source": str(faketime_library)})  # fmt: skip
    return {"dir": str(root_dir), "ops": ops}
