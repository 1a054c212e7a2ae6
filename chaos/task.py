"""A scenario as a task: the folder a candidate works in, and its Harbor export.

``write_task_folder`` (``chaos task SCENARIO -o DIR``) writes what a candidate may see: the
specification (the pack's README minus what is private: see ``public_spec``), the interface
(``TaskSpec.interface``) with the run's limits, a starter program and how to self-check on
the public seeds. ``write_harbor`` (``--format harbor``) writes a Harbor task (the format
Terminal-Bench 2.0 and agent-training stacks load): ``task.toml``, ``instruction.md``,
``environment/`` (a Dockerfile installing chaos-harness and the pack), ``tests/`` (the
verifier: ``chaos grade`` on held-out seeds, the key kept beside it) and ``solution/``
(the golden program, made self-contained by ``bundle_program``).
"""

from __future__ import annotations

import ast
import json
import re
import secrets
import shutil
import textwrap
from collections.abc import Iterator
from pathlib import Path

from chaos.errors import ConfigError
from chaos.sandbox.graded import task_of
from chaos.scenario import BUILTIN_ROOT, Scenario, TaskSpec

#: The harness package root (its parent holds chaos/, faults/, replay/, invariants/, ...).
PROJECT_ROOT = BUILTIN_ROOT.parent
#: Harness modules a self-contained program may carry (the ground floor imports nothing).
PORTABLE = ("chaos.errors", "chaos.rng")
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
    _fresh_dir(out)
    program = f"./{starter.name}"
    files = {
        out / "README.md": public_spec(readme, task.private_sections)
        + "\n"
        + self_check_text(scenario, program),
        out / "TASK.md": interface.rstrip() + "\n\n" + limits_text(task),
    }
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
        if top in ("chaos", "faults", "replay", "invariants") and name not in (
            *PORTABLE,
            "chaos",
        ):
            raise ConfigError(
                f"{source} imports {name}: only {', '.join(PORTABLE)} of the harness travel"
            )
    return entry, found


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


def new_key() -> str:
    """A fresh held-out key (64 hex digits)."""
    return secrets.token_hex(32)
