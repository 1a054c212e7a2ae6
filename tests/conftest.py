"""Fixtures of every test.

- A grade's kept warm workers do not outlive the test that started them (``chaos.grade``
  keeps them for the process's next grade; a later test that counts what is left behind
  would count them).
- A test that uses the program's signal handling in pytest's own process leaves it as it
  found it: the program installs its handlers (``ground._signals.install``) and, as it
  exits, ignores SIGINT, SIGTERM and SIGHUP (``ignore_further``), which in pytest's process
  would leave every later test, and pytest itself, deaf to Ctrl-C.

A pytest started in the background by a non-interactive shell (``cmd &`` in a script, as CI
runs it) inherits SIGINT ignored, and so would every program a test starts: the tests run as
from a terminal, with Python's own SIGINT handler (the ``chaos`` program installs its own
either way; a test that checks a plain interpreter's handlers needs the default).
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Iterator

import pytest

from ground import _signals

if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(autouse=True)
def _no_kept_grade_workers() -> Iterator[None]:
    yield
    pool = sys.modules.get("chaos.grade_pool")  # started only if a test graded through it
    if pool is not None:
        pool.close_shared_pool()


@pytest.fixture(autouse=True)
def _signal_handling_restored() -> Iterator[None]:
    handlers = {signum: signal.getsignal(signum) for signum in _signals.HANDLED}
    installed = _signals._installed
    yield
    for signum, handler in handlers.items():
        if handler is not None:
            signal.signal(signum, handler)
    _signals._installed = installed
    _signals._reset_for_tests()
