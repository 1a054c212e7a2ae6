"""A crashed candidate leaves no libfaketime files behind, under every isolation.

libfaketime makes a semaphore and a shared memory file in /dev/shm for each process that
loads it, named after its pid, and removes them only in a destructor a SIGKILLed process never
runs. A candidate on the machine's /dev/shm (isolation user or uid) uses one pair made for its
sandbox instead, removed with it; with isolation root its /dev/shm is a private tmpfs.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from chaos.sandbox import _python
from chaos.sandbox.candidate import Program
from chaos.sandbox.process import ISOLATIONS, ProcessSandbox, _closed_to_others
from chaos.scenario import Scenario
from chaos.services import open_run_dir, registry
from faults.schedule import generate
from ground.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
PER_PROCESS = re.compile(r"^(faketime_shm_|sem\.faketime_sem_)\d+$")


def _available(isolation: str, program: Path) -> bool:
    try:
        ProcessSandbox(isolation).check(Program.from_path(program))
    except ConfigError:
        return False
    return True


def _libfaketime_files() -> set[str]:
    return {n for n in os.listdir("/dev/shm") if "faketime_" in n}


def _a_crash_seed(payments: Scenario) -> int:
    """The first golden seed whose schedule SIGKILLs the consumer (from the pack's own
    space, so the test follows a change of it)."""
    space = payments.fault_space("golden")
    for seed in range(1000):
        events = generate(space, seed).events
        if any(e.kind == "crash" and e.target.name == "consumer" for e in events):
            return seed
    raise AssertionError("no payments golden seed below 1000 crashes the consumer")


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_a_sigkilled_candidate_leaves_no_libfaketime_files(
    isolation: str, golden: Path, payments: Scenario, tmp_path: Path
) -> None:
    if not _available(isolation, golden):
        pytest.skip(f"--isolation {isolation} is not available on this machine")
    seed = _a_crash_seed(payments)
    before = _libfaketime_files()
    done = subprocess.run(
        [sys.executable, "-m", "chaos", "run", "payments", "--impl", str(golden),
         "--isolation", isolation, "--seed", str(seed), "--json",
         "--out", str(tmp_path / "graded.trace")],
        capture_output=True, text=True, cwd=tmp_path, timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout)
    assert "SIGKILL" in [e.get("signame") for e in result["candidate"]["exits"]], result
    left = _libfaketime_files() - before
    assert {n for n in left if PER_PROCESS.match(n)} == set()
    assert {n for n in left if "-candidate-" in n} == set()  # the sandbox's own pair too


def test_an_interpreter_behind_a_closed_folder_is_found_closed() -> None:
    # in /dev/shm: every folder on the way is open to others (pytest's own tmp is not)
    root = Path(tempfile.mkdtemp(prefix="chaos-test-closed-", dir="/dev/shm"))
    try:
        root.chmod(0o755)
        for name, mode in (("open", 0o755), ("closed", 0o700)):
            python = root / name / "venv" / "bin" / "python"
            python.parent.mkdir(parents=True)
            python.write_text("")
            python.chmod(0o755)
            (root / name).chmod(mode)
        assert _closed_to_others(root / "open" / "venv" / "bin") is None
        assert _closed_to_others(root / "open" / "venv" / "bin" / "python") is None
        assert _closed_to_others(root / "closed" / "venv" / "bin") == root / "closed"
    finally:
        shutil.rmtree(root)


def test_a_group_pair_belongs_to_its_owner_is_registered_and_goes_with_the_block(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # what --isolation uid gives its candidate's uid (a uid of nobody's, as root)
    owner = (65534, 65534) if os.geteuid() == 0 else (os.getuid(), os.getgid())
    monkeypatch.setenv("CHAOS_REGISTRY_DIR", str(tmp_path / "registry"))
    with open_run_dir(parent=tmp_path):
        run = registry.current()
        assert run is not None
        with registry.open_faketime_shared("candidate", owner) as shared:
            sem, shm = (Path("/dev/shm") / n.lstrip("/") for n in shared.split())
            sem = sem.with_name(f"sem.{sem.name}")
            for path in (sem, shm):
                assert (path.stat().st_uid, path.stat().st_gid) == owner
                assert path.name.startswith(
                    (
                        f"faketime_shm_chaos-{run.run_id}-candidate-",
                        f"sem.faketime_sem_chaos-{run.run_id}-candidate-",
                    )
                )
                assert path in run.files  # a killed harness leaves it to the next collection
        assert not sem.exists()
        assert not shm.exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="--isolation uid needs root (CI has it)")
def test_uid_isolation_refuses_a_base_interpreter_closed_to_others_not_a_closed_environment(
    golden: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the candidate runs the base interpreter and copies of the libraries: where the
    # harness's environment lives does not matter, where the base interpreter lives does
    root = Path(tempfile.mkdtemp(prefix="chaos-test-closed-", dir="/dev/shm"))
    try:
        root.chmod(0o755)
        for name, mode in (("open", 0o755), ("closed", 0o700)):
            python = root / name / "bin" / "python3"
            python.parent.mkdir(parents=True)
            python.write_text("")
            python.chmod(0o755)
            (root / name / "lib").mkdir()
            (root / name).chmod(mode)
        program = Program.from_path(golden)
        monkeypatch.setattr(_python, "stdlib", lambda: root / "open" / "lib")
        monkeypatch.setattr(_python, "interpreter", lambda: root / "open" / "bin" / "python3")
        monkeypatch.setattr(sys, "executable", str(root / "closed" / "bin" / "python3"))
        ProcessSandbox("uid").check(program)
        monkeypatch.setattr(_python, "interpreter", lambda: root / "closed" / "bin" / "python3")
        with pytest.raises(ConfigError, match=r"cannot reach Python .* is closed to other users"):
            ProcessSandbox("uid").check(program)
    finally:
        shutil.rmtree(root)
