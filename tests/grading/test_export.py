"""What a candidate can read never holds the golden implementation, a variant or the key.

For every built-in pack: the task folder (``chaos task``) and the parts of a Harbor export
the agent sees (``instruction.md``, ``environment/``: the image's workspace and its copy of
the harness) are searched for the variants' names, the golden implementation's source and
the held-out key; the golden is in ``solution/`` only, the whole pack in ``tests/`` only.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from chaos.harbor import write_harbor
from chaos.scenario import load_scenario
from chaos.task import private_files, public_pack, write_task_folder

ROOT = Path(__file__).resolve().parents[2]
PACKS = ("payments", "tenants", "leases")
KEY = b"a1b2c3d4e5f6a7b8c9d0e1f2a3b4c5d6e7f8a9b0c1d2e3f4a5b6c7d8e9f0a1b2"


def _texts(folder: Path) -> dict[Path, str]:
    return {
        p: p.read_text(errors="replace")
        for p in folder.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }


def _golden_lines(pack: str) -> set[str]:
    """Lines only the pack's private files hold: in none of its other files, nor in the
    harness (long enough to be the implementation's own)."""
    scenario = load_scenario(pack)
    private = private_files(scenario)
    others = [p for p in scenario.path.rglob("*.py") if p.resolve() not in set(private)]
    for package in ("ground", "chaos", "faults", "replay", "invariants"):
        others += list((ROOT / package).rglob("*.py"))
    public = "\n".join(p.read_text() for p in others)
    lines = set()
    for file in private:
        for line in file.read_text().splitlines():
            text = line.strip()
            if len(text) >= 30 and text not in public and not text.startswith("#"):
                lines.add(text)
    return lines


def _variant_names(pack: str) -> list[str]:
    return [v for v in load_scenario(pack).variants if v != "golden"]


@pytest.mark.parametrize("pack", PACKS)
def test_private_files_are_the_golden_implementation_only(pack: str) -> None:
    scenario = load_scenario(pack)
    assert scenario.task is not None
    assert scenario.task.solution is not None
    names = {p.name for p in private_files(scenario)}
    assert scenario.task.solution in names
    assert "variants.py" in names
    assert "scenario.py" not in names
    assert not any(p.is_relative_to(scenario.path / "checkers") for p in private_files(scenario))
    assert len(_golden_lines(pack)) > 20


@pytest.mark.parametrize("pack", PACKS)
def test_the_task_folder_holds_no_variant_and_no_golden_source(pack: str, tmp_path: Path) -> None:
    files = write_task_folder(load_scenario(pack), tmp_path / "task")
    assert sorted(p.name for p in files) == ["README.md", "TASK.md", "starter.py"]
    golden = _golden_lines(pack)
    for path, text in _texts(tmp_path / "task").items():
        for variant in _variant_names(pack):
            assert variant not in text, (path, variant)
        assert "Diagnosis path" not in text, path
        assert not [line for line in golden if line in text], path


@pytest.mark.parametrize("pack", PACKS)
def test_what_the_agent_sees_of_a_harbor_task_leaks_nothing(pack: str, tmp_path: Path) -> None:
    scenario = load_scenario(pack)
    out = tmp_path / "harbor"
    write_harbor(scenario, out, heldout=3, key=KEY)
    golden = _golden_lines(pack)
    key = KEY.decode()
    seen = {out / "instruction.md": (out / "instruction.md").read_text(),
            **_texts(out / "environment")}  # fmt: skip
    for path, text in seen.items():
        assert key not in text, path
        leaked = [line for line in golden if line in text]
        assert leaked == [], (path, leaked[:3])
    for path, text in {out / "instruction.md": seen[out / "instruction.md"],
                       **_texts(out / "environment" / "workspace")}.items():  # fmt: skip
        for variant in _variant_names(pack):
            assert variant not in text, (path, variant)
        assert "Diagnosis path" not in text, path
    pack_copy = out / "environment" / "chaos-harness" / "scenarios" / pack
    assert sorted(p.name for p in (out / "environment" / "chaos-harness" / "scenarios").iterdir()) \
        == sorted(["__init__.py", "py.typed", pack])  # fmt: skip
    for private in private_files(scenario):
        assert not (pack_copy / private.relative_to(scenario.path)).exists()
        assert (out / "tests" / "harness" / "scenarios" / pack
                / private.relative_to(scenario.path)).is_file()  # fmt: skip
    for variant in _variant_names(pack):
        assert variant not in (pack_copy / "README.md").read_text()
        assert variant not in (pack_copy / "faults.toml").read_text()
    # the golden is in solution/ only
    solution = "\n".join(_texts(out / "solution").values())
    assert [line for line in golden if line in solution]
    assert key in (out / "tests" / "heldout.key").read_text()
    verifier = (out / "tests" / "test.sh").read_text()
    assert 'PYTHONPATH="$here/harness' in verifier
    # nothing of the agent's folders on the verifier's sys.path, nothing of its left running
    assert 'cd "$here"\npython3 -P -m chaos grade' in verifier
    assert 'python3 -I "$here/stop_agent.py" agent' in verifier
    assert (out / "tests" / "stop_agent.py").is_file()


@pytest.mark.parametrize("pack", PACKS)
def test_the_image_pack_loads_with_the_golden_variant_only(pack: str, tmp_path: Path) -> None:
    harness = tmp_path / "harness"
    public_pack(load_scenario(pack), harness / "scenarios" / pack)
    (harness / "scenarios" / "__init__.py").write_text("")
    for package in ("ground", "chaos", "faults", "replay", "invariants"):
        shutil.copytree(ROOT / package, harness / package,
                        ignore=shutil.ignore_patterns("__pycache__"))  # fmt: skip
    code = (
        f"import chaos.scenario as s, json; sc = s.load_scenario({pack!r}); "
        "print(json.dumps([str(sc.path), list(sc.variants), sc.task.service]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(harness)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert '["golden"]' in done.stdout
    assert str(tmp_path / "harness" / "scenarios" / pack) in done.stdout
