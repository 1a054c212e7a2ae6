"""Scenarios: what a run sets up, drives, waits for and checks.

A scenario is a folder (``scenarios/<id>/`` or a user's path) whose ``scenario.py`` defines
``SCENARIO``, an instance of a ``Scenario`` subclass, and whose ``README.md`` is its
specification. The runner (``chaos.run``) calls, in order: ``setup`` (start services and
the proxied links between them), ``workload`` (drive the system while faults land),
``settled`` (polled until true or the timeout), and ``final_state`` (read the real stores);
then it checks the scenario's invariants against that state. The fault space of each
variant is read from the folder's ``faults.toml`` (one table per variant) unless the
scenario overrides ``fault_space``.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.machinery
import importlib.util
import json
import math
import re
import sys
import tomllib
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, ClassVar

from chaos.sandbox.candidate import Limits
from chaos.services.images import Image
from chaos.services.supervise import RestartPolicy
from chaos.settle import STUCK_S, Stuck
from faults.kinds import TargetKind
from faults.space import FaultSpace
from ground._moved import moved
from ground.errors import ConfigError
from ground.rng import check_seed
from invariants import Invariant, get

if TYPE_CHECKING:
    from chaos.context import RunContext
    from chaos.nemesis.protocol import Subject
    from chaos.workload import PlannedWork

BUILTIN_ROOT = Path(__file__).resolve().parent.parent / "scenarios"
FAULTS_FILE = "faults.toml"
_HASHED = {".py", ".md", ".toml", ".sql", ".json", ".txt"}


@dataclass(frozen=True)
class Signal:
    """One thing the trace of a defective variant's failing run shows on its diagnosis path.

    A pack declares, per variant, the signals its README's diagnosis path names (a log line,
    a history operation, a proxy or nemesis event); ``chaos validate`` checks that the trace
    of a run that caught the variant shows every one of them. A signal matches an event when
    every field that is set matches: ``process``, ``f`` and ``type`` exactly, ``match`` as a
    regular expression searched in the event's value (a string as is, anything else as
    JSON with sorted keys, ``json.dumps(value, sort_keys=True)``).
    """

    #: One line for people: what the signal is evidence of.
    what: str
    process: str | None = None
    f: str | None = None
    type: str | None = None
    match: str | None = None

    def __post_init__(self) -> None:
        if not self.what.strip():
            raise ConfigError("a signal needs a description (what)")
        if self.match is not None:
            try:
                re.compile(self.match)
            except re.error as exc:
                raise ConfigError(
                    f"signal {self.what!r}: bad regex {self.match!r}: {exc}"
                ) from None

    def matches(self, event: Mapping[str, Any]) -> bool:
        """Whether one recorded event (a trace event: process, type, f, value) matches."""
        for name in ("process", "f", "type"):
            wanted = getattr(self, name)
            if wanted is not None and str(event.get(name)) != wanted:
                return False
        if self.match is None:
            return True
        value = event.get("value")
        text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
        return re.search(self.match, text) is not None

    def found_in(self, events: Iterable[Mapping[str, Any]]) -> bool:
        return any(self.matches(event) for event in events)


@dataclass(frozen=True)
class Budgets:
    """What a correct candidate is expected to stay within (``chaos grade``'s secondary
    measures): each measure within its budget scores 1, beyond it budget/value. They only
    order candidates of equal correctness (see docs/grading.md). None: not scored."""

    #: 95th percentile, over the seeds that held, of the seconds from the workload's end
    #: until the system settled.
    settle_p95_s: float | None = 15.0
    #: Mean CPU seconds of the candidate per run (all its processes).
    cpu_s: float | None = 10.0
    #: Mean side effects per run (``TaskSpec.side_effect``).
    side_effects: float | None = None

    def items(self) -> list[tuple[str, float]]:
        return [(k, v) for k, v in vars(self).items() if v is not None]


@dataclass(frozen=True)
class TaskSpec:
    """The part of a scenario's system that a candidate writes (``chaos task``, ``chaos grade``).

    ``service`` is the name the scenario gives that service in ``ctx.start_service``; in a
    graded run the candidate's program runs in its place, with only the environment
    variables named in ``env`` (the addresses of its links, never the real services) and the
    same ready line. ``interface`` and ``starter`` are files of the pack: the public
    interface contract (argv, environment, what it must do, what it may print) and a program
    that runs but does nothing useful. ``public_seeds`` are the seeds a candidate may
    self-check on; held-out seeds are derived from the environment builder's key.
    """

    service: str
    summary: str
    env: tuple[str, ...]
    interface: str = "TASK.md"
    starter: str = "starter.py"
    public_seeds: tuple[int, ...] = (0, 1, 2, 3, 4)
    #: Python distributions a candidate may import besides the standard library
    #: (requirement strings; extras and dependencies follow), e.g. "psycopg[binary]".
    libraries: tuple[str, ...] = ()
    #: The pack's golden program for this service (a file of the pack): ``chaos task
    #: --format harbor`` makes it self-contained as the task's ``solution/``.
    solution: str | None = None
    #: README sections (headings, matched by prefix, case-insensitive) left out of the public
    #: specification, with everything under them; "**Diagnosis path:**" paragraphs and
    #: ``<!-- private -->`` ... ``<!-- /private -->`` blocks are always left out.
    private_sections: tuple[str, ...] = ("Variants",)
    #: What a candidate may use per run (``chaos grade --limit-*`` changes them).
    limits: Limits = field(default_factory=Limits)
    budgets: Budgets = field(default_factory=Budgets)
    #: The side effect (``Scenario.side_effects`` name) counted as a secondary measure.
    side_effect: str | None = None
    #: Held-out seeds a grade draws by default.
    heldout_seeds: int = 20
    #: What an exported task's container needs (Harbor ``[environment]``, ``[agent]``).
    cpus: int = 2
    memory_mb: int = 4096
    agent_timeout_s: float = 3600.0

    def __post_init__(self) -> None:
        if not self.service:
            raise ConfigError("a task names the service the candidate writes")
        if not self.public_seeds:
            raise ConfigError(f"task {self.service}: at least one public seed")
        for seed in self.public_seeds:
            check_seed(seed, f"task {self.service}: public seed")
        for name in self.env:
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
                raise ConfigError(f"task {self.service}: bad environment variable name {name!r}")
        if not 1 <= self.heldout_seeds <= 1000:
            raise ConfigError(f"task {self.service}: heldout_seeds must be 1 to 1000")


class Scenario(ABC):
    """Base of every scenario. Subclasses set the class attributes and the four hooks."""

    id: ClassVar[str]
    description: ClassVar[str] = ""
    #: Variant name -> one line; "golden" must be one of them.
    variants: ClassVar[dict[str, str]] = {"golden": "the reference implementation"}
    #: Invariant names, resolved in the pack's namespace (the scenario id), then generic.
    invariants: ClassVar[tuple[str, ...]] = ()
    #: The invariants that mean "the final state is consistent" (``ChaosEnv.
    #: final_state_is_consistent``); None: all of them.
    consistency: ClassVar[tuple[str, ...] | None] = None
    #: Defective variant -> the invariant that must catch it (``chaos validate`` checks it).
    catches: ClassVar[dict[str, str]] = {}
    #: Defective variant -> the signals its diagnosis path names (``chaos validate`` checks
    #: that a catching run's trace shows each of them).
    signals: ClassVar[dict[str, tuple[Signal, ...]]] = {}
    #: The part a candidate writes, if this scenario is a task (``chaos task``/``grade``).
    task: ClassVar[TaskSpec | None] = None
    #: Logical subject name (as fault targets use it) -> where it flows.
    subjects: ClassVar[dict[str, Subject]] = {}
    #: Variant -> the links, services and subjects of the golden system it does not have
    #: (a variant without the relay: ``{"dual-write": ("relay", "relay-nats")}``). A fault
    #: space or schedule naming one of them for that variant (``--space golden``, a
    #: schedule file, its own table) is refused before anything starts, in every command.
    absent: ClassVar[dict[str, tuple[str, ...]]] = {}
    settle_timeout_s: ClassVar[float] = 30.0
    #: How long ``settled`` must answer ``STUCK`` (``chaos.settle``) before the run stops
    #: waiting for it: the state is final, the invariants are checked now.
    settle_stuck_s: ClassVar[float] = STUCK_S
    #: Why the scenario needs a PostgreSQL of its own (it creates roles, needs passwords, ...);
    #: empty: it also runs on an external one (``--postgres-dsn``). Checked before a run starts.
    own_postgres: ClassVar[str] = ""
    #: The container images ``ctx.start_container`` may run (references, or ``Image``s that
    #: build themselves); every run checks them before it starts anything.
    images: ClassVar[tuple[str | Image, ...]] = ()
    #: How ``ctx.start_service`` restarts a service under test that exits on its own
    #: (``RestartPolicy.never()``: leave it dead); a service may override it.
    restart: ClassVar[RestartPolicy] = RestartPolicy()
    #: Whether a warm worker (``chaos.warm``) may give runs a fresh database on its kept
    #: PostgreSQL and a fresh stream on its kept nats-server instead of starting both. Only
    #: for scenarios whose state is all in tables of one database and in JetStream streams
    #: (not roles or other cluster-wide objects), and that never fault those two servers.
    warm_services: ClassVar[bool] = False
    #: Modules a warm worker's zygote imports once, so that the scenario's own Python
    #: services (``start_service``/``run_to_completion`` of ``[ctx.python(), "-m", MODULE,
    #: ...]``) are forked from it instead of paying an interpreter start-up and these
    #: imports each (``chaos.services.zygote``; ``CHAOS_ZYGOTE=0`` turns it off). List the
    #: services' third-party dependencies, never the scenario's own modules (they may read
    #: their environment when imported). Empty: no zygote.
    zygote_preload: ClassVar[tuple[str, ...]] = ()

    path: Path = BUILTIN_ROOT

    def fault_space(self, variant: str) -> FaultSpace:
        """The faults a run of ``variant`` may draw: the ``[variant]`` table of the folder's
        ``faults.toml`` (ConfigError naming the file and variant if it is missing or bad)."""
        self.check_variant(variant)
        file = self.path / FAULTS_FILE
        try:
            spaces = tomllib.loads(file.read_text(encoding="utf-8"))
        except OSError as exc:
            raise ConfigError(f"{file}: cannot read the fault spaces: {exc.strerror}") from None
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{file}: not valid TOML: {exc}") from None
        table = spaces.get(variant)
        if not isinstance(table, dict):
            tables = ", ".join(k for k, v in spaces.items() if isinstance(v, dict)) or "none"
            raise ConfigError(f"{file}: no table [{variant}] (tables: {tables})")
        try:
            space = FaultSpace.from_dict(table)
        except ConfigError as exc:
            raise ConfigError(f"{file} [{variant}]: {exc}") from None
        self.check_space(variant, space, f"{file} [{variant}]")
        return space

    def space_for(self, variant: str, table: str) -> FaultSpace:
        """The ``[table]`` space used on runs of ``variant`` (``--space golden``), refused
        (ConfigError, before anything starts) if it names what ``variant`` lacks."""
        space = self.fault_space(table)
        if table != variant:
            self.check_space(variant, space, f"the {table} space")
        return space

    def check_space(self, variant: str, space: FaultSpace, what: str) -> None:
        """ConfigError naming the first link, service or subject of ``space`` that
        ``variant`` lacks (``Scenario.absent``)."""
        lacks = set(self.absent.get(variant, ()))
        for kind in (TargetKind.LINK, TargetKind.SERVICE, TargetKind.SUBJECT):
            for name in space.declared(kind):
                if name in lacks:
                    raise ConfigError(
                        f"{what} names {kind.value} {name!r}, which variant {variant!r} of "
                        f"scenario {self.id} does not have (Scenario.absent)"
                    )

    @abstractmethod
    async def setup(self, ctx: RunContext) -> None:
        """Start the services and declare the proxied links."""

    @abstractmethod
    async def workload(self, ctx: RunContext) -> None:
        """Drive the system; faults land meanwhile. Return when the workload is done."""

    @abstractmethod
    async def settled(self, ctx: RunContext) -> bool | Stuck:
        """True once everything the workload started has been processed; ``STUCK``
        (``chaos.settle``) when it is not and cannot be until something happens first (the
        run then ends without waiting out ``settle_timeout_s``); else False."""

    @abstractmethod
    async def final_state(self, ctx: RunContext) -> dict[str, Any]:
        """The final state, read from the real stores, for the invariants."""

    def side_effects(self, name: str, final_state: Mapping[str, Any]) -> Counter[str]:
        """How often the side effect ``name`` happened, per key (an order id, say), in a
        final state. Scenarios name theirs; the pytest plugin's ``side_effect_count`` asks."""
        raise ConfigError(f"scenario {self.id} declares no side effect {name!r}")

    def planned_work(self, ctx: RunContext) -> Sequence[PlannedWork]:
        """What the harness's own workload must get done in this run (``chaos.workload``):
        checked after the invariants as the run's ``workload`` verdict, so a system that
        keeps the workload from its work fails for it. Default: nothing declared (no such
        verdict)."""
        return ()

    def checkers(self) -> list[Invariant]:
        """The invariants this scenario checks, in order (ConfigError for an unknown name)."""
        return [get(name, pack=self.id) for name in self.invariants]

    def consistency_invariants(self) -> tuple[str, ...]:
        """The invariants whose holding means the final state is consistent."""
        if self.consistency is None:
            return self.invariants
        unknown = [name for name in self.consistency if name not in self.invariants]
        if unknown:
            raise ConfigError(
                f"scenario {self.id}: consistency names {', '.join(unknown)}, which it does "
                f"not check (invariants: {', '.join(self.invariants) or 'none'})"
            )
        return self.consistency

    def check_variant(self, variant: str) -> None:
        if variant not in self.variants:
            raise ConfigError(
                f"scenario {self.id} has no variant {variant!r} "
                f"(it has: {', '.join(self.variants)})"
            )

    def check_externals(self, postgres_dsn: str | None) -> None:
        """Refuse an external PostgreSQL this scenario cannot run on (before anything starts)."""
        if postgres_dsn is not None and self.own_postgres:
            raise ConfigError(
                f"scenario {self.id} needs a PostgreSQL of its own ({self.own_postgres}): "
                "run it without --postgres-dsn"
            )

    @property
    def builtin(self) -> bool:
        """Whether this is a built-in pack (``scenarios/<id>/``), found by its id alone."""
        return self.path.parent == BUILTIN_ROOT.resolve() and self.path.name == self.id

    @property
    def source(self) -> str:
        """What ``load_scenario`` takes to load this pack again from any directory: the id of a
        built-in pack, else the absolute path of its folder."""
        return self.id if self.builtin else str(self.path)

    def content_hash(self) -> str:
        """SHA-256 over the scenario folder's source and docs (what replay checks for drift)."""
        h = hashlib.sha256()
        for file in sorted(self.path.rglob("*")):
            if file.is_file() and file.suffix in _HASHED and "__pycache__" not in file.parts:
                h.update(str(file.relative_to(self.path)).encode() + b"\0")
                h.update(file.read_bytes() + b"\0")
        return h.hexdigest()


#: What a scenario's variant list holds where its implementations are held out (a task's
#: image: ``chaos task --format harbor``): the golden name only, so graded runs still go.
HELD_OUT = {"golden": "(the implementations are held out of this copy of the pack)"}


def variant_descriptions(module: str) -> dict[str, str]:
    """name -> description of the classes in ``module``'s ``VARIANTS`` (each with a
    ``description``), imported when asked. A scenario module calls this instead of
    importing its variants, so it still loads where the pack's implementations of the task's
    service were left out (an exported task's image): then only ``golden`` is listed."""
    try:
        found = importlib.import_module(module)
    except ModuleNotFoundError as exc:
        package = module.rpartition(".")[0]
        if exc.name is None or not (exc.name == package or exc.name.startswith(package + ".")):
            raise
        return dict(HELD_OUT)
    return {name: str(cls.description) for name, cls in found.VARIANTS.items()}


def builtin_scenarios() -> list[str]:
    return sorted(p.name for p in BUILTIN_ROOT.iterdir() if (p / "scenario.py").is_file())


def pack_package(folder: Path) -> str:
    """The package name a folder pack is imported as: ``chaos_pack_<folder>_<hash of its
    absolute path>`` (two folders of the same name never share one)."""
    folder = folder.resolve()
    name = re.sub(r"\W", "_", folder.name)
    return f"chaos_pack_{name}_{hashlib.sha256(str(folder).encode()).hexdigest()[:8]}"


def _import_folder(folder: Path) -> ModuleType:
    """Import a folder pack as a package (``pack_package``), then its ``scenario`` module.

    The folder is importable: ``scenario.py`` may import its siblings relatively
    (``from . import checkers``, ``from .common import X``); an ``__init__.py`` is optional.
    Loading the same folder again returns the module already imported, so the pack's
    checkers register once per process (and registering again would only replace them)."""
    folder = folder.resolve()
    package = pack_package(folder)
    module_name = f"{package}.scenario"
    if module_name in sys.modules:
        return sys.modules[module_name]
    file = folder / "scenario.py"
    init = folder / "__init__.py"
    try:
        if init.is_file():
            spec = importlib.util.spec_from_file_location(
                package, init, submodule_search_locations=[str(folder)]
            )
            if spec is None or spec.loader is None:
                raise ConfigError(f"cannot load {init}")
            parent = importlib.util.module_from_spec(spec)
            sys.modules[package] = parent
            spec.loader.exec_module(parent)
        else:
            spec = importlib.machinery.ModuleSpec(package, None, is_package=True)
            spec.submodule_search_locations = [str(folder)]
            sys.modules[package] = importlib.util.module_from_spec(spec)
        return importlib.import_module(module_name)
    except ConfigError as exc:
        _forget(package)
        raise ConfigError(f"{file}: {exc}") from None
    except Exception as exc:
        _forget(package)
        where = _where(exc, folder) or str(file)
        raise ConfigError(f"{where}: {type(exc).__name__}: {exc}") from None


def _forget(package: str) -> None:
    for name in [n for n in sys.modules if n == package or n.startswith(package + ".")]:
        del sys.modules[name]


def _where(exc: BaseException, folder: Path) -> str | None:
    """``file:line`` of the innermost frame of ``exc`` inside the pack's folder."""
    found = None
    tb = exc.__traceback__
    while tb is not None:
        name = tb.tb_frame.f_code.co_filename
        if name.startswith(str(folder)):
            found = f"{name}:{tb.tb_lineno}"
        tb = tb.tb_next
    return found


def load_scenario(name_or_path: str | Path) -> Scenario:
    """A built-in scenario by id (``payments``) or a folder holding ``scenario.py`` (any
    path, relative to the current directory or absolute); ConfigError naming what it looked
    for otherwise."""
    name_or_path = str(name_or_path)
    if (
        re.fullmatch(r"[a-z][a-z0-9_]*", name_or_path)
        and (BUILTIN_ROOT / name_or_path / "scenario.py").is_file()
    ):
        module = importlib.import_module(f"scenarios.{name_or_path}.scenario")
        folder = BUILTIN_ROOT / name_or_path
    else:
        folder = Path(name_or_path)
        file = folder / "scenario.py"
        if not file.is_file():
            known = ", ".join(builtin_scenarios()) or "none"
            raise ConfigError(
                f"unknown scenario {name_or_path!r}: not a built-in ({known}) "
                f"nor a folder with a scenario.py (looked for {file.resolve()})"
            )
        module = _import_folder(folder)
    scenario = getattr(module, "SCENARIO", None)
    if not isinstance(scenario, Scenario):
        raise ConfigError(f"{folder / 'scenario.py'} defines no SCENARIO (a Scenario instance)")
    for name in ("settle_timeout_s", "settle_stuck_s"):
        value = getattr(scenario, name)
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if not number or not math.isfinite(value) or value <= 0:
            raise ConfigError(
                f"{folder / 'scenario.py'}: {name} must be a number of seconds > 0, "
                f"got {value!r}"
            )
    scenario.path = folder.resolve()
    return scenario


__all__ = [
    "BUILTIN_ROOT",
    "Budgets",
    "Scenario",
    "Signal",
    "TaskSpec",
    "builtin_scenarios",
    "load_scenario",
    "pack_package",
]

#: Old paths of names that moved (a DeprecationWarning naming the new one, for one release).
__getattr__ = moved(__name__, {"Subject": "chaos.nemesis"})
