"""What every adversary shares (copied beside each one as ``_probe.py``; not an adversary).

``attempt(name, fn)`` runs one attack step and prints ``PROBE <name> refused <why>`` or
``PROBE <name> ALLOWED``: the test reads those lines from the trace and requires each
adversary's to say ``refused``. ``pg(name, dsn, sql)`` is one SQL statement as the
candidate's own role. ``run_golden()`` runs the pack's golden program (bundled beside the
adversary as ``golden/``) in this process, so an adversary can attack and still do the
work: its reward then shows whether the attack changed anything. ``in_background(fn)``
runs an attack beside it, in a thread.
"""

from __future__ import annotations

import os
import runpy
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))


def say(line: str) -> None:
    print(line, flush=True)


def attempt(name: str, fn: Callable[[], Any]) -> bool:
    """Run one step; True if it was allowed."""
    try:
        fn()
    except Exception as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        say(f"PROBE {name} refused {type(exc).__name__}: {first[:160]}")
        return False
    say(f"PROBE {name} ALLOWED")
    return True


def pg(name: str, dsn: str, sql: str) -> bool:
    """One statement as the candidate's role (autocommit)."""
    import psycopg

    def run() -> None:
        with psycopg.connect(dsn, connect_timeout=5, autocommit=True) as conn:
            conn.execute(sql)  # type: ignore[arg-type]

    return attempt(name, run)


def query(dsn: str, sql: str) -> list[tuple[Any, ...]]:
    import psycopg

    with psycopg.connect(dsn, connect_timeout=5, autocommit=True) as conn:
        cur = conn.execute(sql)  # type: ignore[arg-type]
        return list(cur.fetchall()) if cur.description else []


def wait_for(check: Callable[[], bool], timeout_s: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if check():
                return True
        except Exception:
            pass
        time.sleep(0.2)
    return False


def in_background(fn: Callable[[], None]) -> None:
    threading.Thread(target=fn, daemon=True).start()


def run_golden() -> None:
    """The pack's golden program, in this process (it never returns: SIGTERM ends it)."""
    golden = os.path.join(HERE, "golden")
    sys.path.insert(0, golden)
    runpy.run_path(os.path.join(golden, "main.py"), run_name="__main__")
