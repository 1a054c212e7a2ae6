"""The candidate's Python: the bare interpreter, and the task's libraries as files to copy.

A candidate never runs in the harness's environment. Whatever the install (a virtualenv,
symlinked or ``--copies``, anywhere; the system interpreter; ``pip install --user``;
editable or not), it gets:

- **the base interpreter** (``interpreter()``: a virtualenv's ``home`` interpreter, links
  resolved), which starts with its standard library only: every ``site-packages`` and
  ``dist-packages`` folder of it, of the harness's environment and of the user site is
  hidden (``package_folders``) where the sandbox can hide (root isolation);
- **the task's libraries** (``TaskSpec.libraries`` and what they require, extras and markers
  honoured: ``distributions``) as *copies* of exactly the files their installation
  recorded (``library_files``), put in one folder of the candidate's own that ``PYTHONPATH``
  names. Copies, not the installed folders: the result is the same from every install, a
  uid of its own can read them wherever the harness's environment lives (a venv in
  ``/root``), nothing beside them comes along (a namespace package shared with a
  distribution the task does not name stays out), and no host path shows in the candidate's
  mount table.
"""

from __future__ import annotations

import json
import site
import sys
from functools import lru_cache
from importlib import metadata
from pathlib import Path, PurePosixPath

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from ground.errors import ConfigError


def _real(path: str | Path) -> Path:
    return Path(path).resolve()


def interpreter() -> Path:
    """The interpreter the candidate runs: this one without its virtualenv, links resolved."""
    base = getattr(sys, "_base_executable", None) or sys.executable
    return _real(base)


def interpreter_names() -> tuple[str, ...]:
    """The names a candidate may call it by (``python3`` on its ``PATH``)."""
    major, minor = sys.version_info[:2]
    return ("python", f"python{major}", f"python{major}.{minor}")


def interpreter_prefixes() -> list[Path]:
    """The base interpreter's installation folders (never a virtualenv's)."""
    found = [_real(sys.base_prefix), _real(sys.base_exec_prefix), interpreter().parent.parent]
    return list(dict.fromkeys(found))


def stdlib() -> Path:
    """The base interpreter's standard library folder."""
    major, minor = sys.version_info[:2]
    return _real(sys.base_prefix) / "lib" / f"python{major}.{minor}"


_PACKAGE_GLOBS = (
    "lib*/python3*/site-packages",
    "lib*/python3*/dist-packages",
    "lib/python3/dist-packages",
    "local/lib*/python3*/site-packages",
    "local/lib*/python3*/dist-packages",
    "local/lib/python3/dist-packages",
)


def package_folders(trees: list[Path]) -> list[Path]:
    """Every folder installed packages are loaded from that the candidate could reach
    through ``trees``: each tree's ``site-packages``/``dist-packages`` (any Python's, by
    the usual layouts), this environment's (a virtualenv, ``sys.path``), the user site.
    Only those that exist."""
    found: list[Path] = []
    for tree in trees:
        for pattern in _PACKAGE_GLOBS:
            found.extend(tree.glob(pattern))
    listed = [*site.getsitepackages(), site.getusersitepackages()]
    listed += [p for p in sys.path if p.endswith(("site-packages", "dist-packages"))]
    found.extend(Path(p) for p in listed if p)
    real = (_real(p) for p in found)
    return [p for p in dict.fromkeys(real) if p.is_dir()]


def environment() -> Path | None:
    """The harness's virtualenv, if it runs in one (nothing of it is the candidate's)."""
    prefix = _real(sys.prefix)
    return None if prefix == _real(sys.base_prefix) else prefix


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


def _editable(dist: metadata.Distribution) -> bool:
    text = dist.read_text("direct_url.json")
    if not text:
        return False
    try:
        return bool(json.loads(text).get("dir_info", {}).get("editable"))
    except (ValueError, AttributeError):
        return False


@lru_cache(maxsize=8)
def library_files(libraries: tuple[str, ...]) -> tuple[tuple[Path, PurePosixPath], ...]:
    """(installed file, path relative to the site folder) for every file the libraries'
    installations recorded (their ``RECORD``: modules, compiled extensions, bytecode,
    metadata), scripts outside the site folder and ``.pth`` files left out. ConfigError
    when a library is not installed, or installed so its files cannot be carried (an
    editable install, an installation without a file list)."""
    files: dict[PurePosixPath, Path] = {}
    for dist in distributions(libraries):
        name = dist.metadata["Name"] or "?"
        if _editable(dist):
            raise ConfigError(
                f"task library {name!r} is installed editable (pip install -e): the sandbox "
                "carries installed files only; install it without -e"
            )
        if dist.files is None:
            raise ConfigError(
                f"task library {name!r} lists no files (no RECORD): reinstall it with pip"
            )
        base = _real(str(dist.locate_file("")))
        for file in dist.files:
            relative = PurePosixPath(str(file))
            if not relative.parts or ".." in relative.parts or relative.suffix == ".pth":
                continue
            source = base / relative
            if source.is_file():
                files.setdefault(relative, source)
    return tuple((source, relative) for relative, source in sorted(files.items()))


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


__all__ = [
    "distributions",
    "environment",
    "interpreter",
    "interpreter_names",
    "interpreter_prefixes",
    "library_entries",
    "library_files",
    "package_folders",
    "stdlib",
]
