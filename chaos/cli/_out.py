"""What every command prints the same way: a live status line, verdict marks, a verdict table."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from chaos.run import Progress
from invariants import Verdict, verdict_word

#: On a pipe, a progress line is printed when the step changes, or after this many seconds.
PLAIN_EVERY_S = 5.0


@contextmanager
def status_line(label: str, *, long: bool = False) -> Iterator[Progress]:
    """A transient ``label: <what now>`` line on stderr while the block runs; yields the
    ``Progress`` function that updates it (an engine's ``progress`` parameter). A ``long``
    command (validate, search) prints plain lines instead when stderr is not a terminal (CI,
    a pipe: ``plain_progress``); a single run stays silent there."""
    err = Console(stderr=True, highlight=False)
    if long and not err.is_terminal:
        yield plain_progress(label)
        return
    with err.status(f"{escape(label)}: starting") as status:
        yield lambda message: status.update(f"{escape(label)}: {escape(message)}")


def plain_progress(label: str, write: Callable[[str], None] | None = None) -> Progress:
    """``Progress`` for a pipe: one plain line ``label [12s]: message`` per message, except
    a phase of the step printed last (``golden seed 1000: setup`` after ``golden seed
    1000``), which prints only when ``PLAIN_EVERY_S`` seconds passed since the last line;
    so a run's phases do not each print, but every step does."""
    started = time.monotonic()
    last_step: list[str | None] = [None]
    last_at = [-PLAIN_EVERY_S]
    out = write or (lambda line: print(line, file=sys.stderr, flush=True))

    def progress(message: str) -> None:
        now = time.monotonic()
        step = last_step[0]
        if step is not None and message.startswith(step + ": "):
            if now - last_at[0] < PLAIN_EVERY_S:
                return
        else:
            last_step[0] = message
        last_at[0] = now
        out(f"{label} [{now - started:.0f}s]: {message}")

    return progress


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
