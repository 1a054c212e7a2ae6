"""``chaos grade`` and ``chaos task`` on bad input (one line, exit 2, nothing started) and
what ``chaos task`` writes (no services)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from chaos.scenario import Scenario
from chaos.task import public_spec

ROOT = Path(__file__).resolve().parents[2]


def chaos(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("CHAOS_HELDOUT_KEY_FILE", None)
    return subprocess.run(
        [sys.executable, "-m", "chaos", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=60,
    )


@pytest.fixture
def no_task_pack(tmp_path: Path) -> Path:
    pack = tmp_path / "plain"
    pack.mkdir()
    (pack / "scenario.py").write_text(
        "from chaos.scenario import Scenario\n"
        "class Plain(Scenario):\n"
        "    id = 'plain'\n"
        "    async def setup(self, ctx): ...\n"
        "    async def workload(self, ctx): ...\n"
        "    async def settled(self, ctx): return True\n"
        "    async def final_state(self, ctx): return {}\n"
        "SCENARIO = Plain()\n"
    )
    return pack


def bad_input_cases(tmp: Path, starter: Path, key: Path, pack: Path) -> list[tuple[list[str], str]]:
    not_executable = tmp / "consumer.sh"
    not_executable.write_text("#!/bin/sh\n")
    short_key = tmp / "short.key"
    short_key.write_text("abc\n")
    s = str(starter)
    return [
        (["grade", "payments", "--impl", str(tmp / "missing.py")], "No such file"),
        (["grade", "payments", "--impl", str(not_executable)], "not executable"),
        (["grade", str(pack), "--impl", s], "declares no task"),
        (["grade", "payments", "--impl", s, "--heldout-key", str(tmp / "nokey")], "bad key file"),
        (["grade", "payments", "--impl", s, "--heldout-key", str(short_key)], "at least 16"),
        (["grade", "payments", "--impl", s, "--seeds", "9-3"], "bad seed range"),
        (["grade", "payments", "--impl", s, "--seeds", "x"], "bad seeds"),
        (["grade", "payments", "--impl", s, "--public", "--heldout-key", str(key)], "neither"),
        (["grade", "payments", "--impl", s, "--heldout", "3"], "needs a held-out key"),
        (["grade", "payments", "--impl", s, "--junit", str(tmp)], "is a folder"),
        (["grade", "payments", "--impl", s, "--junit", str(tmp / "no/dir/j.xml")], "no folder"),
        (["grade", "payments", "--impl", s, "--junit", "/dev/null"], "is a character device"),
        (["grade", "payments", "--impl", s, "--limit", "cpu=1"], "bad --limit"),
        (["grade", "payments", "--impl", s, "--jobs", "0"], "--jobs"),
        (["grade", "payments", "--impl", s, "--isolation", "vm"], "--isolation"),
        (["grade", "nosuch", "--impl", s], "unknown scenario"),
        (["run", "payments", "--limit", "cpu_s=1"], "go with --impl"),
        (["task", "payments", "--format", "zip"], "--format"),
        (["task", str(pack)], "declares no task"),
        (["task", "payments", "--heldout", "3"], "go with --format harbor"),
    ]


def test_bad_input_is_one_line_and_exit_2_with_nothing_started_or_left(
    tmp_path: Path, starter: Path, key_file: Path, no_task_pack: Path
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    for args, message in bad_input_cases(tmp_path, starter, key_file, no_task_pack):
        done = chaos(*args, cwd=work)
        assert done.returncode == 2, (args, done.stderr)
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1, (args, done.stderr)
        assert lines[0].startswith("chaos: error: "), (args, done.stderr)
        assert message in lines[0], (args, lines[0])
        assert list(work.iterdir()) == [], (args, "left something behind")


def test_task_folder_holds_the_public_spec_the_interface_the_starter_and_the_self_check(
    tmp_path: Path, payments: Scenario
) -> None:
    out = tmp_path / "task"
    done = chaos("task", "payments", "-o", out, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in out.iterdir()) == ["README.md", "TASK.md", "starter.py"]
    readme = (out / "README.md").read_text()
    assert "## Invariants" in readme
    assert "## Failure modes in scope" in readme
    for private in ("## Variants", "no-idempotency", "Diagnosis path", "GoldenCharger",
                    "## The golden implementation", "ack only\nafter the commit"):  # fmt: skip
        assert private not in readme
    assert "chaos grade payments --impl ./starter.py --public" in readme
    task = (out / "TASK.md").read_text()
    assert "consumer ready" in task
    assert "| CPU time (all its processes) | 60 s |" in task
    assert os.access(out / "starter.py", os.X_OK)
    again = chaos("task", "payments", "-o", out, cwd=tmp_path)
    assert again.returncode == 2
    assert "not an empty folder" in again.stderr


def test_public_spec_drops_private_sections_blocks_and_diagnosis_paths() -> None:
    readme = (
        "# T\n\nintro\n\n## Spec\n\nkept\n\n<!-- private -->\nhidden block\n<!-- /private -->\n"
        "more\n\n## The golden way\n\nsecret\n\n### detail\n\nsecret too\n\n## Variants\n\n"
        "### v1\n\n**Diagnosis path:** secret\n\n## After\n\n```\n## not a heading\n```\n\n"
        "kept too\n\n**Diagnosis path:** elsewhere\n"
    )
    text = public_spec(readme, ("the golden", "Variants"))
    assert "kept" in text
    assert "kept too" in text
    assert "## After" in text
    assert "more" in text
    assert "## not a heading" in text
    for gone in ("secret", "hidden block", "Diagnosis", "## Variants", "golden"):
        assert gone not in text


def test_harbor_task_has_the_format_and_keeps_the_key_with_the_tests(
    tmp_path: Path, key_file: Path
) -> None:
    out = tmp_path / "harbor"
    done = chaos("task", "payments", "--format", "harbor", "-o", out, "--heldout", "7",
                 "--heldout-key", key_file, cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    config = tomllib.loads((out / "task.toml").read_text())
    assert config["task"]["name"] == "chaos-harness/payments"
    assert config["verifier"]["user"] == "root"
    assert config["agent"]["user"] == "agent"
    assert config["environment"]["cpus"] == 2
    assert config["environment"]["memory_mb"] == 4096
    assert config["verifier"]["timeout_sec"] >= 7 * 300
    assert config["metadata"]["heldout_seeds"] == 7
    key = out / "tests" / "heldout.key"
    assert key.read_text().strip() == key_file.read_text().strip()
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    instruction = (out / "instruction.md").read_text()
    assert "/app/consumer.py" in instruction
    assert "consumer ready" in instruction
    for private in ("no-idempotency", "Diagnosis path", key_file.read_text().strip()):
        assert private not in instruction
    for public_file in (out / "instruction.md", *(out / "environment").rglob("*.md")):
        assert key_file.read_text().strip() not in public_file.read_text()
    dockerfile = (out / "environment" / "Dockerfile").read_text()
    assert "pip install" in dockerfile
    assert "COPY --chown=agent:agent workspace/ /app/" in dockerfile
    harness = out / "environment" / "chaos-harness"
    assert (harness / "scenarios" / "payments" / "scenario.py").is_file()
    assert (out / "environment" / "workspace" / "consumer.py").is_file()
    assert os.access(out / "tests" / "test.sh", os.X_OK)
    assert (out / "solution" / "consumer" / "main.py").is_file()
    assert not (out / "solution" / "consumer" / "scenarios" / "payments" / "checkers").exists()
    assert "--heldout-key" in (out / "tests" / "test.sh").read_text()
