"""A candidate: a program run in place of a scenario's task service, and what became of it.

``Program`` is what the user gave (``--impl PATH``: a Python file, an executable, or a folder
holding ``main.py`` or an executable ``run``), hashed once. ``Limits`` are the resources a
candidate may use in one run. ``Candidate`` ties both to a sandbox and is handed to the run
(``RunOptions.candidate``); the sandbox fills its ``report`` while the run goes: what it had to
stop (``contained``), how the program ended, its CPU seconds.

This module only describes; ``chaos.sandbox.process`` runs.
"""

from __future__ import annotations

import hashlib
import math
import os
import stat
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ground.errors import ConfigError

if TYPE_CHECKING:
    from chaos.context import RunContext
    from chaos.services import ManagedProcess
    from chaos.services.container import ContainerService

#: Why the sandbox stopped a candidate (``CandidateReport.contained``), one word each.
MEMORY = "memory"
CPU = "cpu"
WALL_CLOCK = "wall clock"
PROCESSES = "processes"
FILE_SIZE = "file size"
BYPASS = "bypassed link"
IGNORED_SIGTERM = "ignored SIGTERM"
REASONS = (MEMORY, CPU, WALL_CLOCK, PROCESSES, FILE_SIZE, BYPASS, IGNORED_SIGTERM)


@dataclass(frozen=True)
class Limits:
    """What one candidate may use in one run (``chaos grade`` flags; a task's defaults).

    Reaching a limit stops the candidate (its whole process tree) and grades the seed 0
    with the reason in ``contained``.
    """

    #: Memory (cgroup memory limit when the machine has one, else the address-space rlimit).
    memory_mb: int = 1024
    #: CPU seconds over the whole run, all its processes together.
    cpu_s: float = 60.0
    #: Processes and threads at once.
    processes: int = 256
    #: The largest file, and everything in its scratch directory together.
    file_size_mb: int = 256
    #: Open files per process.
    open_files: int = 256
    #: Wall clock of the whole graded run (services, workload, settle, checks).
    wall_s: float = 300.0
    #: Seconds to print the ready line after each start (then the run goes on without it).
    ready_s: float = 30.0
    #: Seconds to exit after SIGTERM when the run ends.
    term_s: float = 2.0

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ConfigError(f"limit {f.name} must be a number, got {value!r}")
            if not (math.isfinite(value) and value > 0):
                raise ConfigError(f"limit {f.name} must be a finite number > 0, got {value}")
            if f.type == "int" and not isinstance(value, int):
                raise ConfigError(f"limit {f.name} must be a whole number, got {value}")

    def to_dict(self) -> dict[str, float]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_dict(cls, data: dict[str, Any], base: Limits | None = None) -> Limits:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(f"unknown limit(s) {', '.join(unknown)} (known: {', '.join(known)})")
        return replace(base or cls(), **data)

    def to_args(self) -> list[str]:
        """The ``chaos run`` flags that give these limits to a worker."""
        out = []
        for name, value in self.to_dict().items():
            out += ["--limit", f"{name}={value!r}"]
        return out

    @classmethod
    def parse(cls, texts: list[str], base: Limits | None = None) -> Limits:
        """``--limit NAME=VALUE`` flags over ``base`` (ConfigError naming the bad one)."""
        changes: dict[str, Any] = {}
        known = [f.name for f in fields(cls)]
        for text in texts:
            name, sep, value = text.partition("=")
            name = name.strip().replace("-", "_")
            if not sep or name not in known:
                raise ConfigError(
                    f"bad --limit {text!r}: use NAME=VALUE with NAME one of {', '.join(known)}"
                )
            try:
                number = float(value)
            except ValueError:
                raise ConfigError(f"bad --limit {text!r}: {value!r} is not a number") from None
            kind = type(getattr(cls(), name))
            changes[name] = int(number) if kind is int and number.is_integer() else number
        return cls.from_dict(changes, base)


@dataclass(frozen=True)
class Program:
    """The candidate's program: where it is, how to start it, and its SHA-256."""

    path: Path
    #: ``python`` (a .py file, or a folder with main.py) or ``exec`` (an executable).
    kind: str
    #: The file to run, relative to ``path`` for a folder ("" for a single file).
    entry: str
    sha256: str

    @classmethod
    def from_path(cls, path: Path | str) -> Program:
        """A program from ``--impl PATH``; ConfigError (one line) if it cannot be run."""
        path = Path(path).absolute()
        try:
            st = path.lstat()
        except OSError as exc:
            raise ConfigError(f"--impl {path}: {exc.strerror or exc}") from None
        # The harness copies the program as root: a link could hand the candidate any file.
        links = [path] if stat.S_ISLNK(st.st_mode) else []
        if stat.S_ISDIR(st.st_mode):
            links = [p for p in path.rglob("*") if p.is_symlink()]
        if links:
            raise ConfigError(f"--impl {path}: symbolic links are not allowed ({links[0]})")
        if stat.S_ISDIR(st.st_mode):
            if (path / "main.py").is_file():
                kind, entry = "python", "main.py"
            elif (path / "run").is_file() and os.access(path / "run", os.X_OK):
                kind, entry = "exec", "run"
            else:
                raise ConfigError(
                    f"--impl {path}: a folder needs a main.py or an executable named run"
                )
        elif stat.S_ISREG(st.st_mode):
            if path.suffix == ".py":
                kind, entry = "python", ""
            elif os.access(path, os.X_OK):
                kind, entry = "exec", ""
            else:
                raise ConfigError(f"--impl {path}: not executable and not a .py file")
        else:
            raise ConfigError(f"--impl {path}: not a file or folder")
        try:
            digest = tree_sha256(path)
        except OSError as exc:
            raise ConfigError(f"--impl {path}: cannot read it: {exc.strerror or exc}") from None
        return cls(path, kind, entry, digest)

    def files(self) -> list[tuple[Path, str]]:
        """(absolute file, path relative to the program) for every file of the program."""
        if self.path.is_file():
            return [(self.path, self.path.name)]
        return [
            (f, str(f.relative_to(self.path)))
            for f in sorted(self.path.rglob("*"))
            if f.is_file() and "__pycache__" not in f.parts
        ]


def tree_sha256(path: Path) -> str:
    """SHA-256 of a file's bytes, or of a folder's files (relative names and bytes, sorted)."""
    h = hashlib.sha256()
    if path.is_file():
        h.update(path.read_bytes())
        return h.hexdigest()
    for file in sorted(path.rglob("*")):
        if file.is_file() and "__pycache__" not in file.parts:
            h.update(str(file.relative_to(path)).encode() + b"\0")
            h.update(file.read_bytes() + b"\0")
    return h.hexdigest()


@dataclass(frozen=True)
class CandidateSpec:
    """A graded run's candidate as plain data: what ``chaos grade`` hands each run (a
    ``RunSpec``'s ``candidate``) and a warm worker turns into a ``Candidate``. Checked once,
    when the grade makes it (the program hashed, the limits in range, the sandbox able to run
    it); a worker takes it as it comes, never parsing flags back. ``to_args`` gives the
    ``chaos run --impl`` flags of a cold run (``--run-timeout``, Ray)."""

    program: Program
    limits: Limits
    #: ``--isolation`` (None: the machine's default).
    isolation: str | None = None
    #: ``--sandbox`` (None: the process sandbox).
    sandbox: str | None = None
    #: Paths the candidate must not see (the key file, the grade's traces).
    hidden: tuple[Path, ...] = ()

    def with_hidden(self, *paths: Path) -> CandidateSpec:
        return replace(self, hidden=(*self.hidden, *paths))

    def to_args(self) -> list[str]:
        """The ``chaos run`` flags of this candidate (a cold run's command line)."""
        args = ["--impl", str(self.program.path), *self.limits.to_args()]
        if self.isolation:
            args += ["--isolation", self.isolation]
        if self.sandbox and self.sandbox != "process":
            args += ["--sandbox", self.sandbox]
        for path in self.hidden:
            args += ["--hide", str(path)]
        return args

    def to_dict(self) -> dict[str, Any]:
        program = self.program
        return {
            "program": {"path": str(program.path), "kind": program.kind,
                        "entry": program.entry, "sha256": program.sha256},
            "limits": self.limits.to_dict(),
            "isolation": self.isolation,
            "sandbox": self.sandbox,
            "hidden": [str(p) for p in self.hidden],
        }  # fmt: skip

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CandidateSpec:
        """The spec ``to_dict`` gave (ConfigError, or KeyError/TypeError/ValueError for a
        malformed one); the program is not hashed again (a run's sandbox hashes its copy)."""
        program = data["program"]
        if program["kind"] not in ("python", "exec"):
            raise ConfigError(f"a candidate's program kind must be python or exec, got "
                              f"{program['kind']!r}")  # fmt: skip
        return cls(
            Program(Path(program["path"]), str(program["kind"]), str(program["entry"]),
                    str(program["sha256"])),
            Limits.from_dict(dict(data["limits"])),
            None if data.get("isolation") is None else str(data["isolation"]),
            None if data.get("sandbox") is None else str(data["sandbox"]),
            tuple(Path(p) for p in data.get("hidden") or ()),
        )  # fmt: skip


@dataclass
class CandidateReport:
    """What the sandbox saw of the candidate during one run (the run JSON's ``candidate``)."""

    service: str
    sha256: str
    sandbox: str = ""
    #: ``root`` (own uid, namespaces, cgroup when present) or ``user`` (rlimits, detection).
    isolation: str = ""
    #: What the sandbox had to stop: [{"reason", "detail", "t"}], first one decides.
    contained: list[dict[str, Any]] = field(default_factory=list)
    #: How each start of the program ended: [{"code"|"signal", "t", "expected"}].
    exits: list[dict[str, Any]] = field(default_factory=list)
    starts: int = 0
    #: Starts whose ready line never came (the run went on without it).
    not_ready: int = 0
    #: CPU seconds of all its processes, over every instance it ran as.
    cpu_s: float = 0.0
    #: CPU seconds per instance (leases runs the candidate as worker-1, worker-2, ...).
    cpu_by_service: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def add_cpu(self, service: str, seconds: float) -> None:
        """The CPU seconds ``service``'s instance has used so far (never decreasing)."""
        self.cpu_by_service[service] = max(self.cpu_by_service.get(service, 0.0), seconds)
        self.cpu_s = sum(self.cpu_by_service.values())

    def contain(self, reason: str, detail: str, t: float) -> bool:
        """Record a containment; False if this reason was already recorded."""
        if any(c["reason"] == reason for c in self.contained):
            return False
        self.contained.append({"reason": reason, "detail": detail, "t": round(t, 3)})
        return True

    def to_json(self) -> dict[str, Any]:
        return {
            "service": self.service,
            "sha256": self.sha256,
            "sandbox": self.sandbox,
            "isolation": self.isolation,
            "contained": list(self.contained),
            "exits": list(self.exits),
            "starts": self.starts,
            "not_ready": self.not_ready,
            "cpu_s": round(self.cpu_s, 3),
            "cpu_by_service": {k: round(v, 3) for k, v in self.cpu_by_service.items()},
            "notes": list(self.notes),
        }


class Sandbox(Protocol):
    """Where a candidate runs: the process sandbox today, a container sandbox later.

    ``check`` refuses (ConfigError) before anything starts when this machine cannot host the
    sandbox (or, given the program, cannot run it there). ``start`` runs the candidate for one
    run in place of service ``name``: it enters everything it creates on ``ctx.stack`` (so
    it is removed however the run ends), gives the program only ``env`` (the task's
    variables), lets it reach only the run's links, enforces ``candidate.limits`` and fills
    ``candidate.report``. It returns the service as the nemesis drives it (kill, restart,
    pause, resume, clock skew).
    """

    name: str

    def check(self, program: Program | None = None) -> None: ...

    async def start(
        self,
        ctx: RunContext,
        candidate: Candidate,
        name: str,
        env: dict[str, str],
        ready_line: str | None,
        wait: bool,
    ) -> ManagedProcess | ContainerService: ...


@dataclass
class Candidate:
    """A program graded in place of a task's service in one run (``RunOptions.candidate``)."""

    program: Program
    service: str
    #: The environment variables the program receives (``TaskSpec.env``).
    env: tuple[str, ...]
    #: Python distributions the program may import (``TaskSpec.libraries``).
    libraries: tuple[str, ...]
    limits: Limits
    sandbox: Sandbox
    #: Paths the program must not see even where the sandbox exposes their parent.
    hidden: tuple[Path, ...] = ()
    report: CandidateReport = field(init=False)

    def __post_init__(self) -> None:
        self.report = CandidateReport(self.service, self.program.sha256, self.sandbox.name)

    def replaces(self, name: str) -> bool:
        """Whether the service ``name`` is the task: the task's service itself, or one of
        several instances of it named ``<service>-<suffix>`` (``worker-1``, ``worker-2``)."""
        return name == self.service or (
            name.startswith(f"{self.service}-") and len(name) > len(self.service) + 1
        )

    async def start(
        self,
        ctx: RunContext,
        name: str,
        env: dict[str, str],
        ready_line: str | None,
        wait: bool,
    ) -> ManagedProcess | ContainerService:
        """Start the program for the run (``RunContext.start_service`` calls it)."""
        allowed = {k: v for k, v in env.items() if k in self.env}
        return await self.sandbox.start(ctx, self, name, allowed, ready_line, wait)


__all__ = [
    "BYPASS",
    "CPU",
    "FILE_SIZE",
    "IGNORED_SIGTERM",
    "MEMORY",
    "PROCESSES",
    "REASONS",
    "WALL_CLOCK",
    "tree_sha256",
]
