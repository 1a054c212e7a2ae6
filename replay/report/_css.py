"""The report's inline stylesheet (system fonts only, nothing fetched)."""

from __future__ import annotations

CSS = """
:root { --red: #c62828; --green: #2e7d32; --amber: #b26a00; --ink: #1d2433; --dim: #6b7280; }
* { box-sizing: border-box; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif;
  color: var(--ink); margin: 0; padding: 20px 28px 40px; background: #f6f7f9; }
h1 { font-size: 22px; margin: 0 0 4px; }
h2 { font-size: 18px; margin: 0 0 10px; }
h3 { font-size: 14px; margin: 18px 0 6px; text-transform: uppercase; letter-spacing: .04em;
  color: #374151; }
.sub, .dim { color: var(--dim); }
section.trace { background: #fff; border: 1px solid #d9dce3; border-radius: 8px;
  padding: 16px 20px; margin: 18px 0; }
section.trace.violated { border-left: 6px solid var(--red); }
section.trace.partial-trace { border-top: 4px dashed var(--amber); }
table { border-collapse: collapse; }
table.meta th { text-align: left; padding: 1px 14px 1px 0; color: var(--dim); font-weight: 500; }
table.meta td { padding: 1px 0; }
table.grid, table.verdicts, table.compare { width: 100%; font-size: 13px; background: #fff; }
.grid th, .grid td, .verdicts th, .verdicts td, .compare th, .compare td {
  border: 1px solid #e3e5ea; padding: 3px 8px; text-align: left; vertical-align: top; }
thead th { background: #eef0f4; }
td.t { font-variant-numeric: tabular-nums; white-space: nowrap; }
.compare td.diff { background: #fff4cc; }
.badge { display: inline-block; padding: 0 7px; border-radius: 9px; font-weight: 700;
  font-size: 12px; white-space: nowrap; }
.badge.held, .badge.complete { background: #e3f3e5; color: var(--green); }
.badge.violated { background: var(--red); color: #fff; }
.badge.unknown, .badge.partial { background: #fff0d6; color: var(--amber); }
tr.verdict.violated td { background: #fdecec; }
tr.verdict.violated td.name { font-weight: 700; color: var(--red); }
.evidence { margin-top: 4px; padding: 4px 8px; border-left: 3px solid var(--red);
  background: #fff7f7; font-family: ui-monospace, "DejaVu Sans Mono", monospace; font-size: 12px; }
tr.held .evidence { border-left-color: #cfd3da; background: #fafafa; }
ul.ev { margin: 0; padding-left: 16px; }
.key { color: #4b5563; }
mark { background: #ffd54f; padding: 0 2px; border-radius: 2px; }
.banner { padding: 8px 12px; border-radius: 6px; background: #fff0d6; color: #6d4200;
  font-weight: 600; margin: 8px 0; }
.scroll { overflow-x: auto; }
svg.timeline { display: block; max-width: 100%; height: auto; background: #fff; }
svg text { font: 11px system-ui, "DejaVu Sans", sans-serif; fill: var(--ink); }
svg .group { font-weight: 700; text-transform: uppercase; fill: #374151; }
svg .lane .bg { fill: #f8f9fb; } svg .lane.odd .bg { fill: #f1f3f6; }
svg .lanelabel { font-weight: 600; }
svg .none { fill: var(--dim); font-style: italic; }
svg .axis, svg .tick { stroke: #6b7280; } svg .ticklabel { text-anchor: middle; fill: #4b5563; }
svg .phase line { stroke: #8b93a1; stroke-dasharray: 3 3; }
svg .phase text { fill: #4b5563; font-size: 10px; }
svg .fault rect { fill: #cfe0fb; stroke: #3b6fc4; stroke-width: 1.2; }
svg .fault.open rect { stroke-dasharray: 5 3; }
svg .fault text { font-weight: 600; }
svg .k-partition rect { fill: #f9d0d0; stroke: #b3261e; }
svg .k-latency rect, svg .k-bandwidth rect,
svg .k-slow_close rect { fill: #fde7c2; stroke: #a05a00; }
svg .k-reset_peer rect { fill: #f6d5e8; stroke: #9c2770; }
svg .k-redeliver rect, svg .k-duplicate_publish rect { fill: #e2d9f7; stroke: #5b3cc4; }
svg .k-crash rect, svg .k-pause rect { fill: #d9d9d9; stroke: #333; }
svg .k-clock_skew rect { fill: #d3f0ec; stroke: #11766b; }
svg .life { stroke: #a7c7a9; stroke-width: 6; stroke-linecap: round; }
svg .mk path, svg .mk rect, svg .mk circle { stroke-width: 2; }
svg .mk.start path { fill: var(--green); stroke: var(--green); }
svg .mk.exit rect { fill: #6b7280; stroke: #6b7280; }
svg .mk.killed rect { fill: var(--amber); stroke: var(--amber); }
svg .mk.crash path, svg .mk.dropped path { stroke: var(--red); fill: none; }
svg .mk.crash text { fill: var(--red); font-weight: 700; }
svg .mk.instant path { fill: #5b3cc4; stroke: #5b3cc4; }
svg .mk.not-triggered circle { fill: #fff; stroke: #9ca3af; }
svg .mk.not-triggered text { fill: var(--dim); }
svg .mk.dup path { stroke: #5b3cc4; fill: none; }
svg .mk.redelivered circle { fill: #fb8c00; stroke: #b26a00; }
svg .mk.reset path { stroke: #111; }
svg .op { stroke-width: .6; }
svg .op.ok { fill: #66bb6a; stroke: #2e7d32; } svg .op.fail { fill: #ef5350; stroke: #b71c1c; }
svg .op.info { fill: #ffb74d; stroke: #b26a00; }
svg .op.pending { fill: #e5e7eb; stroke: #6b7280; stroke-dasharray: 2 2; }
svg .op.hit { stroke: var(--red); stroke-width: 2.4; fill: #ffd54f; }
.legend { font-size: 12px; color: #4b5563; margin: 4px 0 0; }
.legend span { margin-right: 14px; white-space: nowrap; }
.sw { display: inline-block; width: 14px; height: 10px; border: 1px solid #555;
  vertical-align: middle; margin-right: 4px; }
tr.hit td { background: #fff3c4; }
details.ops { margin: 4px 0; } details.ops summary { cursor: pointer; }
p.more, li.more, span.more, p.none { color: var(--dim); font-style: italic; }
nav.toc a { margin-right: 12px; }
"""
