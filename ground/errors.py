"""The exception tree of chaos-harness, and the exit codes of the ``chaos`` command.

::

    ChaosError                                                                  -> exit 3
      ConfigError            bad scenario file, CLI input or fault parameters   -> exit 2
      TraceError             a trace file cannot be read                         -> exit 2
        TraceFormatError       bad magic, bad checksum, malformed frame
        TraceVersionError      a format version this harness does not read
      ServiceError           a service failed to start or died (with its log tail) -> exit 3
      Unreadable             a store holds what the harness refuses to read      -> exit 3
                             (a graded run: the seed fails, ``unreadable``)
      WriteError             an output could not be written (a full disk, an I/O error):
                             the message names what was kept                     -> exit 3

Messages are short and specific; the CLI prints them on one line, never a traceback, and
exits with ``exit_code_for(error)``: the ``exit_code`` of the error's class.

This module is the ground floor: it imports nothing of the project, so every package may
import it (``ground/__init__.py`` imports nothing: importing ``ground.errors`` loads nothing
else).
"""

from __future__ import annotations

#: The exit codes of every ``chaos`` command, defined once.
EXIT_HELD = 0  #: every invariant held (replay: reproduced; search: nothing found)
EXIT_VIOLATED = 1  #: an invariant was violated (replay: not reproduced; search: found one)
EXIT_BAD_INPUT = 2  #: bad input, refused before anything started
EXIT_HARNESS = 3  #: the harness could not do its job (a service died, a checker undecided)
EXIT_HANGUP = 128 + 1  #: SIGHUP
EXIT_INTERRUPTED = 128 + 2  #: SIGINT (Ctrl-C)
EXIT_TERMINATED = 128 + 15  #: SIGTERM


class ChaosError(Exception):
    """Root of every error the harness raises on purpose."""

    exit_code: int = EXIT_HARNESS


class ConfigError(ChaosError):
    """Bad input from a user: scenario file, CLI flag, fault parameters."""

    exit_code = EXIT_BAD_INPUT


class TraceError(ChaosError):
    """A trace file cannot be read."""

    exit_code = EXIT_BAD_INPUT


class TraceFormatError(TraceError):
    """Bad magic, bad checksum or a malformed frame."""


class TraceVersionError(TraceError):
    """A trace format version this harness does not read."""


class ServiceError(ChaosError):
    """A service failed to start or died unexpectedly."""

    def __init__(self, message: str, log_tail: str = "", service: str | None = None) -> None:
        super().__init__(message)
        self.log_tail = log_tail
        #: The service that failed, when one did (its name as the scenario started it).
        self.service = service
        #: True once a run has added its cause to the message (``explain``).
        self.explained = False

    def explain(self, detail: str) -> None:
        """Add what the run knows of the cause (other services' errors, the trace) to the
        message, once; the error stays the same object, wherever a nursery's group holds it."""
        if not self.explained and detail:
            self.args = (f"{self.args[0]}; {detail}", *self.args[1:])
        self.explained = True


class Unreadable(ChaosError):
    """A store a program under test can write holds something the harness refuses to read
    (a view, a rule, a column of a type of its own, a lock held past the read's timeout,
    ...): reading it would run that program's code with the harness's rights, or wait for
    ever. In a graded run the seed fails with this reason (``unreadable``); elsewhere it is
    a harness error, naming what was refused."""


class WriteError(ChaosError):
    """An output could not be written after its path was checked: a full disk, a quota, an
    I/O error. Its message names the file and what was kept (``T.partial``, the old file)."""


def exit_code_for(error: BaseException) -> int:
    """The exit code for ``error``: its class's ``exit_code`` for a ``ChaosError`` (for a
    nursery's group: that of its first ``ChaosError``); Ctrl-C is ``EXIT_INTERRUPTED``;
    anything else is a harness bug, ``EXIT_HARNESS``."""
    if isinstance(error, BaseExceptionGroup):
        chaos, _ = error.split(ChaosError)
        return exit_code_for((chaos or error).exceptions[0])
    if isinstance(error, ChaosError):
        return error.exit_code
    if isinstance(error, KeyboardInterrupt):
        return EXIT_INTERRUPTED
    return EXIT_HARNESS
