"""Every built-in pack graded in the container sandbox (``--sandbox docker``), as the process
sandbox grades it: real PostgreSQL, NATS, proxies and a real Docker daemon, no mocks.

Per pack: the golden implementation (made self-contained) gets reward 1.0 on two seeds, the
pack's starter gets 0; a graded trace of a docker-sandboxed run replays its candidate in a
container again (``chaos replay``) and reproduces its verdicts; and nothing is left: no
container of these runs (candidates and their namespace holders), no process, no network
namespace held by the harness, no sandbox folder.

tenants' API is a server the workload connects *to*: its link's proxy dials into the
candidate container's namespace. leases runs the candidate three times at once
(``worker-1..3``), each in its own container with its own links.

The grades run with a private run registry and run folder (``CHAOS_REGISTRY_DIR``,
``CHAOS_RUN_DIR``): what is left is then this module's, whatever else runs on the machine.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import trio

from chaos.grading import Grade, GradeOptions, choose_seeds, run_grade
from chaos.sandbox.candidate import Program
from chaos.sandbox.graded import make_sandbox
from chaos.scenario import Scenario, load_scenario
from chaos.services.images import docker_client
from chaos.task import bundle_program
from replay.trace import read_trace
from tests.containers.conftest import require_docker

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.slow, pytest.mark.docker]


@dataclass(frozen=True)
class Case:
    golden_seeds: tuple[int, int]
    #: the invariant the do-nothing starter fails
    starter_fails: str


CASES = {
    "payments": Case((1, 2), "no_lost_messages"),
    "tenants": Case((2, 6), "read_your_writes"),
    "leases": Case((4, 10), "job_recovered"),
}


@dataclass
class Graded:
    scenario: Scenario
    grades: dict[str, Grade]
    golden: Path
    registry: Path
    run_dir: Path
    env: dict[str, str]


def _descendants(pid: int) -> list[str]:
    """Live processes below ``pid`` (``pid cmdline``)."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            stat = Path(f"/proc/{name}/stat").read_bytes()
        except OSError:
            continue
        ppid = int(stat[stat.rfind(b")") + 2 :].split()[1])
        children.setdefault(ppid, []).append(int(name))
    found, todo = [], list(children.get(pid, []))
    while todo:
        child = todo.pop()
        try:
            cmd = Path(f"/proc/{child}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        found.append(f"process {child} {cmd[:120]}")
        todo.extend(children.get(child, []))
    return found


def _netns_fds() -> list[str]:
    """Network namespaces this process holds open (a sandbox's, never released)."""
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("net:"):
            found.append(f"netns fd {fd} {target}")
    return found


def leftovers(registry: Path, run_dir: Path) -> list[str]:
    """Containers of these runs, processes below this one, held namespaces, run folders."""
    found = []
    for c in docker_client().api.containers(all=True, filters={"label": "chaos.registry"}):
        if (c.get("Labels") or {}).get("chaos.registry") == str(registry):
            found.append(f"container {c['Names'][0]} {c['Status']}")
    found += _descendants(os.getpid())
    found += _netns_fds()
    found += [f"folder {p}" for p in run_dir.iterdir()] if run_dir.exists() else []
    return found


@pytest.fixture(scope="module", params=sorted(CASES))
def pack(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Graded]:
    """The golden implementation (two seeds) and the starter (one) graded in containers."""
    require_docker()
    name = request.param
    case = CASES[name]
    scenario = load_scenario(name)
    assert scenario.task is not None
    make_sandbox("docker", None, scenario.task.libraries).check()  # builds the image once
    tmp = tmp_path_factory.mktemp(f"docker-{name}")
    private = Path(tempfile.mkdtemp(prefix=f"chaos-test-docker-{name}-", dir="/dev/shm"))
    private.chmod(0o755)  # PostgreSQL runs as its own user below it
    registry, run_dir = private / "registry", private / "runs"
    run_dir.mkdir(mode=0o755)
    saved = {k: os.environ.get(k) for k in ("CHAOS_REGISTRY_DIR", "CHAOS_RUN_DIR")}
    os.environ.update(CHAOS_REGISTRY_DIR=str(registry), CHAOS_RUN_DIR=str(run_dir))
    try:
        golden = bundle_program(scenario, tmp / "golden")
        programs = {"golden": golden, "starter": scenario.path / scenario.task.starter}
        seeds = {"golden": list(case.golden_seeds), "starter": [case.golden_seeds[0]]}
        grades: dict[str, Grade] = {}

        async def one(who: str) -> None:
            out = tmp / "traces" / who
            out.mkdir(parents=True)
            options = GradeOptions(
                scenario,
                Program.from_path(programs[who]),
                choose_seeds(scenario, seeds=seeds[who]),
                jobs=2 if who == "golden" else 1,
                out_dir=out,
                sandbox="docker",
            )
            grades[who] = await run_grade(options)

        async def both() -> None:
            async with trio.open_nursery() as nursery:
                for who in programs:
                    nursery.start_soon(one, who)

        trio.run(both)
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        yield Graded(scenario, grades, golden, registry, run_dir, env)
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        shutil.rmtree(private, ignore_errors=True)


def _why(grade: Grade) -> list[object]:
    return [(s.seed, s.outcome, s.verdicts, s.contained, s.error) for s in grade.seeds]


def test_the_golden_implementation_gets_reward_1_in_containers(pack: Graded) -> None:
    golden = pack.grades["golden"]
    assert golden.errors == 0, _why(golden)
    assert golden.reward == 1.0, _why(golden)
    assert len(golden.seeds) == 2
    assert set(golden.invariants.values()) == {1.0}
    assert golden.isolation == "docker"
    assert golden.contained == {}


def test_the_starter_gets_0_in_a_container(pack: Graded) -> None:
    starter = pack.grades["starter"]
    assert starter.errors == 0, _why(starter)
    assert starter.reward == 0.0, _why(starter)
    assert starter.invariants[CASES[pack.scenario.id].starter_fails] == 0.0
    assert starter.contained == {}


def test_every_instance_ran_as_the_candidate_in_its_own_container(pack: Graded) -> None:
    (seed, _) = pack.grades["golden"].seeds
    assert seed.trace is not None
    trace = read_trace(Path(seed.trace))
    header = trace.header["candidate"]
    assert header["sandbox"] == "docker"
    starts = {
        e["process"]: e["value"]
        for e in trace.events
        if e.get("f") == "start" and isinstance(e.get("value"), dict)
        and e["value"].get("candidate")
    }  # fmt: skip
    expected = {"payments": ["consumer"], "tenants": ["api"],
                "leases": ["worker-1", "worker-2", "worker-3"]}[pack.scenario.id]  # fmt: skip
    assert sorted(starts) == [f"service:{s}" for s in expected]
    assert len({v["pid"] for v in starts.values()}) == len(expected)  # one container each


def test_a_docker_sandboxed_graded_trace_replays_its_verdicts(pack: Graded) -> None:
    (seed, _) = pack.grades["golden"].seeds
    assert seed.trace is not None
    argv = [sys.executable, "-m", "chaos", "replay", seed.trace, "--json"]
    done = subprocess.run(argv, capture_output=True, text=True, env=pack.env, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout)
    assert report["matched"] == 1, report
    replayed = read_trace(Path(report["replays"][0]["trace"])).header["candidate"]
    assert replayed["sandbox"] == "docker"
    assert replayed["sha256"] == read_trace(Path(seed.trace)).header["candidate"]["sha256"]


def test_nothing_is_left_behind(pack: Graded) -> None:
    assert pack.registry.is_dir()  # the runs registered there: their containers' label
    assert leftovers(pack.registry, pack.run_dir) == []
