"""Which sandbox a graded trace's replay runs its candidate in, and the one-line refusals
(the replays themselves run in tests/grading/test_packs.py and test_container_packs.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from chaos.replay import _candidate
from chaos.sandbox.candidate import Program
from chaos.scenario import load_scenario
from ground.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
STARTER = ROOT / "scenarios" / "payments" / "starter.py"


def _recorded(sandbox: str) -> dict[str, object]:
    program = Program.from_path(STARTER)
    return {"service": "consumer", "path": str(STARTER), "sha256": program.sha256,
            "limits": None, "isolation": None, "sandbox": sandbox}  # fmt: skip


def test_a_sandbox_the_harness_does_not_know_is_refused_in_one_line() -> None:
    with pytest.raises(ConfigError, match=r"a sandbox this harness does not know \('vm'"):
        _candidate(load_scenario("payments"), _recorded("vm"))


def test_a_docker_graded_trace_replays_in_the_docker_sandbox_or_says_why_not() -> None:
    """Without a daemon (or root) the replay refuses before anything starts, in one line."""
    code = (
        "import sys\n"
        "from ground.errors import ConfigError\n"
        "from chaos.scenario import load_scenario\n"
        "from chaos.replay import _candidate\n"
        "from tests.grading.test_replay_sandbox import _recorded\n"
        "try:\n"
        "    c = _candidate(load_scenario('payments'), _recorded('docker'))\n"
        "except ConfigError as exc:\n"
        "    print('refused', exc); sys.exit(2)\n"
        "print('sandbox', c.sandbox.name)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT), "DOCKER_HOST": "unix:///nonexistent/docker.sock"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, timeout=120)  # fmt: skip
    assert done.returncode == 2, (done.stdout, done.stderr)
    (line,) = done.stdout.strip().splitlines()
    assert line.startswith("refused cannot replay the graded run in the docker sandbox: ")
    assert ("no Docker daemon at unix:///nonexistent/docker.sock" in line) or (
        os.geteuid() != 0 and "needs the harness to run as root" in line
    )
