"""``chaos report``: a trace and its replays as one self-contained HTML file."""

from __future__ import annotations

import re
from pathlib import Path

from ground._paths import check_out_file, replace_file
from ground.errors import ConfigError

_REPLAY_N = re.compile(r"\.replay-(\d+)$")


def default_out(trace: Path) -> Path:
    """``traces/x.trace`` -> ``traces/x.report.html`` (beside the original)."""
    if trace.name in ("", ".", ".."):  # (found by the CLI fuzz: `chaos report ''`)
        raise ConfigError(f"trace {str(trace)!r} is not a trace file path")
    return trace.with_name(f"{trace.stem}.report.html")


def titles_for(paths: list[Path]) -> list[str]:
    """Page titles: original: NAME for the first trace, replay N: NAME for the others."""
    titles = [f"original: {paths[0].name}"]
    for n, path in enumerate(paths[1:], 1):
        found = _REPLAY_N.search(path.stem)
        titles.append(f"replay {found.group(1) if found else n}: {path.name}")
    return titles


def check_out(out: Path) -> None:
    """Refuse an ``-o`` that is not a regular file or a new path (a folder, a device, a FIFO),
    or that is a trace (never overwrite a trace with a page)."""
    from replay.trace import is_trace_file

    check_out_file(out, "-o", "report", make_folders=False)
    if is_trace_file(out):
        raise ConfigError(f"-o {out} is a chaos trace; refusing to overwrite it with a report")


def write_report(out: Path, page: str) -> None:
    """Write ``page`` to ``out`` whole or not at all (a full disk: exit 3, ``out`` as it was)."""
    check_out(out)
    replace_file(out, page, "-o")


def report_command(trace: Path, replays: list[Path], out: Path | None) -> Path:
    """Read every trace (TraceError on a bad one), render, write; print and return the path."""
    from chaos.cli._replay import note_unfinished
    from replay.report import render_report
    from replay.trace import read_trace

    target = out if out is not None else default_out(trace)
    check_out(target)
    paths = [trace, *replays]
    traces = [read_trace(path) for path in paths]
    note_unfinished(trace)
    write_report(target, render_report(traces, titles_for(paths)))
    print(target, flush=True)
    return target
