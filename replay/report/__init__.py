"""Renderers of traces: the HTML report (``chaos report``) and the text timeline (``chaos show``).

::

    Trace ──► _model.build_view ──► TraceView ──► _page.render_report ──► one HTML page
                  (fault bars, markers,           ├─ _compare    side-by-side table
                   ops, phases)                   ├─ _tables     identity, schedule, services, ops
                                                  ├─ _verdicts   verdicts and marked evidence
                                                  └─ _lanes      timeline SVG (on _svg's scale)
    Trace ──► _timeline.render_timeline ──► plain text (fault spans from _spans)

Renderers read traces; they never run anything. Times are shown with
``replay.trace.text.seconds``.
"""

from __future__ import annotations

from ._page import render_report
from ._spans import FaultSpan, fault_spans
from ._timeline import render_timeline

__all__ = ["FaultSpan", "fault_spans", "render_report", "render_timeline"]
