"""``chaos validate --jobs``: golden seeds, no-fault runs and replays side by side on warm
workers through the executor give what the sequential path gives: the same seeds, the same
traces (names, seeds, schedules), the same verdicts and outcomes (issue 22)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from chaos.cli._validate import default_jobs
from replay.trace import read_trace
from tests.doc_pack import write_doc_pack


def _validate(pack: Path, out: Path, jobs: int) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "chaos", "validate", str(pack), "--seeds", "2", "--replays", "3",
         "--jobs", str(jobs), "--json", "--out-dir", str(out)],
        capture_output=True, text=True, timeout=600, check=False, cwd=out.parent,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _same(data: Any, out: Path) -> Any:
    """The report without wall times, its folder named D."""
    if isinstance(data, dict):
        return {k: _same(v, out) for k, v in data.items() if k != "wall_s"}
    if isinstance(data, list):
        return [_same(v, out) for v in data]
    return data.replace(str(out), "D") if isinstance(data, str) else data


def test_side_by_side_gives_the_sequential_results(tmp_path: Path) -> None:
    pack = write_doc_pack(tmp_path / "tally")
    one, two = tmp_path / "one", tmp_path / "two"
    sequential = _validate(pack, one, 1)
    side_by_side = _validate(pack, two, 2)
    assert sequential["valid"] is True
    assert _same(sequential, one) == _same(side_by_side, two)
    names = sorted(p.name for p in one.iterdir())
    assert names == sorted(p.name for p in two.iterdir())
    assert "no-dedupe-seed1000.replay-3.trace" in names
    for name in names:
        a, b = read_trace(one / name), read_trace(two / name)
        assert a.header["seed"] == b.header["seed"], name
        assert a.header["variant"] == b.header["variant"], name
        assert a.schedule == b.schedule, name
        assert [v["valid"] for v in a.verdicts] == [v["valid"] for v in b.verdicts], name


def test_the_default_follows_the_cpus(monkeypatch: pytest.MonkeyPatch) -> None:
    import chaos.cli._validate as face

    monkeypatch.setattr(face, "cpu_count", lambda: 3)
    assert default_jobs() == 3
    monkeypatch.setattr(face, "cpu_count", lambda: 500)
    assert default_jobs() == 64


def test_search_and_sweep_defaults_follow_the_cpus(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    from chaos import search, warm

    monkeypatch.setattr(os, "cpu_count", lambda: 3)
    assert search.default_jobs() == 6
    assert warm.default_jobs() == 12
