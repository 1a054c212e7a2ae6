"""How a command ends: one ``chaos: error: <message>`` line on stderr and the exit code of
what it raised (a ChaosError's own, 2 for a usage error, 3 for a full disk or a bug,
128+N for a signal), never a traceback."""

from __future__ import annotations

import errno
import os
import signal
import sys
import traceback
from collections.abc import Iterator
from typing import NoReturn

import trio
import typer

from ground import _signals
from ground.errors import EXIT_BAD_INPUT, EXIT_HARNESS, EXIT_INTERRUPTED, ChaosError, exit_code_for


def _one_line(message: object) -> str:
    return " ".join(str(message).split())


def _fail(message: str, code: int = EXIT_BAD_INPUT) -> NoReturn:
    """Print ``chaos: error: <message>`` (one line) on stderr and exit with ``code``."""
    _signals.say(f"chaos: error: {_one_line(message)}")
    raise SystemExit(code)


def _exit_code(exc: SystemExit) -> int:
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code
    _fail_line(str(exc.code))
    return EXIT_HARNESS


def _fail_line(message: object) -> None:
    _signals.say(f"chaos: error: {_one_line(message)}")


def _code_for(exc: BaseException, *, program: bool) -> int:
    """The exit code of what ``run_cli`` caught, its one line printed. A signal wins over the
    failure it caused (exit 128+N); a ChaosError (alone or the first in a nursery's group)
    is its message and exit code; a full disk or a failing device is exit 3; anything else
    is a bug: one line and exit 3 from the program (its traceback with CHAOS_TRACEBACK=1),
    raised again under a test."""
    signum = _signals.received() if _signals.installed() else None
    if isinstance(exc, _signals.Interrupted):
        signum = exc.signum
    elif signum is None and _signals.installed() and _is_interruption(exc):
        signum = signal.SIGINT
    if signum is not None:
        return _signals.stopped(signum)
    if isinstance(exc, typer.TyperException):  # a usage error (typer's base class of click's)
        if not _is_no_args_help(exc):  # (that one: typer has printed the help)
            _fail_line(exc.format_message())
        return EXIT_BAD_INPUT if _is_no_args_help(exc) else exc.exit_code
    if isinstance(exc, typer.Abort):
        _fail_line("aborted")
        return EXIT_INTERRUPTED
    chaos = _first_chaos_error(exc)
    if chaos is not None:
        _fail_line(chaos)
        return exit_code_for(chaos)
    failed = _environment_error(exc)
    if failed is not None:
        _fail_line(failed)
        return EXIT_HARNESS
    if not program:
        raise exc
    where = "" if os.environ.get(TRACEBACK_ENV) else f" (a bug; {TRACEBACK_ENV}=1 shows where)"
    _fail_line(f"internal error: {type(exc).__name__}: {exc}{where}")
    if os.environ.get(TRACEBACK_ENV):
        traceback.print_exception(exc, file=sys.stderr)
    return EXIT_HARNESS


#: Set to print the traceback of an unexpected error (a harness bug) after its one line.
TRACEBACK_ENV = "CHAOS_TRACEBACK"


def _leaves(exc: BaseException) -> Iterator[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            yield from _leaves(inner)
    else:
        yield exc


def _is_interruption(exc: BaseException) -> bool:
    """Ctrl-C or a cancellation, alone or grouped by nurseries."""
    return all(isinstance(e, KeyboardInterrupt | trio.Cancelled) for e in _leaves(exc))


def _first_chaos_error(exc: BaseException) -> ChaosError | None:
    """``exc`` if it is a ChaosError, else the first one a nursery's group holds: the cause
    (what failed after it, in sibling tasks, follows from it)."""
    return next((e for e in _leaves(exc) if isinstance(e, ChaosError)), None)


#: OS errors that say the machine, not the harness nor the input, failed (exit 3).
_ENVIRONMENT_ERRNOS = frozenset(
    {errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EROFS, errno.EFBIG, errno.ENOMEM}
)


def _environment_error(exc: BaseException) -> str | None:
    """The one line of a full disk or a failing device met where no code expected it."""
    for leaf in _leaves(exc):
        if isinstance(leaf, OSError) and leaf.errno in _ENVIRONMENT_ERRNOS:
            what = leaf.strerror or str(leaf)
            return f"{leaf.filename}: {what}" if leaf.filename else what
    return None


def _is_no_args_help(exc: typer.TyperException) -> bool:
    """The usage "error" of a command group called without a command: typer has printed its
    help. Recognised by name, as typer itself does (its class lives in a private module)."""
    return type(exc).__name__ == "NoArgsIsHelpError"
