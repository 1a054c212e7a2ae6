"""A task's Harbor export: ``write_harbor`` (``chaos task SCENARIO --format harbor -o DIR``).

A Harbor task is the format Terminal-Bench 2.0 and agent-training stacks load:
``task.toml``, ``instruction.md``, ``environment/`` (a Dockerfile installing chaos-harness and
the pack), ``tests/`` (the verifier: ``chaos grade`` on held-out seeds, the key kept beside it)
and ``solution/`` (the golden program, made self-contained by ``chaos.task.bundle_program``).
What the candidate may see is ``chaos.task``'s (the public specification, the public pack);
this module packs it for Harbor.
"""

from __future__ import annotations

import json
import math
import secrets
import shutil
import textwrap
from pathlib import Path

from chaos.sandbox.graded import task_of
from chaos.scenario import BUILTIN_ROOT, Scenario, TaskSpec
from chaos.task import (
    _HARNESS_PACKAGES,
    PROJECT_ROOT,
    _copy_tree,
    _fresh_dir,
    _read,
    bundle_program,
    check_leaks,
    limits_text,
    program_modules,
    public_pack,
    public_spec,
    self_check_text,
)
from ground.errors import ConfigError


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
case "$out" in /*) ;; *) out="$PWD/$out" ;; esac
case "$impl" in /*) ;; *) impl="$PWD/$impl" ;; esac
if [ -z "${{CHAOS_REWARD_DIR:-}}" ]; then
    # in Harbor: nothing the agent left running (a helper outside every sandbox, unfaulted,
    # that could do the program's work or watch the grade) outlives its turn
    python3 -I "$here/stop_agent.py" agent
fi
mkdir -p "$out"
chmod 700 "$here"
chmod 600 "$here/heldout.key"
# the whole harness and pack (the image holds the pack without its implementation)
chmod -R go-rwx "$here/harness" "$here/pack" 2>/dev/null
export PYTHONPATH="$here/harness${{PYTHONPATH:+:$PYTHONPATH}}"
# from this folder, and -P: `python3 -m` would put the working directory (the agent's /app)
# first on sys.path, and a `chaos` package or a `json.py` there would run as root
cd "$here"
python3 -P -m chaos grade {scenario} --impl "$impl" --heldout-key "$here/heldout.key" \\
    --heldout "${{CHAOS_HELDOUT:-{heldout}}}" --jobs "${{CHAOS_JOBS:-{jobs}}}" \\
    --out-dir "$out/traces" --junit "$out/junit.xml" --json > "$out/grade.json"
code=$?
python3 -P "$here/reward.py" "$out/grade.json" "$out/reward.json" "$code"
"""

_STOP_AGENT_PY = '''\
"""The verifier's first step in Harbor: SIGKILL every process of the agent's user until none
is left, so nothing the agent started (a helper outside every sandbox, unfaulted, that could
do the program's work or watch the grade) outlives its turn. Standard library only, run as
`python3 -I` (the slim image has no pkill; nothing of the agent's folders is imported)."""

import os
import pwd
import signal
import sys
import time

try:
    uid = pwd.getpwnam(sys.argv[1] if len(sys.argv) > 1 else "agent").pw_uid
except KeyError:
    sys.exit(0)
for _ in range(200):
    left = []
    for name in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{name}/status") as f:
                fields = dict(line.split(":", 1) for line in f if ":" in line)
        except OSError:
            continue
        if int(fields["Uid"].split()[0]) == uid and "Z" not in fields["State"]:
            left.append(int(name))
    if not left:
        sys.exit(0)
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    time.sleep(0.05)
sys.exit("the agent's processes would not die")
'''

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
    # every seed is in the reward: one in error counts 0 (errors); harness_errors: of
    # those, the ones before the candidate started (the machine is broken: exit 3)
    reward["errors"] = grade["errors"]
    reward["harness_errors"] = grade["harness_errors"]
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
    scenarios = _copy_harness(target)
    if builtin:
        public_pack(scenario, scenarios / scenario.id)
    return (
        "COPY chaos-harness /opt/chaos-harness\n"
        "RUN pip install --no-cache-dir /opt/chaos-harness && rm -rf /opt/chaos-harness"
    )


def _copy_harness(target: Path) -> Path:
    """The harness's packages into ``target``, and an empty ``scenarios`` package beside
    them (the pack goes in it); returns that folder."""
    for package in _HARNESS_PACKAGES:
        _copy_tree(PROJECT_ROOT / package, target / package)
    scenarios = target / "scenarios"
    scenarios.mkdir()
    for name in ("__init__.py", "py.typed"):
        if (BUILTIN_ROOT / name).is_file():
            shutil.copyfile(BUILTIN_ROOT / name, scenarios / name)
    return scenarios


def _verifier_harness(tests: Path, scenario: Scenario, builtin: bool) -> None:
    """The whole harness and pack for the verifier (``tests/``, which reaches the container
    only after the agent is done): ``tests/test.sh`` puts it first on PYTHONPATH."""
    target = tests / "harness"
    target.mkdir()
    scenarios = _copy_harness(target)
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
    check_leaks(scenario, {
        workspace / "README.md": spec + "\n" + check,
        workspace / "TASK.md": interface_text,
        workspace / f"{service}.py": starter.read_text(encoding="utf-8", errors="replace"),
        out / "instruction.md": f"# {scenario.id}: {task.summary}\n",
    })  # fmt: skip
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
    (tests / "stop_agent.py").write_text(_STOP_AGENT_PY)
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


__all__ = ["new_key", "verifier_timeout_s", "write_harbor"]
