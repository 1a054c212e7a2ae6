"""How the harness stops on SIGINT (Ctrl-C), SIGTERM and SIGHUP: clean up, then exit 128+N.

::

    run_program(body) ─ install ─ body() ─ hold() ─ exit: body's code, or 128+N if a signal came
      signal ──► plain code (imports, option checks)   raise Interrupted(signum) (once at most)
            └──► inside run(fn)  (trio.open_signal_receiver)
                   1st: cancel the work; every cleanup runs (shielded, bounded) ──► Interrupted
                   2nd: hurry: services get SIGKILL instead of their stop grace
                   watchdog: cleanup still running after CLEANUP_LIMIT_S ──► emergency hooks
                             (kill what the runs of this process started, remove their dirs), exit
            └──► after hold() (the outcome is being decided), in trio, in deferred(): noted only

A signal becomes an exception at most once per process (the first one, in plain code), and
``run_program`` catches it wherever it lands, even while another exit is unwinding: so the
exit code is 128+N whenever a signal came before the exit was decided, never a traceback and
exit 1. No ``KeyboardInterrupt`` is ever injected at a random checkpoint: trio does not install
its own SIGINT handler while ours is in place, so a second Ctrl-C cannot cut a cleanup short.

``install()`` is for the ``chaos`` program only (``chaos.__main__``): a library or a test
that imports the harness keeps Python's default handlers, and ``run`` is then plain
``trio.run``. This module imports only ``ground.errors`` (the ground floor) and trio only when a run
starts, so the entry point installs the handlers before anything heavy is imported.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Awaitable, Callable, Iterator
from types import FrameType
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

from ground.errors import EXIT_HANGUP, EXIT_HARNESS, EXIT_INTERRUPTED, EXIT_TERMINATED

if TYPE_CHECKING:
    import trio

T = TypeVar("T")

# Exit codes of a command stopped by a signal: the shell's 128 + signal number (129, 130, 143).
_EXIT_CODES = {
    signal.SIGHUP: EXIT_HANGUP,
    signal.SIGINT: EXIT_INTERRUPTED,
    signal.SIGTERM: EXIT_TERMINATED,
}

HANDLED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

#: Seconds a cleanup may take after the first signal before the watchdog takes over.
CLEANUP_LIMIT_S = 30.0

_OUTCOMES = {
    signal.SIGINT: ("interrupted", "interrupted"),
    signal.SIGTERM: ("terminated", "terminated (SIGTERM)"),
    signal.SIGHUP: ("hangup", "hung up (SIGHUP)"),
}


def exit_code(signum: int) -> int:
    """The exit code of a command stopped by ``signum``: 128 + its number (130 for Ctrl-C)."""
    return _EXIT_CODES.get(signal.Signals(signum), 128 + int(signum))


def outcome(signum: int | None) -> str:
    """The trace's end outcome for a run stopped by ``signum`` (None: cancelled, no signal)."""
    if signum is None:
        return "interrupted"
    return _OUTCOMES.get(signal.Signals(signum), (f"signal {int(signum)}", ""))[0]


def describe(signum: int) -> str:
    """A short phrase for the one line the CLI prints: ``interrupted``, ``terminated (SIGTERM)``."""
    known = _OUTCOMES.get(signal.Signals(signum))
    return known[1] if known else f"stopped by {signal.Signals(signum).name}"


class Interrupted(BaseException):
    """The command was stopped by ``signum``. A ``BaseException`` (``except Exception`` never
    swallows it) but not a ``KeyboardInterrupt``: click turns those into an exit code with a
    blank line, and this one must reach ``chaos.cli.main`` to become one line."""

    def __init__(self, signum: int) -> None:
        super().__init__(describe(signum))
        self.signum = int(signum)

    @property
    def exit_code(self) -> int:
        return exit_code(self.signum)


# -- process-wide state ----------------------------------------------------------------

_installed = False
_received: int | None = None  # the first handled signal this process got
_hurry = False
_deferring = False
_raising = True  # False once the outcome is being decided (hold): signals are noted only
_said = False  # the one line of a stopped command was printed
#: What the one line of a stopped command adds (set when a command starts).
_stop_note = " before the command started"
_emergency_hooks: list[Callable[[], None]] = []


def received() -> int | None:
    """The first of SIGINT/SIGTERM/SIGHUP this process received (None: none)."""
    return _received


def stop_outcome() -> tuple[str, int]:
    """(outcome, exit code) for the end frame of a run that was cancelled or interrupted."""
    signum = _received
    return outcome(signum), exit_code(signum if signum is not None else signal.SIGINT)


def hurrying() -> bool:
    """True after a second signal: stop services at once instead of gracefully."""
    return _hurry


def add_emergency_hook(hook: Callable[[], None]) -> None:
    """Call ``hook()`` before the watchdog exits the process: kill and remove synchronously."""
    _emergency_hooks.append(hook)


def _note(signum: int) -> bool:
    """Record a signal; True if it is the first."""
    global _received
    if _received is None:
        _received = int(signum)
        return True
    return False


def _reset_for_tests() -> None:
    global _received, _hurry, _raising, _said, _stop_note
    _received, _hurry, _raising, _said = None, False, True, False
    _stop_note = " before the command started"


def _handler(signum: int, frame: FrameType | None) -> None:
    first = _note(signum)
    if _in_trio() or _deferring or not _raising:
        return  # run(), deferred() or run_program() picks it up; never raise inside trio
    if first:
        raise Interrupted(signum)


def caught(signum: int) -> NoReturn:
    """A signal another library's handler caught instead of ours (Ray's ``sys.exit``): noted
    as ours would have, and the command stops as it would (``Interrupted``)."""
    _note(signum)
    raise Interrupted(signum)


def hold() -> None:
    """The command's outcome is being decided: from now on a signal is noted, never raised
    (``run_program`` turns a noted one into the exit code)."""
    global _raising
    _raising = False


def set_stop_note(note: str) -> None:
    """What the one line of a command stopped by a signal says after the signal's name."""
    global _stop_note
    _stop_note = f": {note}"


def stopped(signum: int) -> int:
    """Print the one line of a command stopped by ``signum`` (once per process); its exit code."""
    global _said
    if not _said:
        _said = True
        say(f"chaos: error: {describe(signum)}{_stop_note}")
    return exit_code(signum)


def run_program(body: Callable[[], int]) -> NoReturn:
    """The ``chaos`` program: install the handlers, run ``body`` (its exit code), exit.

    The exit code is ``body``'s, or 128+N with one line when a signal came before the exit was
    decided: an ``Interrupted`` raised anywhere (imports, a command, the unwinding of an
    exit) is caught here, and one noted without a raise (inside trio, in a ``deferred``
    block, after ``hold``) still decides the code. A signal is raised at most once per
    process, so the handler below cannot itself be interrupted. ``body`` returns its code
    (it must not raise: the first line of an ``except`` clause is a window for a signal)."""
    code = EXIT_HARNESS
    try:
        install()
        code = body()
        hold()
    except Interrupted as exc:
        hold()
        code = stopped(exc.signum)
    ignore_further()  # from here a signal is ignored; any before it decides the code below
    if _received is not None:
        code = stopped(_received)
    if "ray" in sys.modules:
        _exit_past_ray(code)
    raise SystemExit(code)


def _exit_past_ray(code: int) -> NoReturn:
    """Exit without the interpreter's finalization once Ray's core is loaded: stopped while
    its driver was connecting, its C++ threads abort the process as Python tears down
    (SIGABRT, exit 134, after the run was cleaned up and its line printed). The exit
    handlers run first (Ray's shutdown among them), then the process ends with ``code``."""
    import atexit

    with contextlib.suppress(BaseException):
        atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(BaseException):
            stream.flush()
    os._exit(code)


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """A block that a signal must not cut short (a synchronous cleanup): a signal arriving
    inside is raised as ``Interrupted`` when the block ends."""
    global _deferring
    outer, _deferring = _deferring, True
    before = _received
    try:
        yield
    finally:
        _deferring = outer
    if (
        not outer
        and _installed
        and _raising
        and before is None
        and _received is not None
        and not _in_trio()
    ):
        raise Interrupted(_received)


def _in_trio() -> bool:
    try:  # trio may not be imported yet, or be half-way through its import
        return bool(sys.modules["trio"].lowlevel.in_trio_run())
    except (KeyError, AttributeError):
        return False


def install() -> None:
    """Make SIGINT, SIGTERM and SIGHUP stop the command cleanly (the ``chaos`` program only)."""
    global _installed
    for signum in HANDLED:
        signal.signal(signum, _handler)
    _installed = True


def installed() -> bool:
    return _installed


# -- runs --------------------------------------------------------------------------------


def run(async_fn: Callable[..., Awaitable[T]], *args: Any) -> T:
    """``trio.run(async_fn, *args)``; under the ``chaos`` program the three signals cancel it
    (cleanup included) and it raises ``Interrupted``."""
    import trio

    if _received is not None and _installed:
        raise Interrupted(_received)
    if not _installed:
        return trio.run(async_fn, *args)
    return trio.run(_guarded_run, async_fn, args)


async def _guarded_run(async_fn: Callable[..., Awaitable[T]], args: tuple[Any, ...]) -> T:
    import trio

    result: T | None = None
    error: BaseException | None = None
    with trio.open_signal_receiver(*HANDLED) as signals:
        async with trio.open_nursery() as nursery:
            work = trio.CancelScope()
            nursery.start_soon(_watch, signals, work, nursery)
            if _received is not None:  # arrived before the receiver was open
                work.cancel()
                nursery.start_soon(_watchdog)
            with work:
                try:
                    result = await async_fn(*args)
                except BaseException as exc:  # judged below, once the signals are known
                    error = exc
            nursery.cancel_scope.cancel()
    if _received is not None:
        raise Interrupted(_received) from error
    if error is not None:
        raise error
    return result  # type: ignore[return-value]


async def _watch(signals: Any, work: trio.CancelScope, nursery: trio.Nursery) -> None:
    global _hurry
    async for signum in signals:
        _note(signum)
        if not work.cancel_called:
            work.cancel()
            nursery.start_soon(_watchdog)
        else:
            _hurry = True


async def _watchdog() -> None:
    import trio

    await trio.sleep(CLEANUP_LIMIT_S)
    emergency_exit("the cleanup took too long; stopped what was left")


def ignore_further() -> None:
    """The command is exiting: ignore further signals (Python restores the default handlers
    while it finalizes, and a late Ctrl-C would then kill it silently with -2)."""
    for signum in HANDLED:
        try:
            signal.signal(signum, signal.SIG_IGN)
        except (ValueError, OSError):  # not the main thread
            return


def emergency_exit(why: str) -> NoReturn:
    """Run the emergency hooks, print one line, and leave now with the signal's exit code."""
    for hook in list(_emergency_hooks):
        try:
            hook()
        except Exception:  # best effort: the next command reaps the rest
            continue
    signum = _received if _received is not None else signal.SIGINT
    say(f"chaos: error: {describe(signum)}: {why}")
    os._exit(exit_code(signum))  # the trace is left partial, which reads as cut off


def say(line: str) -> None:
    """Print one line on stderr; a hung-up terminal (EIO) or a closed pipe is no error."""
    try:
        print(line, file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass
