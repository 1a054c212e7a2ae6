"""A fault space naming what a variant lacks is refused before anything starts (issue 22):
``Scenario.absent`` says what each variant lacks of the golden system, and every command that
takes a space (search, sweep, validate, grade, run --schedule) refuses, exit 2, one line,
no run dir made, nothing started."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from chaos.scenario import load_scenario
from faults.schedule import generate
from tests.doc_pack import write_doc_pack

ABSENT = '\nTally.absent = {"no-dedupe": ("client-server",)}\n'

TASK = """
from chaos.scenario import TaskSpec

Tally.task = TaskSpec(service="server", summary="count adds", env=("TALLY_PORT",))
Tally.absent = {"golden": ("client-server",)}
"""


def _pack(tmp_path: Path, extra: str = ABSENT) -> Path:
    pack = write_doc_pack(tmp_path / "tally")
    with (pack / "scenario.py").open("a", encoding="utf-8") as f:
        f.write(extra)
    (pack / "TASK.md").write_text("# the server\n", encoding="utf-8")
    (pack / "starter.py").write_text("print('listening', flush=True)\n", encoding="utf-8")
    return pack


def _refused(tmp_path: Path, *args: str) -> str:
    runs = tmp_path / "runs"
    runs.mkdir(exist_ok=True)
    done = subprocess.run(
        [sys.executable, "-m", "chaos", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env={**os.environ, "CHAOS_RUN_DIR": str(runs)},
        check=False,
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("chaos: error: ")
    assert "'client-server'" in lines[0], lines[0]
    assert list(runs.iterdir()) == []  # nothing started
    assert not (tmp_path / "traces").exists()  # nothing written
    return lines[0]


def test_search_refuses_the_golden_space_on_a_variant_lacking_its_link(tmp_path: Path) -> None:
    pack = _pack(tmp_path)
    line = _refused(tmp_path, "search", str(pack), "--variant", "no-dedupe", "--space", "golden")
    assert "variant 'no-dedupe'" in line
    assert "Scenario.absent" in line


def test_sweep_refuses_a_variant_whose_own_table_names_what_it_lacks(tmp_path: Path) -> None:
    pack = _pack(tmp_path)
    line = _refused(tmp_path, "sweep", str(pack), "--variant", "no-dedupe", "--seeds", "0-1")
    assert "[no-dedupe] names link 'client-server'" in line


def test_validate_refuses_before_the_first_run(tmp_path: Path) -> None:
    pack = _pack(tmp_path)
    line = _refused(tmp_path, "validate", str(pack), "--seeds", "1")
    assert "[no-dedupe] names link 'client-server'" in line


def test_run_refuses_a_schedule_naming_what_the_variant_lacks(tmp_path: Path) -> None:
    pack = _pack(tmp_path, "")  # the schedule is drawn before the pack says what it lacks
    schedule = generate(load_scenario(str(pack)).fault_space("golden"), 3)
    assert schedule.events
    file = tmp_path / "schedule.json"
    file.write_text(json.dumps(schedule.to_dict()), encoding="utf-8")
    with (pack / "scenario.py").open("a", encoding="utf-8") as f:
        f.write('\nTally.absent = {"no-dedupe": ("client-server",)}\n'
                'Tally.catches = {}\nTally.signals = {}\n')  # fmt: skip
    (pack / "faults.toml").write_text(
        (pack / "faults.toml").read_text(encoding="utf-8").split("# Its one fault")[0]
        + '[no-dedupe]\nhorizon_s = 3.0\nmin_events = 1\nmax_events = 1\nservices = ["server"]\n'
        + '[[no-dedupe.templates]]\nkind = "pause"\nduration_s = [0.1, 0.2]\n'
        + 'triggers = [{ type = "at_time", offset_s = [0.0, 1.0] }]\n',
        encoding="utf-8",
    )
    line = _refused(
        tmp_path, "run", str(pack), "--variant", "no-dedupe", "--schedule", str(file)
    )
    assert "variant 'no-dedupe' of scenario tally has no link 'client-server'" in line


def test_grade_refuses_a_golden_space_naming_what_golden_lacks(tmp_path: Path) -> None:
    pack = _pack(tmp_path, TASK)
    line = _refused(tmp_path, "grade", str(pack), "--impl", str(pack / "starter.py"))
    assert "[golden] names link 'client-server'" in line
