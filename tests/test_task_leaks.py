"""``chaos task`` checks the task folder of every pack, user packs too (issue 22): a variant's
name, a line of a private README section or a line of the golden implementation in what a
candidate reads is refused, exit 2, one line naming the file, the line and what it leaks;
nothing is written."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.doc_pack import write_doc_pack

TASK = """
from chaos.scenario import TaskSpec

Tally.task = TaskSpec(service="server", summary="count adds", env=("TALLY_PORT",),
                      solution="server.py")
"""
SECRET = "The server forgets an id after exactly three hundred milliseconds."


def _pack(tmp_path: Path, readme_extra: str = "", task_extra: str = "") -> Path:
    pack = write_doc_pack(tmp_path / "tally")
    with (pack / "scenario.py").open("a", encoding="utf-8") as f:
        f.write(TASK)
    readme = (pack / "README.md").read_text(encoding="utf-8")
    readme = readme.replace("## Variants", f"<!-- private -->\n{SECRET}\n<!-- /private -->\n\n"
                            f"{readme_extra}## Variants")  # fmt: skip
    (pack / "README.md").write_text(readme, encoding="utf-8")
    (pack / "TASK.md").write_text(
        "# The server\n\nServe GET /add?id=ID and GET /state on $TALLY_PORT; print "
        f"`listening` once ready.\n{task_extra}",
        encoding="utf-8",
    )
    (pack / "starter.py").write_text("print('listening', flush=True)\n", encoding="utf-8")
    return pack


def _task(tmp_path: Path, pack: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "chaos", "task", str(pack), "-o", str(tmp_path / "out")],
        capture_output=True, text=True, timeout=120, cwd=tmp_path, env=dict(os.environ),
        check=False,
    )  # fmt: skip


def _refused(tmp_path: Path, pack: Path) -> str:
    done = _task(tmp_path, pack)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("chaos: error: task of tally: ")
    assert not (tmp_path / "out").exists()
    return lines[0]


def test_a_clean_user_pack_is_written(tmp_path: Path) -> None:
    done = _task(tmp_path, _pack(tmp_path))
    assert done.returncode == 0, done.stderr
    text = (tmp_path / "out" / "README.md").read_text(encoding="utf-8")
    assert "no-dedupe" not in text
    assert SECRET not in text


def test_a_variant_named_in_a_public_section_is_refused(tmp_path: Path) -> None:
    diagram = "## Failure modes\n\n| mode | variant |\n|---|---|\n| double count | no-dedupe |\n\n"
    line = _refused(tmp_path, _pack(tmp_path, readme_extra=diagram))
    assert "README.md line" in line
    assert "names variant 'no-dedupe'" in line
    assert "| double count | no-dedupe |" in line


def test_a_private_line_repeated_in_a_public_section_is_refused(tmp_path: Path) -> None:
    line = _refused(tmp_path, _pack(tmp_path, readme_extra=f"## Notes\n\nNote: {SECRET}\n\n"))
    assert "README.md line" in line
    assert "holds a line of a private README section" in line
    assert SECRET in line


def test_a_line_of_the_golden_is_refused(tmp_path: Path) -> None:
    pack = _pack(tmp_path, task_extra="\n    if not (DEDUPE and add_id in seen):\n")
    line = _refused(tmp_path, pack)
    assert "TASK.md line 5 holds a line of the golden implementation" in line
    assert "if not (DEDUPE and add_id in seen):" in line
