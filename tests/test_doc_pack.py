"""docs/scenarios.md's example pack, in a folder outside the project, used from elsewhere.

The pack is copied out of the page itself: if the page's example stops working with the
harness, these tests fail.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from chaos.context import RunContext
from chaos.scenario import load_scenario, pack_package
from ground.errors import ConfigError
from invariants import REGISTRY
from tests.doc_pack import write_doc_pack

ROOT = Path(__file__).resolve().parent.parent


def test_the_page_holds_the_whole_pack(tmp_path: Path) -> None:
    pack = write_doc_pack(tmp_path / "tally")
    assert sorted(p.name for p in pack.iterdir()) == [
        "README.md", "checkers.py", "faults.toml", "scenario.py", "server.py",
    ]  # fmt: skip
    assert not pack.resolve().is_relative_to(ROOT)


def test_a_folder_pack_imports_as_a_package_and_registers_its_checkers(tmp_path: Path) -> None:
    pack = write_doc_pack(tmp_path / "tally")
    scenario = load_scenario(str(pack))
    assert scenario.id == "tally"
    assert scenario.path == pack.resolve()
    assert not scenario.builtin
    assert scenario.source == str(pack.resolve())
    assert "counted_once" in REGISTRY["tally"]
    assert [c.name for c in scenario.checkers()] == ["counted_once"]
    # Loading it again (another spelling of the same folder) is the same module: harmless.
    again = load_scenario(str(tmp_path / "." / "tally"))
    assert again is scenario
    assert f"{pack_package(pack)}.checkers" in sys.modules
    for variant in scenario.variants:
        assert scenario.fault_space(variant).max_events >= 1


def test_pack_program_is_an_absolute_argv_and_names_a_missing_file(tmp_path: Path) -> None:
    pack = write_doc_pack(tmp_path / "tally")
    scenario = load_scenario(str(pack))
    ctx = RunContext.__new__(RunContext)
    ctx.scenario = scenario
    assert ctx.pack_program("server.py", "--x") == [
        sys.executable, str(pack.resolve() / "server.py"), "--x",
    ]  # fmt: skip
    with pytest.raises(ConfigError, match=str(pack.resolve() / "nosuch.py")):
        ctx.pack_program("nosuch.py")


def test_a_missing_folder_names_the_path_it_looked_for(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=str(tmp_path / "gone" / "scenario.py")):
        load_scenario(str(tmp_path / "gone"))


def test_a_pack_that_fails_to_import_is_one_line_naming_the_file(tmp_path: Path) -> None:
    pack = write_doc_pack(tmp_path / "broken")
    (pack / "checkers.py").write_text("raise RuntimeError('boom')\n")
    with pytest.raises(ConfigError, match=r"checkers.py:1: RuntimeError: boom"):
        load_scenario(str(pack))


def chaos(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "chaos", *args],
        cwd=cwd, capture_output=True, text=True, timeout=600,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip


@pytest.mark.slow
def test_run_replay_sweep_and_validate_from_another_directory(tmp_path: Path) -> None:
    pack = write_doc_pack(tmp_path / "packs" / "tally")
    here = tmp_path / "work"
    elsewhere = tmp_path / "elsewhere"
    here.mkdir()
    elsewhere.mkdir()

    golden = chaos(here, "run", str(pack), "--seed", "1", "--json")
    assert golden.returncode == 0, golden.stderr
    assert json.loads(golden.stdout)["held"] is True

    quiet = chaos(here, "run", str(pack), "--variant", "no-dedupe", "--no-faults", "--json")
    assert quiet.returncode == 0, quiet.stderr
    assert json.loads(quiet.stdout)["schedule"]["events"] == []

    broken = chaos(here, "run", "../packs/tally", "--variant", "no-dedupe", "--seed", "1",
                   "--json")  # fmt: skip
    assert broken.returncode == 1, broken.stderr
    trace = here / json.loads(broken.stdout)["trace"]
    shown = chaos(elsewhere, "show", str(trace))
    assert f"pack {pack.resolve()}" in shown.stdout
    assert "counted_once  VIOLATED" in shown.stdout

    replayed = chaos(elsewhere, "replay", str(trace), "--json")
    assert replayed.returncode == 0, replayed.stderr
    assert json.loads(replayed.stdout)["fidelity"] == 1.0

    sweep = chaos(elsewhere, "sweep", str(pack), "--seeds", "0-1", "--jobs", "1", "--json")
    assert sweep.returncode == 0, sweep.stderr

    validated = chaos(elsewhere, "validate", str(pack), "--seeds", "2", "--replays", "2",
                      "--json")  # fmt: skip
    assert validated.returncode == 0, validated.stderr + validated.stdout
    report = json.loads(validated.stdout)
    assert report["valid"] is True
    variant = report["variants"]["no-dedupe"]
    assert variant["no_faults"]["verdicts"] == {"counted_once": True}
    assert [s["found"] for s in variant["signals"]] == [True, True]

    moved = tmp_path / "moved"
    shutil.move(pack, moved)
    lost = chaos(elsewhere, "replay", str(trace))
    assert lost.returncode == 2
    assert lost.stderr.count("chaos: error:") == 1
    assert str(pack / "scenario.py") in lost.stderr
    assert "--scenario" in lost.stderr
    found = chaos(elsewhere, "replay", str(trace), "--scenario", str(moved))
    assert found.returncode == 0, found.stderr
