"""The candidate's box: the one folder of its own a sandbox gives it, and what goes in it.

::

    BOX/                  root's, 0755; at root isolation a tmpfs of its own
      scratch/            the candidate's, 0700: home and working directory   -> /sandbox
      tmp/                the candidate's, 0700: TMPDIR                       -> /tmp
      program/            a root-owned copy of the program that was hashed    -> /candidate
      run/                root's                                              -> /run/chaos
        bin/              python, python3, python3.X: links to the interpreter
        site/             the task's libraries, copied (PYTHONPATH)
        clock/            the libfaketime timestamp file the harness rewrites
        libfaketime.so.1  a copy (LD_PRELOAD)

At root isolation the right-hand paths are where the candidate sees them (its mount tree
binds the four folders there: ``_mounts``); the box being a file system of its own, its
mount table shows ``/scratch``, ``/program``... as their sources, never a host path. At uid
and user isolation the candidate uses the box's own paths. Everything the harness lends is a
copy, readable by any uid, so what the candidate gets does not depend on where or how the
harness was installed.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from chaos.sandbox import _python
from chaos.sandbox.candidate import Candidate, tree_sha256

#: Where the box's folders are inside a root-isolated sandbox.
SCRATCH = "/sandbox"
TMP = "/tmp"
PROGRAM = "/candidate"
RUN = "/run/chaos"


@dataclass(frozen=True)
class Places:
    """Where the candidate finds the box's folders (inside its sandbox, or on the host)."""

    scratch: str
    tmp: str
    program: str
    run: str

    @property
    def bin(self) -> str:
        return f"{self.run}/bin"

    @property
    def site(self) -> str:
        return f"{self.run}/site"

    @property
    def clock(self) -> str:
        return f"{self.run}/clock"

    @property
    def python(self) -> str:
        return f"{self.bin}/python3"


INSIDE = Places(SCRATCH, TMP, PROGRAM, RUN)


@dataclass(frozen=True)
class Box:
    """A box folder (see the module docstring); ``fill`` puts everything in it."""

    path: Path

    @property
    def scratch(self) -> Path:
        return self.path / "scratch"

    @property
    def tmp(self) -> Path:
        return self.path / "tmp"

    @property
    def program(self) -> Path:
        return self.path / "program"

    @property
    def run(self) -> Path:
        return self.path / "run"

    @property
    def clock(self) -> Path:
        return self.run / "clock"

    def places(self, inside: bool) -> Places:
        """The candidate's view: fixed paths in its own root, else the box's own."""
        if inside:
            return INSIDE
        return Places(str(self.scratch), str(self.tmp), str(self.program), str(self.run))

    def fill(
        self,
        candidate: Candidate,
        faketime: Path | None,
        owner: tuple[int, int] | None,
        libraries: bool = True,
    ) -> str | None:
        """Make every folder, copy the program (its SHA-256 into the report), the task's
        libraries (unless ``libraries`` is false: ``run/site`` is then left empty, for the
        process's read-only layer, ``_layer``, to be bound on) and libfaketime, link the
        interpreter; give ``owner`` (a sandbox uid) its two writable folders. Returns
        libfaketime's file name in ``run/``, if copied."""
        self.path.chmod(0o755)
        for folder in (self.scratch, self.tmp):
            folder.mkdir(mode=0o700)
            if owner is not None:
                os.chown(folder, *owner)
        copy_program(candidate, self.program)
        for folder in (self.run, self.run / "bin", self.clock):
            folder.mkdir(mode=0o755)
        if libraries:
            copy_libraries(candidate.libraries, self.run / "site")
        else:
            (self.run / "site").mkdir(mode=0o755)
        for name in _python.interpreter_names():
            (self.run / "bin" / name).symlink_to(_python.interpreter())
        if faketime is None:
            return None
        _copy_readable(faketime, self.run / faketime.name)
        return faketime.name


def _copy_readable(source: Path, target: Path) -> None:
    """A copy any uid can read (and run, if the source is executable), times kept (so
    bytecode stays valid for its source)."""
    shutil.copy2(source, target)
    target.chmod(0o755 if os.access(source, os.X_OK) else 0o644)


def copy_libraries(libraries: tuple[str, ...], site: Path) -> None:
    """The files of the task's libraries into ``site`` (made, or an empty folder: folders
    0755, files readable)."""
    site.mkdir(mode=0o755, exist_ok=True)
    site.chmod(0o755)
    made = {site}
    for source, relative in _python.library_files(libraries):
        target = site.joinpath(*relative.parts)
        for folder in reversed(target.parents):
            if folder not in made and folder.is_relative_to(site):
                folder.mkdir(mode=0o755, exist_ok=True)
                folder.chmod(0o755)
                made.add(folder)
        _copy_readable(source, target)


def copy_program(candidate: Candidate, into: Path) -> None:
    """A root-owned, world-readable copy, whose hash the report carries: what runs is what
    the grade hashed (the grade checks it), whatever changes the original meanwhile."""
    into.mkdir(mode=0o755)
    for source, relative in candidate.program.files():
        target = into / relative
        target.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
        shutil.copyfile(source, target)
        mode = 0o755 if os.access(source, os.X_OK) else 0o644
        target.chmod(mode)
    for folder in [into, *(p for p in into.rglob("*") if p.is_dir())]:
        folder.chmod(0o755)
    program = candidate.program
    copied = into / program.path.name if program.path.is_file() else into
    candidate.report.sha256 = tree_sha256(copied)


def used_bytes(paths: list[Path], limit: int = 20_000) -> int:
    """Bytes of the files under ``paths`` (the first ``limit`` files)."""
    total, seen = 0, 0
    for path in paths:
        for root, _dirs, files in os.walk(path):
            for name in files:
                seen += 1
                if seen > limit:
                    return total
                try:
                    total += os.lstat(os.path.join(root, name)).st_blocks * 512
                except OSError:
                    continue
    return total


__all__ = [
    "INSIDE",
    "PROGRAM",
    "RUN",
    "SCRATCH",
    "TMP",
    "Box",
    "Places",
    "copy_libraries",
    "copy_program",
    "used_bytes",
]
