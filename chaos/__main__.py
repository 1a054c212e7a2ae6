"""``python -m chaos`` and the ``chaos`` program: signals are handled from the first line.

SIGINT, SIGTERM and SIGHUP get the harness's handlers before the CLI's imports (typer, trio,
the services) run, so even a Ctrl-C during start-up is one line and exit 130, not a
KeyboardInterrupt traceback (``ground._signals.run_program``).
"""

from __future__ import annotations

from ground import _signals


def _chaos() -> int:
    from chaos.cli import run_cli

    return run_cli()


def main() -> None:
    _signals.run_program(_chaos)


if __name__ == "__main__":
    main()
