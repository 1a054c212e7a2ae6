"""A scenario as a task: the folder a candidate works in, and what it may read.

``write_task_folder`` (``chaos task SCENARIO -o DIR``) writes what a candidate may see: the
specification (the pack's README minus what is private: see ``public_spec``), the interface
(``TaskSpec.interface``) with the run's limits, a starter program and how to self-check on
the public seeds; ``check_leaks`` refuses a text that gives the golden away, ``public_pack``
is the pack as a candidate may read it, and ``bundle_program`` makes a program
self-contained. ``chaos.harbor`` packs the same for Harbor (``--format harbor``).
"""

from __future__ import annotations

import ast
import json
import re
import shutil
import textwrap
from collections.abc import Iterator
from pathlib import Path

from chaos.sandbox.graded import task_of
from chaos.scenario import BUILTIN_ROOT, Scenario, TaskSpec
from ground._moved import moved
from ground.errors import ConfigError

#: The harness package root (its parent holds chaos/, faults/, replay/, invariants/, ...).
PROJECT_ROOT = BUILTIN_ROOT.parent
#: Harness modules a self-contained program may carry (the ground floor imports nothing).
PORTABLE = ("ground.errors", "ground.rng", "ground.jsonhttp")
#: The harness's packages (what an export copies; what a program may not carry but PORTABLE).
_HARNESS_PACKAGES = ("ground", "chaos", "faults", "replay", "invariants")
_PRIVATE_BLOCK = re.compile(r"<!--\s*private\s*-->.*?<!--\s*/private\s*-->\n?", re.S)
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


# -- the public specification ---------------------------------------------------------


def public_spec(readme: str, private_sections: tuple[str, ...]) -> str:
    """The README a candidate may read: without the sections whose heading starts with one
    of ``private_sections`` (case-insensitive; everything under them up to the next heading
    of the same or a higher level), without ``<!-- private -->`` ... ``<!-- /private -->``
    blocks, and without paragraphs starting with ``**Diagnosis path:**``."""
    text = _PRIVATE_BLOCK.sub("", readme)
    prefixes = tuple(p.lower() for p in private_sections)
    out: list[str] = []
    skipping: int | None = None
    fence = False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fence = not fence
        heading = None if fence else _HEADING.match(line)
        if heading is not None:
            level = len(heading.group(1))
            if skipping is not None and level <= skipping:
                skipping = None
            if skipping is None and heading.group(2).lower().startswith(prefixes):
                skipping = level
        if skipping is None:
            out.append(line)
    paragraphs = "\n".join(out).split("\n\n")
    kept = [p for p in paragraphs if not p.lstrip().startswith("**Diagnosis path:**")]
    return re.sub(r"\n{3,}", "\n\n", "\n\n".join(kept)).strip() + "\n"


def limits_text(task: TaskSpec) -> str:
    limits = task.limits
    return textwrap.dedent(
        f"""\
        ## Limits of each run

        | limit | value |
        |---|---|
        | memory | {limits.memory_mb} MiB |
        | CPU time (all its processes) | {limits.cpu_s:g} s |
        | processes and threads | {limits.processes} |
        | largest file, and its scratch directory in all | {limits.file_size_mb} MiB |
        | open files | {limits.open_files} |
        | time to print the ready line | {limits.ready_s:g} s |
        | time to exit after SIGTERM | {limits.term_s:g} s |
        | the whole run | {limits.wall_s:g} s |
        """
    )


def _scenario_arg(scenario: Scenario) -> str:
    """How a command names the scenario: its id if built in, else its folder."""
    if scenario.path.parent == BUILTIN_ROOT.resolve():
        return scenario.id
    return str(scenario.path)


def self_check_text(scenario: Scenario, program: str) -> str:
    task = task_of(scenario)
    seeds = ", ".join(str(s) for s in task.public_seeds)
    name = _scenario_arg(scenario)
    return textwrap.dedent(
        f"""\
        ## Checking your work

        Run your program on the public seeds ({seeds}), each a run with its own faults:

            chaos grade {name} --impl {program} --public

        It prints, per seed, whether every invariant held, and the reward (the fraction of
        seeds where all held). `chaos run {name} --impl {program} --seed N` runs one seed
        and keeps its trace (`chaos show TRACE` prints it as a timeline). The final grade
        uses other seeds, which you do not get.
        """
    )


def _read(scenario: Scenario, name: str, what: str) -> str:
    file = scenario.path / name
    try:
        return file.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"task {what} {file}: {exc.strerror or exc}") from None


def _fresh_dir(out: Path) -> None:
    """``out`` must not exist or be empty: a task folder never overwrites anything."""
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ConfigError(f"{out} exists and is not an empty folder: choose another -o")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot create {out}: {exc.strerror or exc}") from None


def write_task_folder(scenario: Scenario, out: Path) -> list[Path]:
    """``chaos task SCENARIO -o DIR``: README.md, TASK.md, the starter. Returns the files."""
    task = task_of(scenario)
    readme = _read(scenario, "README.md", "specification")
    interface = _read(scenario, task.interface, "interface")
    starter = scenario.path / task.starter
    if not starter.is_file():
        raise ConfigError(f"task starter {starter}: no such file")
    program = f"./{starter.name}"
    files = {
        out / "README.md": public_spec(readme, task.private_sections)
        + "\n"
        + self_check_text(scenario, program),
        out / "TASK.md": interface.rstrip() + "\n\n" + limits_text(task),
    }
    check_leaks(scenario, {**files, out / starter.name: _read(scenario, task.starter, "starter")})
    _fresh_dir(out)
    for path, text in files.items():
        path.write_text(text, encoding="utf-8")
    shutil.copyfile(starter, out / starter.name)
    (out / starter.name).chmod(0o755)
    return [*files, out / starter.name]


# -- self-contained programs (the golden solution) --------------------------------------


def _module_file(name: str, roots: list[Path]) -> Path | None:
    parts = name.split(".")
    for root in roots:
        for candidate in (root.joinpath(*parts).with_suffix(".py"),
                          root.joinpath(*parts, "__init__.py")):  # fmt: skip
            if candidate.is_file():
                return candidate
    return None


def _imports(file: Path, module: str) -> Iterator[str]:
    tree = ast.parse(file.read_text(encoding="utf-8"), str(file))
    package = module if file.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                pkg = package
                for _ in range(node.level - 1):
                    pkg = pkg.rpartition(".")[0]
                base = f"{pkg}.{base}" if base else pkg
            yield base
            for alias in node.names:
                yield f"{base}.{alias.name}"


def program_modules(scenario: Scenario, source: Path) -> tuple[str, dict[str, Path]]:
    """The module name of ``source`` (a file of the pack) and every project module it
    imports, directly or not: name -> file. ConfigError if that takes in something a
    candidate cannot carry (the pack's scenario or checkers, the harness beyond its ground
    floor)."""
    roots = [PROJECT_ROOT, scenario.path.parent]
    root = next((r for r in roots if source.resolve().is_relative_to(r.resolve())), None)
    if root is None:
        raise ConfigError(f"{source} is not inside the pack")
    relative = source.resolve().relative_to(root.resolve()).with_suffix("")
    entry = ".".join(relative.parts)
    found: dict[str, Path] = {}
    todo = [entry]
    while todo:
        name = todo.pop()
        if name in found:
            continue
        file = _module_file(name, roots)
        if file is None:
            continue  # a third-party or standard module: the sandbox provides those
        found[name] = file
        todo.extend(n for n in _imports(file, name) if n not in found)
    pack = entry.rpartition(".")[0]
    for name in found:
        top = name.split(".")[0]
        if name.startswith(f"{pack}.scenario") or name.startswith(f"{pack}.checkers"):
            raise ConfigError(f"{source} imports {name}: a candidate program cannot carry it")
        if top in _HARNESS_PACKAGES and name not in (
            *PORTABLE,
            "ground",
        ):
            raise ConfigError(
                f"{source} imports {name}: only {', '.join(PORTABLE)} of the harness travel"
            )
    return entry, found


def _pack_modules(scenario: Scenario) -> dict[str, Path]:
    """Every Python module of the pack folder: name -> file."""
    root = next(
        r
        for r in (PROJECT_ROOT, scenario.path.parent)
        if scenario.path.resolve().is_relative_to(r.resolve())
    )
    found = {}
    for file in sorted(scenario.path.rglob("*.py")):
        if "__pycache__" in file.parts:
            continue
        relative = file.relative_to(root).with_suffix("")
        parts = relative.parts[:-1] if relative.name == "__init__" else relative.parts
        found[".".join(parts)] = file
    return found


#: A line of the golden or of a private section counts as leaked from this length on (shorter
#: ones, "return None", "## Variants", are everyone's).
LEAK_MIN_CHARS = 30


def check_leaks(scenario: Scenario, texts: dict[Path, str]) -> None:
    """What a candidate will read holds no variant's name, no line of a private README
    section in its specification (nor a diagnosis path anywhere) and no line of the golden
    implementation (``solution``
    and what it alone imports): ConfigError (exit 2) naming the file, the line and what it
    leaks, before anything is written. Every pack, user packs too."""
    task = task_of(scenario)
    variants = [v for v in scenario.variants if v != "golden"]
    names = re.compile(
        r"(?<![\w-])(" + "|".join(re.escape(v) for v in variants) + r")(?![\w-])"
    ) if variants else None  # fmt: skip
    readme = _read(scenario, "README.md", "specification")
    public = {line.strip() for line in public_spec(readme, task.private_sections).splitlines()}
    private = {
        line.strip()
        for line in readme.splitlines()
        if len(line.strip()) >= LEAK_MIN_CHARS and line.strip() not in public
    }
    golden = _golden_lines(scenario)
    for path, text in texts.items():
        # The interface (TASK.md) is public by the author's hand: it may say what a private
        # section also says; the specification must not repeat a private section's lines.
        spec = path.name in ("README.md", "instruction.md")
        for number, line in enumerate(text.splitlines(), 1):
            where = f"{path.name} line {number}"
            found = names.search(line) if names is not None else None
            if found is not None:
                why = f"names variant {found.group(1)!r}"
            elif "**Diagnosis path:**" in line or (spec and any(p in line for p in private)):
                why = "holds a line of a private README section"
            elif any(g in line for g in golden):
                why = "holds a line of the golden implementation"
            else:
                continue
            raise ConfigError(
                f"task of {scenario.id}: {where} {why} (a candidate would read it): "
                f"{line.strip()[:160]}"
            )


def _golden_lines(scenario: Scenario) -> set[str]:
    """Lines only the golden's private files hold (in none of the pack's other programs,
    the starter included, long enough to be its own)."""
    private = private_files(scenario)
    if not private:
        return set()
    mine = {p.resolve() for p in private}
    others = "\n".join(
        p.read_text(encoding="utf-8", errors="replace")
        for p in scenario.path.rglob("*.py")
        if p.is_file() and p.resolve() not in mine
    )
    lines = set()
    for file in private:
        for line in file.read_text(encoding="utf-8", errors="replace").splitlines():
            text = line.strip()
            if len(text) >= LEAK_MIN_CHARS and text not in others and not text.startswith("#"):
                lines.add(text)
    return lines


def private_files(scenario: Scenario) -> list[Path]:
    """The pack's files that only its implementation of the task's service needs (the
    solution and what it alone imports: payments' consumer, charger and variants): left
    out of what a candidate can read. A module that anything else of the pack imports
    (the scenario, the checkers, the other services, the starter) stays public."""
    task = task_of(scenario)
    if task.solution is None:
        return []
    _, solution = program_modules(scenario, scenario.path / task.solution)
    pack = _pack_modules(scenario)
    public_roots = [name for name in pack if name not in solution]
    roots = [PROJECT_ROOT, scenario.path.parent]
    public: set[str] = set()
    todo = list(public_roots)
    while todo:
        name = todo.pop()
        if name in public:
            continue
        public.add(name)
        file = _module_file(name, roots)
        if file is not None:
            todo.extend(n for n in _imports(file, name) if n not in public)
    return sorted(
        file
        for name, file in solution.items()
        if name not in public and file.resolve().is_relative_to(scenario.path.resolve())
    )


def _public_faults_toml(text: str) -> str:
    """faults.toml with only the golden fault space (graded runs use it) and no comments
    (they describe the variants)."""
    out: list[str] = []
    keep = True
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            continue
        if stripped.startswith("["):
            table = stripped.strip("[]").split(".")[0].strip().strip('"')
            keep = table == "golden"
        if keep:
            out.append(line)
    return re.sub(r"\n{3,}", "\n\n", "\n".join(out)).strip() + "\n"


def _copy_tree(source: Path, target: Path) -> None:
    shutil.copytree(
        source, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    )


def public_pack(scenario: Scenario, target: Path) -> None:
    """Copy the pack to ``target`` as a candidate may read it: without ``private_files``,
    with the public specification as README.md and only the golden fault space."""
    task = task_of(scenario)
    private = {p.resolve() for p in private_files(scenario)}
    _copy_tree(scenario.path, target)
    for file in private:
        (target / file.relative_to(scenario.path.resolve())).unlink()
    readme = target / "README.md"
    if readme.is_file():
        readme.write_text(public_spec(readme.read_text(encoding="utf-8"), task.private_sections))
    faults = target / "faults.toml"
    if faults.is_file():
        faults.write_text(_public_faults_toml(faults.read_text(encoding="utf-8")))


def bundle_program(
    scenario: Scenario,
    out: Path,
    *,
    source: str | None = None,
    env_defaults: dict[str, str] | None = None,
) -> Path:
    """Write ``source`` (default: the task's solution) and the project modules it imports
    into ``out`` as a self-contained program folder (``main.py``); return ``out``.

    ``env_defaults`` are environment variables its ``main.py`` sets unless present (a
    variant's name, say: the sandbox passes the program only the task's variables)."""
    task = task_of(scenario)
    name = source or task.solution
    if name is None:
        raise ConfigError(f"scenario {scenario.id}'s task names no solution")
    entry, modules = program_modules(scenario, scenario.path / name)
    _fresh_dir(out)
    for module, file in modules.items():
        parts = module.split(".")
        target = (
            out.joinpath(*parts[:-1], file.name)
            if file.name != "__init__.py"
            else (out.joinpath(*parts, "__init__.py"))
        )
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(file, target)
    for folder in [p for p in out.rglob("*") if p.is_dir()]:
        init = folder / "__init__.py"
        if not init.exists():
            init.write_text("")
    defaults = json.dumps(env_defaults or {}, sort_keys=True)
    (out / "main.py").write_text(
        textwrap.dedent(
            f'''\
            """{scenario.id}'s {task.service}, self-contained (written by chaos task)."""

            import os
            import runpy
            import sys

            sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
            for name, value in {defaults}.items():
                os.environ.setdefault(name, value)
            runpy.run_module({entry!r}, run_name="__main__", alter_sys=True)
            '''
        )
    )
    return out


#: Old paths of names that moved (a DeprecationWarning naming the new one, for one release).
__getattr__ = moved(
    __name__,
    {name: "chaos.harbor" for name in ("new_key", "verifier_timeout_s", "write_harbor")},
    removed_in="0.4.0",  # moved after 0.2.0: kept through the next release
)
