"""Fixtures of the grading tests: real candidates (the golden consumer made self-contained,
the no-idempotency variant, the starter, adversaries) and a check that nothing is left."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest

from chaos.sandbox._uids import SLOTS, UID_BASE
from chaos.scenario import Scenario, load_scenario
from chaos.task import bundle_program

CANDIDATES = Path(__file__).resolve().parent / "candidates"
PAYMENTS = load_scenario("payments")


@pytest.fixture(scope="session")
def payments() -> Scenario:
    return PAYMENTS


@pytest.fixture(scope="session")
def golden(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The golden consumer as a candidate: a folder that carries its own modules."""
    out = tmp_path_factory.mktemp("golden") / "consumer"
    return bundle_program(PAYMENTS, out)


@pytest.fixture(scope="session")
def no_idempotency(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("no-idempotency") / "consumer"
    return bundle_program(PAYMENTS, out, env_defaults={"VARIANT": "no-idempotency"})


@pytest.fixture(scope="session")
def starter() -> Path:
    return PAYMENTS.path / "starter.py"


@pytest.fixture(scope="session")
def dial_direct(tmp_path_factory: pytest.TempPathFactory, golden: Path) -> Path:
    """The adversary that skips its links: dial_direct.py as main.py, the golden beside it."""
    out = tmp_path_factory.mktemp("dial-direct") / "candidate"
    shutil.copytree(golden, out / "golden")
    (out / "golden" / "main.py").unlink()
    shutil.copyfile(CANDIDATES / "dial_direct.py", out / "main.py")
    return out


@pytest.fixture
def key_file(tmp_path: Path) -> Path:
    key = tmp_path / "heldout.key"
    key.write_text("0123456789abcdef0123456789abcdef\n")
    key.chmod(0o600)
    return key


def candidate_processes() -> list[str]:
    """Processes of any sandbox uid, as "pid uid cmdline"."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            status = Path(f"/proc/{name}/status").read_text()
        except OSError:
            continue
        match = re.search(r"^Uid:\s+(\d+)", status, re.M)
        if match and UID_BASE <= int(match.group(1)) < UID_BASE + SLOTS:
            found.append(f"{name} {match.group(1)}")
    return found


def leftovers() -> list[str]:
    """What a finished grade must not leave: candidate processes, sandbox folders and
    mounts, cgroups, files owned by a sandbox uid in the shared temp folders."""
    found = [f"process {p}" for p in candidate_processes()]
    for parent in (Path("/dev/shm"), Path("/tmp")):
        found += [f"folder {p}" for p in parent.glob("chaos-sandbox-*")]
        for path in parent.iterdir():
            try:
                uid = path.lstat().st_uid
            except OSError:
                continue
            if UID_BASE <= uid < UID_BASE + SLOTS:
                found.append(f"file {path} of uid {uid}")
    mounts = Path("/proc/self/mountinfo").read_text()
    found += [f"mount {line.split()[4]}" for line in mounts.splitlines() if "chaos-sandbox" in line]
    for root in Path("/sys/fs/cgroup").glob("*"):
        found += [f"cgroup {p}" for p in root.rglob("chaos-*") if p.is_dir()]
    return found
