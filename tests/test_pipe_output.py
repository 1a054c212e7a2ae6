"""Long commands speak on a pipe and their tables read at 80 columns (issue 22): validate,
sweep and search print plain progress lines on stderr when it is not a terminal, and what
they print on stdout keeps within 80 columns where it is a table."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

from rich.console import Console
from rich.progress import Progress

from chaos.cli._exec import Bar
from chaos.cli._out import plain_progress
from tests.doc_pack import write_doc_pack

BOX = set("┏┃┡│└┗━─┓┩┛┘")


def _piped(tmp_path: Path, *args: str, ok: tuple[int, ...] = (0,)) -> tuple[str, str]:
    done = subprocess.run(
        [sys.executable, "-m", "chaos", *args],
        capture_output=True,  # stdout and stderr are pipes, not terminals
        text=True,
        timeout=600,
        cwd=tmp_path,
        env={**os.environ, "COLUMNS": "80", "TERM": "xterm"},
        check=False,
    )
    assert done.returncode in ok, done.stderr
    for line in done.stdout.splitlines():
        if BOX & set(line):
            assert len(line) <= 80, line
    return done.stdout, done.stderr


def test_validate_prints_a_line_per_run_and_narrow_tables(tmp_path: Path) -> None:
    pack = write_doc_pack(tmp_path / "tally")
    out, err = _piped(tmp_path, "validate", str(pack), "--seeds", "2", "--replays", "2")
    for step in ("golden seed 1000", "golden seed 1001", "no-dedupe: no fault injected",
                 "no-dedupe seed 1000", "no-dedupe: replaying seed 1000 x2"):  # fmt: skip
        assert step in err, err
    assert err.startswith("chaos validate tally [")
    assert "  no-dedupe: caught (declared: counted_once)" in out
    assert "fidelity: 2/2 (need 2)" in out


def test_sweep_and_search_speak_on_a_pipe(tmp_path: Path) -> None:
    pack = write_doc_pack(tmp_path / "tally")
    _out, err = _piped(tmp_path, "sweep", str(pack), "--seeds", "0-1", "--json", ok=(0, 1))
    assert "1/2 runs: held" in err, err
    assert "2/2 runs: held" in err, err
    _out, err = _piped(
        tmp_path, "search", str(pack), "--variant", "no-dedupe", "--max-examples", "4",
        "--jobs", "2", ok=(0, 1),
    )  # fmt: skip
    assert "chaos search tally --variant no-dedupe --space variant --seed 0 --jobs 2 [" in err


def test_plain_progress_prints_each_step_once() -> None:
    lines: list[str] = []
    say = plain_progress("chaos validate x", lines.append)
    for message in ("golden seed 1", "golden seed 1: setup", "golden seed 1: workload",
                    "golden seed 2", "golden seed 2: setup"):  # fmt: skip
        say(message)
    assert [line.split(": ", 1)[1] for line in lines] == ["golden seed 1", "golden seed 2"]


def test_a_bar_on_a_pipe_prints_every_run() -> None:
    console = Console(file=io.StringIO(), force_terminal=False, width=80)
    with Progress(console=console) as progress:
        bar = Bar(progress, 2)
        bar.advance("held")
        bar.advance("violated")
    assert isinstance(console.file, io.StringIO)
    text = console.file.getvalue()
    assert "1/2 runs: held" in text
    assert "2/2 runs: violated" in text
