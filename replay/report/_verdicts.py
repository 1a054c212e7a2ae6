"""Verdicts for the report: held / VIOLATED / unknown, with the evidence laid out and marked."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from invariants.verdict import verdict_word

from ._html import esc, esc_fields

_MAX_ITEMS = 40
_MAX_DEPTH = 5


def verdict_label(valid: object) -> tuple[str, str]:
    """(text, css class) of a verdict's ``valid``: held, VIOLATED or unknown."""
    word = verdict_word(valid)
    return word, word.lower()


def _scalar(value: Any, marks: frozenset[str]) -> str:
    if isinstance(value, str):
        text = esc(value, 200)
        return f"<mark>{text}</mark>" if value in marks else text
    if value is None or isinstance(value, bool):
        return {None: "null", True: "true", False: "false"}[value]
    if isinstance(value, int | float):
        return esc(repr(value))
    return esc_fields(value, 200)


def render_evidence(value: Any, marks: frozenset[str], depth: int = 0) -> str:
    """Evidence as nested lists; strings in ``marks`` (they match workload ops) are <mark>ed."""
    if depth > _MAX_DEPTH:
        return "…"
    if isinstance(value, Mapping):
        if not value:
            return '<span class="empty">{}</span>'
        items = list(value.items())
        rows = [
            f"<li><span class=key>{_scalar(k, marks)}</span> "
            f"{render_evidence(v, marks, depth + 1)}</li>"
            for k, v in items[:_MAX_ITEMS]
        ]
        if len(items) > _MAX_ITEMS:
            rows.append(f'<li class="more">… {len(items) - _MAX_ITEMS} more</li>')
        return f'<ul class="ev">{"".join(rows)}</ul>'
    if isinstance(value, list | tuple):
        if not value:
            return '<span class="empty">[]</span>'
        parts = [render_evidence(v, marks, depth + 1) for v in value[:_MAX_ITEMS]]
        if len(value) > _MAX_ITEMS:
            parts.append(f'<span class="more">… {len(value) - _MAX_ITEMS} more</span>')
        return f'<span class="list">[{", ".join(parts)}]</span>'
    return _scalar(value, marks)


def _evidence_block(shown: str, css: str) -> str:
    """Evidence of a violation shown open; of a held or unknown verdict, folded."""
    if not shown:
        return ""
    if css == "violated":
        return f'<div class="evidence"><b>evidence</b>{shown}</div>'
    return f'<details class="evidence"><summary>evidence</summary>{shown}</details>'


def render_verdicts(verdicts: list[dict[str, Any]], marks: frozenset[str]) -> str:
    """The verdict table; violated rows first-class: red, labelled VIOLATED, evidence marked."""
    if not verdicts:
        return '<p class="none">No verdicts recorded.</p>'
    rows = []
    for verdict in verdicts:
        text, css = verdict_label(verdict.get("valid"))
        evidence = verdict.get("evidence")
        shown = "" if evidence in (None, {}, [], "") else render_evidence(evidence, marks)
        rows.append(
            f'<tr class="verdict {css}"><td class="name">{esc(verdict.get("name", "?"), 80)}</td>'
            f'<td class="status"><span class="badge {css}">{text}</span></td>'
            f"<td>{esc_fields(verdict.get('explanation'), 600)}"
            f"{_evidence_block(shown, css)}</td></tr>"
        )
    return (
        '<table class="verdicts"><thead><tr><th>invariant</th><th>verdict</th>'
        f"<th>explanation and evidence</th></tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )
