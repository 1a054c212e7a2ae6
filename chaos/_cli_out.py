"""What every command prints the same way: a live status line, verdict marks, a verdict table."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from chaos.run import Progress
from invariants import Verdict, verdict_word


@contextmanager
def status_line(label: str) -> Iterator[Progress]:
    """A transient ``label: <what now>`` line on stderr while the block runs; yields the
    ``Progress`` function that updates it (an engine's ``progress`` parameter)."""
    err = Console(stderr=True, highlight=False)
    with err.status(f"{escape(label)}: starting") as status:
        yield lambda message: status.update(f"{escape(label)}: {escape(message)}")


def verdict_mark(valid: Any) -> str:
    """``held`` (green), ``VIOLATED`` (red) or ``unknown`` (yellow), as rich markup."""
    colour = ("green" if valid else "red") if isinstance(valid, bool) else "yellow"
    return f"[{colour}]{verdict_word(valid)}[/]"


def verdict_table(verdicts: Iterable[Verdict]) -> Table:
    """One row per verdict: invariant, mark, explanation."""
    table = Table("invariant", "verdict", "explanation")
    for verdict in verdicts:
        table.add_row(
            escape(verdict.name), verdict_mark(verdict.valid), escape(verdict.explanation)
        )
    return table
