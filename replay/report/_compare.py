"""The side-by-side table: status, verdicts, fault timings and op counts of every trace."""

from __future__ import annotations

from replay.trace.text import seconds

from ._html import esc
from ._model import TraceView
from ._tables import outcome, status
from ._verdicts import verdict_label


def _verdict_cells(views: list[TraceView], name: str) -> list[str]:
    cells = []
    for view in views:
        found = [v for v in view.trace.verdicts if v.get("name") == name]
        if not found:
            cells.append('<span class="dim">not recorded</span>')
            continue
        text, css = verdict_label(found[0].get("valid"))
        cells.append(f'<span class="badge {css}">{text}</span>')
    return cells


def _fault_cells(views: list[TraceView], fault_id: str) -> list[str]:
    cells = []
    for view in views:
        bars = [b for b in view.faults if b.fault_id == fault_id]
        marks = [m for m in view.fault_marks if m.fault_id == fault_id]
        if bars:
            cells.append(
                "<br>".join(
                    f"{esc(b.kind, 40)} {seconds(b.start_ns)} → "
                    + (seconds(b.end_ns) if b.end_ns is not None else "never healed")
                    for b in bars
                )
            )
        elif marks:
            cells.append(f'<span class="dim">{esc(marks[0].label, 80)}</span>')
        else:
            cells.append('<span class="dim">not applied</span>')
    return cells


def _row(label: str, cells: list[str]) -> str:
    tds = "".join(
        f'<td class="{"diff" if n and cell != cells[0] else ""}">{cell}</td>'
        for n, cell in enumerate(cells)
    )
    return f"<tr><th>{label}</th>{tds}</tr>"


def compare_table(views: list[TraceView], titles: list[str]) -> str:
    """One column per trace; cells that differ from the first trace's are marked."""
    head = "".join(
        f'<th><a href="#trace-{n}">{esc(title, 80)}</a></th>' for n, title in enumerate(titles)
    )
    rows = [
        _row("status", [esc(status(v.trace)[0]) for v in views]),
        _row("outcome", [outcome(v.trace) for v in views]),
    ]
    names = dict.fromkeys(str(v.get("name")) for view in views for v in view.trace.verdicts)
    rows += [_row(esc(name, 60), _verdict_cells(views, name)) for name in list(names)[:50]]
    fault_ids = {b.fault_id for view in views for b in view.faults}
    fault_ids |= {m.fault_id for view in views for m in view.fault_marks}
    ordered = sorted(fault_ids - {""}, key=lambda fid: (len(fid), fid))
    rows += [_row(f"fault {esc(fid, 40)}", _fault_cells(views, fid)) for fid in ordered[:50]]
    processes = dict.fromkeys(p for view in views for p in view.ops)
    for process in list(processes)[:20]:
        counts = [str(len(v.ops.get(process, []))) for v in views]
        rows.append(_row(f"ops of {esc(process, 40)}", counts))
    return (
        f'<table class="compare"><thead><tr><th></th>{head}</tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table>"
    )
