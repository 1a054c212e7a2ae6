"""Real grades: real services, real candidates, the real sandbox (no mocks).

About five and a half minutes on a 2-core machine, most of it waiting: the golden consumer
on 20 held-out seeds (4 runs at a time, about a minute), the no-idempotency variant twice on
the same seeds, and every adversary graded six at a time (about two and a half minutes: most
of them never settle, so each of their runs waits out the scenario's 30 s settle timeout).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import trio

from chaos.grading import Grade, GradeOptions, choose_seeds, grade, read_key, run_grade
from chaos.sandbox._uids import UID_BASE
from chaos.sandbox.candidate import Limits, Program
from chaos.sandbox.process import default_isolation
from chaos.scenario import Scenario
from replay.trace import read_trace
from tests.grading.conftest import CANDIDATES, leftovers

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(default_isolation() != "root", reason="the adversaries need root isolation"),
]


def test_the_golden_consumer_gets_reward_1_on_20_held_out_seeds(
    payments: Scenario, golden: Path, key_file: Path, tmp_path: Path
) -> None:
    result = grade(payments, golden, heldout_key=key_file, jobs=4, out_dir=tmp_path)
    assert result.seed_set == "heldout"
    assert result.graded == 20
    assert result.errors == 0
    assert (
        tuple(s.seed for s in result.seeds) == choose_seeds(payments, key=read_key(key_file)).seeds
    )
    assert result.reward == 1.0, [(s.seed, s.outcome, s.contained) for s in result.seeds]
    assert set(result.invariants.values()) == {1.0}
    assert result.contained == {}
    assert result.exit_code == 0
    assert result.secondary.efficiency == 1.0
    assert result.secondary.settle_p95_s is not None
    assert result.candidate_sha256 == Program.from_path(golden).sha256
    assert result.scenario_hash == payments.content_hash()
    assert result.isolation == "root"
    traces = sorted(Path(result.out_dir).iterdir())
    assert len(traces) == 20
    assert oct(Path(result.out_dir).stat().st_mode)[-3:] == "700"
    assert leftovers() == []


def test_the_no_idempotency_variant_fails_exactly_once_the_same_way_every_time(
    payments: Scenario, no_idempotency: Path, tmp_path: Path
) -> None:
    # Golden-space seed 1 publishes the 1st order twice (JetStream's duplicate window stores it
    # once: held); seed 2 loses the 10th order's ack twice (redelivered: violated). Neither
    # outcome hangs on timing.
    first = grade(payments, no_idempotency, seeds=[1, 2], jobs=2, out_dir=tmp_path)
    again = grade(payments, no_idempotency, seeds=[1, 2], jobs=2, out_dir=tmp_path)
    assert first.reward < 1
    assert first.invariants["exactly_once"] < 1
    assert first.exit_code == 1
    assert again.reward == first.reward
    assert [s.outcome for s in again.seeds] == [s.outcome for s in first.seeds]
    assert [s.verdicts for s in again.seeds] == [s.verdicts for s in first.seeds]
    assert [s.outcome for s in first.seeds] == ["held", "violated"]


def test_grades_from_two_processes_at_once_keep_to_their_own_runs(
    golden: Path, tmp_path: Path
) -> None:
    code = (
        "import json, sys, chaos; "
        "g = chaos.grade('payments', sys.argv[1], seeds=[3], out_dir=sys.argv[2]); "
        "print(json.dumps([g.reward, g.out_dir, g.errors]))"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", code, str(golden), str(tmp_path)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for _ in range(2)
    ]
    results = []
    for process in processes:
        out, err = process.communicate(timeout=600)
        assert process.returncode == 0, err
        results.append(json.loads(out))
    assert [r[0] for r in results] == [1.0, 1.0]
    assert [r[2] for r in results] == [0, 0]
    assert results[0][1] != results[1][1]
    assert leftovers() == []


def test_a_crashed_candidate_restarts_in_its_sandbox_and_still_holds(
    payments: Scenario, golden: Path, tmp_path: Path
) -> None:
    trace = tmp_path / "crash.trace"
    done = subprocess.run(
        [sys.executable, "-m", "chaos", "run", "payments", "--seed", "25", "--impl", golden,
         "--out", trace, "--json"],
        capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    run = json.loads(done.stdout)
    assert run["held"]
    assert [e["kind"] for e in run["schedule"]["events"]] == ["crash"]
    assert run["candidate"]["starts"] == 2
    assert run["candidate"]["contained"] == []
    assert leftovers() == []


# -- adversaries, graded side by side ------------------------------------------------------


def _read_secrets(tmp: Path, payments: Scenario, key: Path, traces: Path) -> Path:
    secrets = [
        str(key),
        str(traces),
        str(payments.path / "scenario.py"),
        str(payments.path / "checkers" / "exactly_once.py"),
        str(ROOT / "chaos" / "grading.py"),
        "/root/.bash_history",
    ]
    program = tmp / "read_secrets.py"
    source = (CANDIDATES / "read_secrets.py").read_text()
    program.write_text(source.replace("SECRETS: list[str] = []", f"SECRETS = {secrets!r}"))
    return program


@pytest.fixture(scope="module")
def adversaries(
    tmp_path_factory: pytest.TempPathFactory,
    payments: Scenario,
    starter: Path,
    dial_direct: Path,
) -> dict[str, tuple[Grade, list[str]]]:
    """Every adversary (and the starter) graded on one seed, all at once; with what was
    left behind once all were done."""
    tmp = tmp_path_factory.mktemp("adversaries")
    key = tmp / "heldout.key"
    key.write_text("an adversary never reads this key\n")
    key.chmod(0o600)
    traces = tmp / "traces"
    traces.mkdir()
    limits = Limits(cpu_s=8.0)
    runs: dict[str, tuple[Path, str | None]] = {
        name: (CANDIDATES / f"{name}.py", None)
        for name in (
            "fork_bomb",
            "allocate_20gb",
            "infinite_loop",
            "ignores_sigterm",
            "write_10gb",
            "fake_history",
            "double_charge",
        )
    }
    runs["starter"] = (starter, None)
    runs["dial_direct"] = (dial_direct, None)
    runs["dial_direct_user"] = (dial_direct, "user")
    runs["read_secrets"] = (_read_secrets(tmp, payments, key, traces), None)
    uid_probe = tmp / "uid_probe.sh"
    uid_probe.write_text(
        (CANDIDATES / "uid_probe.sh").read_text().replace("KEY=/nonexistent", f"KEY={key}")
    )
    uid_probe.chmod(0o755)
    runs["uid_probe"] = (uid_probe, "uid")
    results: dict[str, Grade] = {}
    # Six at a time: twelve runs at once on two cores slow the services past their timeouts.
    limiter = trio.CapacityLimiter(6)

    async def one(name: str, program: Path, isolation: str | None) -> None:
        if name == "read_secrets":
            choice = choose_seeds(payments, key=read_key(key), heldout=1)
        else:
            choice = choose_seeds(payments, seeds=[1])
        options = GradeOptions(
            payments,
            Program.from_path(program),
            choice,
            limits=limits,
            isolation=isolation,
            out_dir=traces / name,
            hidden=(key,),
        )
        (traces / name).mkdir()
        async with limiter:
            results[name] = await run_grade(options)

    async def all_of_them() -> None:
        async with trio.open_nursery() as nursery:
            for name, (program, isolation) in runs.items():
                nursery.start_soon(one, name, program, isolation)

    trio.run(all_of_them)
    left = leftovers()
    return {name: (result, left) for name, result in results.items()}


def _seed(result: Grade) -> Any:
    (seed,) = result.seeds
    return seed


@pytest.mark.parametrize(
    ("adversary", "reason"),
    [
        ("fork_bomb", "processes"),
        ("allocate_20gb", "memory"),
        ("infinite_loop", "cpu"),
        ("ignores_sigterm", "ignored SIGTERM"),
        ("write_10gb", "file size"),
        ("dial_direct", "bypassed link"),
        ("dial_direct_user", "bypassed link"),
    ],
)
def test_each_adversary_is_contained_graded_0_and_leaves_nothing(
    adversaries: dict[str, tuple[Grade, list[str]]], adversary: str, reason: str
) -> None:
    result, left = adversaries[adversary]
    seed = _seed(result)
    assert seed.outcome == "contained", (seed.outcome, seed.error, seed.verdicts)
    assert seed.contained[0]["reason"] == reason, seed.contained
    assert result.reward == 0.0
    assert result.contained == {reason: 1}
    assert result.exit_code == 1
    assert left == []


def test_the_user_isolation_bypass_was_detected_not_refused(
    adversaries: dict[str, tuple[Grade, list[str]]],
) -> None:
    user, _ = adversaries["dial_direct_user"]
    root, _ = adversaries["dial_direct"]
    assert user.isolation == "user"
    assert root.isolation == "root"
    assert "not through its link" in _seed(user).contained[0]["detail"]
    assert "from inside its network namespace" in _seed(root).contained[0]["detail"]


def test_the_starter_gets_0_with_no_lost_messages_failing(
    adversaries: dict[str, tuple[Grade, list[str]]],
) -> None:
    result, _ = adversaries["starter"]
    assert result.reward == 0.0
    assert result.invariants["no_lost_messages"] == 0.0
    assert _seed(result).outcome == "violated"
    assert result.contained == {}


def test_fake_history_lines_are_logged_never_history(
    adversaries: dict[str, tuple[Grade, list[str]]],
) -> None:
    result, _ = adversaries["fake_history"]
    seed = _seed(result)
    assert result.reward == 0.0
    assert seed.verdicts["no_lost_messages"] is False
    assert seed.trace is not None
    events = list(read_trace(Path(seed.trace)).events)
    forged = [e for e in events if e.get("process") == "consumer"]
    logged = [e for e in events if e.get("process") == "service:consumer" and e.get("f") == "log"
              and str(e.get("value", "")).startswith("@op ")]  # fmt: skip
    assert forged == []
    assert len(logged) == 90


def test_charging_twice_then_deleting_the_rows_still_fails_exactly_once(
    adversaries: dict[str, tuple[Grade, list[str]]],
) -> None:
    result, _ = adversaries["double_charge"]
    seed = _seed(result)
    assert result.reward == 0.0
    assert seed.outcome == "violated"
    assert seed.verdicts["exactly_once"] is False
    assert "charged more than once at the gateway" in seed.explanations["exactly_once"]
    assert "in the charges table" not in seed.explanations["exactly_once"]


def test_the_pack_traces_key_and_other_processes_are_out_of_reach(
    adversaries: dict[str, tuple[Grade, list[str]]],
) -> None:
    result, _ = adversaries["read_secrets"]
    seed = _seed(result)
    assert result.seed_set == "heldout"
    assert result.reward == 0.0
    assert seed.trace is not None
    lines = [
        str(e.get("value"))
        for e in read_trace(Path(seed.trace)).events
        if e.get("process") == "service:consumer" and e.get("f") == "log"
    ]
    read = [line for line in lines if line.startswith("SECRET-READ")]
    denied = [line for line in lines if line.startswith("SECRET-DENIED")]
    assert read == [], lines
    assert len(denied) == 6, lines
    (shm,) = [line for line in lines if line.startswith("SHM-LIST")]
    assert "chaos-" not in shm


def test_uid_isolation_runs_any_language_as_its_own_user_with_a_scrubbed_environment(
    adversaries: dict[str, tuple[Grade, list[str]]], payments: Scenario
) -> None:
    result, left = adversaries["uid_probe"]
    seed = _seed(result)
    assert result.isolation == "uid"
    assert seed.trace is not None
    probe = {
        line.split()[1]: line.split(None, 2)[2]
        for e in read_trace(Path(seed.trace)).events
        if e.get("f") == "log" and str(e.get("value", "")).startswith("PROBE ")
        for line in [str(e["value"])]
    }
    assert int(probe["uid"]) >= UID_BASE
    home, _, pwd = probe["home"].partition(" pwd ")
    assert home == pwd
    assert home.endswith("/scratch")
    assert payments.task is not None
    allowed = {"PATH", "HOME", "TMPDIR", "LANG", "PYTHONUNBUFFERED", "PYTHONPATH", "PWD", "SHLVL",
               "_"}  # fmt: skip
    faketime = {n for n in probe["env"].split() if "FAKE" in n or n == "LD_PRELOAD"}
    assert set(probe["env"].split()) - faketime <= allowed | set(payments.task.env)
    assert "CHAOS_RUN_ID" not in probe["env"]
    assert probe["key"] == "denied"
    assert left == []


# -- Harbor ---------------------------------------------------------------------------------


def test_the_harbor_task_scores_its_oracle_1_and_a_no_op_0(tmp_path: Path, key_file: Path) -> None:
    task = tmp_path / "harbor"
    # the verifier's `python3` is this environment's, as in an activated virtualenv
    path = f"{Path(sys.executable).parent}:{os.environ['PATH']}"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PATH": path}
    subprocess.run(
        [sys.executable, "-m", "chaos", "task", "payments", "--format", "harbor", "-o", task,
         "--heldout-key", key_file],
        check=True, capture_output=True, env=env, cwd=tmp_path,
    )  # fmt: skip
    # the verifier's working directory is the agent's (/app in Harbor): a `chaos` package
    # there that prints a perfect grade once ran as the verifier (as root) and scored the
    # no-op 1.0; nothing of that folder may be imported
    fake = tmp_path / "chaos"
    fake.mkdir()
    (fake / "__init__.py").write_text("")
    (fake / "__main__.py").write_text(
        "import json\nprint(json.dumps({'reward': 1.0, 'primary': 1.0, 'invariants': {}, "
        "'contained': {}, 'errors': 0, 'harness_errors': 0, 'graded': 1}))\n"
    )
    checks = {
        "oracle": (task / "solution" / "consumer", "1"),
        "no-op": (task / "environment" / "workspace" / "consumer.py", "1"),
    }
    running = {}
    for name, (impl, seeds) in checks.items():
        out = tmp_path / name
        running[name] = subprocess.Popen(
            ["bash", str(task / "tests" / "test.sh")],
            env={**env, "CHAOS_REWARD_DIR": str(out), "CHAOS_IMPL": str(impl),
                 "CHAOS_HELDOUT": seeds, "CHAOS_JOBS": "2"},
            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
    rewards = {}
    for name, process in running.items():
        _, err = process.communicate(timeout=600)
        assert process.returncode == 0, err
        rewards[name] = json.loads((tmp_path / name / "reward.json").read_text())
        assert (tmp_path / name / "junit.xml").is_file()
        assert json.loads((tmp_path / name / "grade.json").read_text())["seed_set"] == "heldout"
    assert rewards["oracle"]["reward"] == 1.0
    assert rewards["oracle"]["exactly_once"] == 1.0
    assert rewards["no-op"]["reward"] == 0.0
    assert rewards["no-op"]["no_lost_messages"] == 0.0
    assert all(isinstance(v, int | float) for r in rewards.values() for v in r.values())
    assert leftovers() == []
    shutil.rmtree(task)
