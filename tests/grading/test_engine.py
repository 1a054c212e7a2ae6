"""The grading engine's decisions, on outcomes a fake executor hands it (no services)."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chaos.errors import EXIT_HARNESS, EXIT_HELD, EXIT_VIOLATED, ConfigError
from chaos.grading import (
    MAX_HELDOUT,
    GradeOptions,
    OnOutcome,
    RunOutcome,
    RunSpec,
    choose_seeds,
    heldout_seeds,
    junit_xml,
    read_key,
    reward_of,
    run_grade,
)
from chaos.rng import SEED_MAX
from chaos.sandbox.candidate import Limits, Program
from chaos.scenario import Scenario

INVARIANTS = ("exactly_once", "no_lost_messages", "consistent_final_state")
KEY = b"0123456789abcdef-a-test-key"


def run_json(
    seed: int,
    sha: str,
    failed: Sequence[str] = (),
    contained: Sequence[str] = (),
    settle: float | None = 2.0,
    cpu: float = 0.5,
) -> dict[str, Any]:
    """What a ``chaos run --impl --json`` worker prints."""
    return {
        "seed": seed,
        "held": not failed and not contained,
        "trace": f"/traces/seed{seed}.trace",
        "verdicts": [
            {"name": n, "valid": n not in failed, "explanation": f"{n} explained"}
            for n in INVARIANTS
        ],
        "candidate": {
            "sha256": sha,
            "contained": [{"reason": r, "detail": f"{r} detail", "t": 1.0} for r in contained],
            "exits": [],
            "not_ready": 0,
            "measures": {"settle_s": settle, "side_effects": 30.0, "cpu_s": cpu},
        },
    }


class FakeExecutor:
    """Hands back scripted outcomes; records what it was asked to run."""

    def __init__(self, script: dict[int, list[RunOutcome]]) -> None:
        self.script = script
        self.calls: list[list[RunSpec]] = []

    async def __call__(
        self, specs: Sequence[RunSpec], jobs: int, progress: OnOutcome | None = None
    ) -> list[RunOutcome]:
        self.calls.append(list(specs))
        out = [self.script[spec.seed].pop(0) for spec in specs]
        for outcome in out:
            if progress is not None:
                progress(outcome)
        return out


@pytest.fixture
def program(tmp_path: Path) -> Program:
    file = tmp_path / "consumer.py"
    file.write_text("print('consumer ready')\n")
    return Program.from_path(file)


async def grade_with(
    payments: Scenario, program: Program, script: dict[int, list[RunOutcome]], tmp_path: Path
) -> tuple[Any, FakeExecutor]:
    fake = FakeExecutor(script)
    choice = choose_seeds(payments, seeds=sorted(script))
    options = GradeOptions(payments, program, choice, out_dir=tmp_path, executor=fake)
    return await run_grade(options), fake


async def test_a_seed_holds_only_when_every_invariant_held_and_nothing_was_contained(
    payments: Scenario, program: Program, tmp_path: Path
) -> None:
    sha = program.sha256
    script = {
        1: [RunOutcome(1, EXIT_HELD, run_json(1, sha))],
        2: [RunOutcome(2, EXIT_VIOLATED, run_json(2, sha, failed=["exactly_once"]))],
        3: [RunOutcome(3, EXIT_VIOLATED, run_json(3, sha, contained=["cpu"]))],
        4: [RunOutcome(4, EXIT_HELD, run_json(4, sha))],
    }
    grade, _ = await grade_with(payments, program, script, tmp_path)
    assert [s.outcome for s in grade.seeds] == ["held", "violated", "contained", "held"]
    assert grade.primary == 0.5
    assert grade.reward == 0.5  # every measure within its budget: reward is primary
    assert grade.invariants == {
        "exactly_once": 0.75,
        "no_lost_messages": 1.0,
        "consistent_final_state": 1.0,
    }
    assert grade.contained == {"cpu": 1}
    assert grade.exit_code == EXIT_VIOLATED
    assert grade.candidate_sha256 == sha
    assert grade.seed_set == "explicit"


async def test_a_harness_error_is_retried_once_then_exits_3_without_counting_as_graded(
    payments: Scenario, program: Program, tmp_path: Path
) -> None:
    sha = program.sha256
    script = {
        1: [RunOutcome(1, EXIT_HARNESS, error="postgres did not start")] * 2,
        2: [RunOutcome(2, EXIT_HARNESS, error="flake"), RunOutcome(2, EXIT_HELD, run_json(2, sha))],
    }
    grade, fake = await grade_with(payments, program, script, tmp_path)
    assert [[s.seed for s in call] for call in fake.calls] == [[1, 2], [1, 2]]
    assert [s.outcome for s in grade.seeds] == ["error", "held"]
    assert grade.seeds[0].error == "postgres did not start"
    assert (grade.graded, grade.errors, grade.primary) == (1, 1, 1.0)
    assert grade.exit_code == EXIT_HARNESS


async def test_a_run_of_another_program_than_the_one_hashed_is_not_graded(
    payments: Scenario, program: Program, tmp_path: Path
) -> None:
    script = {1: [RunOutcome(1, EXIT_HELD, run_json(1, "f" * 64))] * 2}
    grade, _ = await grade_with(payments, program, script, tmp_path)
    assert grade.seeds[0].outcome == "error"
    assert "changed during the grade" in (grade.seeds[0].error or "")


async def test_efficiency_beyond_the_budgets_orders_equally_correct_candidates_only(
    payments: Scenario, program: Program, tmp_path: Path
) -> None:
    sha = program.sha256
    fast = {s: [RunOutcome(s, EXIT_HELD, run_json(s, sha, settle=2.0))] for s in (1, 2)}
    slow = {s: [RunOutcome(s, EXIT_HELD, run_json(s, sha, settle=30.0))] for s in (1, 2)}
    fast_grade, _ = await grade_with(payments, program, fast, tmp_path / "a")
    slow_grade, _ = await grade_with(payments, program, slow, tmp_path / "b")
    assert fast_grade.reward == 1.0
    assert 2 / 3 < slow_grade.reward < 1.0  # settle p95 30 s against a 15 s budget
    assert slow_grade.secondary.settle_p95_s == 30.0
    assert slow_grade.primary == fast_grade.primary == 1.0


@given(
    n=st.integers(min_value=1, max_value=200),
    data=st.data(),
)
def test_one_more_seed_held_always_outweighs_any_efficiency(n: int, data: st.DataObject) -> None:
    k = data.draw(st.integers(min_value=0, max_value=n - 1))
    e_low, e_high = data.draw(st.floats(0, 1)), data.draw(st.floats(0, 1))
    assert reward_of((k + 1) / n, e_low, n) > reward_of(k / n, e_high, n)
    assert 0.0 <= reward_of(k / n, e_high, n) <= 1.0
    assert reward_of(1.0, 1.0, n) == 1.0


def test_held_out_seeds_come_from_the_key_and_the_scenario_never_from_the_public_ones() -> None:
    seeds = heldout_seeds(KEY, "payments", 20, exclude=(0, 1, 2, 3, 4))
    assert seeds == heldout_seeds(KEY, "payments", 20, exclude=(0, 1, 2, 3, 4))
    assert len(set(seeds)) == 20
    assert all(0 <= s <= SEED_MAX for s in seeds)
    assert not set(seeds) & {0, 1, 2, 3, 4}
    assert set(seeds).isdisjoint(heldout_seeds(KEY + b"x", "payments", 20))
    assert set(seeds).isdisjoint(heldout_seeds(KEY, "leases", 20))
    assert heldout_seeds(KEY, "payments", 5) == seeds[:5]
    with pytest.raises(ConfigError, match="held-out seeds"):
        heldout_seeds(KEY, "payments", MAX_HELDOUT + 1)


def test_without_a_key_only_public_seeds_exist(payments: Scenario) -> None:
    assert payments.task is not None
    public = choose_seeds(payments)
    assert (public.kind, public.seeds) == ("public", payments.task.public_seeds)
    assert choose_seeds(payments, public=True, key=KEY).kind == "public"
    heldout = choose_seeds(payments, key=KEY, heldout=3)
    assert heldout.kind == "heldout"
    assert len(heldout.seeds) == 3
    with pytest.raises(ConfigError, match="needs a held-out key"):
        choose_seeds(payments, heldout=3)


@pytest.mark.parametrize(
    ("content", "message"),
    [(None, "No such file"), (b"short\n", "at least 16"), (b"   \n", "0 bytes")],
)
def test_a_bad_key_file_is_refused(tmp_path: Path, content: bytes | None, message: str) -> None:
    path = tmp_path / "key"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(ConfigError, match=message):
        read_key(path)


async def test_junit_has_one_case_per_seed_and_invariant_plus_the_sandbox(
    payments: Scenario, program: Program, tmp_path: Path
) -> None:
    sha = program.sha256
    script = {
        1: [RunOutcome(1, EXIT_VIOLATED, run_json(1, sha, failed=["exactly_once"]))],
        2: [RunOutcome(2, EXIT_VIOLATED, run_json(2, sha, contained=["memory"]))],
    }
    grade, _ = await grade_with(payments, program, script, tmp_path)
    suite = ET.fromstring(junit_xml(grade)).find("testsuite")
    assert suite is not None
    cases = suite.findall("testcase")
    assert len(cases) == 2 * (len(INVARIANTS) + 1)
    failed = {
        (c.get("classname"), c.get("name")): c.find("failure").get("message")  # type: ignore[union-attr]
        for c in cases
        if c.find("failure") is not None
    }
    assert failed == {
        ("payments.seed1", "exactly_once"): "exactly_once explained",
        ("payments.seed2", "sandbox"): "contained (memory): memory detail",
    }
    assert suite.get("tests") == "8"
    assert suite.get("failures") == "2"


def test_limits_parse_names_values_and_refuse_the_rest() -> None:
    limits = Limits.parse(["cpu_s=5", "memory-mb=512"])
    assert (limits.cpu_s, limits.memory_mb, limits.processes) == (5.0, 512, 256)
    assert Limits.from_dict(limits.to_dict()) == limits
    assert Limits.parse(limits.to_args()[1::2]) == limits
    for bad, message in [
        ("cpu=5", "NAME one of"),
        ("cpu_s", "NAME one of"),
        ("cpu_s=fast", "not a number"),
        ("cpu_s=-1", "> 0"),
        ("memory_mb=1.5", "whole number"),
        ("wall_s=inf", "finite"),
    ]:
        with pytest.raises(ConfigError, match=message):
            Limits.parse([bad])


def test_a_program_is_a_py_file_an_executable_or_a_folder(tmp_path: Path) -> None:
    script = tmp_path / "run.sh"
    script.write_text("#!/bin/sh\necho consumer ready\n")
    with pytest.raises(ConfigError, match=r"not executable and not a \.py file"):
        Program.from_path(script)
    script.chmod(0o755)
    assert Program.from_path(script).kind == "exec"
    folder = tmp_path / "folder"
    folder.mkdir()
    with pytest.raises(ConfigError, match=r"needs a main\.py or an executable named run"):
        Program.from_path(folder)
    (folder / "main.py").write_text("print('consumer ready')\n")
    before = Program.from_path(folder)
    assert (before.kind, before.entry) == ("python", "main.py")
    (folder / "util.py").write_text("X = 1\n")
    assert Program.from_path(folder).sha256 != before.sha256  # every file counts
    with pytest.raises(ConfigError, match="No such file"):
        Program.from_path(tmp_path / "missing.py")


def test_a_program_with_a_symbolic_link_is_refused(tmp_path: Path) -> None:
    """The harness copies the program as root: a link could hand the candidate any file."""
    secret = tmp_path / "secret.key"
    secret.write_text("not for the candidate\n")
    secret.chmod(0o600)
    link = tmp_path / "consumer.py"
    link.symlink_to(secret)
    with pytest.raises(ConfigError, match="symbolic links are not allowed"):
        Program.from_path(link)
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "main.py").write_text("print(open('key').read())\n")
    (folder / "key").symlink_to(secret)
    with pytest.raises(ConfigError, match="symbolic links are not allowed"):
        Program.from_path(folder)


def test_the_candidate_replaces_the_task_service_and_each_of_its_instances(
    tmp_path: Path,
) -> None:
    from chaos.sandbox.candidate import Candidate
    from chaos.sandbox.process import ProcessSandbox

    program = tmp_path / "worker.py"
    program.write_text("print('ready')\n")
    candidate = Candidate(
        Program.from_path(program), "worker", ("PG_DSN",), (), Limits(), ProcessSandbox("user")
    )
    assert candidate.replaces("worker")
    assert candidate.replaces("worker-1")
    assert candidate.replaces("worker-blue")
    assert not candidate.replaces("worker-")
    assert not candidate.replaces("workers")
    assert not candidate.replaces("store")


def test_a_candidate_run_as_several_instances_reports_their_cpu_summed() -> None:
    from chaos.sandbox.candidate import CandidateReport

    report = CandidateReport("worker", "0" * 64)
    report.add_cpu("worker-1", 1.5)
    report.add_cpu("worker-2", 0.5)
    report.add_cpu("worker-1", 1.0)  # an older sample never lowers what was seen
    assert report.cpu_s == 2.0
    assert report.to_json()["cpu_by_service"] == {"worker-1": 1.5, "worker-2": 0.5}
