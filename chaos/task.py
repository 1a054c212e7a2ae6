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
import math
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


def new_key() -> str:
    """A fresh held-out key (64 hex digits)."""
    return secrets.token_hex(32)


# -- Harbor ------------------------------------------------------------------------------

_DOCKERFILE = """\
# The environment of a chaos-harness task (written by `chaos task --format harbor`): the
# harness with its packs, the agent's workspace in /app. The agent runs as `agent`; the
# verifier runs as root, so the graded program gets a sandbox of its own.
FROM python:3.11-slim
{install}
RUN useradd --create-home agent && mkdir -p /app && chown agent:agent /app
COPY --chown=agent:agent workspace/ /app/
WORKDIR /app
"""

_TEST_SH = """\
#!/usr/bin/env bash
# The verifier of this task (written by `chaos task --format harbor`): grades the program in
# /app on held-out seeds derived from the key beside this script (tests/ reaches the
# container only after the agent is done, so the agent never sees it), and writes
# reward.json (reward, primary, the pass rate of each invariant), grade.json (every field of
# `chaos grade --json`), junit.xml and the traces. For a local check outside Harbor:
#   CHAOS_REWARD_DIR  where to write (default /logs/verifier)
#   CHAOS_IMPL        the program to grade (default /app/{service} if a folder, else
#                     /app/{service}.py)
#   CHAOS_HELDOUT     how many held-out seeds (default {heldout})
#   CHAOS_JOBS        runs side by side (default {jobs})
set -u
here="$(cd "$(dirname "$0")" && pwd)"
out="${{CHAOS_REWARD_DIR:-/logs/verifier}}"
impl="${{CHAOS_IMPL:-}}"
if [ -z "$impl" ]; then
    if [ -d /app/{service} ]; then impl=/app/{service}; else impl=/app/{service}.py; fi
fi
mkdir -p "$out"
chmod 600 "$here/heldout.key"
# the whole harness and pack (the image holds the pack without its implementation)
chmod -R go-rwx "$here/harness" "$here/pack" 2>/dev/null
export PYTHONPATH="$here/harness${{PYTHONPATH:+:$PYTHONPATH}}"
python3 -m chaos grade {scenario} --impl "$impl" --heldout-key "$here/heldout.key" \\
    --heldout "${{CHAOS_HELDOUT:-{heldout}}}" --jobs "${{CHAOS_JOBS:-{jobs}}}" \\
    --out-dir "$out/traces" --junit "$out/junit.xml" --json > "$out/grade.json"
code=$?
python3 "$here/reward.py" "$out/grade.json" "$out/reward.json" "$code"
"""

_REWARD_PY = '''\
"""Turn `chaos grade --json` into Harbor's reward.json: a flat map of numbers."""

import json
import sys

grade_file, reward_file, code = sys.argv[1], sys.argv[2], int(sys.argv[3])
try:
    with open(grade_file) as f:
        grade = json.load(f)
except (OSError, ValueError):
    grade = None
if grade is None:
    reward = {{"reward": 0.0, "verifier_error": 1}}
else:
    reward = {{"reward": grade["reward"], "primary": grade["primary"]}}
    reward.update({{name: rate for name, rate in grade["invariants"].items()}})
    reward["contained_seeds"] = sum(grade["contained"].values())
    reward["harness_errors"] = grade["errors"]
    reward["seeds"] = grade["graded"]
with open(reward_file, "w") as f:
    json.dump(reward, f, sort_keys=True)
print(json.dumps(reward, sort_keys=True))
sys.exit(0 if code in (0, 1) else code)
'''

_SOLVE_SH = """\
#!/usr/bin/env bash
# The oracle (written by `chaos task --format harbor`): puts the golden {service} where the
# verifier looks for it.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
rm -rf /app/{service} /app/{service}.py
cp -r "$here/{service}" /app/{service}
"""


def _toml_str(value: str) -> str:
    return json.dumps(value)


def _copy_tree(source: Path, target: Path) -> None:
    shutil.copytree(
        source, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    )


_HARNESS_PACKAGES = ("chaos", "faults", "replay", "invariants")


def _harness_install(env_dir: Path, scenario: Scenario, builtin: bool) -> str:
    """Copy the harness's source into the build context; the Dockerfile lines installing it.

    The image gets the harness and, of the built-in packs, only the task's, as a candidate
    may read it (``public_pack``): the agent self-checks with it, and cannot read the
    golden implementation in it. The verifier brings the whole pack (``tests/harness``)."""
    if not (PROJECT_ROOT / "pyproject.toml").is_file():
        from chaos.grading import harness_version

        return f"RUN pip install --no-cache-dir chaos-harness=={harness_version()}"
    target = env_dir / "chaos-harness"
    target.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        if (PROJECT_ROOT / name).is_file():
            shutil.copyfile(PROJECT_ROOT / name, target / name)
    for package in _HARNESS_PACKAGES:
        _copy_tree(PROJECT_ROOT / package, target / package)
    scenarios = target / "scenarios"
    scenarios.mkdir()
    for name in ("__init__.py", "py.typed"):
        if (BUILTIN_ROOT / name).is_file():
            shutil.copyfile(BUILTIN_ROOT / name, scenarios / name)
    if builtin:
        public_pack(scenario, scenarios / scenario.id)
    return (
        "COPY chaos-harness /opt/chaos-harness\n"
        "RUN pip install --no-cache-dir /opt/chaos-harness && rm -rf /opt/chaos-harness"
    )


def _verifier_harness(tests: Path, scenario: Scenario, builtin: bool) -> None:
    """The whole harness and pack for the verifier (``tests/``, which reaches the container
    only after the agent is done): ``tests/test.sh`` puts it first on PYTHONPATH."""
    target = tests / "harness"
    target.mkdir()
    for package in _HARNESS_PACKAGES:
        _copy_tree(PROJECT_ROOT / package, target / package)
    scenarios = target / "scenarios"
    scenarios.mkdir()
    for name in ("__init__.py", "py.typed"):
        if (BUILTIN_ROOT / name).is_file():
            shutil.copyfile(BUILTIN_ROOT / name, scenarios / name)
    if builtin:
        _copy_tree(scenario.path, scenarios / scenario.id)
    else:
        _copy_tree(scenario.path, tests / "pack")


def verifier_timeout_s(task: TaskSpec, seeds: int, jobs: int) -> float:
    """Room for every graded run at its wall-clock limit, a few at a time, plus setup."""
    return float(math.ceil(seeds / jobs) * task.limits.wall_s + 300)


def write_harbor(
    scenario: Scenario,
    out: Path,
    *,
    heldout: int | None = None,
    key: bytes | None = None,
) -> list[Path]:
    """``chaos task SCENARIO --format harbor -o DIR``: a Harbor task. Returns its files."""
    from chaos.grading import MAX_HELDOUT, harness_version

    task = task_of(scenario)
    count = task.heldout_seeds if heldout is None else heldout
    if not 1 <= count <= MAX_HELDOUT:
        raise ConfigError(f"--heldout: want 1 to {MAX_HELDOUT}, got {count}")
    readme = _read(scenario, "README.md", "specification")
    interface = _read(scenario, task.interface, "interface")
    starter = scenario.path / task.starter
    if not starter.is_file():
        raise ConfigError(f"task starter {starter}: no such file")
    if task.solution is None:
        raise ConfigError(f"scenario {scenario.id}'s task names no solution (TaskSpec.solution)")
    program_modules(scenario, scenario.path / task.solution)  # refuses before writing
    _fresh_dir(out)
    service = task.service
    jobs = max(1, task.cpus // 2)
    builtin = scenario.path.parent == BUILTIN_ROOT.resolve()
    scenario_arg = scenario.id if builtin else f"/opt/chaos-packs/{scenario.id}"

    env_dir = out / "environment"
    env_dir.mkdir()
    install = _harness_install(env_dir, scenario, builtin)
    if not builtin:
        public_pack(scenario, env_dir / "pack")
        install += f"\nCOPY pack {scenario_arg}"
    (env_dir / "Dockerfile").write_text(_DOCKERFILE.format(install=install))
    workspace = env_dir / "workspace"
    workspace.mkdir()
    program = f"/app/{service}.py"
    spec = public_spec(readme, task.private_sections)
    check = self_check_text(scenario, program).replace(str(scenario.path), scenario_arg)
    interface_text = interface.rstrip() + "\n\n" + limits_text(task)
    (workspace / "README.md").write_text(spec + "\n" + check)
    (workspace / "TASK.md").write_text(interface_text)
    shutil.copyfile(starter, workspace / f"{service}.py")

    (out / "instruction.md").write_text(
        f"# {scenario.id}: {task.summary}\n\n"
        f"Write the `{service}` of the system below. Your program goes in `{program}` (a "
        f"starter that runs but does nothing useful is there), or in a folder "
        f"`/app/{service}/` holding `main.py` or an executable `run`. `/app/README.md` "
        f"(the specification) and `/app/TASK.md` (the interface) are the same texts as "
        f"here.\n\n{interface_text}\n\n# The specification\n\n{spec}\n{check}"
    )
    key_text = key.decode() if key is not None else new_key()
    wall = verifier_timeout_s(task, count, jobs)
    (out / "task.toml").write_text(
        textwrap.dedent(
            f"""\
            schema_version = "1.1"

            [task]
            name = {_toml_str(f"chaos-harness/{scenario.id}")}
            description = {_toml_str(task.summary)}
            keywords = ["chaos-engineering", "distributed-systems", "fault-injection"]

            [metadata]
            category = "distributed-systems"
            scenario = {_toml_str(scenario.id)}
            scenario_hash = {_toml_str(scenario.content_hash())}
            harness_version = {_toml_str(harness_version())}
            service = {_toml_str(service)}
            heldout_seeds = {count}

            [verifier]
            timeout_sec = {wall}
            user = "root"

            [agent]
            timeout_sec = {float(task.agent_timeout_s)}
            user = "agent"

            [environment]
            build_timeout_sec = 900.0
            cpus = {task.cpus}
            memory_mb = {task.memory_mb}
            storage_mb = 10240
            allow_internet = false
            """
        )
    )
    tests = out / "tests"
    tests.mkdir()
    test_sh = tests / "test.sh"
    verifier_scenario = scenario.id if builtin else '"$here/pack"'
    test_sh.write_text(
        _TEST_SH.format(service=service, scenario=verifier_scenario, heldout=count, jobs=jobs)
    )
    _verifier_harness(tests, scenario, builtin)
    test_sh.chmod(0o755)
    (tests / "reward.py").write_text(_REWARD_PY.format())
    key_file = tests / "heldout.key"
    key_file.write_text(key_text + "\n")
    key_file.chmod(0o600)

    solution = out / "solution"
    solution.mkdir()
    bundle_program(scenario, solution / service)
    solve = solution / "solve.sh"
    solve.write_text(_SOLVE_SH.format(service=service))
    solve.chmod(0o755)
    return sorted(p for p in out.rglob("*") if p.is_file())
