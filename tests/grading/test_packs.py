"""Every built-in pack serves its task: real grades of real candidates (no mocks).

Per pack, graded side by side: the golden implementation (made self-contained) on the seeds
that expose the variants, each one-fault variant as a candidate on a seed of the golden
fault space that exposes it (found by grading each variant on seeds 0-9 for tenants and
0-12 and 29 for leases, then drawing leases' again when its golden weights changed (see
CASES), keeping the seeds whose fault has a wide margin; for no-fencing,
the seeds whose only fault pauses the holder on one of its own store connections: payments'
seed 2 is a redelivery, as in test_graded_runs), the pack's
starter, and an adversary that goes for the evidence in PostgreSQL. Then: a graded trace
replays its candidate; a changed candidate is refused; the exported Harbor task scores its
oracle 1 and a no-op 0.

About four minutes a pack on a 2-core machine (leases' runs take 15-35 s each).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import trio

from chaos.grading import Grade, GradeOptions, choose_seeds, run_grade
from chaos.sandbox.candidate import Program
from chaos.sandbox.process import default_isolation
from chaos.scenario import Scenario, load_scenario
from chaos.task import bundle_program
from replay.trace import read_trace
from tests.grading.conftest import CANDIDATES, leftovers

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(default_isolation() != "root", reason="graded packs need root isolation"),
]


@dataclass(frozen=True)
class PackCase:
    """What each candidate of a pack is graded on, and what must fail."""

    golden_seeds: tuple[int, ...]
    #: variant -> seeds of the golden fault space where it is caught (a pause that lands at
    #: an at_time offset can land in the few ms where the defect does not show: more seeds)
    variants: dict[str, tuple[int, ...]]
    #: the invariant the do-nothing starter fails
    starter_fails: str
    #: the adversary (a file of candidates/) and the invariant it fails
    adversary: str
    adversary_fails: str


CASES = {
    # payments: seed 2 of the golden space loses the 10th order's ack twice (a redelivery)
    "payments": PackCase((2,), {"no-idempotency": (2,)}, "no_lost_messages",
                         "payments_rewrite.py", "exactly_once"),
    "tenants": PackCase((2, 6), {"session-tenant": (2,), "missing-policy": (6,),
                                 "definer-function": (6,)}, "read_your_writes",
                        "tenants_owner_reads.py", "tenant_isolation"),
    # no-fencing: seeds 167, 1450 and 1970 each hold one fault, a pause of worker-1 (3.8-4 s,
    # TTL 2 s) on its 16th-18th store connection: at the start of a job step, on any machine
    # and on cold or warm workers alike. (A pause at an at_time offset, as seed 10's, misses
    # when it lands while the holder's write is in flight: it then renews, learns it lost the
    # lease and never writes stale; warm workers' steadier timing made that the rule.)
    # wall-clock-expiry: seed 88, worker-2's clock 3074 s ahead from 2.0 s for 3 s;
    # renew-without-owner-check: seed 61, worker-1's database link cut (downstream) for 4.3 s
    # from its 10th store connection: each caught in 3 of 3 runs (the golden space of
    # pauses and partitions at weight 3; seed 10, a pause at an at_time offset, is golden's).
    "leases": PackCase((88, 10, 61), {"no-fencing": (167, 1450, 1970), "wall-clock-expiry": (88,),
                                      "renew-without-owner-check": (61,)}, "job_recovered",
                       "leases_forge.py", "fencing_tokens"),
}  # fmt: skip


def _adversary(tmp: Path, name: str) -> Path:
    """The adversary as a folder: main.py, the probe beside it (and what it runs)."""
    out = tmp / name.removesuffix(".py")
    out.mkdir()
    shutil.copyfile(CANDIDATES / name, out / "main.py")
    shutil.copyfile(CANDIDATES / "pg_probe.py", out / "pg_probe.py")
    if name == "payments_rewrite.py":
        shutil.copyfile(CANDIDATES / "double_charge.py", out / "double_charge.py")
    return out


@dataclass
class Graded:
    scenario: Scenario
    programs: dict[str, Path]
    grades: dict[str, Grade]
    left: list[str]


@pytest.fixture(scope="module", params=sorted(CASES))
def pack(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Graded:
    """Every candidate of one pack graded, three grades at a time."""
    name = request.param
    case = CASES[name]
    scenario = load_scenario(name)
    assert scenario.task is not None
    tmp = tmp_path_factory.mktemp(f"pack-{name}")
    programs: dict[str, Path] = {"golden": bundle_program(scenario, tmp / "golden")}
    for variant in case.variants:
        programs[variant] = bundle_program(
            scenario, tmp / variant, env_defaults={"VARIANT": variant}
        )
    programs["starter"] = scenario.path / scenario.task.starter
    programs["adversary"] = _adversary(tmp, case.adversary)
    seeds = {"golden": list(case.golden_seeds), **{v: list(s) for v, s in case.variants.items()}}
    seeds["starter"] = [case.golden_seeds[0]]
    seeds["adversary"] = [case.golden_seeds[0]]
    grades: dict[str, Grade] = {}
    limiter = trio.CapacityLimiter(3)

    async def one(who: str) -> None:
        out = tmp / "traces" / who
        out.mkdir(parents=True)
        options = GradeOptions(
            scenario,
            Program.from_path(programs[who]),
            choose_seeds(scenario, seeds=seeds[who]),
            jobs=1 if who != "golden" else 2,
            out_dir=out,
        )
        async with limiter:
            grades[who] = await run_grade(options)

    async def all_of_them() -> None:
        async with trio.open_nursery() as nursery:
            for who in programs:
                nursery.start_soon(one, who)

    trio.run(all_of_them)
    return Graded(scenario, programs, grades, leftovers())


def _why(grade: Grade) -> list[object]:
    return [(s.seed, s.outcome, s.verdicts, s.contained, s.error) for s in grade.seeds]


def test_the_golden_implementation_gets_reward_1(pack: Graded) -> None:
    golden = pack.grades["golden"]
    assert golden.errors == 0, _why(golden)
    assert golden.reward == 1.0, _why(golden)
    assert set(golden.invariants.values()) == {1.0}
    assert golden.exit_code == 0
    assert golden.isolation == "root"


def test_each_variant_gets_below_1_with_its_declared_invariant_failing(pack: Graded) -> None:
    scenario = pack.scenario
    for variant in CASES[scenario.id].variants:
        result = pack.grades[variant]
        caught = scenario.catches[variant]
        assert result.errors == 0, (variant, _why(result))
        assert result.reward < 1, (variant, _why(result))
        assert result.invariants[caught] < 1, (variant, caught, _why(result))
        assert result.exit_code == 1


def test_the_starter_gets_0(pack: Graded) -> None:
    starter = pack.grades["starter"]
    assert starter.errors == 0, _why(starter)
    assert starter.reward == 0.0, _why(starter)
    assert starter.invariants[CASES[pack.scenario.id].starter_fails] == 0.0
    assert starter.contained == {}


def _probes(grade: Grade) -> dict[str, str]:
    (seed,) = grade.seeds
    assert seed.trace is not None
    found = {}
    for e in read_trace(Path(seed.trace)).events:
        value = str(e.get("value", ""))
        if e.get("f") == "log" and value.startswith("PG-PROBE "):
            _, name, verdict = value.split(" ", 3)[:3]
            found[name] = verdict
    return found


def test_the_adversary_cannot_rewrite_the_evidence_and_fails(pack: Graded) -> None:
    case = CASES[pack.scenario.id]
    result = pack.grades["adversary"]
    assert result.reward == 0.0, _why(result)
    assert result.invariants[case.adversary_fails] == 0.0, _why(result)
    probes = _probes(result)
    assert "superuser-no-password-postgres" in probes
    assert "own-role-superuser" in probes
    assert "server-program" in probes
    if pack.scenario.id == "leases":
        assert {"audit-insert", "audit-delete", "audit-update", "trigger-disable"} <= set(probes)
    allowed = sorted(name for name, verdict in probes.items() if verdict != "refused")
    assert allowed == []


def test_nothing_is_left_behind(pack: Graded) -> None:
    assert pack.left == []


def test_a_graded_trace_replays_its_candidate_and_refuses_a_changed_one(pack: Graded) -> None:
    variant = next(iter(CASES[pack.scenario.id].variants))
    program = pack.programs[variant]
    seed = next(s for s in pack.grades[variant].seeds if s.outcome == "violated")
    assert seed.trace is not None
    recorded = read_trace(Path(seed.trace)).header["candidate"]
    assert recorded["path"] == str(program)
    assert recorded["sha256"] == Program.from_path(program).sha256
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    # A violation that hangs on where a timed pause lands replays with a fidelity, not
    # always: at least one of three replays must reproduce it.
    argv = [sys.executable, "-m", "chaos", "replay", seed.trace, "--json", "--times", "3"]
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=900)
    assert done.returncode in (0, 1), done.stderr
    report = json.loads(done.stdout)
    assert report["matched"] >= 1, report
    replayed = read_trace(Path(report["replays"][0]["trace"])).header["candidate"]
    assert replayed["sha256"] == recorded["sha256"]
    with (program / "main.py").open("a") as f:  # the candidate changes after its grade
        f.write("# changed\n")
    refused = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120)
    assert refused.returncode == 2
    assert refused.stdout == ""
    (line,) = refused.stderr.strip().splitlines()
    assert "changed since the graded run" in line


@pytest.mark.parametrize("name", ["tenants", "leases"])
def test_the_harbor_task_scores_its_oracle_1_and_a_no_op_0(
    name: str, tmp_path: Path, key_file: Path
) -> None:
    """As test_graded_runs does for payments: the exported verifier, on this machine."""
    task = tmp_path / "harbor"
    path = f"{Path(sys.executable).parent}:{os.environ['PATH']}"  # an activated environment's
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PATH": path}
    subprocess.run(
        [sys.executable, "-m", "chaos", "task", name, "--format", "harbor", "-o", task,
         "--heldout-key", key_file],
        check=True, capture_output=True, env=env, cwd=tmp_path,
    )  # fmt: skip
    scenario = load_scenario(name)
    assert scenario.task is not None
    service = scenario.task.service
    checks = {
        "oracle": task / "solution" / service,
        "no-op": task / "environment" / "workspace" / f"{service}.py",
    }
    running = {}
    for who, impl in checks.items():
        running[who] = subprocess.Popen(
            ["bash", str(task / "tests" / "test.sh")],
            env={**env, "CHAOS_REWARD_DIR": str(tmp_path / who), "CHAOS_IMPL": str(impl),
                 "CHAOS_HELDOUT": "1", "CHAOS_JOBS": "1"},
            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
    rewards = {}
    for who, process in running.items():
        _, err = process.communicate(timeout=900)
        assert process.returncode == 0, err
        rewards[who] = json.loads((tmp_path / who / "reward.json").read_text())
    assert rewards["oracle"]["reward"] == 1.0, rewards
    assert rewards["oracle"]["harness_errors"] == 0
    assert rewards["no-op"]["reward"] == 0.0, rewards
    assert rewards["no-op"]["harness_errors"] == 0
    assert leftovers() == []


def test_junit_has_a_case_per_seed_and_invariant_and_fails_the_variants(pack: Graded) -> None:
    from xml.etree import ElementTree

    from chaos.grading import junit_xml

    invariants = len(pack.scenario.invariants)
    golden = ElementTree.fromstring(junit_xml(pack.grades["golden"]))
    assert len(golden.findall(".//testcase")) == len(pack.grades["golden"].seeds) * (invariants + 1)
    assert golden.findall(".//failure") == []
    for variant in CASES[pack.scenario.id].variants:
        suite = ElementTree.fromstring(junit_xml(pack.grades[variant]))
        failed = {case.get("name") for case in suite.findall(".//testcase")
                  if case.find("failure") is not None}  # fmt: skip
        assert any(pack.scenario.catches[variant] in str(name) for name in failed), failed
