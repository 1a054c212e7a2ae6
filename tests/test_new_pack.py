"""``chaos new PACK [DIR]`` writes a minimal working pack that ``chaos validate`` accepts as
written, from any directory (issue 22); its templates are docs/scenarios.md's pack."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from chaos.cli._new import render
from tests.doc_pack import DOC, FILE


def _chaos(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "chaos", *args],
        capture_output=True, text=True, timeout=600, cwd=cwd, check=False,
    )  # fmt: skip


def test_the_templates_are_the_pages_pack() -> None:
    page = dict(FILE.findall(DOC.read_text(encoding="utf-8")))
    assert {name: text.rstrip("\n") for name, text in render("tally").items()} == page


def test_a_new_pack_validates_as_written_from_elsewhere(tmp_path: Path) -> None:
    done = _chaos(tmp_path, "new", "order-relay", "packs/relay")
    assert done.returncode == 0, done.stderr
    pack = tmp_path / "packs" / "relay"
    assert sorted(p.name for p in pack.iterdir()) == [
        "README.md", "checkers.py", "faults.toml", "scenario.py", "server.py",
    ]  # fmt: skip
    assert 'id = "order-relay"' in (pack / "scenario.py").read_text(encoding="utf-8")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    done = _chaos(elsewhere, "validate", str(pack), "--seeds", "2", "--replays", "2", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["scenario"] == "order-relay"
    assert report["valid"] is True
    assert report["variants"]["no-dedupe"]["status"] == "caught"


def test_a_bad_name_or_a_used_folder_is_refused(tmp_path: Path) -> None:
    done = _chaos(tmp_path, "new", "Bad Name")
    assert done.returncode == 2
    assert done.stderr.startswith("chaos: error: pack name 'Bad Name'")
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "keep.txt").write_text("mine", encoding="utf-8")
    done = _chaos(tmp_path, "new", "fine", "used")
    assert done.returncode == 2
    assert "used exists and is not an empty folder" in done.stderr
    assert sorted(p.name for p in (tmp_path / "used").iterdir()) == ["keep.txt"]
