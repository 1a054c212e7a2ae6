"""The exception tree of chaos-harness, and the exit codes of the ``chaos`` command.

::

    ChaosError                                                                  -> exit 3
      ConfigError            bad scenario file, CLI input or fault parameters   -> exit 2
      TraceError             a trace file cannot be read                         -> exit 2
        TraceFormatError       bad magic, bad checksum, malformed frame
        TraceVersionError      a format version this harness does not read
      ServiceError           a service failed to start or died (with its log tail) -> exit 3

Messages are short and specific; the CLI prints them on one line, never a traceback, and
exits with ``exit_code_for(error)``: the ``exit_code`` of the error's class.

This module is the ground floor: it imports nothing of the project, so every package may
import it (``chaos/__init__.py`` is empty: importing ``chaos.errors`` loads nothing else).
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

    def __init__(self, message: str, log_tail: str = "") -> None:
        super().__init__(message)
        self.log_tail = log_tail


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
