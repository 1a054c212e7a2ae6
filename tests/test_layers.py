"""The house's layers: imports point down only, no import cycle, packs stay off engines and faces.

The layer order is written once, here (docs/architecture.md explains it). Every module of the
six top-level packages is read with ``ast`` (nothing is imported) and each failure names the
file and line of the offending import.
"""

from __future__ import annotations

import ast
import fnmatch
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("ground", "chaos", "faults", "replay", "invariants", "scenarios")

# One row per floor, bottom up: rank, name, the modules on it. NAME covers the module and
# everything under it, NAME= the module alone, * is a wildcard; the most specific entry wins.
# Packs (P) may import floors 0-2 (and packs); no harness module imports a pack: the harness
# loads packs by name. Old paths kept for one release (ground._moved shims: they import only
# the ground) sit on the floor of the package that holds them.
LAYERS = """
0 ground   ground  chaos.errors  chaos.rng
1 model    faults  invariants  replay
2 run      chaos.scenario  chaos.context  chaos.nemesis  chaos.recorder  chaos.services  chaos.run
           chaos.sandbox  chaos.stress  chaos.settle  chaos.warm  chaos.schedule_file
           chaos.workload  chaos.floor
P packs    scenarios
3 engines  chaos.replay  chaos.search  chaos.search_scenario  chaos._shrink
           chaos.sweep  chaos.validate  chaos.testing  chaos.grading
           chaos.task  chaos.harbor  chaos.executor  chaos.executor_ray  chaos.hypothesis
           chaos.warm_worker  chaos.warm_pool  chaos.grade_pool
4 faces    chaos=  chaos.cli  chaos.pytest_plugin  chaos.__main__
"""
PACK_RANK = 2.5


@dataclass(frozen=True)
class Floor:
    rank: float
    name: str


def floors() -> list[tuple[str, Floor]]:
    """(pattern, floor) for every entry of LAYERS."""
    entries = []
    floor = Floor(0, "")
    for line in LAYERS.strip().splitlines():
        if line.startswith(" "):  # a continuation line: more modules of the floor above
            patterns = line.split()
        else:
            rank, name, *patterns = line.split()
            floor = Floor(PACK_RANK if rank == "P" else float(rank), name)
        entries += [(pattern, floor) for pattern in patterns]
    return entries


FLOORS = floors()


def floor_of(module: str) -> Floor | None:
    best: tuple[int, Floor] | None = None
    for pattern, floor in FLOORS:
        if pattern.endswith("="):
            hit = module == pattern[:-1]
        elif "*" in pattern:
            hit = fnmatch.fnmatchcase(module, pattern) or fnmatch.fnmatchcase(
                module, pattern + ".*"
            )
        else:
            hit = module == pattern or module.startswith(pattern + ".")
        if hit and (best is None or len(pattern) > best[0]):
            best = (len(pattern), floor)
    return None if best is None else best[1]


@dataclass(frozen=True)
class Import:
    source: str  # importing module
    target: str  # imported project module
    file: Path
    line: int
    type_only: bool  # inside ``if TYPE_CHECKING:``
    function: str | None = None  # the top-level function whose body holds it (lazy)

    @property
    def where(self) -> str:
        return f"{self.file.relative_to(ROOT)}:{self.line}"


def module_files() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for package in PACKAGES:
        for file in sorted((ROOT / package).rglob("*.py")):
            parts = list(file.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = file
    return found


MODULES = module_files()


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _resolve(source: str, file: Path, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    package = source if file.name == "__init__.py" else source.rpartition(".")[0]
    for _ in range(node.level - 1):
        package = package.rpartition(".")[0]
    return f"{package}.{node.module}" if node.module else package


def imports_of(source: str, file: Path) -> Iterator[Import]:
    tree = ast.parse(file.read_text(encoding="utf-8"), str(file))

    def walk(node: ast.AST, type_only: bool, function: str | None) -> Iterator[Import]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child.test):
                for stmt in child.body:
                    yield from walk_one(stmt, True, function)
                for stmt in child.orelse:
                    yield from walk_one(stmt, type_only, function)
            else:
                yield from walk_one(child, type_only, function)

    def walk_one(node: ast.AST, type_only: bool, function: str | None) -> Iterator[Import]:
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(source, alias.name, file, node.lineno, type_only, function)
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(source, file, node)
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                target = sub if sub in MODULES else base
                yield Import(source, target, file, node.lineno, type_only, function)
        elif function is None and isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield from walk(node, type_only, node.name)
        else:
            yield from walk(node, type_only, function)

    for found in walk(tree, False, None):
        if found.target.split(".")[0] in PACKAGES:
            yield found


IMPORTS = [found for module, file in MODULES.items() for found in imports_of(module, file)]


def describe(module: str) -> str:
    floor = floor_of(module)
    return f"{module} ({'no layer' if floor is None else floor.name})"


def wrong_way(imports: list[Import]) -> list[str]:
    """Each import that points up, or into a pack from the harness, or out of the ground."""
    problems = []
    for found in imports:
        source, target = floor_of(found.source), floor_of(found.target)
        if source is None or target is None:
            continue  # reported by test_every_module_has_a_layer
        what = f"{found.where}: {describe(found.source)} imports {describe(found.target)}"
        if source.rank == 0 and target.rank != 0:
            problems.append(f"{what}: the ground floor imports nothing of the project")
        elif source.rank == PACK_RANK and target.rank not in (0, 1, 2, PACK_RANK):
            problems.append(f"{what}: a pack may use floors 0-2 only (no engine, no face)")
        elif target.rank == PACK_RANK and source.rank != PACK_RANK:
            problems.append(f"{what}: the harness loads packs by name, it never imports one")
        elif target.rank > source.rank:
            problems.append(f"{what}: imports must point down")
    return list(dict.fromkeys(problems))  # one line per import, however many names it takes


def cycles(imports: list[Import]) -> list[str]:
    """Each file-level import cycle, with its edges' lines: every import counts, those under
    ``if TYPE_CHECKING:`` and those inside functions too (a cycle of types is still two
    modules that cannot be read, tested or moved one without the other)."""
    edges: dict[str, dict[str, Import]] = {}
    for found in imports:
        if found.target in MODULES and found.target != found.source:
            edges.setdefault(found.source, {}).setdefault(found.target, found)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    components: list[list[str]] = []

    def connect(node: str) -> None:  # Tarjan's strongly connected components
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in edges.get(node, {}):
            if nxt not in index:
                connect(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            connect(node)
    problems = []
    for component in components:
        members = set(component)
        lines = [
            f"    {found.where}: {found.source} -> {target}"
            for source in component
            for target, found in edges.get(source, {}).items()
            if target in members
        ]
        problems.append(f"import cycle among {', '.join(component)}:\n" + "\n".join(lines))
    return problems


def test_every_module_has_a_layer() -> None:
    assert [m for m in MODULES if floor_of(m) is None] == []


def test_imports_point_down() -> None:
    problems = wrong_way(IMPORTS)
    assert not problems, "\n".join(problems)


def test_no_import_cycle() -> None:
    problems = cycles(IMPORTS)
    assert not problems, "\n".join(problems)


def test_the_chaos_and_ground_packages_import_nothing_at_import_time() -> None:
    """``chaos/__init__.py`` loads its API (``chaos.grade``) on first use (PEP 562), from a
    face's floor; ``ground/__init__.py`` imports nothing at all."""
    init = [
        found.where
        for found in IMPORTS
        if found.source == "ground" or (found.source == "chaos" and found.function is None)
    ]
    assert init == []


def test_importing_the_ground_loads_nothing_else_of_the_project() -> None:
    code = (
        "import sys, ground.errors, ground.rng; "
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {PACKAGES!r}))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert done.stdout.split() == ["['ground',", "'ground.errors',", "'ground.rng']"]


# -- the checker itself ---------------------------------------------------------------


def _edge(source: str, target: str, type_only: bool = False) -> Import:
    return Import(source, target, ROOT / "chaos" / "x.py", 7, type_only)


@pytest.mark.parametrize(
    ("source", "target", "reason"),
    [
        ("faults.schedule", "chaos.run", "imports must point down"),
        ("chaos.run", "chaos.search", "imports must point down"),
        ("ground.errors", "faults.model", "the ground floor imports nothing"),
        ("scenarios.payments.scenario", "chaos.search", "a pack may use floors 0-2 only"),
        ("scenarios.payments.scenario", "chaos.cli", "a pack may use floors 0-2 only"),
        ("invariants", "scenarios.payments.checkers", "the harness loads packs by name"),
        ("replay.trace", "chaos.replay", "imports must point down"),
    ],
)
def test_the_checker_catches_each_wrong_way_import(source: str, target: str, reason: str) -> None:
    for type_only in (False, True):  # TYPE_CHECKING imports count for the direction too
        (problem,) = wrong_way([_edge(source, target, type_only)])
        assert problem.startswith("chaos/x.py:7: ")
        assert reason in problem


def test_the_checker_finds_a_cycle_through_type_checking_and_in_function_imports() -> None:
    a, b = "chaos.run", "chaos.scenario"
    (problem,) = cycles([_edge(a, b), _edge(b, a)])
    assert problem.startswith("import cycle among chaos.run, chaos.scenario")
    assert "chaos/x.py:7: chaos.scenario -> chaos.run" in problem
    (problem,) = cycles([_edge(a, b), _edge(b, a, type_only=True)])
    assert problem.startswith("import cycle among chaos.run, chaos.scenario")
    lazy = Import(b, a, ROOT / "chaos" / "x.py", 9, False, "helper")
    (problem,) = cycles([_edge(a, b), lazy])
    assert "chaos/x.py:9: chaos.scenario -> chaos.run" in problem
    assert cycles([_edge(a, b)]) == []


def test_the_checker_lists_no_exception_an_in_function_import_up_is_one_too() -> None:
    lazy = Import("chaos", "chaos.grading", ROOT / "chaos" / "__init__.py", 3, False, "__getattr__")
    assert wrong_way([lazy]) == []  # the chaos package is a face: its API is an engine below it
    other = Import(
        "ground.errors", "chaos.grading", ROOT / "chaos" / "x.py", 7, False, "__getattr__"
    )
    (problem,) = wrong_way([other])
    assert "the ground floor imports nothing" in problem
    up = Import("chaos.run", "chaos.search", ROOT / "chaos" / "x.py", 7, False, "helper")
    (problem,) = wrong_way([up])
    assert "imports must point down" in problem


def test_the_checker_reads_type_checking_and_relative_imports(tmp_path: Path) -> None:
    found = {(i.target, i.type_only) for i in IMPORTS if i.source == "chaos.scenario"}
    assert ("chaos.context", True) in found
    assert ("ground.errors", False) in found
    relative = {i.target for i in IMPORTS if i.source == "replay.report"}
    assert "replay.report._page" in relative
