"""The container sandbox (``--sandbox docker``): the golden consumer holds in it, and every
adversary is contained with the same reason as in the process sandbox, leaving nothing."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from chaos.grading import Grade, GradeOptions, choose_seeds, read_key, run_grade
from chaos.sandbox.candidate import Limits, Program
from chaos.sandbox.container import candidate_image
from chaos.sandbox.graded import make_sandbox
from chaos.scenario import Scenario
from chaos.services.images import docker_client
from ground.errors import ConfigError
from replay.trace import read_trace
from tests.containers.conftest import require_docker

from .conftest import CANDIDATES
from .test_graded_runs import _read_secrets

pytestmark = [pytest.mark.slow, pytest.mark.docker]

ADVERSARIES = {
    "fork_bomb": "processes",
    "allocate_20gb": "memory",
    "infinite_loop": "cpu",
    "ignores_sigterm": "ignored SIGTERM",
    "write_10gb": "file size",
    "dial_direct": "bypassed link",
}


def leftovers(image: str) -> list[str]:
    """Candidate containers still there, and sandbox folders."""
    found = docker_client().api.containers(all=True, filters={"ancestor": image})
    left = [f"container {c['Names'][0]} {c['Status']}" for c in found]
    for parent in (Path("/dev/shm"), Path("/tmp")):
        left += [f"folder {p}" for p in parent.glob("chaos-docker-*")]
    return left


@pytest.fixture(scope="module")
def graded(
    tmp_path_factory: pytest.TempPathFactory,
    payments: Scenario,
    golden: Path,
    starter: Path,
    dial_direct: Path,
) -> tuple[dict[str, Grade], list[str]]:
    """The golden, the starter and every adversary graded on seed 1 in containers."""
    require_docker()
    assert payments.task is not None
    make_sandbox("docker", None, payments.task.libraries).check()  # builds the images once
    tmp = tmp_path_factory.mktemp("docker-sandbox")
    key = tmp / "heldout.key"
    key.write_text("an adversary never reads this key\n")
    key.chmod(0o600)
    programs = {name: CANDIDATES / f"{name}.py" for name in ADVERSARIES}
    programs.update(golden=golden, starter=starter, dial_direct=dial_direct)
    programs["read_secrets"] = _read_secrets(tmp, payments, key, tmp)
    results: dict[str, Grade] = {}
    limiter = trio.CapacityLimiter(4)

    async def one(name: str, program: Path) -> None:
        if name == "read_secrets":
            choice = choose_seeds(payments, key=read_key(key), heldout=1)
        else:
            choice = choose_seeds(payments, seeds=[1])
        options = GradeOptions(
            payments,
            Program.from_path(program),
            choice,
            limits=Limits(cpu_s=8.0),
            out_dir=tmp / name,
            hidden=(key,),
            sandbox="docker",
        )
        (tmp / name).mkdir()
        async with limiter:
            results[name] = await run_grade(options)

    async def all_of_them() -> None:
        async with trio.open_nursery() as nursery:
            for name, program in programs.items():
                nursery.start_soon(one, name, program)

    trio.run(all_of_them)
    return results, leftovers(candidate_image(payments.task.libraries).ref)


def test_the_golden_consumer_holds_in_a_container(
    graded: tuple[dict[str, Grade], list[str]],
) -> None:
    results, _ = graded
    result = results["golden"]
    assert result.reward == 1.0, [(s.seed, s.outcome, s.contained, s.error) for s in result.seeds]
    assert result.isolation == "docker"
    assert result.contained == {}


@pytest.mark.parametrize(("adversary", "reason"), list(ADVERSARIES.items()))
def test_each_adversary_is_contained_with_the_process_sandboxs_reason(
    graded: tuple[dict[str, Grade], list[str]], adversary: str, reason: str
) -> None:
    results, left = graded
    result = results[adversary]
    (seed,) = result.seeds
    assert seed.outcome == "contained", (seed.outcome, seed.error, seed.verdicts)
    assert seed.contained[0]["reason"] == reason, seed.contained
    assert result.reward == 0.0
    assert result.exit_code == 1
    assert left == []


def test_a_direct_dial_is_refused_inside_the_containers_namespace(
    graded: tuple[dict[str, Grade], list[str]],
) -> None:
    results, _ = graded
    (seed,) = results["dial_direct"].seeds
    assert "from inside its network namespace" in seed.contained[0]["detail"]


def test_the_starter_runs_and_gets_0(graded: tuple[dict[str, Grade], list[str]]) -> None:
    results, _ = graded
    result = results["starter"]
    (seed,) = result.seeds
    assert seed.outcome == "violated"
    assert result.invariants["no_lost_messages"] == 0.0
    assert seed.trace is not None
    starts = [e for e in read_trace(Path(seed.trace)).events
              if e.get("process") == "service:consumer" and e.get("f") == "start"]  # fmt: skip
    assert starts[0]["value"]["candidate"] is True


def test_the_pack_traces_key_and_other_processes_are_out_of_reach(
    graded: tuple[dict[str, Grade], list[str]],
) -> None:
    results, _ = graded
    result = results["read_secrets"]
    (seed,) = result.seeds
    assert result.seed_set == "heldout"
    assert seed.trace is not None
    lines = [
        str(e.get("value"))
        for e in read_trace(Path(seed.trace)).events
        if e.get("process") == "service:consumer" and e.get("f") == "log"
    ]
    assert [line for line in lines if line.startswith("SECRET-READ")] == [], lines
    assert len([line for line in lines if line.startswith("SECRET-DENIED")]) == 6, lines
    (shm,) = [line for line in lines if line.startswith("SHM-LIST")]
    assert "chaos-" not in shm


def test_isolation_does_not_go_with_the_docker_sandbox() -> None:
    with pytest.raises(ConfigError, match="--isolation goes with the process sandbox"):
        make_sandbox("docker", "root")
    with pytest.raises(ConfigError, match="--sandbox must be one of process, docker"):
        make_sandbox("vm", None)
