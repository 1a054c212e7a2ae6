"""render_report: one self-contained HTML page for a trace and its replays (inline CSS + SVG).

::

    chaos report payments-golden-seed7.trace payments-golden-seed7.replay-1.trace -o r.html

    header        scenario, variant, seed
    side by side  status, outcome, each verdict, each fault's apply/heal time, op counts
    per trace     identity and versions, PARTIAL banner, verdicts (VIOLATED + evidence),
                  timeline SVG on the shared time axis, service events, ops, schedule

Nothing is fetched: no script, stylesheet, font or image; every trace string is escaped.
"""

from __future__ import annotations

from collections.abc import Sequence

from ground.errors import ConfigError
from replay.trace import Trace

from ._compare import compare_table
from ._css import CSS
from ._html import esc, esc_atom
from ._lanes import render_svg
from ._model import TraceView, build_view
from ._ops import value_tokens
from ._svg import Scale
from ._tables import header_block, ops_table, schedule_table, service_table, status
from ._verdicts import render_verdicts

_LEGEND = (
    '<p class="legend"><span><i class="sw" style="background:#cfe0fb"></i>fault applied → healed'
    " (dashed: never healed)</span><span>◇ instantaneous fault</span><span>○ not triggered</span>"
    "<span>▲ service start</span><span>■ exit (orange: killed as expected)</span>"
    '<span style="color:#c62828">✕ crash / dropped frame</span>'
    '<span><i class="sw" style="background:#66bb6a"></i>op ok</span>'
    '<span><i class="sw" style="background:#ef5350"></i>fail</span>'
    '<span><i class="sw" style="background:#ffb74d"></i>info (indeterminate)</span>'
    '<span><i class="sw" style="background:#e5e7eb"></i>no completion</span>'
    '<span><i class="sw" style="background:#ffd54f;border-color:#c62828"></i>'
    "op named by violated evidence</span><span>● redelivery</span></p>"
)


def _marks(view: TraceView) -> frozenset[str]:
    """The evidence strings that name at least one workload op."""
    named = set().union(*(value_tokens(op.value) for ops in view.ops.values() for op in ops))
    return view.tokens & frozenset(named)


def _section(n: int, title: str, view: TraceView, scale: Scale, ops_per_process: int) -> str:
    trace = view.trace
    violated = any(v.get("valid") is False for v in trace.verdicts)
    css = " ".join(
        ["trace", "violated" if violated else "", "partial-trace" if trace.partial else ""]
    ).strip()
    banner = f'<p class="banner">{esc(status(trace)[0])}</p>' if trace.partial else ""
    ops = "".join(ops_table(p, ops, ops_per_process) for p, ops in view.ops.items())
    return (
        f'<section class="{css}" id="trace-{n}"><h2>{esc(title, 200)}</h2>{banner}'
        f"{header_block(trace)}<h3>Verdicts</h3>{render_verdicts(trace.verdicts, _marks(view))}"
        f'<h3>Timeline</h3><div class="scroll">{render_svg(view, scale, 400)}</div>{_LEGEND}'
        f"<h3>Service events</h3>{service_table(view)}"
        f"<h3>Workload ops</h3>{ops or '<p class=none>No workload ops recorded.</p>'}"
        f"<h3>Fault schedule</h3>{schedule_table(trace.schedule)}</section>"
    )


def render_report(
    traces: Sequence[Trace], titles: Sequence[str], *, ops_per_process: int = 40
) -> str:
    """The HTML page: the first trace is the original, the rest its replays, on one time axis."""
    if not traces:
        raise ConfigError("a report needs at least one trace")
    if len(titles) != len(traces):
        raise ConfigError(f"got {len(traces)} traces but {len(titles)} titles")
    if ops_per_process < 0:
        raise ConfigError(f"ops_per_process must be >= 0, got {ops_per_process}")
    views = [build_view(trace) for trace in traces]
    ends = [v.end_ns for v in views] + [b.end_ns or 0 for v in views for b in v.faults]
    scale = Scale.covering(max(ends))
    first = traces[0].header
    what = " ".join(
        f"{label} {esc_atom(first.get(key), 80)}"
        for label, key in (("scenario", "scenario_id"), ("variant", "variant"), ("seed", "seed"))
    )
    count = f"{len(traces)} trace{'s' if len(traces) > 1 else ''}"
    sections = "".join(
        _section(n, title, view, scale, ops_per_process)
        for n, (title, view) in enumerate(zip(titles, views, strict=True))
    )
    nav = "".join(f'<a href="#trace-{n}">{esc(t, 80)}</a>' for n, t in enumerate(titles))
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>chaos report: {what}</title><style>{CSS}</style></head><body>"
        f'<header><h1>chaos report</h1><p class="sub">{what} · {count}; all timelines share '
        f'one time axis (seconds from the run start)</p><nav class="toc">{nav}</nav></header>'
        f'<section class="trace summary"><h2>Side by side</h2>{compare_table(views, list(titles))}'
        f"</section>{sections}</body></html>\n"
    )
