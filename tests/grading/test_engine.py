"""The grading engine's decisions, on outcomes a fake executor hands it (no services)."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

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
    summarize,
)
from chaos.sandbox.candidate import Limits, Program
from chaos.scenario import Scenario
from ground.errors import EXIT_HARNESS, EXIT_HELD, EXIT_VIOLATED, ConfigError
from ground.rng import SEED_MAX

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


async def test_a_harness_error_is_retried_once_then_counts_0_and_exits_3_if_nothing_started(
    payments: Scenario, program: Program, tmp_path: Path
) -> None:
    """Every seed asked for is graded: one that fails to run twice counts 0 (it was in the
    reward's denominator before this change left it out, and a candidate could turn a
    failure into an error to raise its reward). A worker that never said its candidate
    started means a broken machine: exit 3."""
    sha = program.sha256
    script = {
        1: [RunOutcome(1, EXIT_HARNESS, error="postgres did not start")] * 2,
        2: [RunOutcome(2, EXIT_HARNESS, error="flake"), RunOutcome(2, EXIT_HELD, run_json(2, sha))],
    }
    grade, fake = await grade_with(payments, program, script, tmp_path)
    assert [[s.seed for s in call] for call in fake.calls] == [[1, 2], [1, 2]]
    assert [s.outcome for s in grade.seeds] == ["error", "held"]
    assert grade.seeds[0].error == "postgres did not start"
    assert (grade.graded, grade.errors, grade.harness_errors) == (2, 1, 1)
    assert (grade.primary, grade.reward) == (0.5, 0.5)
    assert grade.invariants["exactly_once"] == 0.5
    assert grade.exit_code == EXIT_HARNESS


def error_json(seed: int, sha: str, started: bool) -> dict[str, Any]:
    """What a graded worker prints when its run failed (exit 3)."""
    return {
        "seed": seed,
        "held": False,
        "verdicts": [],
        "error": "the reader lost its connection",
        "candidate_started": started,
        "candidate": {"sha256": sha, "contained": [], "exits": [], "measures": {}},
    }


async def test_an_error_after_the_candidate_started_counts_0_without_calling_the_machine_broken(
    payments: Scenario, program: Program, tmp_path: Path
) -> None:
    sha = program.sha256
    script = {
        1: [RunOutcome(1, EXIT_HARNESS, error_json(1, sha, True), error="x")] * 2,
        2: [RunOutcome(2, EXIT_HELD, run_json(2, sha))],
        3: [RunOutcome(3, EXIT_HARNESS, timed_out=True, error="timed out after 60 s")],
    }
    grade, fake = await grade_with(payments, program, script, tmp_path)
    assert [[s.seed for s in call] for call in fake.calls] == [[1, 2, 3], [1]]  # no re-timeout
    assert [s.outcome for s in grade.seeds] == ["error", "held", "timeout"]
    assert grade.seeds[0].candidate_started is True
    assert grade.seeds[0].error == "x"
    assert (grade.graded, grade.errors, grade.harness_errors) == (3, 2, 1)
    assert grade.reward == round(1 / 3, 6)
    assert grade.exit_code == EXIT_HARNESS  # the timeout never said the candidate started
    del script[3]
    script[1] = [RunOutcome(1, EXIT_HARNESS, error_json(1, sha, True), error="x")] * 2
    script[2] = [RunOutcome(2, EXIT_HELD, run_json(2, sha))]
    grade, _ = await grade_with(payments, program, script, tmp_path / "again")
    assert (grade.errors, grade.harness_errors, grade.exit_code) == (1, 0, EXIT_VIOLATED)


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


# -- no outcome pays more than failing ---------------------------------------------------------

OUTCOMES = ("held", "violated", "contained", "error", "timeout")
#: What a candidate may turn a seed of each outcome into, without doing more work.
WORSE = {
    "held": ("violated", "contained", "error", "timeout"),
    "violated": ("contained", "error", "timeout"),
}


def outcome_of(seed: int, sha: str, kind: str, settle: float, cpu: float) -> RunOutcome:
    if kind == "held":
        return RunOutcome(seed, EXIT_HELD, run_json(seed, sha, settle=settle, cpu=cpu))
    if kind == "violated":
        return RunOutcome(
            seed, EXIT_VIOLATED, run_json(seed, sha, ["no_lost_messages"], settle=settle, cpu=cpu)
        )
    if kind == "contained":
        return RunOutcome(seed, EXIT_VIOLATED, run_json(seed, sha, contained=["cpu"], cpu=cpu))
    if kind == "timeout":
        return RunOutcome(seed, EXIT_HARNESS, timed_out=True, error="timed out")
    return RunOutcome(seed, EXIT_HARNESS, error_json(seed, sha, True), error="broke")


def reward_for(payments: Scenario, program: Program, runs: list[RunOutcome]) -> float:
    choice = choose_seeds(payments, seeds=[r.seed for r in runs])
    grade = summarize(
        payments, program, choice, runs, isolation="root", limits=Limits(), jobs=1,
        wall_s=1.0, out_dir=Path("/nonexistent"),
    )  # fmt: skip
    assert 0.0 <= grade.reward <= 1.0
    assert grade.graded == len(runs)
    return grade.reward


SEEDS = st.lists(
    st.tuples(
        st.sampled_from(OUTCOMES),
        st.floats(0.0, 120.0),  # settle seconds (budget 15)
        st.floats(0.0, 60.0),  # CPU seconds (budget 10)
    ),
    min_size=1,
    max_size=12,
)


@given(seeds=SEEDS, data=st.data())
def test_no_candidate_raises_its_reward_by_turning_a_seed_into_an_error_timeout_or_containment(
    payments: Scenario, seeds: list[tuple[str, float, float]], data: st.DataObject
) -> None:
    """Over any mix of outcomes and efficiency measures: a held seed turned into a violation,
    a containment, an error or a timeout, or a violated one into any of the last three, never
    raises the reward (whatever the efficiency of the seeds that remain)."""
    program = Program(Path("/candidate"), "python", "", "a" * 64)
    sha = program.sha256
    runs = [outcome_of(i, sha, *seed) for i, seed in enumerate(seeds)]
    changeable = [i for i, (kind, _, _) in enumerate(seeds) if kind in WORSE]
    if not changeable:
        return
    i = data.draw(st.sampled_from(changeable))
    kind, settle, cpu = seeds[i]
    into = data.draw(st.sampled_from(WORSE[kind]))
    before = reward_for(payments, program, runs)
    runs[i] = outcome_of(i, sha, into, settle, cpu)
    assert reward_for(payments, program, runs) <= before


@given(seeds=SEEDS)
def test_an_error_or_a_timeout_counts_exactly_as_a_violation(
    payments: Scenario, seeds: list[tuple[str, float, float]]
) -> None:
    program = Program(Path("/candidate"), "python", "", "a" * 64)
    failing = [outcome_of(i, program.sha256, *s) for i, s in enumerate(seeds)]
    as_violations = [
        outcome_of(i, program.sha256, "violated" if kind in ("error", "timeout") else kind, x, y)
        for i, (kind, x, y) in enumerate(seeds)
    ]
    assert reward_for(payments, program, failing) == reward_for(payments, program, as_violations)


def test_an_undecided_verdict_is_not_held_and_never_breaks_the_grade() -> None:
    """A checker that cannot read the evidence (a value the candidate sent, say) reports
    ``"valid": "unknown"``: the seed is violated with that invariant undecided. Before, the
    grade's own model refused the string and the whole grade failed (an internal error: no
    reward at all; ``tests/grading/adversaries/leases_huge_token.py``)."""
    from chaos.grading import seed_grade

    data = run_json(4, "sha")
    data["held"] = False
    data["verdicts"][0]["valid"] = "unknown"
    seed = seed_grade(RunOutcome(4, EXIT_VIOLATED, data), INVARIANTS, "sha")
    assert (seed.outcome, seed.held) == ("violated", False)
    assert seed.verdicts == {
        "exactly_once": None,
        "no_lost_messages": True,
        "consistent_final_state": True,
    }


def test_values_a_trace_cannot_hold_are_recorded_as_text() -> None:
    """What a program under test sent through a harness service (a fencing token past 64
    bits, a string with a lone surrogate) is kept as its digits and escapes, never a trace
    writer's refusal (a harness error any candidate could cause)."""
    from chaos.recorder import storable

    value = {"token": 2**64, "ok": 2**64 - 1, "low": -(2**63) - 1, "id": "\ud800x", "n": [1.5]}
    assert storable(value) == {
        "token": "18446744073709551616",
        "ok": 2**64 - 1,
        "low": "-9223372036854775809",
        "id": "\\ud800x",
        "n": [1.5],
    }


async def test_a_service_that_prints_without_end_is_recorded_up_to_a_cap(tmp_path: Path) -> None:
    """Past ``MAX_SERVICE_LOG_LINES`` a harness service's lines are counted, not recorded
    (a program under test can make PostgreSQL log without end:
    ``tests/grading/adversaries/payments_log_flood.py``); operations are never dropped, and
    proxy observations have a cap of their own."""
    from chaos import recorder as rec
    from replay.trace import TraceWriter, build_header

    with TraceWriter(tmp_path / "t.trace", build_header("demo", "sha256:0", "golden", 1)) as w:
        recorder = rec.Recorder(w)
        for i in range(rec.MAX_SERVICE_LOG_LINES + 50):
            recorder.log_line("postgres", "stderr", f"LOG: flood {i}")
        recorder.log_line("store", "stdout", '@op {"type": "ok", "f": "write", "value": 1}')
        recorder.log_line("other", "stdout", "a line of another service")
        for _ in range(rec.MAX_PROXY_EVENTS + 50):
            recorder.proxy_event({"event": "connection_opened", "proxy": "db"})
    logs = [e for e in recorder.events if e["process"] == "service:postgres"]
    assert len(logs) == rec.MAX_SERVICE_LOG_LINES + 1
    assert logs[-1]["value"] == f"(output truncated after {rec.MAX_SERVICE_LOG_LINES} lines)"
    assert [e["f"] for e in recorder.events if e["process"] == "store"] == ["write"]
    assert [e["value"] for e in recorder.events if e["process"] == "service:other"] == [
        "a line of another service"
    ]
    proxy = [e for e in recorder.events if e["process"] == "proxy"]
    assert len(proxy) == rec.MAX_PROXY_EVENTS + 1
    assert proxy[-1]["f"] == "truncated"
